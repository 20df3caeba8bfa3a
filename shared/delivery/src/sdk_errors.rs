//! The SDKs' own error types, classed variant by variant. Every error the SNS `Publish` and
//! SES v2 `SendEmail` models name has an arm here, so a variant a newer SDK adds must be
//! classed deliberately, although both enums are `#[non_exhaustive]`:
//! - clippy's `wildcard_enum_match_arm`, denied on both matches, fails on a variant they do
//!   not name (the project runs clippy with `-D warnings`);
//! - a test reads the SDK's own (wire code → variant) table out of its deserializer, drives
//!   each pair through the real SDK client, and requires a class here that agrees with
//!   [`CLASSES`](notify_core::delivery::classify::CLASSES) for that wire code.
//!
//! What the models do not name arrives as `Unhandled` with the service's code (SES v2's
//! `AccessDeniedException`, `ThrottlingException`, 5xx): the functions answer `None` and the
//! caller classes the code with [`classify`](notify_core::delivery::classify()).

use aws_sdk_sesv2::operation::send_email::SendEmailError;
use aws_sdk_sns::operation::publish::PublishError;

use notify_core::delivery::classify::ErrorClass::{self, Account, Permanent, Transient};

/// The class of a `Publish` error the SNS model names; `None` for one it does not
/// (`Unhandled`, or a variant newer than this match): class that by its code.
#[deny(clippy::wildcard_enum_match_arm)]
#[allow(deprecated)] // `Unhandled` is named so that clippy sees every variant named
pub fn publish_class(err: &PublishError) -> Option<ErrorClass> {
    use PublishError as E;
    Some(match err {
        // the message is wrong: the phone number, the text, an attribute's value
        E::InvalidParameterException(_)
        | E::InvalidParameterValueException(_)
        | E::ValidationException(_) => Permanent,
        // the endpoint this message targets is disabled
        E::EndpointDisabledException(_) => Permanent,
        E::InternalErrorException(_) | E::KmsThrottlingException(_) => Transient,
        // IAM, the request's signature, or the KMS key of the topic
        E::AuthorizationErrorException(_)
        | E::InvalidSecurityException(_)
        | E::KmsAccessDeniedException(_)
        | E::KmsDisabledException(_)
        | E::KmsInvalidStateException(_)
        | E::KmsNotFoundException(_)
        | E::KmsOptInRequired(_) => Account,
        // the topic or platform application the request names: configuration, not the
        // message (this service publishes to phone numbers only)
        E::NotFoundException(_) | E::PlatformApplicationDisabledException(_) => Account,
        E::Unhandled(_) => return None,
        _ => return None,
    })
}

/// The class of a `SendEmail` error the SES v2 model names; `None` for one it does not
/// (`Unhandled`, or a variant newer than this match): class that by its code. `sender` is
/// `EMAIL_FROM`, which tells a lapsed sender identity from an unverified recipient.
#[deny(clippy::wildcard_enum_match_arm)]
#[allow(deprecated)] // `Unhandled` is named so that clippy sees every variant named
pub fn send_email_class(err: &SendEmailError, sender: &str) -> Option<ErrorClass> {
    use SendEmailError as E;
    Some(match err {
        E::BadRequestException(_) => Permanent,
        E::MessageRejected(rejected) => {
            rejected_class(rejected.message().unwrap_or_default(), sender)
        }
        E::LimitExceededException(_) | E::TooManyRequestsException(_) => Transient,
        // NotFound: the configuration set SES_CONFIGURATION_SET names does not exist
        E::AccountSuspendedException(_)
        | E::SendingPausedException(_)
        | E::MailFromDomainNotVerifiedException(_)
        | E::NotFoundException(_) => Account,
        E::Unhandled(_) => return None,
        _ => return None,
    })
}

