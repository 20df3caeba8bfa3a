//! How a delivering scenario ends: sweeps and healthy worker runs until every job is final
//! ([`drain`]), then the counts and checks every such scenario shares ([`settle`]).

use std::time::{Duration, Instant};

use chrono::Utc;
use tokio_postgres::Client;
use uuid::Uuid;

use super::api::invoke_scheduled;
use super::claims::{self, Verdict};
use super::process::Function;
use super::runtime::Ledger;
use super::suite::{STUCK_AFTER_SECS, WORKER_TIMEOUT};
use super::{Row, db, sends};
use crate::stand_in::Recipients;

/// Seconds since the oldest claim still held on the queue (0 when none).
async fn oldest_claim_age(client: &Client) -> f64 {
    client
        .query_one(
            "SELECT COALESCE(EXTRACT(EPOCH FROM now() - min(claimed_at))::float8, 0)
             FROM job_queue WHERE claim_token IS NOT NULL",
            &[],
        )
        .await
        .expect("age of the oldest claim")
        .get(0)
}

/// Runs sweeps (once the window has passed) and healthy worker runs, one after the other,
/// until no job is open (the queue is empty); bounded in rounds and time. Retries are made
/// due at once (the factory moves `next_attempt_at` back) instead of waiting their backoff
/// out.
pub async fn drain(client: &Client, worker: &Function, sweeper: &Function, row: &mut Row) {
    let started = Instant::now();
    let mut moved = 0;
    for _ in 0..60 {
        if started.elapsed() > Duration::from_secs(180) {
            row.check(false, "drain finished within 180 s");
            break;
        }
        let queue = db::queue(client).await;
        if queue.open == 0 {
            break;
        }
        moved += crate::factory::make_retries_due(client).await;
        if queue.claimed > 0 {
            // wait until the oldest claim is past the sweep window, then sweep
            let age = oldest_claim_age(client).await;
            let wait = (STUCK_AFTER_SECS as f64 + 0.5 - age).clamp(0.0, 10.0);
            tokio::time::sleep(Duration::from_secs_f64(wait)).await;
            if let Err(e) = invoke_scheduled(sweeper, Duration::from_secs(30)).await {
                row.note(format!("sweeper run failed: {e}"));
            }
            row.runs += 1;
        }
        if let Err(e) = invoke_scheduled(worker, WORKER_TIMEOUT).await {
            row.note(format!("worker run failed: {e}"));
        }
        row.runs += 1;
    }
    if moved > 0 {
        row.note(format!(
            "{moved} retries made due early (next_attempt_at moved back instead of waiting)"
        ));
    }
}

/// The provider is back: the held retries made due at once (instead of waiting the backoff
/// out), then one worker run, noted.
pub async fn run_once_recovered(
    client: &Client,
    worker: &Function,
    timeout: Duration,
    row: &mut Row,
) {
    crate::factory::make_retries_due(client).await;
    let summary = invoke_scheduled(worker, timeout).await;
    row.runs += 1;
    row.note(format!("the first run after: {summary:?}"));
}

/// [`settle`], and every accepted job delivered by now.
pub async fn settle_all_delivered(
    client: &Client,
    ledger: &Ledger,
    row: &mut Row,
    accepted: &[Uuid],
    recipients: &Recipients,
) {
    settle(client, ledger, row, accepted, recipients).await;
    let jobs = accepted.len() as u64;
    row.check(
        row.delivered == Some(jobs),
        format!("all {jobs} delivered on the first run after the provider returned"),
    );
}

/// The end-of-scenario counts and the checks every delivering scenario shares.
pub async fn settle(
    client: &Client,
    ledger: &Ledger,
    row: &mut Row,
    accepted: &[Uuid],
    recipients: &Recipients,
) -> Verdict {
    let st = db::statuses(client).await;
    row.delivered = Some(st.get("sent").copied().unwrap_or(0));
    row.dead = Some(st.get("dead").copied().unwrap_or(0));
    row.lost = db::lost(client, accepted).await;
    row.check(row.lost == 0, format!("lost jobs: {}", row.lost));
    let mismatched = db::queue_mismatches(client).await;
    let left = db::queue(client).await.open;
    row.check(
        mismatched == 0 && left == 0,
        format!(
            "the queue holds exactly the open jobs: {mismatched} records and queue rows that \
             disagree; queue rows left: {left}"
        ),
    );
    check_every_job_sent(client, row, accepted).await;
    let verdict = check_claims(client, ledger, row).await;
    check_sends(client, row, recipients).await;
    let without = db::attempts_without_rows(client).await;
    row.check(
        without == 0,
        format!("jobs whose attempts lack a delivery row: {without}"),
    );
    verdict
}

