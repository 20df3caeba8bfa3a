//! Invariant 1, checked from both ends: the database logs every claim (a trigger the suite
//! installs on the queue, job_queue: job, attempt, token, the claiming session's
//! `application_name` — the process — and the time), the runtime emulator's
//! [`Ledger`](super::runtime::Ledger) says when each process ran each invocation, and a claim
//! is *twice* when it was made while an earlier claim of the same job was still held: its
//! holder's invocation still running and not yet done with the job.
//!
//! A claim is a queue row getting a new claim token (an UPDATE, or a row inserted claimed). A
//! hold starts at the claim and lasts until the holder is done with the job itself (its
//! session clears the token or deletes the queue row under its token: completed, or given
//! back) or its invocation ends (answered, or its process killed), whichever comes first. A
//! sweep does not end it: the swept worker may still be delivering, which is exactly the
//! double hold a sweep window shorter than the worker's timeout would cause. Whatever state
//! the job was in when claimed again counts for nothing.

use std::collections::HashMap;
use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio_postgres::Client;
use uuid::Uuid;

use super::runtime::{Ending, Span};

/// The attempt rows' number for the job row `rec` (a row of [`super::db::STANDS`]): its
/// tries, or its attempts where more (attempts given back are not retried numbers).
pub fn try_column(rec: &str) -> String {
    format!("GREATEST({rec}.tries, {rec}.attempts)")
}

/// Installs the claim log on a scenario's database (before any worker runs).
pub async fn install(client: &Client) {
    client
        .batch_execute(&format!(
            "CREATE TABLE faults_claims (
                 token uuid PRIMARY KEY,
                 job_id uuid NOT NULL,
                 attempt int NOT NULL,
                 holder text NOT NULL,
                 backend_pid int NOT NULL,
                 old_status text NOT NULL,
                 claimed_at timestamptz NOT NULL,
                 ended_at timestamptz,
                 ended_by text,
                 ended_how text);
             {LOG_CLAIM}
             CREATE TRIGGER faults_claims AFTER INSERT OR UPDATE OR DELETE ON job_queue
                 FOR EACH ROW EXECUTE FUNCTION faults_log_claim();"
        ))
        .await
        .expect("install the claim log");
}

/// The trigger function on job_queue. An AFTER ROW trigger runs once its statement is done,
/// so where the job stands (job_states) is as that statement left it.
const LOG_CLAIM: &str = "
    CREATE FUNCTION faults_log_claim() RETURNS trigger LANGUAGE plpgsql AS $$
    DECLARE
        record_status text;
        new_token uuid;
    BEGIN
        SELECT j.status::text INTO record_status FROM job_states AS j
        WHERE j.id = CASE WHEN TG_OP = 'DELETE' THEN OLD.id ELSE NEW.id END;
        record_status := coalesce(record_status, 'no record');
        new_token := CASE WHEN TG_OP = 'DELETE' THEN NULL ELSE NEW.claim_token END;
        -- the first change that ends a claim: the queue row loses its token (completed,
        -- given back, swept), gets another one, or goes (finished, buried); by whom
        IF TG_OP <> 'INSERT' AND OLD.claim_token IS NOT NULL
           AND new_token IS DISTINCT FROM OLD.claim_token THEN
            UPDATE faults_claims
            SET ended_at = clock_timestamp(),
                ended_by = current_setting('application_name'),
                ended_how = record_status
                            || CASE WHEN TG_OP = 'DELETE' THEN ', left the queue'
                                    WHEN new_token IS NULL THEN ', claim cleared'
                                    ELSE ', token changed' END
            WHERE token = OLD.claim_token AND ended_at IS NULL;
        END IF;
        -- a claim, whatever the job was before: a new token on its queue row
        IF new_token IS NOT NULL
           AND (TG_OP = 'INSERT' OR new_token IS DISTINCT FROM OLD.claim_token) THEN
            INSERT INTO faults_claims
                (token, job_id, attempt, holder, backend_pid, old_status, claimed_at)
            VALUES (new_token, NEW.id, GREATEST(NEW.tries, NEW.attempts),
                    current_setting('application_name'), pg_backend_pid(),
                    CASE WHEN TG_OP = 'INSERT' THEN 'queued claimed'
                         WHEN OLD.claim_token IS NOT NULL THEN 'processing'
                         ELSE record_status END,
                    clock_timestamp());
        END IF;
        RETURN NULL;
    END $$;";

/// One claim, as the trigger logged it.
#[derive(Debug, Clone)]
pub struct Claim {
    pub job_id: Uuid,
    pub attempt: i32,
    /// The claiming process (its session's `application_name`).
    pub holder: String,
    /// The job's status when it was claimed: `processing` when its queue row held another
    /// claim, else its record's (pending or failed).
    pub found: String,
    pub at: DateTime<Utc>,
    /// When and by which session the claim ended on the queue row (token cleared or
    /// replaced, row deleted), if it did: the holder's own (completed or given back) ends the
    /// hold; another's (a sweep) does not.
    pub ended: Option<(DateTime<Utc>, String)>,
}