/// The class of SES's `MessageRejected`, from its message. SES refuses to send from an
/// unverified identity ("Email address is not verified. The following identities failed the
/// check in region US-EAST-1: noreply@example.com"), and in the sandbox to one as well. When
/// the identities named include `sender` (its address, or its domain) the sender identity has
/// lapsed: account trouble, the message is not at fault. When they name only others, the
/// sandbox refused this message's recipient: permanent for this message. A "not verified"
/// naming no identity we can read is held too, rather than bury a message for what is most
/// likely our configuration. Any other rejection (the content) is permanent.
pub fn rejected_class(message: &str, sender: &str) -> ErrorClass {
    let lower = message.to_lowercase();
    let Some(at) = lower.find("not verified") else {
        return Permanent;
    };
    let address = notify_core::delivery::sender_address(sender).to_lowercase();
    let domain = address.rsplit_once('@').map_or("", |(_, domain)| domain);
    let named: Vec<&str> = lower[at..]
        .split(|c: char| c.is_whitespace() || c == ',' || c == ';')
        .map(|word| word.trim_matches(|c: char| !(c.is_alphanumeric() || c == '@')))
        .filter(|word| is_identity(word))
        .collect();
    let names_sender = named
        .iter()
        .any(|identity| *identity == address || *identity == domain);
    if named.is_empty() || names_sender {
        Account
    } else {
        Permanent
    }
}

/// An email address or a domain, as SES names identities.
fn is_identity(word: &str) -> bool {
    let domain = word.rsplit_once('@').map_or(word, |(_, domain)| domain);
    domain.contains('.')
        && !domain.starts_with('.')
        && domain
            .chars()
            .all(|c| c.is_alphanumeric() || c == '.' || c == '-')
}

#[cfg(test)]
mod tests {
    //! Errors built by the SDKs themselves: each case is an HTTP answer as the service sends
    //! it, served on a loopback port to a real SDK client, whose deserializer makes the typed
    //! error (or `Unhandled`) that the adapter then classes.

    use std::time::Duration;

    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;
    use crate::{SesEmail, SnsSms};
    use notify_core::delivery::classify::{CLASSES, known};
    use notify_core::delivery::{DeliveryConfig, DeliveryError, EmailPayload, SmsPayload};

    const SENDER: &str = "Example <noreply@example.com>";

    /// One HTTP answer, and the code the adapter must read from it.
    struct Reply {
        status: u16,
        headers: Vec<(&'static str, String)>,
        body: String,
        code: String,
    }

    /// An SNS (Query protocol) error: `<ErrorResponse><Error><Code>…`.
    fn sns(status: u16, code: &str, message: &str) -> Reply {
        let escape = |s: &str| {
            s.replace('&', "&amp;")
                .replace('<', "&lt;")
                .replace('>', "&gt;")
        };
        let kind = if status >= 500 { "Receiver" } else { "Sender" };
        Reply {
            status,
            headers: vec![("Content-Type", "text/xml".into())],
            body: format!(
                "<ErrorResponse xmlns=\"http://sns.amazonaws.com/doc/2010-03-31/\">\
                 <Error><Type>{kind}</Type><Code>{}</Code><Message>{}</Message></Error>\
                 <RequestId>4b7e4b2e-3c0f-5f3e-9d1a-0c5b1f0e9a11</RequestId></ErrorResponse>",
                escape(code),
                escape(message)
            ),
            code: code.into(),
        }
    }

    /// An SES v2 (REST-JSON) error: the code in `x-amzn-ErrorType`, the message in the body.
    fn ses(status: u16, code: &str, message: &str) -> Reply {
        ses_from(status, code, "com.amazonaws.sesv2", "message", message)
    }

    /// The same as the AWS front door sends it for credentials and IAM (`Message`).
    fn ses_auth(code: &str, message: &str) -> Reply {
        ses_from(403, code, "com.amazon.coral.service", "Message", message)
    }

    fn ses_from(status: u16, code: &str, namespace: &str, key: &str, message: &str) -> Reply {
        Reply {
            status,
            headers: vec![
                ("Content-Type", "application/json".into()),
                (
                    "x-amzn-ErrorType",
                    format!("{code}:http://internal.amazon.com/coral/{namespace}/"),
                ),
            ],
            body: serde_json::json!({ key: message }).to_string(),
            code: code.into(),
        }
    }

