//! The one table that sorts error codes into classes: the codes SNS `Publish` and SES v2
//! `SendEmail` send on the wire (as the SDKs' deserializers read them), the AWS-wide codes both
//! services answer for credentials and throttling, and the worker's own codes. Codes not in it
//! are transient: an error we do not know is retried (with backoff, within the job's budget),
//! never dropped.
//!
//! Errors that come from the SDKs are classed from their typed error first
//! (`notify_delivery::sdk_errors`), which names every variant the SDK models and agrees with this
//! table (a test holds them together); this table alone classes codes that arrive without a
//! typed error (`Unhandled`, the worker's own). The "Error classes" table of
//! docs/operations.md is this one with a reason per row.

use serde::Serialize;

/// What a failed attempt means for the job.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ErrorClass {
    /// The message or its recipient is wrong; no retry can succeed: the job goes to `dead`
    /// at once.
    Permanent,
    /// May succeed later: retry with backoff while attempts remain.
    Transient,
    /// Account or configuration trouble: a person must act. The attempt is given back, the job
    /// is retried at the longest backoff, logged at ERROR, and never buried for it.
    Account,
}

use ErrorClass::{Account, Permanent, Transient};

/// Every code the worker knows, with its class.
pub const CLASSES: &[(&str, ErrorClass)] = &[
    // permanent: the message or its recipient is wrong
    (super::SUPPRESSED, Permanent), // ours: the organization suppressed the recipient
    ("InvalidParameter", Permanent), // SNS, e.g. "PhoneNumber Reason: … is not valid to …"
    ("ParameterValueInvalid", Permanent), // SNS's wire code of InvalidParameterValueException
    ("InvalidParameterValue", Permanent), // the same in other Query APIs and stand-ins
    ("ValidationException", Permanent), // SNS (modeled) and JSON APIs: the input is invalid
    ("ValidationError", Permanent), // the Query protocol's common input error
    ("EndpointDisabled", Permanent), // SNS: the target endpoint is disabled
    ("OptedOut", Permanent),        // SNS: the phone number opted out
    ("BadRequestException", Permanent), // SES: the input is invalid, e.g. a malformed address
    // SES refused the content or a recipient; "not verified" naming our sender is Account,
    // decided from the typed error's message (sdk_errors::rejected_class)
    ("MessageRejected", Permanent),
    (super::INVALID_PAYLOAD, Permanent),
    // transient: throttling and quotas
    ("Throttling", Transient),
    ("Throttled", Transient),
    ("ThrottlingException", Transient), // SES: sending rate or daily quota exceeded
    ("TooManyRequestsException", Transient),
    ("LimitExceededException", Transient),
    ("KMSThrottling", Transient),
    ("Http429", Transient),
    // transient: the provider's own trouble
    ("InternalError", Transient),
    ("InternalFailure", Transient),
    ("InternalServerError", Transient),
    ("InternalServiceError", Transient),
    ("ServiceUnavailable", Transient),
    ("ServiceUnavailableException", Transient),
    ("Http5xx", Transient),
    // transient: the call did not complete
    (super::TIMEOUT, Transient),
    ("DispatchFailure", Transient),
    ("ResponseError", Transient),
    (super::WORKER_PANIC, Transient),
    // account or configuration: SNS
    ("AuthorizationError", Account), // IAM denies sns:Publish
    ("InvalidSecurity", Account),
    ("KMSAccessDenied", Account),
    ("KMSDisabled", Account),
    ("KMSInvalidState", Account),
    ("KMSNotFound", Account),
    ("KMSOptInRequired", Account),
    ("NotFound", Account), // the topic or endpoint named by the request does not exist
    ("PlatformApplicationDisabled", Account),
    // account or configuration: SES v2
    ("AccountSuspendedException", Account),
    ("SendingPausedException", Account),
    ("MailFromDomainNotVerifiedException", Account),
    ("NotFoundException", Account), // e.g. SES_CONFIGURATION_SET names no configuration set
    // account or configuration: credentials and permissions, any AWS API
    ("AccessDeniedException", Account), // SES v2's IAM denial (HTTP 403, not modeled)
    ("AccessDenied", Account),
    ("UnrecognizedClientException", Account),
    ("InvalidClientTokenId", Account),
    ("InvalidSignatureException", Account),
    ("SignatureDoesNotMatch", Account),
    ("ExpiredToken", Account),
    ("ExpiredTokenException", Account),
    ("OptInRequired", Account),
    ("Http401", Account),
    ("Http403", Account),
    // the SDK could not build the request: no region, no credentials, no endpoint
    ("ConstructionFailure", Account),
];

