//! Keyset pages (`GET /notifications`, `GET /suppressions`): the query parameters, the
//! opaque cursors and the page answer `{"items": [...], "next_cursor": ...}`.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use chrono::{DateTime, SecondsFormat, Utc};
use lambda_http::aws_lambda_events::query_map::QueryMap;
use serde::Serialize;
use serde_json::{Value, json};
use uuid::Uuid;

use super::FieldError;
use notify_core::domain::JobStatus;
use notify_core::store::ListCursor;

pub const DEFAULT_LIMIT: u32 = 50;
pub const MAX_LIMIT: u32 = 500;

/// A validated listing request.
#[derive(Debug, Clone, PartialEq)]
pub struct ListQuery {
    pub status: Option<JobStatus>,
    pub limit: u32,
    pub after: Option<ListCursor>,
}

impl ListQuery {
    /// Reads `status`, `limit` (1–500, default 50) and `cursor`; every bad one is listed.
    pub fn parse(query: &QueryMap) -> Result<Self, Vec<FieldError>> {
        let mut errors = Vec::new();
        let status = match query.first("status") {
            None => None,
            Some(s) => match JobStatus::parse(s) {
                Some(status) => Some(status),
                None => {
                    let names: Vec<&str> = JobStatus::ALL.iter().map(|s| s.as_str()).collect();
                    errors.push(FieldError::new(
                        "status",
                        format!("must be one of {}", names.join(", ")),
                    ));
                    None
                }
            },
        };
        let page = Page::parse(query, decode_cursor, &mut errors);
        if errors.is_empty() {
            Ok(Self {
                status,
                limit: page.limit,
                after: page.after,
            })
        } else {
            Err(errors)
        }
    }
}

/// The paging parameters every listing takes: `limit` (1–500, default 50) and `cursor`.
#[derive(Debug, Clone, PartialEq)]
pub struct Page<C> {
    pub limit: u32,
    pub after: Option<C>,
}

impl<C> Page<C> {
    /// Reads `limit` and `cursor` (read by `decode`), noting what is wrong in `errors`.
    pub fn parse(
        query: &QueryMap,
        decode: impl FnOnce(&str) -> Option<C>,
        errors: &mut Vec<FieldError>,
    ) -> Self {
        let limit = match query.first("limit") {
            None => DEFAULT_LIMIT,
            Some(raw) => match raw.parse::<u32>() {
                Ok(n) if (1..=MAX_LIMIT).contains(&n) => n,
                _ => {
                    errors.push(FieldError::new("limit", "must be an integer from 1 to 500"));
                    DEFAULT_LIMIT
                }
            },
        };
        let after = query.first("cursor").and_then(|raw| {
            let cursor = decode(raw);
            if cursor.is_none() {
                errors.push(FieldError::new(
                    "cursor",
                    "is not a cursor this API returned",
                ));
            }
            cursor
        });
        Self { limit, after }
    }
}

/// A page's answer: the items and, when the page is full, the cursor after its last item
/// (a full last page is followed by an empty one).
pub fn answer<T: Serialize>(
    items: &[T],
    limit: u32,
    cursor_after: impl FnOnce(&T) -> String,
) -> Value {
    let next_cursor = items
        .last()
        .filter(|_| items.len() == limit as usize)
        .map(cursor_after);
    json!({"items": items, "next_cursor": next_cursor})
}

/// The cursor after `last`: opaque to callers (base64url of its time and id).
pub fn encode_cursor(last: ListCursor) -> String {
    let text = format!(
        "{}|{}",
        last.created_at.to_rfc3339_opts(SecondsFormat::Micros, true),
        last.id
    );
    URL_SAFE_NO_PAD.encode(text)
}

fn decode_cursor(raw: &str) -> Option<ListCursor> {
    let bytes = URL_SAFE_NO_PAD.decode(raw).ok()?;
    let text = String::from_utf8(bytes).ok()?;
    let (time, id) = text.split_once('|')?;
    Some(ListCursor {
        created_at: DateTime::parse_from_rfc3339(time).ok()?.with_timezone(&Utc),
        id: Uuid::parse_str(id).ok()?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn query(pairs: &[(&str, &str)]) -> QueryMap {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        map.into()
    }

    #[test]
    fn cursors_round_trip_to_the_microsecond() {
        let cursor = ListCursor {
            created_at: "2026-11-30T07:00:00.123456Z".parse().unwrap(),
            id: Uuid::new_v4(),
        };
        let parsed = ListQuery::parse(&query(&[("cursor", &encode_cursor(cursor))])).unwrap();
        assert_eq!(parsed.after, Some(cursor));
    }

    #[test]
    fn bad_parameters_are_all_named() {
        let errors = ListQuery::parse(&query(&[
            ("status", "lost"),
            ("limit", "0"),
            ("cursor", "%%"),
        ]))
        .unwrap_err();
        let fields: Vec<_> = errors.iter().map(|e| e.field.as_str()).collect();
        assert_eq!(fields, ["status", "limit", "cursor"]);
    }

    #[test]
    fn defaults() {
        let parsed = ListQuery::parse(&query(&[])).unwrap();
        assert_eq!(
            (parsed.status, parsed.limit, parsed.after),
            (None, 50, None)
        );
    }
}