    /// An answer without a code: a proxy's or load balancer's error page.
    fn bare(status: u16) -> Reply {
        Reply {
            status,
            headers: vec![("Content-Type", "text/html".into())],
            body: format!("<html><body>{status}</body></html>"),
            code: match status {
                500.. => "Http5xx".into(),
                _ => format!("Http{status}"),
            },
        }
    }

    /// Serves `reply` to the first request on a loopback port; `None` never answers.
    async fn serve(reply: Option<Reply>) -> String {
        serve_recording(reply).await.0
    }

    /// [`serve`], also handing over the request's head (request line and headers) as read.
    async fn serve_recording(
        reply: Option<Reply>,
    ) -> (String, tokio::sync::oneshot::Receiver<String>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let (seen, request) = tokio::sync::oneshot::channel();
        tokio::spawn(async move {
            let (mut stream, _) = listener.accept().await.unwrap();
            let _ = seen.send(read_request(&mut stream).await);
            let Some(reply) = reply else {
                return tokio::time::sleep(Duration::from_secs(60)).await;
            };
            let mut head = format!("HTTP/1.1 {} Error\r\n", reply.status);
            for (name, value) in &reply.headers {
                head.push_str(&format!("{name}: {value}\r\n"));
            }
            head.push_str(&format!(
                "x-amzn-RequestId: 4b7e4b2e-3c0f-5f3e-9d1a-0c5b1f0e9a11\r\n\
                 Content-Length: {}\r\nConnection: close\r\n\r\n",
                reply.body.len()
            ));
            stream.write_all(head.as_bytes()).await.unwrap();
            stream.write_all(reply.body.as_bytes()).await.unwrap();
            stream.shutdown().await.ok();
        });
        (url, request)
    }

    /// Reads one request; returns its head.
    async fn read_request(stream: &mut tokio::net::TcpStream) -> String {
        let mut request = Vec::new();
        let mut buf = [0u8; 4096];
        loop {
            let n = stream.read(&mut buf).await.unwrap();
            request.extend_from_slice(&buf[..n]);
            let text = String::from_utf8_lossy(&request);
            if let Some(end) = text.find("\r\n\r\n") {
                let length = text[..end]
                    .lines()
                    .find_map(|line| {
                        let (name, value) = line.split_once(':')?;
                        name.eq_ignore_ascii_case("content-length")
                            .then(|| value.trim().parse::<usize>().ok())?
                    })
                    .unwrap_or(0);
                if request.len() >= end + 4 + length || n == 0 {
                    return text[..end].to_owned();
                }
            } else if n == 0 {
                return text.into_owned();
            }
        }
    }

    fn credentials() -> aws_sdk_sns::config::Credentials {
        aws_sdk_sns::config::Credentials::new("AKIDEXAMPLE", "secret", None, None, "test")
    }

    fn timeouts() -> aws_sdk_sns::config::timeout::TimeoutConfig {
        aws_sdk_sns::config::timeout::TimeoutConfig::builder()
            .operation_timeout(Duration::from_secs(2))
            .build()
    }

    fn sns_client(url: &str) -> aws_sdk_sns::Client {
        let config = aws_sdk_sns::Config::builder()
            .behavior_version(aws_sdk_sns::config::BehaviorVersion::v2026_01_12())
            .region(aws_sdk_sns::config::Region::new("us-east-1"))
            .credentials_provider(credentials())
            .endpoint_url(url)
            .retry_config(aws_sdk_sns::config::retry::RetryConfig::disabled())
            .timeout_config(timeouts())
            .build();
        aws_sdk_sns::Client::from_conf(config)
    }

    fn ses_client(url: &str) -> aws_sdk_sesv2::Client {
        let config = aws_sdk_sesv2::Config::builder()
            .behavior_version(aws_sdk_sesv2::config::BehaviorVersion::v2026_01_12())
            .region(aws_sdk_sesv2::config::Region::new("us-east-1"))
            .credentials_provider(credentials())
            .endpoint_url(url)
            .retry_config(aws_sdk_sesv2::config::retry::RetryConfig::disabled())
            .timeout_config(timeouts())
            .build();
        aws_sdk_sesv2::Client::from_conf(config)
    }