/// Every claim logged so far.
pub async fn load(client: &Client) -> Vec<Claim> {
    client
        .query(
            "SELECT job_id, attempt, holder, claimed_at, ended_at, ended_by, old_status
             FROM faults_claims",
            &[],
        )
        .await
        .expect("read the claim log")
        .iter()
        .map(|r| Claim {
            job_id: r.get(0),
            attempt: r.get(1),
            holder: r.get(2),
            at: r.get(3),
            found: r.get(6),
            ended: r
                .get::<_, Option<DateTime<Utc>>>(4)
                .zip(r.get::<_, Option<String>>(5)),
        })
        .collect()
}

/// What the claim log and the invocations say together.
#[derive(Debug, Default)]
pub struct Verdict {
    pub claims: u64,
    /// Claims made while an earlier claim of the same job was still held, described.
    pub twice: Vec<String>,
    /// Claims ended by a worker that did not hold them, described: another worker's
    /// completion changed the job under a claim token that was not its own (the completion's
    /// fence is what prevents it; a sweeper ending a claim is its job).
    pub ended_by_another: Vec<String>,
    /// Claims that committed after their process was killed (the server ran a statement the
    /// process sent just before): held by no one.
    pub after_kill: u64,
    /// Claims by a session that ran no invocation at that moment and was not killed before:
    /// the log cannot say who held them (none should be).
    pub unattributed: Vec<String>,
    /// The longest a healthy holder kept a job before completing it.
    pub longest_hold: Duration,
}

/// Who held a claim.
enum Holder {
    /// An invocation of its process, until then. A running invocation holds until `now`.
    Until(DateTime<Utc>),
    /// No one: the claim committed after its process was killed.
    Dead,
    /// No invocation of its process ran at that moment.
    Unknown,
}

fn holder(claim: &Claim, spans: &[&Span], now: DateTime<Utc>) -> Holder {
    let running = spans
        .iter()
        .find(|s| s.picked <= claim.at && claim.at <= s.ended.map_or(now, |(at, _)| at));
    let Some(span) = running else {
        let killed_before = spans.iter().any(
            |s| matches!(s.ended, Some((at, Ending::Killed | Ending::TimedOut)) if at <= claim.at),
        );
        return if killed_before {
            Holder::Dead
        } else {
            Holder::Unknown
        };
    };
    let invocation_end = span.ended.map_or(now, |(at, _)| at);
    Holder::Until(match &claim.ended {
        Some((at, by)) if *by == claim.holder => invocation_end.min(*at),
        _ => invocation_end,
    })
}

/// Holds each claim against the invocations; see the module doc.
pub fn judge(claims: &[Claim], spans: &[Span], now: DateTime<Utc>) -> Verdict {
    let mut by_process: HashMap<&str, Vec<&Span>> = HashMap::new();
    for span in spans {
        by_process.entry(&span.process).or_default().push(span);
    }
    let mut by_job: HashMap<Uuid, Vec<(&Claim, DateTime<Utc>)>> = HashMap::new();
    let mut verdict = Verdict {
        claims: claims.len() as u64,
        ..Verdict::default()
    };
    for claim in claims {
        if let Some((at, by)) = &claim.ended
            && by != &claim.holder
            && by.starts_with("worker-")
        {
            verdict.ended_by_another.push(format!(
                "job {} attempt {} claimed by {} at {}, ended by {} at {}",
                claim.job_id,
                claim.attempt,
                claim.holder,
                claim.at.format("%T%.3f"),
                by,
                at.format("%T%.3f")
            ));
        }
        let spans = by_process
            .get(claim.holder.as_str())
            .map_or(&[][..], Vec::as_slice);
        let end = match holder(claim, spans, now) {
            Holder::Until(end) => end,
            Holder::Dead => {
                verdict.after_kill += 1;
                continue;
            }
            Holder::Unknown => {
                verdict.unattributed.push(format!(
                    "job {} attempt {} claimed by {:?} at {}",
                    claim.job_id,
                    claim.attempt,
                    claim.holder,
                    claim.at.format("%T%.3f")
                ));
                continue;
            }
        };
        if matches!(&claim.ended, Some((_, by)) if *by == claim.holder) {
            let held = (end - claim.at).to_std().unwrap_or_default();
            verdict.longest_hold = verdict.longest_hold.max(held);
        }
        by_job.entry(claim.job_id).or_default().push((claim, end));
    }
    for held in by_job.values_mut() {
        held.sort_by_key(|(c, _)| c.at);
        for (i, (later, _)) in held.iter().enumerate() {
            if let Some((earlier, until)) = held[..i].iter().find(|(_, until)| later.at < *until) {
                verdict.twice.push(format!(
                    "job {} attempt {} claimed from {} by {} at {} while {} held attempt {} until {}",
                    later.job_id,
                    later.attempt,
                    later.found,
                    later.holder,
                    later.at.format("%T%.3f"),
                    earlier.holder,
                    earlier.attempt,
                    until.format("%T%.3f"),
                ));
            }
        }
    }
    verdict
}

