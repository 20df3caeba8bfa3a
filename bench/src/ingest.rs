//! 3: the ingest handler called in-process with API Gateway requests (the HTTP API v2 event
//! of tests/fixtures/apigw, JWT authorizer), one connection per `Ingest` instance.

use std::sync::Arc;
use std::time::Instant;

use anyhow::{Context, Result, ensure};
use lambda_http::http::StatusCode;
use lambda_http::{Body, Request};
use notify_api::{Ingest, IngestConfig};
use notify_postgres::PgStore;
use serde::Serialize;
use serde_json::{Value, json};
use uuid::Uuid;

use crate::Plan;
use crate::db::Bench;
use crate::stats::{Latency, Samples, rounded};

const V2_EVENT: &str = include_str!("../../tests/fixtures/apigw/v2_http_api.json");

/// Builds API Gateway requests: an SMS send with a fresh Idempotency-Key each.
pub struct Requests {
    event: Value,
}

impl Requests {
    pub fn new() -> Result<Self> {
        Ok(Self {
            event: serde_json::from_str(V2_EVENT).context("the API Gateway fixture")?,
        })
    }

    pub fn send(&self, n: u64) -> Result<Request> {
        let mut event = self.event.clone();
        event["body"] = json!(
            json!({
                "channel": "sms",
                "to": format!("+1555{:07}", n % 10_000_000),
                "message": "Your invoice is paid",
            })
            .to_string()
        );
        event["headers"]["idempotency-key"] = json!(Uuid::new_v4().to_string());
        lambda_http::request::from_str(&event.to_string()).context("lambda_http parses the event")
    }
}

/// A job id from a 202 answer.
pub fn accepted_id(status: StatusCode, body: &Body) -> Result<Uuid> {
    let text = match body {
        Body::Text(t) => t.as_bytes(),
        Body::Binary(b) => b.as_slice(),
        _ => &[],
    };
    ensure!(
        status == StatusCode::ACCEPTED,
        "ingest answered {status}: {}",
        String::from_utf8_lossy(text)
    );
    let value: Value = serde_json::from_slice(text).context("ingest's JSON answer")?;
    value["id"]
        .as_str()
        .and_then(|s| Uuid::parse_str(s).ok())
        .context("ingest's answer has no id")
}

pub async fn new_ingest(bench: &Bench) -> Result<Ingest> {
    let store = PgStore::connect(bench.config.clone())
        .await
        .context("open ingest's store")?;
    Ok(Ingest::new(Arc::new(store), IngestConfig::default()))
}

/// 3: ingest alone and eight at once.
#[derive(Debug, Clone, Default, Serialize)]
pub struct IngestRuns {
    pub concurrency_1: IngestRun,
    pub concurrency_8: IngestRun,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct IngestRun {
    pub concurrency: usize,
    #[serde(flatten)]
    pub latency: Latency,
    #[serde(rename = "requests_per_sec", serialize_with = "rounded::<1, _>")]
    pub per_sec: f64,
}

/// The plan's requests at concurrency 1, then at 8, each on an empty queue.
pub async fn measure(bench: &Bench, plan: &Plan) -> Result<IngestRuns> {
    crate::step!("ingest: {} requests at concurrency 1", plan.ingest_c1);
    bench.truncate().await?;
    let concurrency_1 = run(bench, 1, plan.ingest_c1).await?;
    crate::step!(
        "ingest: {} requests at concurrency 8",
        plan.ingest_c8_each * 8
    );
    bench.truncate().await?;
    let concurrency_8 = run(bench, 8, plan.ingest_c8_each).await?;
    Ok(IngestRuns {
        concurrency_1,
        concurrency_8,
    })
}

/// `per_task` requests on each of `concurrency` instances at once (each request built before
/// its clock starts; the clock covers `Ingest::handle` only).
pub async fn run(bench: &Bench, concurrency: usize, per_task: u64) -> Result<IngestRun> {
    let requests = Arc::new(Requests::new()?);
    let mut ingests = Vec::with_capacity(concurrency);
    for _ in 0..concurrency {
        let ingest = new_ingest(bench).await?;
        // warm: the first request of an instance pays for nothing the others do not, but
        // keep the measured ones alike
        let resp = ingest.handle(requests.send(0)?).await;
        accepted_id(resp.status(), resp.body())?;
        ingests.push(ingest);
    }
    let started = Instant::now();
    let tasks: Vec<_> = ingests
        .into_iter()
        .enumerate()
        .map(|(t, ingest)| {
            let requests = requests.clone();
            tokio::spawn(async move {
                let mut samples = Samples::new();
                for i in 0..per_task {
                    let req = requests.send(t as u64 * per_task + i + 1)?;
                    let t0 = Instant::now();
                    let resp = ingest.handle(req).await;
                    samples.push(t0.elapsed());
                    accepted_id(resp.status(), resp.body())?;
                }
                Ok::<_, anyhow::Error>(samples)
            })
        })
        .collect();
    let mut latency = Samples::new();
    for task in tasks {
        latency.extend(task.await.context("ingest task")??);
    }
    let secs = started.elapsed().as_secs_f64();
    Ok(IngestRun {
        concurrency,
        per_sec: latency.len() as f64 / secs,
        latency: latency.latency(),
    })
}