/// Whether a code says the provider (or the way to it) is down or busy, not that the message
/// is wrong: every transient code of the table (throttling, 5xx, timeouts, calls that did not
/// complete) but a panic of our own. Unknown codes are not outages: they may be the message's
/// fault.
pub fn is_outage(code: &str) -> bool {
    code != super::WORKER_PANIC && known(code) == Some(Transient)
}

/// The class of an error code; unknown codes are [`ErrorClass::Transient`].
pub fn classify(code: &str) -> ErrorClass {
    known(code).unwrap_or(Transient)
}

/// The class of a code in [`CLASSES`], `None` for a code it does not list.
pub fn known(code: &str) -> Option<ErrorClass> {
    CLASSES
        .iter()
        .find(|(known, _)| *known == code)
        .map(|&(_, class)| class)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_listed_code_has_its_class() {
        for (code, class) in [
            ("InvalidParameter", Permanent),
            ("ParameterValueInvalid", Permanent),
            ("InvalidParameterValue", Permanent),
            ("ValidationException", Permanent),
            ("EndpointDisabled", Permanent),
            ("BadRequestException", Permanent),
            ("MessageRejected", Permanent),
            ("InvalidPayload", Permanent),
            ("Throttling", Transient),
            ("Throttled", Transient),
            ("ThrottlingException", Transient),
            ("TooManyRequestsException", Transient),
            ("LimitExceededException", Transient),
            ("KMSThrottling", Transient),
            ("InternalError", Transient),
            ("InternalFailure", Transient),
            ("ServiceUnavailable", Transient),
            ("Http5xx", Transient),
            ("Timeout", Transient),
            ("DispatchFailure", Transient),
            ("ResponseError", Transient),
            ("WorkerPanic", Transient),
            ("AuthorizationError", Account),
            ("KMSAccessDenied", Account),
            ("KMSDisabled", Account),
            ("KMSNotFound", Account),
            ("AccountSuspendedException", Account),
            ("SendingPausedException", Account),
            ("MailFromDomainNotVerifiedException", Account),
            ("NotFoundException", Account),
            ("AccessDeniedException", Account),
            ("Http403", Account),
            ("ConstructionFailure", Account),
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
            "Http404",
            "ServiceError",
        ] {
            assert_eq!(classify(code), Transient, "{code:?}");
            assert_eq!(known(code), None, "{code:?}");
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

    /// docs/operations.md's table (rows `| `Code` | class | from | why |`) must say what this one
    /// says.
    #[test]
    fn the_manuals_table_matches_this_one() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/operations.md");
        let readme = std::fs::read_to_string(path).expect(path);
        let rows: Vec<(&str, &str)> = readme
            .lines()
            .filter_map(|line| {
                let mut cells = line.split('|').map(str::trim).skip(1);
                let code = cells.next()?.strip_prefix('`')?.strip_suffix('`')?;
                let class = cells.next()?;
                let plain = code.chars().all(|c| c.is_ascii_alphanumeric());
                (plain && ["permanent", "transient", "account"].contains(&class))
                    .then_some((code, class))
            })
            .collect();
        for (code, class) in CLASSES {
            let word = serde_json::to_value(class).unwrap();
            let word = word.as_str().unwrap();
            assert!(
                rows.contains(&(*code, word)),
                "docs/operations.md's error table has no row `{code}` | {word}"
            );
        }
        for (code, class) in &rows {
            assert!(
                known(code).is_some(),
                "docs/operations.md classes `{code}` as {class}, but CLASSES does not list it"
            );
        }
    }
}
