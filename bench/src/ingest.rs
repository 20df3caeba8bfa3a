//! 3: the ingest handler called in-process with API Gateway requests (the HTTP API v2 event
//! of tests/fixtures/apigw, JWT authorizer), one connection per `Ingest` instance.

use std::sync::Arc;
use std::time::Instant;

use anyhow::{ensure, Context, Result};
use lambda_http::http::StatusCode;
use lambda_http::{Body, Request};
use serde_json::{json, Value};
use shared::ingest::{Ingest, IngestConfig};
use shared::store::PgStore;
use uuid::Uuid;

use crate::db::Bench;
use crate::stats::{round, Samples};

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
        event["body"] = json!(json!({
            "channel": "sms",
            "to": format!("+1555{:07}", n % 10_000_000),
            "message": "Your invoice is paid",
        })
        .to_string());
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

#[derive(Debug, Clone)]
pub struct IngestRun {
    pub concurrency: usize,
    pub latency: Samples,
    pub per_sec: f64,
}

impl IngestRun {
    pub fn json(&self) -> Value {
        let mut v = self.latency.json();
        v["concurrency"] = json!(self.concurrency);
        v["requests_per_sec"] = json!(round(self.per_sec, 1));
        v
    }
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
        latency,
    })
}
