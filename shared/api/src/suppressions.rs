//! The organization's suppression list as ingest sees it: the recipients it refuses
//! (`422 recipient_suppressed`; in a batch, the item `suppressed`), and the routes that show
//! and edit the list: `GET /suppressions`, `POST /suppressions` and
//! `DELETE /suppressions/{recipient}`.
//!
//! Recipients are compared normalised ([`normalize_recipient`]): an email address in lower
//! case, a phone number in E.164.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use lambda_http::http::StatusCode;
use lambda_http::{Request, RequestExt};
use percent_encoding::percent_decode_str;
use serde_json::Value;
use uuid::Uuid;

use super::http::json_body;
use super::listing::{self, Page};
use super::validate::{Fields, MAX_EMAIL_CHARS, parse_recipient, recipient_channel};
use super::{Answer, ApiError, FieldError, Ingest, MAX_BODY_BYTES, to_json};
use notify_core::domain::normalize_recipient;

/// An entry added by hand may say why in at most this many characters.
pub const MAX_DETAIL_CHARS: usize = 1000;

/// What a refusal says of a suppressed recipient.
pub const SUPPRESSED: &str = "the recipient is on this organization's suppression list \
     (it bounced, complained, failed as an SMS, or was added by hand); \
     DELETE /suppressions/{recipient}, the recipient URL-encoded, lifts it";

/// 422 for a notification to a suppressed recipient: nothing was stored.
pub(super) fn refusal() -> ApiError {
    let mut err = ApiError::new(
        StatusCode::UNPROCESSABLE_ENTITY,
        "recipient_suppressed",
        format!("{SUPPRESSED}; nothing was stored"),
    );
    err.fields.push(FieldError::new("to", "is suppressed"));
    err
}

/// The body of `POST /suppressions`: `{"recipient", "detail"?}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ManualSuppression {
    /// Normalised: an email address in lower case, a phone number in E.164.
    pub recipient: String,
    pub detail: Option<String>,
}

impl ManualSuppression {
    /// The recipient's channel is inferred: `+` and digits is a phone number, anything else
    /// must be an email address; either is held to the rules `to` follows.
    pub fn parse(body: &Value) -> Result<Self, Vec<FieldError>> {
        let mut errors = Vec::new();
        let Some(mut fields) = Fields::of(body, &mut errors) else {
            return Err(errors);
        };
        let recipient = fields
            .string("recipient", true, 1, MAX_EMAIL_CHARS)
            .and_then(|raw| match parse_recipient(&raw) {
                Ok(recipient) => Some(recipient),
                Err(why) => {
                    fields.error("recipient", why);
                    None
                }
            });
        let detail = fields.string("detail", false, 1, MAX_DETAIL_CHARS);
        fields.refuse_unknown(&["recipient", "detail"]);
        match recipient {
            Some(recipient) if errors.is_empty() => Ok(Self { recipient, detail }),
            _ => Err(errors),
        }
    }
}

/// The recipient a `/suppressions/{recipient}` path names: URL-decoded (`%2B15555550100`,
/// `user%40example.com`; a literal `+` stays a plus), then normalised. Not held to the rules
/// a new recipient follows, so that any entry the list holds can be lifted; but no entry
/// holds a control character (`POST /suppressions` and ingest refuse them), and PostgreSQL
/// cannot store NUL, so one is refused here with 400 rather than sent to the database.
pub fn path_recipient(segment: &str) -> Result<String, ApiError> {
    let invalid = |why: &str| {
        ApiError::field(
            "invalid_recipient",
            "recipient",
            &format!("the recipient in the path {why}"),
            why,
        )
    };
    let decoded = percent_decode_str(segment)
        .decode_utf8()
        .map_err(|_| invalid("must be URL-encoded UTF-8"))?;
    if decoded.chars().any(char::is_control) {
        return Err(invalid("must not contain control characters"));
    }
    Ok(normalize_recipient(recipient_channel(&decoded), &decoded))
}

/// Tags a suppression cursor, so that a notifications cursor is not taken for one.
const CURSOR_TAG: &str = "suppression:";

/// The cursor after `recipient`: opaque to callers (base64url of the tagged recipient).
fn encode_cursor(recipient: &str) -> String {
    URL_SAFE_NO_PAD.encode(format!("{CURSOR_TAG}{recipient}"))
}

/// The recipient a cursor names; `None` for anything [`encode_cursor`] cannot have made (no
/// listed recipient is empty or holds a control character).
fn decode_cursor(raw: &str) -> Option<String> {
    let text = String::from_utf8(URL_SAFE_NO_PAD.decode(raw).ok()?).ok()?;
    let recipient = text.strip_prefix(CURSOR_TAG)?;
    (!recipient.is_empty() && !recipient.chars().any(char::is_control))
        .then(|| recipient.to_owned())
}