    /// What the SMS adapter makes of `reply`.
    async fn sms_failure(reply: Reply) -> DeliveryError {
        let url = serve(Some(reply)).await;
        send_sms(sns_client(&url)).await
    }

    async fn send_sms(client: aws_sdk_sns::Client) -> DeliveryError {
        let sms = SmsPayload {
            to: "+15555550100".into(),
            message: "Your code is 123456".into(),
        };
        SnsSms::new(client, None)
            .send(sms, None)
            .await
            .expect_err("the stand-in answers with an error")
    }

    /// What the email adapter, sending from [`SENDER`], makes of `reply`.
    async fn email_failure(reply: Reply) -> DeliveryError {
        let url = serve(Some(reply)).await;
        send_email(ses_client(&url)).await
    }

    async fn send_email(client: aws_sdk_sesv2::Client) -> DeliveryError {
        let email = EmailPayload {
            to: "alice@example.org".into(),
            subject: "Your receipt".into(),
            text: Some("Thank you.".into()),
            html: None,
            reply_to: None,
        };
        SesEmail::new(client, &DeliveryConfig::new(SENDER))
            .send(email, None)
            .await
            .expect_err("the stand-in answers with an error")
    }

    const NOT_AUTHORIZED: &str = "User: arn:aws:sts::123456789012:assumed-role/worker/fn is not \
        authorized to perform: SNS:Publish on resource: +15555550100 because no identity-based \
        policy allows the SNS:Publish action";
    const TOKEN_INVALID: &str = "The security token included in the request is invalid.";
    const TOKEN_EXPIRED: &str = "The security token included in the request is expired";
    const SIGNATURE: &str = "The request signature we calculated does not match the signature \
        you provided. Check your AWS Secret Access Key and signing method.";
    const OPT_IN: &str = "The AWS Access Key Id needs a subscription for the service";
    const KEY: &str = "arn:aws:kms:us-east-1:123456789012:key/1234abcd-12ab-34cd-56ef-1234567890ab";

    /// Every SNS answer the table classes, with the class it must get.
    fn sms_cases() -> Vec<(Reply, ErrorClass)> {
        let kms = |code, message: &str| sns(400, code, &format!("{message} (Service: AWSKMS)"));
        Vec::from([
            // modeled by the SDK: PublishError's variants
            (
                sns(
                    400,
                    "InvalidParameter",
                    "Invalid parameter: PhoneNumber Reason: \
                    +15555550100 is not valid to publish to",
                ),
                Permanent,
            ),
            (
                sns(
                    400,
                    "ParameterValueInvalid",
                    "Invalid parameter: Message Reason: \
                    Message too long",
                ),
                Permanent,
            ),
            (
                sns(
                    400,
                    "ValidationException",
                    "1 validation error detected: Value at \
                    'message' failed to satisfy constraint",
                ),
                Permanent,
            ),
            (
                sns(400, "EndpointDisabled", "Endpoint is disabled"),
                Permanent,
            ),
            (sns(500, "InternalError", "Internal Error"), Transient),
            (kms("KMSThrottling", "Rate exceeded"), Transient),
            (sns(403, "AuthorizationError", NOT_AUTHORIZED), Account),
            (
                sns(
                    403,
                    "InvalidSecurity",
                    "The request must be made over HTTPS and signed \
                    with Signature Version 4",
                ),
                Account,
            ),
            (
                kms("KMSAccessDenied", &format!("Access to {KEY} is denied")),
                Account,
            ),
            (kms("KMSDisabled", &format!("{KEY} is disabled.")), Account),
            (
                kms("KMSInvalidState", &format!("{KEY} is pending deletion.")),
                Account,
            ),
            (kms("KMSNotFound", "Invalid keyId alias/sns-sms"), Account),
            (sns(403, "KMSOptInRequired", OPT_IN), Account),
            (sns(404, "NotFound", "Topic does not exist"), Account),
            (
                sns(
                    400,
                    "PlatformApplicationDisabled",
                    "Platform application is disabled",
                ),
                Account,
            ),
            // not modeled for Publish: Unhandled, classed by its code
            (
                sns(
                    400,
                    "InvalidParameterValue",
                    "Invalid parameter value: Message",
                ),
                Permanent,
            ),
            (
                sns(400, "ValidationError", "1 validation error detected"),
                Permanent,
            ),
            (sns(400, "OptedOut", "Phone number is opted out"), Permanent),
            (sns(400, "Throttling", "Rate exceeded"), Transient),
            (sns(429, "Throttled", "Rate exceeded"), Transient),
            (
                sns(
                    500,
                    "InternalFailure",
                    "The request processing has failed because of an \
                    unknown error, exception or failure.",
                ),
                Transient,
            ),
            (
                sns(
                    503,
                    "ServiceUnavailable",
                    "Service is unavailable. Please try again later.",
                ),
                Transient,
            ),
            (sns(403, "InvalidClientTokenId", TOKEN_INVALID), Account),
            (sns(403, "SignatureDoesNotMatch", SIGNATURE), Account),
            (sns(403, "ExpiredToken", TOKEN_EXPIRED), Account),
            (sns(403, "OptInRequired", OPT_IN), Account),
            (sns(403, "AccessDenied", NOT_AUTHORIZED), Account),
            (sns(400, "SomethingNew", "a code no table knows"), Transient),
            // no code at all: named by the status
            (bare(502), Transient),
            (bare(429), Transient),
            (bare(401), Account),
            (bare(403), Account),
            (bare(404), Transient),
        ])
    }

