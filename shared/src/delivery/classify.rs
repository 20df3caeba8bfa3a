//! The one table that sorts provider error codes. Codes not in it are transient: an error we
//! do not know is retried (with backoff, within the job's budget), never dropped.

use serde::Serialize;

/// What a failed attempt means for the job.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ErrorClass {
    /// No retry can succeed: the job goes to `dead` at once.
    Permanent,
    /// May succeed later: retry with backoff while attempts remain.
    Transient,
    /// Account or configuration trouble: a person must act. Retry at the longest backoff,
    /// log at ERROR, and never bury the message for it.
    Account,
}

/// Every code the worker knows, with its class (SNS and SES v2 codes, and the worker's own).
pub const CLASSES: &[(&str, ErrorClass)] = &[
    // permanent: the request itself is wrong
    ("InvalidParameter", ErrorClass::Permanent),
    ("InvalidParameterValue", ErrorClass::Permanent),
    ("ValidationException", ErrorClass::Permanent),
    ("BadRequestException", ErrorClass::Permanent),
    ("MessageRejected", ErrorClass::Permanent),
    ("MailFromDomainNotVerifiedException", ErrorClass::Permanent),
    ("NotFoundException", ErrorClass::Permanent),
    ("EndpointDisabled", ErrorClass::Permanent),
    (super::INVALID_PAYLOAD, ErrorClass::Permanent),
    // transient: throttling
    ("Throttling", ErrorClass::Transient),
    ("ThrottlingException", ErrorClass::Transient),
    ("TooManyRequestsException", ErrorClass::Transient),
    ("LimitExceededException", ErrorClass::Transient),
    // transient: the provider's own trouble
    ("InternalError", ErrorClass::Transient),
    ("InternalFailure", ErrorClass::Transient),
    ("InternalServerError", ErrorClass::Transient),
    ("InternalServiceError", ErrorClass::Transient),
    ("ServiceUnavailable", ErrorClass::Transient),
    ("ServiceUnavailableException", ErrorClass::Transient),
    ("Http5xx", ErrorClass::Transient),
    // transient: the call did not complete
    (super::TIMEOUT, ErrorClass::Transient),
    ("DispatchFailure", ErrorClass::Transient),
    ("ResponseError", ErrorClass::Transient),
    (super::WORKER_PANIC, ErrorClass::Transient),
    // account or configuration trouble
    ("AuthorizationError", ErrorClass::Account),
    ("AccountSuspendedException", ErrorClass::Account),
    ("SendingPausedException", ErrorClass::Account),
];

/// The class of an error code; unknown codes are [`ErrorClass::Transient`].
pub fn classify(code: &str) -> ErrorClass {
    CLASSES
        .iter()
        .find(|(known, _)| *known == code)
        .map_or(ErrorClass::Transient, |&(_, class)| class)
}

#[cfg(test)]
mod tests {
    use super::*;
    use ErrorClass::*;

    #[test]
    fn each_listed_code_has_its_class() {
        for (code, class) in [
            ("InvalidParameter", Permanent),
            ("InvalidParameterValue", Permanent),
            ("ValidationException", Permanent),
            ("BadRequestException", Permanent),
            ("MessageRejected", Permanent),
            ("MailFromDomainNotVerifiedException", Permanent),
            ("NotFoundException", Permanent),
            ("EndpointDisabled", Permanent),
            ("InvalidPayload", Permanent),
            ("Throttling", Transient),
            ("ThrottlingException", Transient),
            ("TooManyRequestsException", Transient),
            ("LimitExceededException", Transient),
            ("InternalError", Transient),
            ("InternalFailure", Transient),
            ("InternalServerError", Transient),
            ("ServiceUnavailable", Transient),
            ("Http5xx", Transient),
            ("Timeout", Transient),
            ("DispatchFailure", Transient),
            ("ResponseError", Transient),
            ("WorkerPanic", Transient),
            ("AuthorizationError", Account),
            ("AccountSuspendedException", Account),
            ("SendingPausedException", Account),
        ] {
            assert_eq!(classify(code), class, "{code}");
        }
    }

    #[test]
    fn unknown_codes_are_transient() {
        for code in [
            "",
            "SomethingNew",
            "invalidparameter",
            "Http418",
            "KMSThrottling",
        ] {
            assert_eq!(classify(code), Transient, "{code:?}");
        }
    }

    #[test]
    fn the_table_has_no_duplicate_codes() {
        let mut codes: Vec<_> = CLASSES.iter().map(|(c, _)| *c).collect();
        codes.sort_unstable();
        let before = codes.len();
        codes.dedup();
        assert_eq!(codes.len(), before);
    }
}
