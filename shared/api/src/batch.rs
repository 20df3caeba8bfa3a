//! `POST /notifications/batch`: up to 500 notifications in one request, each validated on
//! its own; partial acceptance is explicit, item by item.

use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::{Value, json};
use uuid::Uuid;

use super::{FieldError, valid_key, validate};
use notify_core::store::{Inserted, JobSummary, NewJob};

pub const MAX_ITEMS: usize = 500;

/// The `notifications` array of a batch body.
pub fn items(body: &Value) -> Result<&Vec<Value>, Vec<FieldError>> {
    let Some(obj) = body.as_object() else {
        return Err(vec![FieldError::new("", "the body must be a JSON object")]);
    };
    let mut errors: Vec<FieldError> = obj
        .keys()
        .filter(|k| k.as_str() != "notifications")
        .map(|k| FieldError::new(k, "is not a known field"))
        .collect();
    let items = match obj.get("notifications") {
        Some(Value::Array(items)) if (1..=MAX_ITEMS).contains(&items.len()) => Some(items),
        Some(Value::Array(_)) => {
            errors.push(FieldError::new(
                "notifications",
                "must hold 1 to 500 notifications",
            ));
            None
        }
        _ => {
            errors.push(FieldError::new(
                "notifications",
                "is required: an array of notifications",
            ));
            None
        }
    };
    match items {
        Some(items) if errors.is_empty() => Ok(items),
        _ => Err(errors),
    }
}

/// One item, validated like a single request, with its own optional `idempotency_key`.
pub fn new_job(
    item: &Value,
    organization_id: Uuid,
    now: DateTime<Utc>,
    max_age: std::time::Duration,
) -> Result<NewJob, Vec<FieldError>> {
    // one notification in a batch is held to what a single request may be
    let size = serde_json::to_vec(item).map_or(usize::MAX, |bytes| bytes.len());
    if size > super::MAX_BODY_BYTES {
        return Err(vec![FieldError::new(
            "item",
            format!(
                "must be at most {} bytes, as a single request",
                super::MAX_BODY_BYTES
            ),
        )]);
    }
    let mut request = item.clone();
    let key = request
        .as_object_mut()
        .and_then(|obj| obj.remove("idempotency_key"));
    let mut errors = Vec::new();
    let key = match key {
        None => None,
        Some(Value::String(k)) if valid_key(k.as_bytes()) => Some(k),
        Some(_) => {
            errors.push(FieldError::new(
                "idempotency_key",
                "must be 1 to 255 visible ASCII characters",
            ));
            None
        }
    };
    match validate(&request, now) {
        Ok(request) if errors.is_empty() => Ok(request.into_job(organization_id, key, max_age)),
        Ok(_) => Err(errors),
        Err(more) => {
            errors.extend(more);
            Err(errors)
        }
    }
}

/// What became of one item.
#[derive(Debug, Clone, Serialize)]
pub struct ItemResult {
    pub index: usize,
    /// accepted | existing (an idempotent repeat) | invalid | conflict (key reused) |
    /// suppressed (the organization suppressed the recipient)
    pub status: &'static str,
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    pub job: Option<JobSummaryFields>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub errors: Vec<FieldError>,
}

/// The job an item made or found.
#[derive(Debug, Clone, Serialize)]
pub struct JobSummaryFields {
    pub id: Uuid,
    pub job_status: notify_core::domain::JobStatus,
    pub next_attempt_at: DateTime<Utc>,
}

impl From<JobSummary> for JobSummaryFields {
    fn from(s: JobSummary) -> Self {
        Self {
            id: s.id,
            job_status: s.status,
            next_attempt_at: s.next_attempt_at,
        }
    }
}

impl ItemResult {
    pub fn invalid(index: usize, errors: Vec<FieldError>) -> Self {
        Self {
            index,
            status: "invalid",
            job: None,
            errors,
        }
    }

    /// A valid item to a recipient the organization suppressed: not stored.
    pub fn suppressed(index: usize) -> Self {
        Self {
            index,
            status: "suppressed",
            job: None,
            errors: vec![FieldError::new(
                "to",
                format!("recipient_suppressed: {}", super::suppressions::SUPPRESSED),
            )],
        }
    }

    /// A valid item's result from the store (`None` would be a store bug: reported as such).
    pub fn stored(index: usize, inserted: Option<Inserted>) -> Self {
        let (status, job, errors) = match inserted {
            Some(Inserted::Suppressed) => return Self::suppressed(index),
            Some(Inserted::Created(s)) => ("accepted", Some(s.into()), Vec::new()),
            Some(Inserted::Existing(s)) => ("existing", Some(s.into()), Vec::new()),
            Some(Inserted::KeyReused) => (
                "conflict",
                None,
                vec![FieldError::new(
                    "idempotency_key",
                    "idempotency_key_reused: already used with a different request",
                )],
            ),
            None => ("invalid", None, vec![FieldError::new("", "not stored")]),
        };
        Self {
            index,
            status,
            job,
            errors,
        }
    }
}

/// The answer: counts, then every item's result in order.
pub fn answer(results: &[ItemResult]) -> Value {
    let count = |status: &str| results.iter().filter(|r| r.status == status).count();
    json!({
        "accepted": count("accepted"),
        "existing": count("existing"),
        "invalid": count("invalid"),
        "conflict": count("conflict"),
        "suppressed": count("suppressed"),
        "results": results,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_notification_in_a_batch_is_held_to_the_single_request_limit() {
        let org = Uuid::nil();
        let now = Utc::now();
        let big = "x".repeat(super::super::MAX_BODY_BYTES);
        let item = serde_json::json!({"channel": "email", "to": "a@example.com",
                                      "subject": "s", "html": big});
        let errors = new_job(&item, org, now, std::time::Duration::from_secs(3600)).unwrap_err();
        assert_eq!(errors.len(), 1);
        assert_eq!(errors[0].field, "item");
        assert!(errors[0].message.contains("65536"), "{}", errors[0].message);
        let small = serde_json::json!({"channel": "sms", "to": "+15555550100", "message": "hi"});
        assert!(new_job(&small, org, now, std::time::Duration::from_secs(3600)).is_ok());
    }

    #[test]
    fn each_item_has_its_own_priority() {
        use notify_core::domain::Priority;
        let (org, now, max_age) = (Uuid::nil(), Utc::now(), std::time::Duration::from_secs(60));
        let item = |priority: Value| {
            json!({"channel": "sms", "to": "+15555550100", "message": "hi",
                   "idempotency_key": "k", "priority": priority})
        };
        let job = new_job(&item(json!("low")), org, now, max_age).unwrap();
        assert_eq!(job.priority, Priority::Low);
        let plain = json!({"channel": "sms", "to": "+15555550100", "message": "hi"});
        assert_eq!(
            new_job(&plain, org, now, max_age).unwrap().priority,
            Priority::Normal
        );
        let errors = new_job(&item(json!("urgent")), org, now, max_age).unwrap_err();
        let fields: Vec<&str> = errors.iter().map(|e| e.field.as_str()).collect();
        assert_eq!(fields, ["priority"]);
    }
}