    const RECIPIENT_UNVERIFIED: &str = "Email address is not verified. The following identities \
        failed the check in region US-EAST-1: alice@example.org";
    const SENDER_UNVERIFIED: &str = "Email address is not verified. The following identities \
        failed the check in region US-EAST-1: noreply@example.com";
    const BOTH_UNVERIFIED: &str = "Email address is not verified. The following identities \
        failed the check in region EU-WEST-1: noreply@example.com, alice@example.org";
    /// What the stand-in (moto) says of an unverified sender.
    const STAND_IN_UNVERIFIED: &str = "Email address not verified Example <noreply@example.com>";
    const SES_NOT_AUTHORIZED: &str = "User: arn:aws:sts::123456789012:assumed-role/worker/fn is \
        not authorized to perform: ses:SendEmail on resource: \
        arn:aws:ses:us-east-1:123456789012:identity/example.com";

    /// Every SES v2 answer the table classes, with the class it must get.
    fn email_cases() -> Vec<(Reply, ErrorClass)> {
        Vec::from([
            // modeled by the SDK: SendEmailError's variants
            (
                ses(400, "BadRequestException", "Missing final '@domain'"),
                Permanent,
            ),
            (
                ses(
                    400,
                    "MessageRejected",
                    "Message length is more than 40 megabytes",
                ),
                Permanent,
            ),
            (ses(400, "MessageRejected", RECIPIENT_UNVERIFIED), Permanent),
            (ses(400, "MessageRejected", SENDER_UNVERIFIED), Account),
            (ses(400, "MessageRejected", BOTH_UNVERIFIED), Account),
            (ses(400, "MessageRejected", STAND_IN_UNVERIFIED), Account),
            (
                ses(
                    400,
                    "LimitExceededException",
                    "Daily message quota exceeded.",
                ),
                Transient,
            ),
            (
                ses(429, "TooManyRequestsException", "Too Many Requests"),
                Transient,
            ),
            (
                ses(
                    400,
                    "AccountSuspendedException",
                    "Sending suspended for this account.",
                ),
                Account,
            ),
            (
                ses(
                    400,
                    "SendingPausedException",
                    "Sending is paused for this account.",
                ),
                Account,
            ),
            (
                ses(
                    400,
                    "MailFromDomainNotVerifiedException",
                    "MAIL FROM domain \
                    mail.example.com is not verified",
                ),
                Account,
            ),
            (
                ses(
                    404,
                    "NotFoundException",
                    "Configuration set <transactionl> does not \
                    exist.",
                ),
                Account,
            ),
            // not modeled for SendEmail: Unhandled, classed by its code
            (
                ses_auth("AccessDeniedException", SES_NOT_AUTHORIZED),
                Account,
            ),
            (
                ses_auth("UnrecognizedClientException", TOKEN_INVALID),
                Account,
            ),
            (ses_auth("InvalidSignatureException", SIGNATURE), Account),
            (ses_auth("ExpiredTokenException", TOKEN_EXPIRED), Account),
            (
                ses(
                    400,
                    "ValidationException",
                    "1 validation error detected: Value null at \
                    'fromEmailAddress'",
                ),
                Permanent,
            ),
            (
                ses(400, "ThrottlingException", "Maximum sending rate exceeded."),
                Transient,
            ),
            (
                ses(500, "InternalServerError", "Internal server error"),
                Transient,
            ),
            (
                ses(500, "InternalServiceError", "Internal service error"),
                Transient,
            ),
            (
                ses(503, "ServiceUnavailableException", "Service Unavailable"),
                Transient,
            ),
            (bare(503), Transient),
        ])
    }

