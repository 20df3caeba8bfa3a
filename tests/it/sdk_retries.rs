//! One provider call is one request. SNS `Publish` and SES `SendEmail` are not idempotent:
//! after a 5xx or a timeout the message may have gone, and a retry inside the SDK would send
//! it again unseen, a call the job's history never records. So the production clients
//! (`notify_delivery::deliverer_from`) have the SDK's retries off, and a transient failure is
//! the job's, retried by the worker with its backoff and recorded as an attempt. Through the
//! real SDKs, against a proxy that answers every request with the provider's own 5xx.

use integration_tests::proxy::Proxy;
use notify_core::delivery::classify::ErrorClass;
use notify_core::delivery::{Deliverer, DeliveryConfig};
use notify_core::domain::Channel;
use notify_core::store::ClaimedJob;
use serde_json::json;

/// SNS's (Query protocol) answer to an internal failure.
fn sns_internal_error() -> Vec<u8> {
    let body = "<ErrorResponse xmlns=\"http://sns.amazonaws.com/doc/2010-03-31/\"><Error>\
                <Type>Receiver</Type><Code>InternalError</Code><Message>Internal error</Message>\
                </Error><RequestId>4b7e4b2e-3c0f-5f3e-9d1a-0c5b1f0e9a11</RequestId></ErrorResponse>";
    format!(
        "HTTP/1.1 500 Internal Server Error\r\nx-amzn-RequestId: 4b7e4b2e-3c0f-5f3e-9d1a-0c5b1f0e9a11\r\n\
         Content-Type: text/xml\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

/// SES v2's (REST-JSON) answer to an internal failure.
fn ses_internal_failure() -> Vec<u8> {
    let body = r#"{"message":"Internal failure"}"#;
    format!(
        "HTTP/1.1 500 Internal Server Error\r\nx-amzn-RequestId: 3f1c9e2a-7b1d-4c55-9a8e-2b6f0d4e8c11\r\n\
         x-amzn-ErrorType: InternalFailure:http://internal.amazon.com/coral/com.amazonaws.sesv2/\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

/// aws-config's defaults, as the worker loads them, with the proxy as the endpoint.
async fn sdk(endpoint: &str) -> aws_config::SdkConfig {
    aws_config::defaults(aws_config::BehaviorVersion::v2026_01_12())
        .endpoint_url(endpoint)
        .region(aws_config::Region::new("us-east-1"))
        .credentials_provider(aws_sdk_sesv2::config::Credentials::new(
            "testing", "testing", None, None, "test",
        ))
        .load()
        .await
}

fn job(channel: Channel) -> ClaimedJob {
    let payload = match channel {
        Channel::Sms => json!({"to": "+15555550100", "message": "Your code is 123456"}),
        Channel::Email => json!({"to": "a@example.com", "subject": "Hi", "text": "Hello"}),
    };
    integration_tests::stand_in::claimed_job(channel, payload)
}

#[tokio::test]
async fn each_provider_call_is_one_request_whatever_the_provider_answers() {
    for (channel, response, code) in [
        (Channel::Sms, sns_internal_error(), "InternalError"),
        (Channel::Email, ses_internal_failure(), "InternalFailure"),
    ] {
        let proxy = Proxy::answering(response).await;
        let deliverer = notify_delivery::deliverer_from(
            &sdk(&proxy.endpoint()).await,
            &DeliveryConfig::new("noreply@example.com"),
        );
        let err = deliverer.deliver(&job(channel)).await.unwrap_err();
        assert_eq!(err.code, code, "{channel:?}: {err:?}");
        assert_eq!(
            err.class(),
            ErrorClass::Transient,
            "the worker retries it later"
        );
        assert_eq!(
            proxy.answered(),
            1,
            "{channel:?}: one request for one call, no retry inside the SDK"
        );
    }
}

/// The contrast that makes the test above mean something: the SDK's default policy, on the
/// same answer, sends the same message three times.
#[tokio::test]
async fn the_sdks_default_retries_would_have_sent_three_requests() {
    let proxy = Proxy::answering(sns_internal_error()).await;
    let client = aws_sdk_sns::Client::new(&sdk(&proxy.endpoint()).await);
    let sms = notify_delivery::SnsSms::new(client, None);
    let err = sms.deliver(&job(Channel::Sms)).await.unwrap_err();
    assert_eq!(err.code, "InternalError");
    assert_eq!(proxy.answered(), 3);
}
