//! The AWS adapters of [`Deliverer`]: SMS through SNS `Publish`, email through SES v2
//! `SendEmail`. Clients are built once, at cold start, by [`aws_deliverer`].

use async_trait::async_trait;
use aws_sdk_sesv2::types::{Body, Content, Destination, EmailContent, Message};
use aws_sdk_sns::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_sns::types::MessageAttributeValue;

use super::{
    Deliverer, DeliveryConfig, DeliveryError, EmailPayload, Router, SmsPayload, INVALID_PAYLOAD,
    TIMEOUT,
};
use crate::store::ClaimedJob;

type HttpResponse = aws_sdk_sns::config::http::HttpResponse;

/// The SNS attribute that makes an SMS transactional (higher delivery priority).
pub const SMS_TYPE_ATTRIBUTE: &str = "AWS.SNS.SMS.SMSType";
/// The SNS attribute naming the sender, where the destination country supports it.
pub const SENDER_ID_ATTRIBUTE: &str = "AWS.SNS.SMS.SenderID";

/// Builds the SNS and SES v2 clients from aws-config's defaults (region, credentials and
/// `AWS_ENDPOINT_URL` from the environment) and routes jobs to them. Call once, at cold start.
pub async fn aws_deliverer(config: &DeliveryConfig) -> Router {
    let sdk = aws_config::defaults(aws_config::BehaviorVersion::latest())
        .load()
        .await;
    Router::new(
        Box::new(SnsSms::new(
            aws_sdk_sns::Client::new(&sdk),
            config.sms_sender_id.clone(),
        )),
        Box::new(SesEmail::new(aws_sdk_sesv2::Client::new(&sdk), config)),
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
        let sms = SmsPayload::parse(&job.payload)?;
        let mut request = self
            .client
            .publish()
            .phone_number(sms.to)
            .message(sms.message)
            .message_attributes(SMS_TYPE_ATTRIBUTE, string_attribute("Transactional")?);
        if let Some(sender) = &self.sender_id {
            request = request.message_attributes(SENDER_ID_ATTRIBUTE, string_attribute(sender)?);
        }
        let output = request.send().await.map_err(sdk_error)?;
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
        let email = EmailPayload::parse(&job.payload)?;
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
        let output = request.send().await.map_err(sdk_error)?;
        message_id(output.message_id())
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

/// An SDK error as a [`DeliveryError`], keeping it as the source.
pub fn sdk_error<E>(err: SdkError<E, HttpResponse>) -> DeliveryError
where
    E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
{
    let code = sdk_error_code(&err);
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
    DeliveryError::with_source(code, message, err)
}

#[cfg(test)]
mod tests {
    use super::*;
    use aws_sdk_sns::error::{ConnectorError, ErrorMetadata};
    use aws_sdk_sns::operation::publish::PublishError;

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
        let err = sdk_error(service_error(Some("InvalidParameter"), 400));
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
        let err = sdk_error(garbled);
        assert!(err.detail().contains("bad xml"), "{}", err.detail());
    }
}
