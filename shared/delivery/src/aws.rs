//! The AWS adapters of [`Deliverer`]: SMS through SNS `Publish`, email through SES v2
//! `SendEmail`. Clients are built once, at cold start, by [`aws_deliverer`].

use async_trait::async_trait;
use aws_sdk_sesv2::operation::send_email::SendEmailError;
use aws_sdk_sesv2::types::{Body, Content, Destination, EmailContent, Message};
use aws_sdk_sns::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_sns::operation::publish::PublishError;
use aws_sdk_sns::types::MessageAttributeValue;

use crate::sdk_errors::{publish_class, send_email_class};
use notify_core::delivery::classify::{ErrorClass, classify};
use notify_core::delivery::{
    Deliverer, DeliveryConfig, DeliveryError, EmailPayload, INVALID_PAYLOAD, Router, SmsPayload,
    TIMEOUT,
};
use notify_core::pace::{Quota, SendQuota};
use notify_core::store::ClaimedJob;

type HttpResponse = aws_sdk_sns::config::http::HttpResponse;

/// The SNS attribute that makes an SMS transactional (higher delivery priority).
pub const SMS_TYPE_ATTRIBUTE: &str = "AWS.SNS.SMS.SMSType";
/// The SNS attribute naming the sender, where the destination country supports it.
pub const SENDER_ID_ATTRIBUTE: &str = "AWS.SNS.SMS.SenderID";

/// Builds the SNS and SES v2 clients from aws-config's defaults (region, credentials and
/// `AWS_ENDPOINT_URL` from the environment) and routes jobs to them. Call once, at cold start.
/// The SDK's behaviour version is pinned to a dated one (timeouts and endpoint defaults
/// change only when this line does), as in notify-postgres's secret read.
pub async fn aws_deliverer(config: &DeliveryConfig) -> Router {
    let sdk = aws_config::defaults(aws_config::BehaviorVersion::v2026_01_12())
        .load()
        .await;
    deliverer_from(&sdk, config)
}

/// The SNS and SES v2 adapters ([`deliverer_from`]) and the email account's quota
/// ([`SesQuota`]) on `sdk`, the function's one load of aws-config's defaults (every client it
/// builds shares its HTTPS client and credentials). Call once, at cold start.
pub fn sender_from(sdk: &aws_config::SdkConfig, config: &DeliveryConfig) -> (Router, SesQuota) {
    (deliverer_from(sdk, config), SesQuota::from_sdk(sdk))
}

/// The email account's sending quota through SES v2 `GetAccount` (`SendQuota`). A read, so
/// the SDK's retries stay on; each call is bounded by [`SesQuota::TIMEOUT`], since the
/// deliveries of email wait for it.
pub struct SesQuota {
    client: aws_sdk_sesv2::Client,
}

impl SesQuota {
    /// The longest a `GetAccount` call may take, retries included.
    pub const TIMEOUT: std::time::Duration = std::time::Duration::from_secs(3);

    pub fn from_sdk(sdk: &aws_config::SdkConfig) -> Self {
        let timeouts = aws_config::timeout::TimeoutConfig::builder()
            .operation_timeout(Self::TIMEOUT)
            .build();
        let conf = aws_sdk_sesv2::config::Builder::from(sdk)
            .timeout_config(timeouts)
            .build();
        Self {
            client: aws_sdk_sesv2::Client::from_conf(conf),
        }
    }
}

#[async_trait]
impl SendQuota for SesQuota {
    async fn email_quota(&self) -> Result<Quota, DeliveryError> {
        let account = self.client.get_account().send().await.map_err(|err| {
            let code = err.code().unwrap_or("GetAccountFailed").to_owned();
            DeliveryError::with_source(code, "SES v2 GetAccount failed", err)
        })?;
        let quota = account.send_quota().ok_or_else(|| {
            DeliveryError::new(
                "NoSendQuota",
                "SES v2 GetAccount answered without a SendQuota",
            )
        })?;
        Ok(Quota {
            max_send_rate: quota.max_send_rate(),
            max_24_hour_send: quota.max24_hour_send(),
            sent_last_24_hours: quota.sent_last24_hours(),
        })
    }
}

