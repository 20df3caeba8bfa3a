//! The X-Ray trace header a request ran under, kept with its job.

use lambda_http::{Request, RequestExt};
use notify_core::telemetry::usable_trace_header;

/// The X-Ray trace header a request ran under: the Lambda invocation's (with active tracing,
/// it continues the caller's trace), else the request's `X-Amzn-Trace-Id`. Kept only when it
/// is printable ASCII of at most [`notify_core::telemetry::MAX_TRACE_HEADER`] characters; otherwise, or without
/// one, `None` (a bad header never fails a request).
pub fn trace_header(req: &Request) -> Option<String> {
    let from_lambda = req
        .lambda_context_ref()
        .and_then(|context| context.xray_trace_id.clone());
    let from_request = || {
        req.headers()
            .get("x-amzn-trace-id")
            .and_then(|value| value.to_str().ok())
            .map(str::to_owned)
    };
    from_lambda
        .or_else(from_request)
        .filter(|header| usable_trace_header(header))
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEADER: &str =
        "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1";

    #[test]
    fn the_invocation_trace_comes_first_then_the_request_header() {
        let mut context = lambda_http::Context::default();
        context.xray_trace_id = Some(HEADER.to_owned());
        let req = lambda_http::http::Request::builder()
            .header("x-amzn-trace-id", "Root=1-from-the-caller")
            .body(lambda_http::Body::Empty)
            .unwrap();
        assert_eq!(
            trace_header(&req).as_deref(),
            Some("Root=1-from-the-caller")
        );
        let req = req.with_lambda_context(context);
        assert_eq!(trace_header(&req).as_deref(), Some(HEADER));
        let bare = lambda_http::http::Request::builder()
            .body(lambda_http::Body::Empty)
            .unwrap();
        assert_eq!(trace_header(&bare), None);
    }

    #[test]
    fn an_unusable_header_is_dropped() {
        let req = lambda_http::http::Request::builder()
            .header("x-amzn-trace-id", "a".repeat(300))
            .body(lambda_http::Body::Empty)
            .unwrap();
        assert_eq!(trace_header(&req), None);
    }
}