/// Every accepted job was sent. No scenario injects a fault of the message itself, so a job
/// may end `dead` only when its whole budget went to attempts whose fate its worker never
/// learnt (killed, swept, cut off, timed out: [`sends::unlearned_filter`]); a job buried by
/// anything else fails the scenario, even though `dead` is final and so not lost.
pub async fn check_every_job_sent(client: &Client, row: &mut Row, accepted: &[Uuid]) {
    let unlearned = sends::unlearned_filter("d", "$2");
    let r = client
        .query_one(
            &format!(
                "SELECT count(*) FILTER (WHERE j.status IS DISTINCT FROM 'sent'),
                        count(*) FILTER (WHERE j.status = 'dead'
                            AND EXISTS (SELECT 1 FROM job_attempt_history d WHERE d.job_id = j.id)
                            AND NOT EXISTS (
                                SELECT 1 FROM job_attempt_history d
                                WHERE d.job_id = j.id
                                  AND (d.outcome = 'sent' OR NOT ({unlearned}))))
                 FROM unnest($1::uuid[]) AS a(id)
                 LEFT JOIN ({}) j ON j.id = a.id",
                db::STANDS
            ),
            &[&accepted, &&sends::UNANSWERED[..]],
        )
        .await
        .expect("count unsent jobs");
    let (unsent, spent): (i64, i64) = (r.get(0), r.get(1));
    row.check(
        unsent == spent,
        format!(
            "every accepted job sent: {} of {}; dead because the at-least-once window spent \
             their whole budget (every attempt's fate unknown): {spent}; otherwise not sent: {}",
            accepted.len() as i64 - unsent,
            accepted.len(),
            unsent - spent
        ),
    );
}

/// The claimed-twice check's words: a mutant that breaks invariant 1 must fail it.
pub const CLAIMED_TWICE: &str =
    "claims made while an earlier holder's invocation still held the job";

/// The fence check's words: a worker whose completions ignore the claim token must fail it.
pub const ENDED_BY_ANOTHER: &str =
    "claims ended by a worker that did not hold them (a completion past its fence)";

/// Invariant 1 from the claim log and the invocations (see [`claims`]).
pub async fn check_claims(client: &Client, ledger: &Ledger, row: &mut Row) -> Verdict {
    let verdict = claims::judge(&claims::load(client).await, &ledger.spans(), Utc::now());
    row.claims = Some(verdict.claims);
    row.claimed_twice = Some(verdict.twice.len() as u64);
    // attempts given back make fewer attempts than claims, never more
    let attempts = crate::count(
        client,
        &format!(
            "SELECT COALESCE(sum(attempts), 0)::bigint FROM ({}) j",
            db::STANDS
        ),
    )
    .await as u64;
    let (unlogged, unclaimed) = unlogged_claims(client).await;
    row.check(
        verdict.claims >= attempts && attempts > 0 && unlogged == 0 && unclaimed == 0,
        format!(
            "the claim log saw every claim: {} claims for {attempts} attempts; claim tokens \
             in the queue it never saw: {unlogged}; delivery rows of attempts it saw no claim \
             for: {unclaimed}",
            verdict.claims
        ),
    );
    for (words, found) in [
        (CLAIMED_TWICE, &verdict.twice),
        (ENDED_BY_ANOTHER, &verdict.ended_by_another),
    ] {
        row.check(
            found.is_empty(),
            format!("{words}: {} of {}", found.len(), verdict.claims),
        );
    }
    row.check(
        verdict.unattributed.is_empty(),
        format!(
            "claims made outside any invocation of a live process: {}",
            verdict.unattributed.len()
        ),
    );
    for what in verdict
        .twice
        .iter()
        .chain(&verdict.ended_by_another)
        .chain(&verdict.unattributed)
        .take(5)
    {
        row.note(format!("  {what}"));
    }
    verdict
}

/// What the claim log missed: claim tokens held on the queue now that it never logged, and
/// delivery rows (one per attempt a claim started; `expired` ones excepted, which no claim
/// makes) with no logged claim of that job and attempt number. A finished job's queue row
/// and its last token are gone, so the delivery rows are what witnesses its claims.
async fn unlogged_claims(client: &Client) -> (i64, i64) {
    let tokens = crate::count(
        client,
        "SELECT count(*) FROM job_queue q WHERE q.claim_token IS NOT NULL
         AND NOT EXISTS (SELECT 1 FROM faults_claims c WHERE c.token = q.claim_token)",
    )
    .await;
    let attempts = crate::count(
        client,
        "SELECT count(*) FROM job_attempt_history d WHERE d.outcome <> 'expired'
         AND NOT EXISTS (SELECT 1 FROM faults_claims c
                         WHERE c.job_id = d.job_id AND c.attempt = d.attempt)",
    )
    .await;
    (tokens, attempts)
}

/// What the provider received, held against the attempts (see [`sends`]).
pub async fn check_sends(client: &Client, row: &mut Row, recipients: &Recipients) {
    let received = sends::received(|to| recipients.owns(to)).await;
    row.duplicate_sends = Some(sends::duplicates(&received));
    let accounting = sends::account(&received, &sends::attempts_by_recipient(client).await);
    row.check(
        accounting.unaccounted.is_empty(),
        format!(
            "recipients sent more than their attempts account for (one per recorded send, \
             at most one per attempt killed, swept or timed out): {}{}",
            accounting.unaccounted.len(),
            accounting
                .unaccounted
                .first()
                .map(|(_, got, n)| format!(" (first: {got} sent, {n} accountable)"))
                .unwrap_or_default()
        ),
    );
    row.check(
        accounting.sent_not_received == 0,
        format!(
            "jobs marked sent that the provider never received: {}",
            accounting.sent_not_received
        ),
    );
}
