//! The fault suite (`make faults`): the real function binaries, driven through a Lambda
//! Runtime API emulator, against a real PostgreSQL and the AWS stand-in behind a delaying
//! proxy. See `src/bin/faults.rs` for the scenarios.

pub mod process;
pub mod proxy;
pub mod runtime;

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use serde_json::Value;
use tokio_postgres::Client;
use uuid::Uuid;

use crate::apigw::ApiRequest;
use process::Function;
use runtime::Outcome;

/// One line of the result table.
#[derive(Debug, Default, Clone)]
pub struct Row {
    pub scenario: String,
    pub runs: u64,
    pub accepted: u64,
    pub delivered: Option<u64>,
    pub dead: Option<u64>,
    pub lost: u64,
    pub claimed_twice: Option<u64>,
    pub duplicate_sends: Option<u64>,
    pub notes: Vec<String>,
    pub failures: Vec<String>,
}

impl Row {
    pub fn new(scenario: &str) -> Self {
        Self {
            scenario: scenario.to_owned(),
            ..Self::default()
        }
    }

    pub fn note(&mut self, text: impl Into<String>) {
        let text = text.into();
        println!("    {text}");
        self.notes.push(text);
    }

    /// Records a failed check (the suite exits non-zero).
    pub fn check(&mut self, ok: bool, what: impl Into<String>) {
        let what = what.into();
        if ok {
            println!("    ok: {what}");
        } else {
            println!("    FAILED: {what}");
            self.failures.push(what);
        }
    }
}

fn cell(v: Option<u64>) -> String {
    v.map(|v| v.to_string()).unwrap_or_else(|| "n/a".into())
}

/// The table, as Markdown (printed and pasted into the README).
pub fn table(rows: &[Row]) -> String {
    let mut out = String::from(
        "| scenario | runs | accepted | delivered | dead | lost | claimed twice | duplicate sends |\n\
         | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n",
    );
    for r in rows {
        out.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} | {} | {} |\n",
            r.scenario,
            r.runs,
            r.accepted,
            cell(r.delivered),
            cell(r.dead),
            r.lost,
            cell(r.claimed_twice),
            cell(r.duplicate_sends),
        ));
    }
    out
}

/// What the ingest binary answered.
#[derive(Debug, Clone)]
pub struct Answer {
    /// The HTTP status API Gateway would return: the function's `statusCode`, 502 for a
    /// function error, 504 when no answer came in time.
    pub status: u16,
    pub body: Value,
    pub headers: Value,
    pub function_error: bool,
    pub latency: Duration,
}

/// Sends one API Gateway event through the ingest function.
pub async fn send_event(ingest: &Function, event: &Value) -> Answer {
    let started = Instant::now();
    let outcome = ingest
        .emulator
        .call(
            event.to_string().as_bytes(),
            Duration::from_secs(10),
            Duration::from_secs(15),
        )
        .await;
    let latency = started.elapsed();
    match outcome {
        Some(Outcome::Response(bytes)) => {
            let resp: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
            let status = resp
                .get("statusCode")
                .and_then(Value::as_u64)
                .unwrap_or(502) as u16;
            let body = resp
                .get("body")
                .and_then(Value::as_str)
                .and_then(|b| serde_json::from_str(b).ok())
                .unwrap_or(Value::Null);
            Answer {
                status,
                body,
                headers: resp.get("headers").cloned().unwrap_or(Value::Null),
                function_error: false,
                latency,
            }
        }
        Some(Outcome::Error(bytes)) => Answer {
            status: 502,
            body: serde_json::from_slice(&bytes).unwrap_or(Value::Null),
            headers: Value::Null,
            function_error: true,
            latency,
        },
        None => Answer {
            status: 504,
            body: Value::Null,
            headers: Value::Null,
            function_error: true,
            latency,
        },
    }
}

pub async fn send(ingest: &Function, req: &ApiRequest) -> Answer {
    send_event(ingest, &req.event()).await
}

/// The id in a 202/200 answer.
pub fn answered_id(answer: &Answer) -> Option<Uuid> {
    answer
        .body
        .get("id")
        .and_then(Value::as_str)
        .and_then(|s| Uuid::parse_str(s).ok())
}

pub const SCHEDULED_EVENT: &str = include_str!("../../fixtures/events/scheduled.json");

/// Invokes a worker or sweeper with the scheduled event; the summary, or why not.
pub async fn invoke_scheduled(f: &Function, timeout: Duration) -> Result<Value, String> {
    match f.call(SCHEDULED_EVENT.as_bytes(), timeout).await {
        Some(Outcome::Response(b)) => serde_json::from_slice(&b).map_err(|e| e.to_string()),
        Some(Outcome::Error(b)) => Err(String::from_utf8_lossy(&b).into_owned()),
        None => Err("no answer (timed out)".into()),
    }
}