    /// The job's trace header goes to the provider as `X-Amzn-Trace-Id` on both channels,
    /// and an unusable one is not sent.
    #[tokio::test]
    async fn the_jobs_trace_header_is_sent_with_the_provider_call() {
        const TRACE: &str =
            "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1";
        let trace_of = |head: String| {
            head.lines().find_map(|line| {
                let (name, value) = line.split_once(':')?;
                name.eq_ignore_ascii_case("x-amzn-trace-id")
                    .then(|| value.trim().to_owned())
            })
        };
        let reply = || {
            Some(sns(
                400,
                "InvalidParameter",
                "Invalid parameter: PhoneNumber",
            ))
        };
        let sms = || SmsPayload {
            to: "+15555550100".into(),
            message: "hi".into(),
        };
        let (url, head) = serve_recording(reply()).await;
        let _ = SnsSms::new(sns_client(&url), None)
            .send(sms(), Some(TRACE))
            .await;
        assert_eq!(trace_of(head.await.unwrap()).as_deref(), Some(TRACE));

        let (url, head) = serve_recording(reply()).await;
        let email = EmailPayload {
            to: "alice@example.org".into(),
            subject: "s".into(),
            text: Some("t".into()),
            html: None,
            reply_to: None,
        };
        let _ = SesEmail::new(ses_client(&url), &DeliveryConfig::new(SENDER))
            .send(email, Some(TRACE))
            .await;
        assert_eq!(trace_of(head.await.unwrap()).as_deref(), Some(TRACE));

        let (url, head) = serve_recording(reply()).await;
        let _ = SnsSms::new(sns_client(&url), None)
            .send(sms(), Some("Root=1-x\u{7f}"))
            .await;
        assert_eq!(trace_of(head.await.unwrap()), None);
    }

    #[tokio::test]
    async fn every_sns_answer_gets_its_class() {
        for (reply, class) in sms_cases() {
            let code = reply.code.clone();
            let err = sms_failure(reply).await;
            assert_eq!(
                (err.code.as_str(), err.class()),
                (code.as_str(), class),
                "{}",
                err.detail()
            );
            assert!(!err.message.is_empty(), "{code}");
            assert!(
                std::error::Error::source(&err).is_some(),
                "{code} keeps the SDK error"
            );
        }
    }

    #[tokio::test]
    async fn every_ses_answer_gets_its_class() {
        for (reply, class) in email_cases() {
            let code = reply.code.clone();
            let err = email_failure(reply).await;
            assert_eq!(
                (err.code.as_str(), err.class()),
                (code.as_str(), class),
                "{}",
                err.detail()
            );
        }
    }

