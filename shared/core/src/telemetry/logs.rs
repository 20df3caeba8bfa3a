//! The functions' log lines: Lambda's advanced logging settings first, then `RUST_LOG`.
//!
//! - Level: `AWS_LAMBDA_LOG_LEVEL` (`TRACE`, `DEBUG`, `INFO`, `WARN`, `ERROR`, `FATAL`), else
//!   `RUST_LOG` (any `EnvFilter` directives), else `info`.
//! - Format: `AWS_LAMBDA_LOG_FORMAT` `Text` gives tracing's human format; `JSON` (or unset) one
//!   JSON object per line, which Lambda's level filter and Logs Insights read.
//!
//! A JSON line carries, besides `level`, `message` and the event's fields, the fields of
//! every span it was logged in, flattened: within an invocation `request_id` (the Lambda
//! request id), `trace_id` (its X-Ray trace header) and `cold_start` (true on the lines of
//! an instance's first invocation); within a delivery `job_id` and the job's own `trace_id`.

use std::fmt;
use std::sync::OnceLock;

use serde_json::{Map, Value};
use tracing::field::{Field, Visit};
use tracing::{Event, Metadata, Subscriber};
use tracing_subscriber::Layer;
use tracing_subscriber::filter::{EnvFilter, FilterExt, filter_fn};
use tracing_subscriber::fmt::format::{JsonFields, Writer};
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields, FormattedFields};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::util::SubscriberInitExt;

/// The span the Lambda runtime opens around each invocation (`requestId`, `xrayTraceId`).
const INVOCATION_SPAN: &str = "Lambda runtime invoke";
/// The worker's span around one delivery (`job_id`, `trace_id`).
pub const DELIVERY_SPAN: &str = "delivery";

/// Targets that log at most `info` whatever the level: their debug lines carry statement
/// parameters and raw events (recipients, message bodies).
const QUIET: [&str; 3] = [
    "tokio_postgres=info",
    "lambda_runtime=info",
    "lambda_runtime_api_client=info",
];

/// How the lines look, from the environment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogSettings {
    /// `EnvFilter` directives.
    pub filter: String,
    pub json: bool,
}

impl LogSettings {
    /// From `AWS_LAMBDA_LOG_LEVEL`, `AWS_LAMBDA_LOG_FORMAT` and `RUST_LOG` in `lookup`.
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Self {
        let lambda_level = lookup("AWS_LAMBDA_LOG_LEVEL")
            .map(|level| level.trim().to_ascii_lowercase())
            .and_then(|level| match level.as_str() {
                "trace" | "debug" | "info" | "warn" | "error" => Some(level),
                "fatal" => Some("error".to_owned()),
                _ => None,
            });
        let filter = lambda_level
            .or_else(|| lookup("RUST_LOG").filter(|v| !v.trim().is_empty()))
            .unwrap_or_else(|| "info".to_owned());
        let json = !lookup("AWS_LAMBDA_LOG_FORMAT")
            .is_some_and(|format| format.trim().eq_ignore_ascii_case("text"));
        Self { filter, json }
    }

    /// The filter for events: the level, with [`QUIET`] targets held at `info`.
    pub fn env_filter(&self) -> EnvFilter {
        let filter = EnvFilter::try_new(&self.filter).unwrap_or_else(|_| EnvFilter::new("info"));
        QUIET
            .iter()
            .filter_map(|directive| directive.parse().ok())
            .fold(filter, |filter, directive| filter.add_directive(directive))
    }
}

/// Installs the global subscriber from the process environment (once; later calls do nothing).
pub fn init() {
    let settings = LogSettings::from_lookup(|name| std::env::var(name).ok());
    let layer = if settings.json {
        json_layer(&settings, std::io::stdout).boxed()
    } else {
        tracing_subscriber::fmt::layer()
            .with_target(false)
            .without_time()
            .with_filter(filter(&settings))
            .boxed()
    };
    let _ = tracing_subscriber::registry().with(layer).try_init();
}

