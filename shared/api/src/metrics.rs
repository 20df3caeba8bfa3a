//! The ingest function's metric line, one per request (see
//! [`INGEST_METRICS`](notify_core::telemetry::emf::INGEST_METRICS)).

use lambda_http::http::StatusCode;
use serde_json::Value;

use notify_core::telemetry::emf::{Emf, Unit};

/// What a request did to the counts: `Accepted` (notifications stored now; a replay stores
/// nothing), `Refused` by `Code` for a refused request, `RefusedItems` for a batch's items
/// not stored.
pub fn line(
    route: &str,
    status: StatusCode,
    body: &Value,
    error_code: Option<&str>,
    timestamp_ms: i64,
) -> String {
    let count = |key: &str| body.get(key).and_then(Value::as_u64).unwrap_or(0);
    let (accepted, refused_items) = match (route, status) {
        ("POST /notifications", StatusCode::ACCEPTED) => (1, 0),
        ("POST /notifications/batch", StatusCode::OK) => (
            count("accepted"),
            count("invalid") + count("conflict") + count("suppressed"),
        ),
        _ => (0, 0),
    };
    let mut emf = Emf::new(timestamp_ms)
        .count("Accepted", accepted)
        .count("RefusedItems", refused_items);
    emf = match error_code {
        Some(code) => emf.dimension("Code", code).count("Refused", 1).metric_by(
            &["Code"],
            "Refused",
            Unit::Count,
            1.0,
        ),
        None => emf.count("Refused", 0),
    };
    emf.line()
}

#[cfg(test)]
mod tests {
    use super::*;
    use notify_core::telemetry::emf::published;
    use serde_json::json;

    fn values(line: &str) -> Value {
        serde_json::from_str(line).unwrap()
    }

    #[test]
    fn an_accepted_notification_counts_once_and_a_replay_not_at_all() {
        let v = values(&line(
            "POST /notifications",
            StatusCode::ACCEPTED,
            &json!({}),
            None,
            1,
        ));
        assert_eq!(
            (v["Accepted"].clone(), v["Refused"].clone()),
            (json!(1), json!(0))
        );
        let v = values(&line(
            "POST /notifications",
            StatusCode::OK,
            &json!({}),
            None,
            1,
        ));
        assert_eq!(v["Accepted"], 0);
    }

    #[test]
    fn a_batch_counts_its_items() {
        let body =
            json!({"accepted": 3, "existing": 1, "invalid": 2, "conflict": 1, "suppressed": 1});
        let v = values(&line(
            "POST /notifications/batch",
            StatusCode::OK,
            &body,
            None,
            1,
        ));
        assert_eq!(v["Accepted"], 3);
        assert_eq!(v["RefusedItems"], 4);
    }

    #[test]
    fn a_refusal_is_counted_by_its_code_and_in_total() {
        let l = line(
            "POST /notifications",
            StatusCode::UNPROCESSABLE_ENTITY,
            &json!({}),
            Some("recipient_suppressed"),
            1,
        );
        let v = values(&l);
        assert_eq!(v["Refused"], 1);
        assert_eq!(v["Code"], "recipient_suppressed");
        let refused = published(&l)
            .unwrap()
            .into_iter()
            .find(|(name, _)| name == "Refused")
            .unwrap();
        assert_eq!(
            refused.1,
            vec![
                vec!["Service".to_owned()],
                vec!["Service".to_owned(), "Code".to_owned()]
            ]
        );
    }
}