/// The SNS and SES v2 adapters on `sdk`'s settings, **without the SDK's own retries**.
/// `Publish` and `SendEmail` are not idempotent: after a timeout or a 5xx the message may
/// have been sent, and a retry inside the SDK would send it again unseen, as a second call
/// the job's history never records. So each provider call is one request; a transient
/// failure is the job's, retried by the worker with its backoff and recorded as an attempt
/// (docs/decisions/0008-no-sdk-retries-for-sends.md).
pub fn deliverer_from(sdk: &aws_config::SdkConfig, config: &DeliveryConfig) -> Router {
    let sns = aws_sdk_sns::config::Builder::from(sdk)
        .retry_config(aws_sdk_sns::config::retry::RetryConfig::disabled())
        .build();
    let ses = aws_sdk_sesv2::config::Builder::from(sdk)
        .retry_config(aws_sdk_sesv2::config::retry::RetryConfig::disabled())
        .build();
    Router::new(
        Box::new(SnsSms::new(
            aws_sdk_sns::Client::from_conf(sns),
            config.sms_sender_id.clone(),
        )),
        Box::new(SesEmail::new(aws_sdk_sesv2::Client::from_conf(ses), config)),
    )
}

/// SMS through SNS `Publish` to a phone number.
pub struct SnsSms {
    client: aws_sdk_sns::Client,
    sender_id: Option<String>,
}

impl SnsSms {
    pub fn new(client: aws_sdk_sns::Client, sender_id: Option<String>) -> Self {
        Self { client, sender_id }
    }
}

fn string_attribute(value: &str) -> Result<MessageAttributeValue, DeliveryError> {
    MessageAttributeValue::builder()
        .data_type("String")
        .string_value(value)
        .build()
        .map_err(|e| DeliveryError::with_source(INVALID_PAYLOAD, "cannot build the request", e))
}

#[async_trait]
impl Deliverer for SnsSms {
    async fn deliver(&self, job: &ClaimedJob) -> Result<String, DeliveryError> {
        self.send(
            SmsPayload::parse(&job.payload)?,
            job.trace_header.as_deref(),
        )
        .await
    }
}

impl SnsSms {
    /// Publishes `sms` (under the X-Ray `trace` header, if any); returns SNS's message id.
    pub async fn send(
        &self,
        sms: SmsPayload,
        trace: Option<&str>,
    ) -> Result<String, DeliveryError> {
        let mut request = self
            .client
            .publish()
            .phone_number(sms.to)
            .message(sms.message)
            .message_attributes(SMS_TYPE_ATTRIBUTE, string_attribute("Transactional")?);
        if let Some(sender) = &self.sender_id {
            request = request.message_attributes(SENDER_ID_ATTRIBUTE, string_attribute(sender)?);
        }
        let trace = trace.map(str::to_owned);
        let output = request
            .customize()
            .mutate_request(move |req| set_trace_header(req, trace.as_deref()))
            .send()
            .await
            .map_err(publish_error)?;
        message_id(output.message_id())
    }
}

/// Email through SES v2 `SendEmail`, simple content.
pub struct SesEmail {
    client: aws_sdk_sesv2::Client,
    from: String,
    configuration_set: Option<String>,
}

impl SesEmail {
    pub fn new(client: aws_sdk_sesv2::Client, config: &DeliveryConfig) -> Self {
        Self {
            client,
            from: config.email_from.clone(),
            configuration_set: config.ses_configuration_set.clone(),
        }
    }
}

fn content(data: String) -> Result<Content, DeliveryError> {
    Content::builder()
        .data(data)
        .charset("UTF-8")
        .build()
        .map_err(|e| DeliveryError::with_source(INVALID_PAYLOAD, "cannot build the request", e))
}

#[async_trait]
impl Deliverer for SesEmail {
    async fn deliver(&self, job: &ClaimedJob) -> Result<String, DeliveryError> {
        self.send(
            EmailPayload::parse(&job.payload)?,
            job.trace_header.as_deref(),
        )
        .await
    }
}

impl SesEmail {
    /// Sends `email` from `EMAIL_FROM` (under the X-Ray `trace` header, if any); returns
    /// SES's message id.
    pub async fn send(
        &self,
        email: EmailPayload,
        trace: Option<&str>,
    ) -> Result<String, DeliveryError> {
        let mut body = Body::builder();
        if let Some(text) = email.text {
            body = body.text(content(text)?);
        }
        if let Some(html) = email.html {
            body = body.html(content(html)?);
        }
        let message = Message::builder()
            .subject(content(email.subject)?)
            .body(body.build())
            .build();
        let mut request = self
            .client
            .send_email()
            .from_email_address(&self.from)
            .destination(Destination::builder().to_addresses(email.to).build())
            .content(EmailContent::builder().simple(message).build())
            .set_configuration_set_name(self.configuration_set.clone());
        if let Some(reply_to) = email.reply_to {
            request = request.reply_to_addresses(reply_to);
        }
        let trace = trace.map(str::to_owned);
        let output = request
            .customize()
            .mutate_request(move |req| set_trace_header(req, trace.as_deref()))
            .send()
            .await
            .map_err(|err| send_email_error(err, &self.from))?;
        message_id(output.message_id())
    }
}