    #[tokio::test]
    async fn calls_that_do_not_complete_are_transient() {
        // nobody listens: the connection is refused
        let closed = {
            let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            format!("http://{}", listener.local_addr().unwrap())
        };
        let err = send_sms(sns_client(&closed)).await;
        assert_eq!(
            (err.code.as_str(), err.class()),
            ("DispatchFailure", Transient)
        );

        // the provider takes the request and never answers
        let silent = serve(None).await;
        let client = aws_sdk_sns::Client::from_conf(
            sns_client(&silent)
                .config()
                .to_builder()
                .timeout_config(
                    aws_sdk_sns::config::timeout::TimeoutConfig::builder()
                        .operation_timeout(Duration::from_millis(200))
                        .build(),
                )
                .build(),
        );
        let err = send_sms(client).await;
        assert_eq!((err.code.as_str(), err.class()), ("Timeout", Transient));

        // a 200 the SDK cannot read
        let garbled = serve(Some(Reply {
            status: 200,
            headers: vec![("Content-Type", "text/xml".into())],
            body: "<PublishResponse><PublishResult><MessageId>".into(),
            code: "ResponseError".into(),
        }))
        .await;
        let err = send_sms(sns_client(&garbled)).await;
        assert_eq!(
            (err.code.as_str(), err.class()),
            ("ResponseError", Transient)
        );

        // no region: the SDK fails before sending, and says so as a dispatch failure
        // ("missing signing region"), which the worker holds like an outage
        let url = serve(Some(bare(500))).await;
        let client = aws_sdk_sesv2::Client::from_conf(
            aws_sdk_sesv2::Config::builder()
                .behavior_version(aws_sdk_sesv2::config::BehaviorVersion::v2026_01_12())
                .credentials_provider(credentials())
                .endpoint_url(url)
                .build(),
        );
        let err = send_email(client).await;
        assert_eq!(
            (err.code.as_str(), err.class()),
            ("DispatchFailure", Transient)
        );
        assert!(err.detail().contains("region"), "{}", err.detail());
    }

    /// The cases above, with the worker's own codes (tested where they are made), cover every
    /// row of the table.
    #[test]
    fn the_cases_cover_every_row() {
        let mut covered: Vec<String> = sms_cases()
            .into_iter()
            .chain(email_cases())
            .map(|(reply, _)| reply.code)
            .collect();
        covered.extend(
            [
                "DispatchFailure",
                "Timeout",
                "ResponseError",
                // built by hand in aws::tests: no real request fails while it is built
                "ConstructionFailure",
                // made by the worker: delivery::tests and worker's tests
                notify_core::delivery::INVALID_PAYLOAD,
                notify_core::delivery::WORKER_PANIC,
                // made by the worker for a suppressed recipient: tests/it/feedback.rs
                notify_core::delivery::SUPPRESSED,
            ]
            .map(String::from),
        );
        for (code, _) in CLASSES {
            assert!(
                covered.iter().any(|c| c == code),
                "no case answers `{code}`"
            );
        }
    }

    #[test]
    fn a_rejection_is_the_senders_when_it_names_the_sender_or_its_domain() {
        let failed = |identities: &str| {
            format!(
                "Email address is not verified. The following identities failed the check in \
                 region US-EAST-1: {identities}"
            )
        };
        for (message, class) in [
            (failed("alice@example.org"), Permanent),
            (failed("noreply@example.com"), Account),
            // case and display names do not matter
            (failed("NoReply@Example.com"), Account),
            (STAND_IN_UNVERIFIED.into(), Account),
            // a domain identity: the sender's, or another
            (failed("example.com"), Account),
            (failed("example.org"), Permanent),
            // a recipient at the sender's domain is still a recipient
            (failed("alice@example.com"), Permanent),
            // several: the sender among them is account trouble
            (failed("alice@example.org, noreply@example.com"), Account),
            (failed("alice@example.org, bob@example.net"), Permanent),
            // "not verified" but no identity we can read: held, not buried
            ("Email address is not verified.".into(), Account),
            // other rejections are the message's
            ("Message length is more than 40 megabytes".into(), Permanent),
            (String::new(), Permanent),
        ] {
            assert_eq!(rejected_class(&message, SENDER), class, "{message:?}");
            assert_eq!(
                rejected_class(&message, "noreply@example.com"),
                class,
                "{message:?} from a bare address"
            );
        }
    }