/// Per killed process (by a kill -9, or by Lambda at its invocation's deadline): the jobs it
/// was delivering when it was killed — claimed inside the invocation the kill ended (not
/// committed after it), never completed by it.
pub fn held_at_kills(claims: &[Claim], spans: &[Span]) -> HashMap<String, Vec<Uuid>> {
    let killed: Vec<&Span> = spans
        .iter()
        .filter(|s| matches!(s.ended, Some((_, Ending::Killed | Ending::TimedOut))))
        .collect();
    let mut held = HashMap::new();
    for claim in claims {
        let in_killed = killed.iter().any(|s| {
            s.process == claim.holder
                && s.picked <= claim.at
                && s.ended.is_some_and(|(at, _)| claim.at <= at)
        });
        let completed = matches!(&claim.ended, Some((_, by)) if *by == claim.holder);
        if in_killed && !completed {
            held.entry(claim.holder.clone())
                .or_insert_with(Vec::new)
                .push(claim.job_id);
        }
    }
    held
}

/// Duplicate sends, each given to what can explain it.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Attribution {
    /// Per killed process, the duplicates its kill explains.
    pub per_kill: HashMap<String, u64>,
    /// Duplicates explained by the job's own calls whose answer never came.
    pub by_unanswered: u64,
    /// Per job, the duplicates nothing explains.
    pub unexplained: Vec<(Uuid, u64)>,
}