impl Ingest {
    /// `GET /suppressions?limit=&cursor=`: a page of the list in recipient order.
    pub(super) async fn list_suppressions(&self, req: &Request, organization_id: Uuid) -> Answer {
        let mut errors = Vec::new();
        let page = Page::parse(&req.query_string_parameters(), decode_cursor, &mut errors);
        if !errors.is_empty() {
            return Err(ApiError::invalid(errors));
        }
        let entries = self
            .store
            .list_suppressions(organization_id, page.after.as_deref(), page.limit)
            .await?;
        let answer = listing::answer(&entries, page.limit, |last| encode_cursor(&last.recipient));
        Ok((StatusCode::OK, answer, None))
    }

    /// `POST /suppressions`: 201 with the new entry, 200 with the one already there.
    pub(super) async fn add_suppression(&self, req: &Request, organization_id: Uuid) -> Answer {
        let body = json_body(req, MAX_BODY_BYTES)?;
        let wanted = ManualSuppression::parse(&body).map_err(ApiError::invalid)?;
        let (entry, created) = self
            .store
            .add_suppression(organization_id, &wanted.recipient, wanted.detail.as_deref())
            .await?;
        let status = if created {
            StatusCode::CREATED
        } else {
            StatusCode::OK
        };
        Ok((status, to_json(&entry), None))
    }

    /// `DELETE /suppressions/{recipient}`: 204, or 404 when the recipient is not suppressed.
    pub(super) async fn remove_suppression(&self, organization_id: Uuid, segment: &str) -> Answer {
        let recipient = path_recipient(segment)?;
        if self
            .store
            .remove_suppression(organization_id, &recipient)
            .await?
        {
            Ok((StatusCode::NO_CONTENT, Value::Null, None))
        } else {
            Err(ApiError::not_found(
                "this recipient is not on the organization's suppression list",
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_recipient_is_a_phone_number_or_an_email_address_normalised() {
        let parse = |body: Value| ManualSuppression::parse(&body);
        assert_eq!(
            parse(json!({"recipient": "User@Example.COM", "detail": "asked by phone"})),
            Ok(ManualSuppression {
                recipient: "user@example.com".into(),
                detail: Some("asked by phone".into()),
            })
        );
        assert_eq!(
            parse(json!({"recipient": "+15555550100"}))
                .unwrap()
                .recipient,
            "+15555550100"
        );
        // an email address may start with + too
        assert_eq!(
            parse(json!({"recipient": "+Tag@Example.com"}))
                .unwrap()
                .recipient,
            "+tag@example.com"
        );
        for bad in [
            json!({"recipient": "15555550100"}),
            json!({"recipient": "+1555-555"}),
            json!({"recipient": "Ann <ann@example.com>"}),
            json!({"recipient": "a@localhost"}),
            json!({"recipient": ""}),
            json!({"recipient": 15555550100u64}),
            json!({}),
        ] {
            let fields: Vec<String> = parse(bad.clone())
                .unwrap_err()
                .into_iter()
                .map(|e| e.field)
                .collect();
            assert_eq!(fields, ["recipient"], "{bad}");
        }
    }

    #[test]
    fn unknown_fields_and_a_reason_are_refused() {
        let errors =
            ManualSuppression::parse(&json!({"recipient": "a@example.com", "reason": "bounce"}))
                .unwrap_err();
        assert_eq!(errors, [FieldError::new("reason", "is not a known field")]);
        let errors = ManualSuppression::parse(&json!({"recipient": "a@example.com",
                                                      "detail": "x".repeat(1001)}))
        .unwrap_err();
        assert_eq!(errors[0].field, "detail");
        assert!(ManualSuppression::parse(&json!(["a@example.com"])).is_err());
    }

    #[test]
    fn the_path_is_url_decoded_and_normalised() {
        for (segment, recipient) in [
            ("%2B15555550100", "+15555550100"),
            ("+15555550100", "+15555550100"),
            ("User%40Example.com", "user@example.com"),
            ("user@EXAMPLE.com", "user@example.com"),
            ("a%2Bb%40example.com", "a+b@example.com"),
            ("%2BTag%40Example.com", "+tag@example.com"),
        ] {
            assert_eq!(path_recipient(segment).unwrap(), recipient, "{segment}");
        }
        assert_eq!(path_recipient("%FF").unwrap_err().code, "invalid_recipient");
    }

    #[test]
    fn cursors_round_trip_and_refuse_what_this_listing_did_not_make() {
        let cursor = encode_cursor("user@example.com");
        assert_eq!(decode_cursor(&cursor).as_deref(), Some("user@example.com"));
        let notifications =
            URL_SAFE_NO_PAD.encode(format!("2026-11-30T07:00:00.123456Z|{}", Uuid::new_v4()));
        for bad in [
            "%%",
            "",
            &notifications,
            &URL_SAFE_NO_PAD.encode(CURSOR_TAG),
        ] {
            assert_eq!(decode_cursor(bad), None, "{bad}");
        }
    }
}