/// The level filter, keeping the invocation and delivery spans at any level, so a `warn`
/// line still names its request, trace and job.
fn filter<S>(settings: &LogSettings) -> impl tracing_subscriber::layer::Filter<S> + use<S> {
    settings
        .env_filter()
        .or(filter_fn(|meta: &Metadata<'_>| kept_span(meta)))
}

/// The JSON lines layer ([`FlatJson`]) writing to `writer`.
fn json_layer<S, W>(settings: &LogSettings, writer: W) -> impl Layer<S> + use<S, W>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    W: for<'w> tracing_subscriber::fmt::MakeWriter<'w> + Send + Sync + 'static,
{
    tracing_subscriber::fmt::layer()
        .fmt_fields(JsonFields::new())
        .event_format(FlatJson)
        .with_writer(writer)
        .with_filter(filter(settings))
}

fn kept_span(meta: &Metadata<'_>) -> bool {
    meta.is_span() && (meta.name() == INVOCATION_SPAN || meta.name() == DELIVERY_SPAN)
}

/// One JSON object per event: level, message, the event's fields and its spans' fields.
pub struct FlatJson;

impl<S, N> FormatEvent<S, N> for FlatJson
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let mut line = Map::new();
        line.insert("level".to_owned(), event.metadata().level().as_str().into());
        if let Some(scope) = ctx.event_scope() {
            for span in scope.from_root() {
                let extensions = span.extensions();
                let Some(fields) = extensions.get::<FormattedFields<N>>() else {
                    continue;
                };
                if let Ok(Value::Object(fields)) = serde_json::from_str::<Value>(fields) {
                    for (name, value) in fields {
                        line.insert(span_field_name(name), value);
                    }
                }
            }
        }
        event.record(&mut Fields(&mut line));
        if let Some(Value::String(request_id)) = line.get("request_id") {
            static FIRST: OnceLock<String> = OnceLock::new();
            let cold = FIRST.get_or_init(|| request_id.clone()) == request_id;
            line.insert("cold_start".to_owned(), cold.into());
        }
        writeln!(writer, "{}", Value::Object(line))
    }
}

/// The runtime's span names its fields in camel case; the lines use snake case throughout.
fn span_field_name(name: String) -> String {
    match name.as_str() {
        "requestId" => "request_id".to_owned(),
        "xrayTraceId" => "trace_id".to_owned(),
        "tenantId" => "tenant_id".to_owned(),
        _ => name,
    }
}

/// Records an event's fields into a JSON object.
struct Fields<'a>(&'a mut Map<String, Value>);

