//! What the provider (the stand-in) received, held against what the job table says was
//! attempted. Every job of a scenario has a recipient of its own, so a recipient's messages
//! are its job's.

use std::collections::HashMap;

use tokio_postgres::Client;

/// Messages the stand-in received per recipient, for the recipients `owned` accepts.
pub async fn received(owned: impl Fn(&str) -> bool) -> HashMap<String, u64> {
    let received = crate::stand_in::received().await;
    let mut counts = HashMap::new();
    for sms in received.sms {
        if owned(&sms.phone_number) {
            *counts.entry(sms.phone_number).or_insert(0) += 1;
        }
    }
    for email in received.email {
        for to in email.to {
            if owned(&to) {
                *counts.entry(to).or_insert(0) += 1;
            }
        }
    }
    counts
}

/// Extra messages beyond the first, over all recipients.
pub fn duplicates(counts: &HashMap<String, u64>) -> u64 {
    counts.values().map(|c| c.saturating_sub(1)).sum()
}

/// Error codes of a provider call that did not complete: the request may have been
/// accepted all the same.
pub const UNANSWERED: [&str; 2] = [notify_core::delivery::TIMEOUT, "ResponseError"];

/// The condition on a delivery row `d` (the alias) that its attempt's fate was never learnt
/// ([`Attempts::unlearned`]); the query parameter `param` (`$1`) must be [`UNANSWERED`].
pub fn unlearned_filter(d: &str, param: &str) -> String {
    // COALESCE: a row with no error code is not unanswered (false, never NULL, so that
    // `NOT (…)` holds for it)
    format!(
        "({d}.outcome = 'lost' OR {d}.fenced OR COALESCE({d}.error_code = ANY({param}), false))"
    )
}

/// Per job: the sends the provider received beyond the first (`received`, by recipient: each
/// job has one of its own), and its calls whose answer never came ([`UNANSWERED`]).
pub async fn duplicates_by_job(
    client: &Client,
    received: &HashMap<String, u64>,
) -> (HashMap<uuid::Uuid, u64>, HashMap<uuid::Uuid, u64>) {
    let rows = client
        .query(
            "SELECT j.id, j.payload->>'to',
                    (SELECT count(*) FROM job_attempt_history d
                     WHERE d.job_id = j.id AND d.error_code = ANY($1))
             FROM job_states j",
            &[&&UNANSWERED[..]],
        )
        .await
        .expect("jobs by recipient");
    let mut duplicates = HashMap::new();
    let mut unanswered = HashMap::new();
    for r in rows {
        let (id, to): (uuid::Uuid, String) = (r.get(0), r.get(1));
        let extra = received.get(&to).copied().unwrap_or(0).saturating_sub(1);
        if extra > 0 {
            duplicates.insert(id, extra);
        }
        let n = r.get::<_, i64>(2) as u64;
        if n > 0 {
            unanswered.insert(id, n);
        }
    }
    (duplicates, unanswered)
}

/// One job's attempts, as the delivery rows tell them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Attempts {
    pub sent: bool,
    /// Attempts recorded as accepted by the provider.
    pub recorded_sends: u64,
    /// Attempts whose fate the worker never learnt: its process was killed or cut off before
    /// recording it (the sweeper's `lost` row), it completed after being swept (`fenced`),
    /// or the provider's answer never came ([`UNANSWERED`]). Each may have reached the
    /// provider: the at-least-once window.
    pub unlearned: u64,
}

/// Every job's [`Attempts`], by recipient.
pub async fn attempts_by_recipient(client: &Client) -> HashMap<String, Attempts> {
    client
        .query(
            &format!(
                "SELECT j.payload->>'to', j.status = 'sent',
                        count(d.*) FILTER (WHERE d.outcome = 'sent' AND NOT d.fenced),
                        count(d.*) FILTER (WHERE {})
                 FROM job_states j
                 LEFT JOIN job_attempt_history d ON d.job_id = j.id
                 GROUP BY j.id, j.payload, j.status",
                unlearned_filter("d", "$1")
            ),
            &[&&UNANSWERED[..]],
        )
        .await
        .expect("attempts by recipient")
        .iter()
        .map(|r| {
            let attempts = Attempts {
                sent: r.get(1),
                recorded_sends: r.get::<_, i64>(2) as u64,
                unlearned: r.get::<_, i64>(3) as u64,
            };
            (r.get(0), attempts)
        })
        .collect()
}

/// The provider's messages held against the attempts.
#[derive(Debug, Default)]
pub struct Accounting {
    /// Recipients with more messages than their job's attempts can account for (a
    /// recorded send one each, an unlearned attempt one at most): `(to, received, accountable)`.
    pub unaccounted: Vec<(String, u64, u64)>,
    /// Jobs marked `sent` whose recipient received nothing.
    pub sent_not_received: u64,
}

pub fn account(
    received: &HashMap<String, u64>,
    attempts: &HashMap<String, Attempts>,
) -> Accounting {
    let mut out = Accounting::default();
    for (to, a) in attempts {
        let got = received.get(to).copied().unwrap_or(0);
        let accountable = a.recorded_sends + a.unlearned;
        if got > accountable {
            out.unaccounted.push((to.clone(), got, accountable));
        }
        if a.sent && got == 0 {
            out.sent_not_received += 1;
        }
    }
    for (to, got) in received {
        if !attempts.contains_key(to) {
            out.unaccounted.push((to.clone(), *got, 0));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attempts(sent: bool, recorded_sends: u64, unlearned: u64) -> Attempts {
        Attempts {
            sent,
            recorded_sends,
            unlearned,
        }
    }

    #[test]
    fn a_second_message_needs_an_unlearned_attempt() {
        let received = HashMap::from([("a".to_owned(), 2), ("b".to_owned(), 2)]);
        let by_to = HashMap::from([
            ("a".to_owned(), attempts(true, 1, 1)),
            ("b".to_owned(), attempts(true, 1, 0)),
        ]);
        let out = account(&received, &by_to);
        assert_eq!(out.unaccounted, vec![("b".to_owned(), 2, 1)]);
        assert_eq!(out.sent_not_received, 0);
    }

    #[test]
    fn a_sent_job_whose_recipient_got_nothing_is_counted() {
        let by_to = HashMap::from([("a".to_owned(), attempts(true, 1, 0))]);
        let out = account(&HashMap::new(), &by_to);
        assert_eq!(out.sent_not_received, 1);
        assert!(out.unaccounted.is_empty());
    }

    #[test]
    fn a_message_to_a_recipient_without_a_job_is_unaccounted() {
        let received = HashMap::from([("x".to_owned(), 1)]);
        let out = account(&received, &HashMap::new());
        assert_eq!(out.unaccounted, vec![("x".to_owned(), 1, 0)]);
    }
}
