//! A hostile-input corpus through the ingest binary ([`corpus`]): oversized and malformed
//! headers, deep nesting, NUL bytes, overlong and invalid UTF-8, SQL in every checked field,
//! wrong methods, content types and bodies. Every case gets the answer its table row
//! expects (always a 4xx), no process dies or panics, and nothing is written.

mod corpus;

use std::collections::HashMap;

use super::Scenario;
use crate::TestDb;
use crate::faults::api;
use crate::faults::row::statuses_text;
use crate::faults::{Row, Suite, db};

pub use corpus::{Case, Expect, corpus};

pub const SCENARIO: Scenario = Scenario {
    title: "hostile input corpus",
    run: |s| Box::pin(run(s)),
};

const PROCESSES: usize = 2;

async fn run(s: &mut Suite) -> Row {
    let mut row = Row::default();
    let db = TestDb::new().await;
    let client = db.client().await;
    let mut ingest = s.ingest(&db, PROCESSES, true).await;
    let cases = corpus();
    let mut statuses: HashMap<u16, u64> = HashMap::new();
    let mut unexpected = Vec::new();
    for case in &cases {
        let a = api::send_event(&ingest, &case.request).await;
        *statuses.entry(a.status).or_insert(0) += 1;
        row.runs += 1;
        if a.status == 202 {
            row.accepted += 1;
        }
        if a.function_error || !case.expect.allows(a.status) {
            let body: String = a.body.to_string().chars().take(200).collect();
            unexpected.push(format!(
                "{}: {} (want {}) {body}",
                case.name, a.status, case.expect
            ));
        }
    }
    row.note(format!(
        "{} cases → {}",
        cases.len(),
        statuses_text(&statuses)
    ));
    for u in &unexpected {
        row.note(format!("  {u}"));
    }
    let fivexx: u64 = statuses
        .iter()
        .filter(|(s, _)| **s >= 500)
        .map(|(_, n)| n)
        .sum();
    row.check(
        fivexx == 0,
        format!("5xx answers or function errors: {fivexx}"),
    );
    row.check(
        unexpected.is_empty(),
        format!(
            "cases answered otherwise than their row expects: {}",
            unexpected.len()
        ),
    );
    let alive = ingest.alive();
    row.check(
        alive == PROCESSES && ingest.spawned() == PROCESSES,
        format!("ingest processes alive: {alive} of {PROCESSES}, none restarted"),
    );
    let panics = s.launcher.all_logs().matches("panicked").count();
    row.check(panics == 0, format!("panics in the logs: {panics}"));
    let rows = db::jobs(&client).await;
    let queued = db::queue(&client).await.open;
    row.check(
        rows == 0 && queued == 0,
        format!("rows written: {rows}; queue rows: {queued}"),
    );
    ingest.kill_all().await;
    row
}
