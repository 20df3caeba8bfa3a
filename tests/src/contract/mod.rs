//! The API contract in the integration tests: [`Ingest`] is the ingest service whose every
//! answer is checked against `functions/ingest/openapi.yaml` (see the `api-contract` crate), so the tests
//! that call the handler keep the spec from drifting from the code.

pub use api_contract as checker;

use std::sync::Arc;

use lambda_http::{Body, Request, Response};
use notify_api::IngestConfig;
use notify_core::store::Store;

pub use checker::{Answer, Contract, assert_conforms, checked, contract, request_path, summary};

/// `notify_api::Ingest`, every answer checked against the contract: a test that gets an
/// answer the spec does not describe fails, naming what differs.
pub struct Ingest(notify_api::Ingest);

impl Ingest {
    pub fn new(store: Arc<dyn Store>, config: IngestConfig) -> Self {
        Self(notify_api::Ingest::new(store, config))
    }

    /// [`notify_api::Ingest::with_waker`].
    pub fn with_waker(self, waker: notify_core::fleet::Waker) -> Self {
        Self(self.0.with_waker(waker))
    }

    /// [`notify_api::Ingest::handle`], then the contract check.
    pub async fn handle(&self, req: Request) -> Response<Body> {
        checked(req, |req| self.0.handle(req)).await
    }
}

/// A reply of `cargo lambda watch`'s function URL (`/lambda-url/ingest/…`) against the
/// contract; `target` is the path after the function's prefix, query included.
pub fn assert_reply_conforms(method: &str, target: &str, reply: &crate::watch::Reply) {
    let answer = Answer {
        status: reply.status,
        headers: reply.headers.clone(),
        body: reply.body.as_bytes(),
    };
    let problems = contract().problems(method, target, &answer);
    assert!(
        problems.is_empty(),
        "{method} {target} answered {} through cargo lambda watch, which breaks the API \
         contract (functions/ingest/openapi.yaml):\n  - {}\n{reply:?}",
        reply.status,
        summary(&problems)
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    const ID: &str = "5b0f6c0e-1a2b-4c3d-8e4f-0123456789ab";

    fn answer<'a>(status: u16, headers: &[(&str, &str)], body: &'a str) -> Answer<'a> {
        Answer {
            status,
            headers: headers
                .iter()
                .map(|(n, v)| ((*n).to_owned(), (*v).to_owned()))
                .collect(),
            body: body.as_bytes(),
        }
    }

    fn accepted_body() -> String {
        format!(
            r#"{{"id":"{ID}","status":"pending","next_attempt_at":"2026-11-30T09:00:00.123456Z"}}"#
        )
    }

    const JSON: (&str, &str) = ("content-type", "application/json");
    const RID: (&str, &str) = ("x-request-id", "abc");

    #[test]
    fn an_answer_the_spec_describes_passes() {
        let location = format!("/notifications/{ID}");
        let body = accepted_body();
        let ok = answer(202, &[JSON, RID, ("location", &location)], &body);
        assert_eq!(
            contract().problems("POST", "/notifications", &ok),
            Vec::<String>::new()
        );
        let none = answer(204, &[RID], "");
        assert!(
            contract()
                .problems("DELETE", "/suppressions/a%40example.com", &none)
                .is_empty()
        );
        let err = r#"{"error":{"code":"invalid_id","message":"m","fields":[{"field":"id","message":"x"}]}}"#;
        let bad_id = answer(400, &[JSON, RID], err);
        assert!(
            contract()
                .problems("POST", "/notifications/x/cancel?y=1", &bad_id)
                .is_empty()
        );
    }

    #[test]
    fn what_the_spec_does_not_describe_is_named() {
        let c = contract();
        let body = accepted_body();
        let lost = body.replace("pending", "lost");
        let location = format!("/notifications/{ID}");
        let cases: Vec<(&str, &str, Answer, &str)> = vec![
            // a required header missing
            (
                "POST",
                "/notifications",
                answer(202, &[JSON, RID], &body),
                "Location",
            ),
            (
                "POST",
                "/notifications",
                answer(202, &[JSON, ("location", &location)], &body),
                "x-request-id",
            ),
            // a header against its schema
            (
                "POST",
                "/notifications",
                answer(202, &[JSON, RID, ("location", "/elsewhere")], &body),
                "header Location",
            ),
            // a status the operation does not declare
            (
                "GET",
                "/notifications",
                answer(404, &[JSON, RID], r#"{}"#),
                "does not declare status 404",
            ),
            // a body against its schema: an unknown field, a wrong enum, a missing field
            (
                "POST",
                "/notifications",
                answer(202, &[JSON, RID, ("location", &location)], &lost),
                "body",
            ),
            (
                "GET",
                "/suppressions",
                answer(
                    200,
                    &[JSON, RID],
                    r#"{"items":[],"next_cursor":null,"more":1}"#,
                ),
                "body",
            ),
            (
                "GET",
                "/suppressions",
                answer(200, &[JSON, RID], r#"{"items":[]}"#),
                "next_cursor",
            ),
            // an error code the response does not carry
            (
                "GET",
                "/notifications/x",
                answer(
                    400,
                    &[JSON, RID],
                    r#"{"error":{"code":"invalid_json","message":"m","fields":[]}}"#,
                ),
                "x-error-codes",
            ),
            // the media type, and a body where none is declared
            (
                "GET",
                "/suppressions",
                answer(200, &[("content-type", "text/plain"), RID], "{}"),
                "Content-Type",
            ),
            (
                "DELETE",
                "/suppressions/x",
                answer(204, &[RID], "{}"),
                "no content",
            ),
            // 405 must name exactly the path's methods
            (
                "PUT",
                "/notifications",
                answer(
                    405,
                    &[JSON, RID, ("allow", "GET")],
                    r#"{"error":{"code":"method_not_allowed","message":"m","fields":[]}}"#,
                ),
                "Allow",
            ),
            (
                "PUT",
                "/notifications",
                answer(404, &[JSON, RID], r#"{}"#),
                "expected 405",
            ),
            // an unknown path must be 404
            (
                "GET",
                "/nowhere",
                answer(200, &[JSON, RID], r#"{}"#),
                "expected 404",
            ),
        ];
        for (method, path, answer, expected) in cases {
            let problems = c.problems(method, path, &answer);
            assert!(
                problems.iter().any(|p| p.contains(expected)),
                "{method} {path} {}: expected a problem naming {expected:?}, got {problems:?}",
                answer.status
            );
        }
    }

    #[test]
    fn a_concrete_path_falls_under_its_most_literal_template() {
        fn template(path: &str) -> Option<&'static str> {
            contract().path_item(path).map(|(t, _)| t)
        }
        assert_eq!(
            template("/notifications/batch"),
            Some("/notifications/batch")
        );
        assert_eq!(
            template("/notifications/5b0f6c0e-1a2b-4c3d-8e4f-0123456789ab"),
            Some("/notifications/{id}")
        );
        assert_eq!(
            template("/notifications/?status=dead"),
            Some("/notifications")
        );
        assert_eq!(
            template("/notifications/x/cancel"),
            Some("/notifications/{id}/cancel")
        );
        assert_eq!(template("/notifications/x/retry"), None);
        assert_eq!(template("/"), None);
    }
}
