//! What to do with a job after one attempt: pure functions, no I/O.

use std::time::Duration;

use chrono::{DateTime, Utc};
use rand::Rng;

use crate::delivery::{DeliveryError, ErrorClass};
use crate::store::Decision;

/// The first retry waits about this long...
pub const BASE_BACKOFF: Duration = Duration::from_secs(60);
/// ...doubling with each attempt up to this cap.
pub const MAX_BACKOFF: Duration = Duration::from_secs(30 * 60);

/// The nominal wait after attempt `attempt` (1 for the first): 1 min × 2^(attempt−1),
/// capped at 30 min. Attempts below 1 count as 1.
pub fn backoff_step(attempt: i32) -> Duration {
    // 2^5 minutes is already past the cap; clamping the exponent avoids any overflow
    let exponent = attempt.saturating_sub(1).clamp(0, 5) as u32;
    (BASE_BACKOFF * 2u32.pow(exponent)).min(MAX_BACKOFF)
}

/// The wait after attempt `attempt`: uniform in [step/2, step] with `step` from
/// [`backoff_step`], so retries of jobs that failed together spread over half the step.
pub fn backoff(attempt: i32, rng: &mut impl Rng) -> Duration {
    let step = backoff_step(attempt);
    let millis = step.as_millis() as u64;
    Duration::from_millis(rng.random_range(millis / 2..=millis))
}

