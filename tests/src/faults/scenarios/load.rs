//! Load: ingest requests at concurrency 16, 16 ingest processes polling one emulator; every
//! one accepted, and a row and a queue row for each. Latency is through the emulator, on a debug build
//! sharing the machine with PostgreSQL.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use futures::StreamExt;
use notify_core::stats::nearest_rank;
use serde_json::{Value, json};
use uuid::Uuid;

use super::Scenario;
use crate::TestDb;
use crate::apigw::{ApiRequest, Version};
use crate::faults::api::{self, Answer};
use crate::faults::logs::SECRET_MARKER;
use crate::faults::row::statuses_text;
use crate::faults::{Row, Suite, db};

pub const SCENARIO: Scenario = Scenario {
    title: "load, concurrency 16",
    run: |s| Box::pin(run(s)),
};

const CONCURRENCY: usize = 16;

async fn run(s: &mut Suite) -> Row {
    let mut row = Row::default();
    let n = if s.quick { 2_000 } else { 10_000 };
    let db = TestDb::new().await;
    let client = db.client().await;
    let api = s.ingest(&db, CONCURRENCY, true).await;
    let secret = format!("{SECRET_MARKER}load-{}", Uuid::new_v4().simple());
    s.secrets.push(secret.clone());
    let org = Uuid::new_v4();
    let recipient = |i: usize| format!("+1999{i:07}");
    let events: Vec<Value> = (0..n)
        .map(|i| {
            let body = json!({"channel": "sms", "to": recipient(i), "message": secret});
            ApiRequest::post(Version::V2, &body).org(org).event()
        })
        .collect();
    s.secrets.extend((0..n).map(recipient));
    let started = Instant::now();
    let answers: Vec<Answer> = futures::stream::iter(events.iter())
        .map(|e| api::send_event(&api, e))
        .buffer_unordered(CONCURRENCY)
        .collect()
        .await;
    let elapsed = started.elapsed();
    let mut statuses = HashMap::new();
    let mut latencies: Vec<Duration> = answers.iter().map(|a| a.latency).collect();
    latencies.sort();
    for a in &answers {
        *statuses.entry(a.status).or_insert(0u64) += 1;
    }
    let accepted: Vec<Uuid> = answers
        .iter()
        .filter(|a| a.status == 202)
        .filter_map(Answer::id)
        .collect();
    row.runs = n as u64;
    row.accepted = accepted.len() as u64;
    row.lost = db::missing_rows(&client, &accepted).await;
    let rows = db::jobs(&client).await;
    row.check(
        accepted.len() == n,
        format!("{n} requests → {}", statuses_text(&statuses)),
    );
    row.check(rows == n as u64, format!("rows in the table: {rows}"));
    // a job without its queue row would never be claimed: as good as lost
    let queue = db::queue(&client).await;
    let mismatched = db::queue_mismatches(&client).await;
    row.check(
        queue.open == rows && queue.claimed == 0 && mismatched == 0,
        format!(
            "queue rows: {} ({} claimed), one per job waiting; records and queue rows that \
             disagree: {mismatched}",
            queue.open, queue.claimed
        ),
    );
    row.check(row.lost == 0, format!("accepted but missing: {}", row.lost));
    // latencies is sorted; n > 0, so every quantile is there
    let ms_at = |q: f64| {
        nearest_rank(&latencies, q)
            .unwrap_or_default()
            .as_secs_f64()
            * 1000.0
    };
    row.note(format!(
        "{CONCURRENCY} ingest processes; latency through the runtime API: p50 {:.1} ms, \
         p99 {:.1} ms, max {:.1} ms; {:.0} requests/s over {:.1} s (debug build, 2 cores \
         shared with PostgreSQL)",
        ms_at(0.50),
        ms_at(0.99),
        ms_at(1.0),
        n as f64 / elapsed.as_secs_f64(),
        elapsed.as_secs_f64()
    ));
    row
}