    /// The (wire code, variant) pairs the SDK's deserializer for an operation maps, read from
    /// `src/protocol_serde/shape_<operation>.rs` of the version Cargo.lock pins, in cargo's
    /// registry (`$CARGO_HOME`, else `~/.cargo`) or a `vendor/` directory.
    fn sdk_model(krate: &str, operation: &str, error: &str) -> Vec<(String, String)> {
        let workspace = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        let lock = std::fs::read_to_string(workspace.join("Cargo.lock")).unwrap();
        let version = lock
            .split("[[package]]")
            .find(|package| package.contains(&format!("name = \"{krate}\"\n")))
            .and_then(|package| package.split("version = \"").nth(1))
            .and_then(|rest| rest.split('"').next())
            .unwrap_or_else(|| panic!("Cargo.lock pins no {krate}"));
        let cargo_home = std::env::var_os("CARGO_HOME")
            .map(std::path::PathBuf::from)
            .or_else(|| {
                std::env::var_os("HOME").map(|home| std::path::Path::new(&home).join(".cargo"))
            })
            .unwrap_or_default();
        let mut roots = vec![workspace.join("vendor").join(krate)];
        if let Ok(indexes) = std::fs::read_dir(cargo_home.join("registry").join("src")) {
            roots.extend(
                indexes
                    .flatten()
                    .map(|index| index.path().join(format!("{krate}-{version}"))),
            );
        }
        let file = format!("src/protocol_serde/shape_{operation}.rs");
        let Some(source) = roots
            .iter()
            .find_map(|root| std::fs::read_to_string(root.join(&file)).ok())
        else {
            panic!(
                "cannot find {krate} {version}'s {file} under {roots:?}; \
                 set CARGO_HOME to the cargo home that built this crate"
            );
        };
        let marker = format!("{error}::");
        let pairs: Vec<(String, String)> = source
            .lines()
            .filter_map(|line| {
                let (code, rest) = line.trim().strip_prefix('"')?.split_once("\" => ")?;
                let variant = rest.split_once(&marker)?.1.split('(').next()?;
                Some((code.to_owned(), variant.to_owned()))
            })
            .collect();
        assert!(!pairs.is_empty(), "no error arms found in {krate}'s {file}");
        pairs
    }

    #[tokio::test]
    async fn every_error_the_sns_publish_model_names_is_classed_here() {
        let model = sdk_model("aws-sdk-sns", "publish", "PublishError");
        assert!(model.contains(&(
            "ParameterValueInvalid".into(),
            "InvalidParameterValueException".into()
        )));
        for (code, variant) in model {
            let url = serve(Some(sns(400, &code, "from the model"))).await;
            let err = sns_client(&url)
                .publish()
                .phone_number("+15555550100")
                .message("hi")
                .send()
                .await
                .expect_err("an error answer");
            let typed = err.as_service_error().expect("a service error");
            assert!(
                format!("{typed:?}").starts_with(&format!("{variant}(")),
                "the SDK reads `{code}` as {variant}: {typed:?}"
            );
            let class = publish_class(typed);
            assert!(
                class.is_some(),
                "publish_class does not name PublishError::{variant} (`{code}`)"
            );
            assert_eq!(
                class,
                known(&code),
                "PublishError::{variant} and CLASSES disagree on `{code}`"
            );
        }
    }

    #[tokio::test]
    async fn every_error_the_ses_send_email_model_names_is_classed_here() {
        let model = sdk_model("aws-sdk-sesv2", "send_email", "SendEmailError");
        for (code, variant) in model {
            let url = serve(Some(ses(400, &code, "from the model"))).await;
            let err = ses_client(&url)
                .send_email()
                .from_email_address("noreply@example.com")
                .send()
                .await
                .expect_err("an error answer");
            let typed = err.as_service_error().expect("a service error");
            assert!(
                format!("{typed:?}").starts_with(&format!("{variant}(")),
                "the SDK reads `{code}` as {variant}: {typed:?}"
            );
            let class = send_email_class(typed, SENDER);
            assert!(
                class.is_some(),
                "send_email_class does not name SendEmailError::{variant} (`{code}`)"
            );
            assert_eq!(
                class,
                known(&code),
                "SendEmailError::{variant} and CLASSES disagree on `{code}`"
            );
        }
    }
}