/// The decision for one attempt, made at `now`. `attempt` is the budget spent with this
/// attempt, `call` the provider calls so far (this one included):
/// - delivered → [`Decision::Sent`];
/// - a permanent error → [`Decision::Dead`] at once;
/// - account or configuration trouble → [`Decision::Hold`] for [`MAX_BACKOFF`]: the attempt
///   is given back, a person must act, and the message is not lost meanwhile;
/// - an outage ([`crate::delivery::classify::is_outage`]) → [`Decision::Hold`] after
///   [`backoff`] by `call`, the provider calls made (capped): not the message's fault either, however long it lasts;
/// - any other transient error (an unknown code, a panic) → retry after [`backoff`] by
///   `attempt`, or `Dead` when this was the last allowed attempt.
///
/// Held jobs are bounded by their expiry, not by their budget.
pub fn decide(
    attempt: i32,
    call: i32,
    max_attempts: i32,
    result: &Result<String, DeliveryError>,
    now: DateTime<Utc>,
    rng: &mut impl Rng,
) -> Decision {
    let err = match result {
        Ok(_) => return Decision::Sent,
        Err(err) => err,
    };
    let after =
        |wait: Duration| now + chrono::Duration::from_std(wait).unwrap_or(chrono::Duration::MAX);
    match err.class() {
        ErrorClass::Permanent => Decision::Dead,
        ErrorClass::Account => Decision::Hold {
            at: after(MAX_BACKOFF),
        },
        ErrorClass::Transient if crate::delivery::classify::is_outage(&err.code) => {
            Decision::Hold {
                at: after(backoff(call, rng)),
            }
        }
        ErrorClass::Transient if attempt >= max_attempts => Decision::Dead,
        ErrorClass::Transient => Decision::Retry {
            at: after(backoff(attempt, rng)),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand::rngs::StdRng;

    const MIN: Duration = Duration::from_secs(60);

    #[test]
    fn steps_double_from_one_minute_and_stop_at_thirty() {
        let steps: Vec<_> = (1..=8).map(backoff_step).collect();
        assert_eq!(
            steps,
            [1, 2, 4, 8, 16, 30, 30, 30].map(|m| MIN * m).to_vec()
        );
        assert_eq!(backoff_step(0), MIN);
        assert_eq!(backoff_step(-3), MIN);
        assert_eq!(backoff_step(i32::MAX), MAX_BACKOFF);
    }

    #[test]
    fn jitter_stays_within_half_a_step_and_spreads() {
        let mut rng = StdRng::seed_from_u64(7);
        for attempt in 1..=10 {
            let step = backoff_step(attempt);
            let samples: Vec<_> = (0..500).map(|_| backoff(attempt, &mut rng)).collect();
            assert!(samples.iter().all(|d| *d >= step / 2 && *d <= step));
            assert!(samples.iter().all(|d| *d <= MAX_BACKOFF), "capped");
            let lo = samples.iter().min().unwrap();
            let hi = samples.iter().max().unwrap();
            assert!(
                *hi - *lo >= step * 4 / 10,
                "spread over the half step: {lo:?}..{hi:?}"
            );
        }
    }

    #[test]
    fn upper_bound_never_decreases() {
        let steps: Vec<_> = (1..=20).map(backoff_step).collect();
        assert!(steps.windows(2).all(|w| w[0] <= w[1]));
    }

    fn err(code: &str) -> Result<String, DeliveryError> {
        Err(DeliveryError::new(code, "boom"))
    }

    #[test]
    fn decisions() {
        let mut rng = StdRng::seed_from_u64(1);
        let now = Utc::now();
        let rng = &mut rng;
        let within = |at: DateTime<Utc>, lo: chrono::Duration, hi: chrono::Duration| {
            at >= now + lo && at <= now + hi
        };
        assert_eq!(decide(1, 1, 5, &Ok("m-1".into()), now, rng), Decision::Sent);
        assert_eq!(decide(5, 9, 5, &Ok("m-1".into()), now, rng), Decision::Sent);
        for code in ["InvalidParameter", "MessageRejected", "InvalidPayload"] {
            assert_eq!(
                decide(1, 1, 5, &err(code), now, rng),
                Decision::Dead,
                "{code}"
            );
        }
        // an unknown code or a panic spends the budget
        assert_eq!(
            decide(5, 5, 5, &err("SomethingNew"), now, rng),
            Decision::Dead
        );
        assert_eq!(
            decide(1, 1, 1, &err("WorkerPanic"), now, rng),
            Decision::Dead
        );
        let Decision::Retry { at } = decide(3, 3, 5, &err("SomethingNew"), now, rng) else {
            panic!("an unknown code is transient, retried while attempts remain");
        };
        assert!(within(
            at,
            chrono::Duration::minutes(2),
            chrono::Duration::minutes(4)
        ));

        // an outage never spends the budget, even on the last attempt; backoff by calls
        for code in ["Throttling", "Timeout", "Http5xx", "DispatchFailure"] {
            let Decision::Hold { at } = decide(5, 1, 5, &err(code), now, rng) else {
                panic!("{code}: an outage holds the job");
            };
            assert!(within(
                at,
                chrono::Duration::seconds(30),
                chrono::Duration::seconds(60)
            ));
            let Decision::Hold { at } = decide(5, 40, 5, &err(code), now, rng) else {
                panic!("{code}: however long it lasts");
            };
            assert!(within(
                at,
                chrono::Duration::minutes(15),
                chrono::Duration::minutes(30)
            ));
        }

        for attempt in [1, 5, 9] {
            assert_eq!(
                decide(
                    attempt,
                    attempt,
                    5,
                    &err("AccountSuspendedException"),
                    now,
                    rng
                ),
                Decision::Hold {
                    at: now + chrono::Duration::minutes(30)
                },
                "account trouble waits the longest backoff, attempt given back"
            );
        }
    }

    #[test]
    fn outages_are_the_known_transient_codes_but_a_panic() {
        use crate::delivery::classify::is_outage;
        for code in [
            "Throttling",
            "Http429",
            "Http5xx",
            "Timeout",
            "DispatchFailure",
        ] {
            assert!(is_outage(code), "{code}");
        }
        for code in [
            "WorkerPanic",
            "SomethingNew",
            "InvalidParameter",
            "AccountSuspendedException",
        ] {
            assert!(!is_outage(code), "{code}");
        }
    }
}