/// Gives each job's duplicate sends (`duplicates`: sends beyond its first) to what can have
/// caused them: first its own calls that went unanswered (`unanswered`, per job), then the
/// kills whose invocation held it (`held`, from [`held_at_kills`]), one each — a killed
/// invocation sent a job it held at most once — the least loaded kill first. What is left is
/// unexplained. Each kill's share can then be held to what that kill had in flight.
pub fn attribute(
    duplicates: &HashMap<Uuid, u64>,
    unanswered: &HashMap<Uuid, u64>,
    held: &HashMap<String, Vec<Uuid>>,
) -> Attribution {
    let mut holders: HashMap<Uuid, Vec<&str>> = HashMap::new();
    for (process, jobs) in held {
        for job in jobs {
            holders.entry(*job).or_default().push(process);
        }
    }
    let mut out = Attribution::default();
    let mut jobs: Vec<(&Uuid, &u64)> = duplicates.iter().filter(|(_, d)| **d > 0).collect();
    // the jobs with the fewest candidate kills first, so the freer kills are left for the rest
    jobs.sort_by_key(|(job, _)| (holders.get(*job).map_or(0, Vec::len), **job));
    for (job, dups) in jobs {
        let own = unanswered.get(job).copied().unwrap_or(0).min(*dups);
        out.by_unanswered += own;
        let mut left = dups - own;
        let mut candidates = holders.get(job).cloned().unwrap_or_default();
        candidates.sort_by_key(|p| (out.per_kill.get(*p).copied().unwrap_or(0), *p));
        for process in candidates {
            if left == 0 {
                break;
            }
            *out.per_kill.entry(process.to_owned()).or_insert(0) += 1;
            left -= 1;
        }
        if left > 0 {
            out.unexplained.push((*job, left));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(ms: i64) -> DateTime<Utc> {
        DateTime::from_timestamp_millis(1_800_000_000_000 + ms).unwrap()
    }

    fn span(process: &str, picked: i64, ended: Option<i64>) -> Span {
        Span {
            invocation: format!("{process}-{picked}"),
            process: process.into(),
            picked: t(picked),
            ended: ended.map(|e| (t(e), Ending::Response)),
        }
    }

    fn claim(job: Uuid, holder: &str, at: i64, ended: Option<(i64, &str)>) -> Claim {
        Claim {
            job_id: job,
            attempt: 1,
            holder: holder.into(),
            found: "pending".into(),
            at: t(at),
            ended: ended.map(|(at, by)| (t(at), by.to_owned())),
        }
    }

    #[test]
    fn a_claim_after_the_holder_completed_the_job_is_not_twice() {
        let job = Uuid::new_v4();
        let spans = [span("w1", 0, Some(1000)), span("w2", 0, Some(1000))];
        let claims = [
            claim(job, "w1", 10, Some((200, "w1"))),
            claim(job, "w2", 300, None),
        ];
        let v = judge(&claims, &spans, t(5000));
        assert!(v.twice.is_empty(), "{:?}", v.twice);
        assert_eq!(v.claims, 2);
        assert_eq!(v.longest_hold, Duration::from_millis(190));
    }

    #[test]
    fn a_claim_of_a_swept_job_while_its_holder_still_runs_is_twice() {
        let job = Uuid::new_v4();
        let spans = [span("w1", 0, Some(3000)), span("w2", 0, None)];
        // swept at 2000 (not by its holder), claimed again at 2100
        let claims = [
            claim(job, "w1", 10, Some((2000, "sweeper"))),
            claim(job, "w2", 2100, Some((2500, "w2"))),
        ];
        let v = judge(&claims, &spans, t(5000));
        assert_eq!(v.twice.len(), 1, "{:?}", v.twice);
    }

    #[test]
    fn a_killed_holder_holds_nothing_after_the_kill() {
        let job = Uuid::new_v4();
        let mut killed = span("w1", 0, Some(500));
        killed.ended = Some((t(500), Ending::Killed));
        let spans = [killed, span("w2", 8000, Some(9000))];
        let claims = [claim(job, "w1", 10, None), claim(job, "w2", 8100, None)];
        assert!(judge(&claims, &spans, t(10_000)).twice.is_empty());
    }

    #[test]
    fn a_running_invocation_holds_until_now() {
        let job = Uuid::new_v4();
        let spans = [span("w1", 0, None), span("w2", 0, None)];
        let claims = [claim(job, "w1", 10, None), claim(job, "w2", 9000, None)];
        assert_eq!(judge(&claims, &spans, t(10_000)).twice.len(), 1);
    }

    #[test]
    fn a_claim_committed_after_its_process_was_killed_holds_nothing() {
        let job = Uuid::new_v4();
        let mut killed = span("w1", 0, None);
        killed.ended = Some((t(100), Ending::Killed));
        let spans = [killed, span("w2", 0, None)];
        let claims = [claim(job, "w1", 150, None), claim(job, "w2", 200, None)];
        let v = judge(&claims, &spans, t(1000));
        assert!(v.twice.is_empty());
        assert_eq!(v.after_kill, 1);
        assert!(v.unattributed.is_empty());
    }

    #[test]
    fn a_kill_holds_what_its_invocation_claimed_and_did_not_complete() {
        let mut killed = span("w1", 0, None);
        killed.ended = Some((t(900), Ending::Killed));
        let spans = [killed, span("w2", 0, Some(900))];
        let claims = [
            claim(Uuid::new_v4(), "w1", 10, Some((400, "w1"))), // completed before the kill
            claim(Uuid::new_v4(), "w1", 410, Some((8000, "sweeper"))), // in delivery
            claim(Uuid::new_v4(), "w1", 410, None),             // in delivery, not swept yet
            claim(Uuid::new_v4(), "w1", 950, Some((8000, "sweeper"))), // committed after the kill
            claim(Uuid::new_v4(), "w2", 10, None),              // not killed
        ];
        let held = held_at_kills(&claims, &spans);
        assert_eq!(held.len(), 1);
        assert_eq!(held["w1"].len(), 2);
        assert_eq!(
            [held["w1"][0], held["w1"][1]],
            [claims[1].job_id, claims[2].job_id]
        );
    }

    #[test]
    fn a_duplicate_goes_to_the_kill_that_held_its_job_never_to_another() {
        let (a, b, c) = (Uuid::new_v4(), Uuid::new_v4(), Uuid::new_v4());
        let held = HashMap::from([("k1".to_owned(), vec![a, b]), ("k2".to_owned(), vec![b])]);
        // a: once more than sent (k1 held it); b: twice more (k1 and k2); c: held by no kill,
        // one of its calls unanswered, two duplicates
        let duplicates = HashMap::from([(a, 1), (b, 2), (c, 2)]);
        let unanswered = HashMap::from([(c, 1)]);
        let out = attribute(&duplicates, &unanswered, &held);
        assert_eq!(
            out.per_kill,
            HashMap::from([("k1".to_owned(), 2), ("k2".to_owned(), 1)])
        );
        assert_eq!(out.by_unanswered, 1);
        assert_eq!(out.unexplained, vec![(c, 1)]);
        // a kill cannot explain a job twice: b's third duplicate is nobody's
        let out = attribute(&HashMap::from([(b, 3)]), &HashMap::new(), &held);
        assert_eq!(out.unexplained, vec![(b, 1)]);
    }

    #[test]
    fn a_claim_outside_any_invocation_of_a_live_process_is_unattributed() {
        let job = Uuid::new_v4();
        let spans = [span("w1", 0, Some(100))];
        let claims = [claim(job, "w1", 150, None), claim(job, "psql", 200, None)];
        assert_eq!(judge(&claims, &spans, t(1000)).unattributed.len(), 2);
    }
}