/// Sends the call under the job's X-Ray trace (`X-Amzn-Trace-Id`), in place of the one the
/// SDK would take from the invocation: X-Ray then links the provider call to the request
/// that created the job.
fn set_trace_header(req: &mut aws_sdk_sns::config::http::HttpRequest, trace: Option<&str>) {
    if let Some(trace) = trace.filter(|t| notify_core::telemetry::usable_trace_header(t)) {
        req.headers_mut()
            .insert("x-amzn-trace-id", trace.to_owned());
    }
}

fn message_id(id: Option<&str>) -> Result<String, DeliveryError> {
    id.filter(|id| !id.is_empty())
        .map(str::to_owned)
        .ok_or_else(|| DeliveryError::new("ResponseError", "the provider returned no MessageId"))
}

/// The code of an SDK error: the service's error code, or what went wrong on the way.
pub fn sdk_error_code<E: ProvideErrorMetadata>(err: &SdkError<E, HttpResponse>) -> String {
    match err {
        SdkError::ServiceError(_) => match err.code() {
            Some(code) if !code.is_empty() => code.to_owned(),
            _ => match err.raw_response().map(|r| r.status().as_u16()) {
                Some(status) if status >= 500 => "Http5xx".to_owned(),
                Some(status) => format!("Http{status}"),
                None => "ServiceError".to_owned(),
            },
        },
        SdkError::TimeoutError(_) => TIMEOUT.to_owned(),
        SdkError::DispatchFailure(failure) if failure.is_timeout() => TIMEOUT.to_owned(),
        SdkError::DispatchFailure(_) => "DispatchFailure".to_owned(),
        SdkError::ResponseError(_) => "ResponseError".to_owned(),
        SdkError::ConstructionFailure(_) => "ConstructionFailure".to_owned(),
        _ => "SdkError".to_owned(),
    }
}

/// A failed `Publish` as a [`DeliveryError`]: classed from the SDK's typed error
/// ([`publish_class`]), else by its code.
pub fn publish_error(err: SdkError<PublishError, HttpResponse>) -> DeliveryError {
    sdk_error(err, publish_class)
}

/// A failed `SendEmail` as a [`DeliveryError`]: classed from the SDK's typed error
/// ([`send_email_class`], which reads whose identity a `MessageRejected` names against
/// `sender`, the configured `EMAIL_FROM`), else by its code.
pub fn send_email_error(
    err: SdkError<SendEmailError, HttpResponse>,
    sender: &str,
) -> DeliveryError {
    sdk_error(err, |typed| send_email_class(typed, sender))
}

/// An SDK error as a [`DeliveryError`], keeping it as the source. A service error is classed
/// by `typed` when the model names it, every other by its code ([`classify`]).
fn sdk_error<E>(
    err: SdkError<E, HttpResponse>,
    typed: impl FnOnce(&E) -> Option<ErrorClass>,
) -> DeliveryError
where
    E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
{
    let code = sdk_error_code(&err);
    let class = err
        .as_service_error()
        .and_then(typed)
        .unwrap_or_else(|| classify(&code));
    let message = match err.message() {
        Some(message) if !message.is_empty() => message.to_owned(),
        _ => match &err {
            SdkError::ServiceError(_) => "the provider refused the request",
            SdkError::TimeoutError(_) => "the provider call timed out",
            SdkError::DispatchFailure(_) => "the request could not be sent",
            SdkError::ResponseError(_) => "the provider's response could not be read",
            SdkError::ConstructionFailure(_) => "the request could not be built",
            _ => "the provider call failed",
        }
        .to_owned(),
    };
    DeliveryError::with_source(code, message, err).with_class(class)
}

#[cfg(test)]
mod tests {
    use super::*;
    use aws_sdk_sns::error::{ConnectorError, ErrorMetadata};

    fn response(status: u16) -> HttpResponse {
        HttpResponse::new(
            status.try_into().unwrap(),
            aws_smithy_types::body::SdkBody::empty(),
        )
    }

    fn service_error(code: Option<&str>, status: u16) -> SdkError<PublishError, HttpResponse> {
        let mut meta = ErrorMetadata::builder().message("details");
        if let Some(code) = code {
            meta = meta.code(code);
        }
        SdkError::service_error(PublishError::generic(meta.build()), response(status))
    }