/// Records every claim in `faults_claims` (a trigger on the job table), with the state the
/// job was in: a claim of a job already `processing` would be a double claim.
pub async fn install_claim_log(client: &Client) {
    client
        .batch_execute(
            "CREATE TABLE faults_claims (
                 job_id uuid NOT NULL, token uuid NOT NULL, old_status text NOT NULL,
                 old_token uuid, at timestamptz NOT NULL DEFAULT clock_timestamp());
             CREATE FUNCTION faults_log_claim() RETURNS trigger LANGUAGE plpgsql AS $$
             BEGIN
                 IF NEW.claim_token IS NOT NULL
                    AND NEW.claim_token IS DISTINCT FROM OLD.claim_token THEN
                     INSERT INTO faults_claims (job_id, token, old_status, old_token)
                     VALUES (NEW.id, NEW.claim_token, OLD.status::text, OLD.claim_token);
                 END IF;
                 RETURN NEW;
             END $$;
             CREATE TRIGGER faults_claims AFTER UPDATE ON notification_jobs
                 FOR EACH ROW EXECUTE FUNCTION faults_log_claim();",
        )
        .await
        .expect("install the claim log");
}

/// Claims taken while another invocation still held the job.
pub async fn double_claims(client: &Client) -> u64 {
    let row = client
        .query_one(
            "SELECT count(*) FROM faults_claims WHERE old_status = 'processing'",
            &[],
        )
        .await
        .expect("count double claims");
    row.get::<_, i64>(0) as u64
}

pub async fn claims(client: &Client) -> u64 {
    let row = client
        .query_one("SELECT count(*) FROM faults_claims", &[])
        .await
        .expect("count claims");
    row.get::<_, i64>(0) as u64
}

/// Job counts by status.
pub async fn statuses(client: &Client) -> HashMap<String, u64> {
    client
        .query(
            "SELECT status::text, count(*) FROM notification_jobs GROUP BY 1",
            &[],
        )
        .await
        .expect("count jobs")
        .iter()
        .map(|r| (r.get::<_, String>(0), r.get::<_, i64>(1) as u64))
        .collect()
}

/// Accepted ids that are missing or not final (`sent`/`dead`).
pub async fn lost(client: &Client, accepted: &[Uuid]) -> u64 {
    let row = client
        .query_one(
            "SELECT count(*) FROM unnest($1::uuid[]) AS a(id)
             LEFT JOIN notification_jobs j ON j.id = a.id
             WHERE j.id IS NULL OR j.status NOT IN ('sent', 'dead')",
            &[&accepted],
        )
        .await
        .expect("count lost jobs");
    row.get::<_, i64>(0) as u64
}

/// Accepted ids with no row.
pub async fn lost_rows(client: &Client, accepted: &[Uuid]) -> u64 {
    let row = client
        .query_one(
            "SELECT count(*) FROM unnest($1::uuid[]) AS a(id)
             WHERE NOT EXISTS (SELECT 1 FROM notification_jobs j WHERE j.id = a.id)",
            &[&accepted],
        )
        .await
        .expect("count missing rows");
    row.get::<_, i64>(0) as u64
}

/// Jobs whose attempts are not each recorded by exactly one delivery row.
pub async fn attempts_without_rows(client: &Client) -> u64 {
    let row = client
        .query_one(
            "SELECT count(*) FROM notification_jobs j
             WHERE j.attempts <> (SELECT count(*) FROM notification_deliveries d
                                  WHERE d.job_id = j.id)",
            &[],
        )
        .await
        .expect("count attempts without rows");
    row.get::<_, i64>(0) as u64
}

/// Sends per recipient at the stand-in, for the given recipients only.
pub async fn sends_per_recipient(owned: impl Fn(&str) -> bool) -> HashMap<String, u64> {
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

/// Extra sends beyond the first, over all recipients.
pub fn duplicates(counts: &HashMap<String, u64>) -> u64 {
    counts.values().map(|c| c.saturating_sub(1)).sum()
}

/// Recipients of jobs that had an attempt abandoned (swept as lost, or completed late and
/// fenced): the only jobs a duplicate send may come from.
pub async fn recipients_with_lost_attempts(client: &Client) -> HashSet<String> {
    client
        .query(
            "SELECT DISTINCT j.payload->>'to' FROM notification_jobs j
             JOIN notification_deliveries d ON d.job_id = j.id
             WHERE d.outcome = 'lost' OR d.fenced",
            &[],
        )
        .await
        .expect("recipients with lost attempts")
        .iter()
        .map(|r| r.get::<_, String>(0))
        .collect()
}

pub use crate::factory::make_retries_due;

/// `DATABASE_URL` with another database name.
pub fn url_with_db(url: &str, db: &str) -> String {
    shared::db::url_with_dbname(url, db).expect("DATABASE_URL is a postgres:// URL")
}

/// The `p`-th percentile (0–100) of sorted durations.
pub fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles() {
        let d: Vec<Duration> = (1..=100).map(Duration::from_millis).collect();
        assert_eq!(percentile(&d, 99.0), Duration::from_millis(99));
        assert_eq!(percentile(&d, 50.0), Duration::from_millis(50));
    }
}
