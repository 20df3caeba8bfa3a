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

/// The decision for one attempt, made at `now`:
/// - delivered → [`Decision::Sent`];
/// - a permanent error → [`Decision::Dead`] at once;
/// - a transient error → retry after [`backoff`], or `Dead` when this was the last allowed
///   attempt;
/// - account trouble → retry after [`MAX_BACKOFF`] whatever the budget: a person must act,
///   and the message must not be lost meanwhile.
pub fn decide(
    attempt: i32,
    max_attempts: i32,
    result: &Result<String, DeliveryError>,
    now: DateTime<Utc>,
    rng: &mut impl Rng,
) -> Decision {
    let class = match result {
        Ok(_) => return Decision::Sent,
        Err(err) => err.class(),
    };
    let wait = match class {
        ErrorClass::Permanent => return Decision::Dead,
        ErrorClass::Transient if attempt >= max_attempts => return Decision::Dead,
        ErrorClass::Transient => backoff(attempt, rng),
        ErrorClass::Account => MAX_BACKOFF,
    };
    Decision::Retry {
        at: now + chrono::Duration::from_std(wait).unwrap_or(chrono::Duration::MAX),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::rngs::StdRng;
    use rand::SeedableRng;

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
        assert_eq!(decide(1, 5, &Ok("m-1".into()), now, rng), Decision::Sent);
        assert_eq!(decide(5, 5, &Ok("m-1".into()), now, rng), Decision::Sent);
        assert_eq!(
            decide(1, 5, &err("InvalidParameter"), now, rng),
            Decision::Dead
        );
        assert_eq!(
            decide(1, 5, &err("MessageRejected"), now, rng),
            Decision::Dead
        );
        assert_eq!(decide(5, 5, &err("Throttling"), now, rng), Decision::Dead);
        assert_eq!(decide(1, 1, &err("Timeout"), now, rng), Decision::Dead);
        assert_eq!(decide(6, 5, &err("SomethingNew"), now, rng), Decision::Dead);

        let Decision::Retry { at } = decide(1, 5, &err("Throttling"), now, rng) else {
            panic!("a transient error with attempts left is retried");
        };
        assert!(
            at >= now + chrono::Duration::seconds(30) && at <= now + chrono::Duration::seconds(60)
        );
        let Decision::Retry { at } = decide(3, 5, &err("SomethingNew"), now, rng) else {
            panic!("an unknown code is transient");
        };
        assert!(
            at >= now + chrono::Duration::minutes(2) && at <= now + chrono::Duration::minutes(4)
        );

        for attempt in [1, 5, 9] {
            assert_eq!(
                decide(attempt, 5, &err("AccountSuspendedException"), now, rng),
                Decision::Retry {
                    at: now + chrono::Duration::minutes(30)
                },
                "account trouble waits the longest backoff and is never buried"
            );
        }
    }
}