impl Visit for Fields<'_> {
    fn record_f64(&mut self, field: &Field, value: f64) {
        self.0.insert(field.name().to_owned(), value.into());
    }
    fn record_i64(&mut self, field: &Field, value: i64) {
        self.0.insert(field.name().to_owned(), value.into());
    }
    fn record_u64(&mut self, field: &Field, value: u64) {
        self.0.insert(field.name().to_owned(), value.into());
    }
    fn record_bool(&mut self, field: &Field, value: bool) {
        self.0.insert(field.name().to_owned(), value.into());
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().to_owned(), value.into());
    }
    fn record_error(&mut self, field: &Field, value: &(dyn std::error::Error + 'static)) {
        let report = crate::error::report(value);
        self.0.insert(field.name().to_owned(), report.into());
    }
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.0
            .insert(field.name().to_owned(), format!("{value:?}").into());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::sync::{Arc, Mutex};

    fn settings(pairs: &[(&str, &str)]) -> LogSettings {
        LogSettings::from_lookup(|name| {
            pairs
                .iter()
                .find(|(n, _)| *n == name)
                .map(|(_, v)| (*v).to_owned())
        })
    }

    #[test]
    fn lambda_settings_come_before_rust_log() {
        let s = settings(&[("AWS_LAMBDA_LOG_LEVEL", "WARN"), ("RUST_LOG", "debug")]);
        assert_eq!(s.filter, "warn");
        assert!(s.json);
        assert_eq!(
            settings(&[("AWS_LAMBDA_LOG_LEVEL", "FATAL")]).filter,
            "error"
        );
        assert_eq!(
            settings(&[("RUST_LOG", "notify_core=debug")]).filter,
            "notify_core=debug"
        );
        assert_eq!(settings(&[]).filter, "info");
        // an unknown Lambda level leaves RUST_LOG in charge
        let s = settings(&[("AWS_LAMBDA_LOG_LEVEL", "LOUD"), ("RUST_LOG", "debug")]);
        assert_eq!(s.filter, "debug");
        assert!(!settings(&[("AWS_LAMBDA_LOG_FORMAT", "Text")]).json);
        assert!(settings(&[("AWS_LAMBDA_LOG_FORMAT", "JSON")]).json);
    }

    #[test]
    fn the_driver_and_the_runtime_never_log_below_info() {
        let captured = Captured::default();
        let writer = captured.clone();
        let filter = settings(&[(
            "RUST_LOG",
            "trace,tokio_postgres=trace,lambda_runtime=debug",
        )])
        .env_filter();
        let subscriber = tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_writer(move || writer.clone())
            .finish();
        tracing::subscriber::with_default(subscriber, || {
            tracing::debug!(target: "tokio_postgres::query", "executing statement with +15555550100");
            tracing::debug!(target: "lambda_runtime", "raw event with a message body");
            tracing::info!(target: "tokio_postgres::connection", "connection closed");
            tracing::debug!(target: "notify_core::worker", "our own debug line");
        });
        let text = String::from_utf8(captured.0.lock().unwrap().clone()).unwrap();
        assert!(!text.contains("+15555550100"), "{text}");
        assert!(!text.contains("raw event"), "{text}");
        assert!(text.contains("connection closed"), "{text}");
        assert!(
            text.contains("our own debug line"),
            "RUST_LOG is honoured otherwise: {text}"
        );
    }

    #[derive(Clone, Default)]
    struct Captured(Arc<Mutex<Vec<u8>>>);

    impl Write for Captured {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    /// The lines `f` logs through a subscriber built as [`init`] builds it, at `level`.
    fn lines_logged(level: &str, f: impl FnOnce()) -> Vec<Value> {
        let captured = Captured::default();
        let writer = captured.clone();
        let layer = json_layer(&settings(&[("AWS_LAMBDA_LOG_LEVEL", level)]), move || {
            writer.clone()
        });
        let subscriber = tracing_subscriber::registry().with(layer);
        tracing::subscriber::with_default(subscriber, f);
        let text = String::from_utf8(captured.0.lock().unwrap().clone()).unwrap();
        text.lines()
            .map(|line| serde_json::from_str(line).unwrap())
            .collect()
    }

    #[test]
    fn every_line_names_its_request_trace_and_job_even_above_info() {
        let lines = lines_logged("WARN", || {
            for request in ["req-1", "req-2"] {
                let invocation = tracing::info_span!(
                    "Lambda runtime invoke",
                    requestId = request,
                    xrayTraceId = "Root=1-invocation"
                );
                let _invocation = invocation.enter();
                tracing::info!("dropped: below the level");
                tracing::warn!(count = 3_u64, "outside any delivery");
                let delivery =
                    tracing::info_span!("delivery", job_id = "job-1", trace_id = "Root=1-job");
                let _delivery = delivery.enter();
                tracing::warn!(outcome = "retry", "attempt");
            }
        });
        assert_eq!(lines.len(), 4, "{lines:?}");
        assert_eq!(lines[0]["level"], "WARN");
        assert_eq!(lines[0]["message"], "outside any delivery");
        assert_eq!(lines[0]["count"], 3);
        assert_eq!(lines[0]["request_id"], "req-1");
        assert_eq!(lines[0]["trace_id"], "Root=1-invocation");
        assert_eq!(lines[0]["cold_start"], true);
        assert_eq!(lines[0].get("job_id"), None);
        // inside a delivery: the job's id and its own trace
        assert_eq!(lines[1]["job_id"], "job-1");
        assert_eq!(lines[1]["trace_id"], "Root=1-job");
        assert_eq!(lines[1]["request_id"], "req-1");
        assert_eq!(lines[1]["cold_start"], true);
        // the second invocation is warm
        assert_eq!(lines[2]["request_id"], "req-2");
        assert_eq!(lines[2]["cold_start"], false);
        assert_eq!(lines[3]["cold_start"], false);
    }
}