    #[test]
    fn service_errors_carry_their_code() {
        let err = publish_error(service_error(Some("InvalidParameter"), 400));
        assert_eq!(err.code, "InvalidParameter");
        assert_eq!(err.message, "details");
        assert!(
            std::error::Error::source(&err).is_some(),
            "keeps the SDK error"
        );
        assert_eq!(
            sdk_error_code(&service_error(Some("Throttling"), 400)),
            "Throttling"
        );
    }

    #[test]
    fn errors_without_a_code_are_named_by_what_happened() {
        assert_eq!(sdk_error_code(&service_error(None, 503)), "Http5xx");
        assert_eq!(sdk_error_code(&service_error(None, 500)), "Http5xx");
        assert_eq!(sdk_error_code(&service_error(None, 403)), "Http403");
        let timeout: SdkError<PublishError, HttpResponse> =
            SdkError::timeout_error(std::io::Error::other("slow"));
        assert_eq!(sdk_error_code(&timeout), "Timeout");
        let connect_timeout: SdkError<PublishError, HttpResponse> = SdkError::dispatch_failure(
            ConnectorError::timeout(std::io::Error::other("slow").into()),
        );
        assert_eq!(sdk_error_code(&connect_timeout), "Timeout");
        let refused: SdkError<PublishError, HttpResponse> =
            SdkError::dispatch_failure(ConnectorError::io(std::io::Error::other("refused").into()));
        assert_eq!(sdk_error_code(&refused), "DispatchFailure");
        let garbled: SdkError<PublishError, HttpResponse> =
            SdkError::response_error(std::io::Error::other("bad xml"), response(200));
        assert_eq!(sdk_error_code(&garbled), "ResponseError");
        let err = publish_error(garbled);
        assert!(err.detail().contains("bad xml"), "{}", err.detail());
        assert_eq!(err.class(), ErrorClass::Transient);
        let unbuilt: SdkError<PublishError, HttpResponse> =
            SdkError::construction_failure(std::io::Error::other("cannot serialize"));
        let err = publish_error(unbuilt);
        assert_eq!(
            (err.code.as_str(), err.class()),
            ("ConstructionFailure", ErrorClass::Account)
        );
    }

    fn meta(code: &str, message: &str) -> ErrorMetadata {
        ErrorMetadata::builder().code(code).message(message).build()
    }

    #[test]
    fn a_modeled_error_is_classed_by_its_variant_an_unhandled_one_by_its_code() {
        use aws_sdk_sns::types::error::{InvalidParameterValueException, KmsDisabledException};
        let value = "Invalid parameter: Message Reason: Message too long";
        let typed = PublishError::InvalidParameterValueException(
            InvalidParameterValueException::builder()
                .message(value)
                .meta(meta("ParameterValueInvalid", value))
                .build(),
        );
        let err = publish_error(SdkError::service_error(typed, response(400)));
        assert_eq!(err.code, "ParameterValueInvalid");
        assert_eq!(err.class(), ErrorClass::Permanent);

        // the variant decides, whatever code its metadata carries
        let typed = PublishError::KmsDisabledException(KmsDisabledException::builder().build());
        let err = publish_error(SdkError::service_error(typed, response(400)));
        assert_eq!(
            (err.code.as_str(), err.class()),
            ("Http400", ErrorClass::Account)
        );

        let denied = SendEmailError::generic(meta(
            "AccessDeniedException",
            "User: arn:aws:sts::123456789012:assumed-role/worker/fn is not authorized to \
             perform: ses:SendEmail",
        ));
        let err = send_email_error(
            SdkError::service_error(denied, response(403)),
            "noreply@example.com",
        );
        assert_eq!(
            (err.code.as_str(), err.class()),
            ("AccessDeniedException", ErrorClass::Account)
        );
    }

    #[test]
    fn ses_rejections_are_read_against_the_configured_sender() {
        use aws_sdk_sesv2::types::error::MessageRejected;
        let rejected = |identity: &str| {
            let message = format!(
                "Email address is not verified. The following identities failed the check \
                 in region US-EAST-1: {identity}"
            );
            let typed = SendEmailError::MessageRejected(
                MessageRejected::builder()
                    .message(&message)
                    .meta(meta("MessageRejected", &message))
                    .build(),
            );
            send_email_error(
                SdkError::service_error(typed, response(400)),
                "Example <noreply@example.com>",
            )
        };
        let sender = rejected("noreply@example.com");
        assert_eq!(
            (sender.code.as_str(), sender.class()),
            ("MessageRejected", ErrorClass::Account)
        );
        let recipient = rejected("alice@example.org");
        assert_eq!(
            (recipient.code.as_str(), recipient.class()),
            ("MessageRejected", ErrorClass::Permanent)
        );
    }
}
