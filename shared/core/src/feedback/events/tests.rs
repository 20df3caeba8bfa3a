//! `parse` on the documented shapes (`tests/fixtures/feedback/`), on variations of them, on
//! broken payloads, and on arbitrary JSON.

use chrono::{DateTime, Utc};
use proptest::prelude::*;
use serde_json::{Value, json};

use super::sms::{SUPPRESSING_RESPONSES, suppresses};
use super::{BASE64, TEXT_MAX_CHARS, awslogs_event, encode_awslogs, parse};
use crate::feedback::{FeedbackEvent, FeedbackKind, Malformed, Parsed, RAW_EVENT_MAX_BYTES};
use base64::Engine;

const SES_BOUNCE: &str =
    include_str!("../../../../../tests/fixtures/feedback/ses-bounce-permanent.json");
const SES_COMPLAINT: &str =
    include_str!("../../../../../tests/fixtures/feedback/ses-complaint.json");
const SES_DELIVERY: &str = include_str!("../../../../../tests/fixtures/feedback/ses-delivery.json");
const SMS_SUCCESS: &str =
    include_str!("../../../../../tests/fixtures/feedback/sns-sms-success.json");
const SMS_FAILURE: &str =
    include_str!("../../../../../tests/fixtures/feedback/sns-sms-failure.json");

/// The provider message id the tests put in place of the fixtures' `MESSAGE_ID`.
const ID: &str = "010001812a3b4c5d-6e7f8a9b-0c1d-2e3f-4a5b-6c7d8e9f0a1b-000000";

/// A recipient of the fixtures (SES).
const EMAIL: &str = "recipient@example.com";

fn fixture(text: &str) -> Value {
    serde_json::from_str(&text.replace("MESSAGE_ID", ID)).expect("a fixture is JSON")
}

/// The SES record carried by an SNS fixture.
fn ses_record(sns_fixture: &str) -> Value {
    let event = fixture(sns_fixture);
    let message = event["Records"][0]["Sns"]["Message"]
        .as_str()
        .expect("a message");
    serde_json::from_str(message).expect("the message is JSON")
}

/// An SNS event with one record (in the fixtures' envelope) per SES record.
fn sns_event(ses_records: &[Value]) -> Value {
    let envelope = fixture(SES_BOUNCE)["Records"][0].clone();
    let records: Vec<Value> = ses_records
        .iter()
        .map(|ses_record| {
            let mut record = envelope.clone();
            record["Sns"]["Message"] = ses_record.to_string().into();
            record
        })
        .collect();
    json!({ "Records": records })
}

/// The SES record of `sns_fixture` changed by `edit`, as Lambda receives it.
fn edited_ses(sns_fixture: &str, edit: impl FnOnce(&mut Value)) -> Value {
    let mut record = ses_record(sns_fixture);
    edit(&mut record);
    sns_event(&[record])
}

/// The delivery-status line of an SMS fixture.
fn sms_line(sms_fixture: &str) -> Value {
    let batch = fixture(sms_fixture);
    let message = batch["logEvents"][0]["message"]
        .as_str()
        .expect("a message");
    serde_json::from_str(message).expect("the message is JSON")
}

/// A CloudWatch Logs batch (an SMS fixture's envelope) of these lines, as Lambda receives it.
fn sms_event(lines: &[Value]) -> Value {
    let mut batch = fixture(SMS_FAILURE);
    let template = batch["logEvents"][0].clone();
    let log_events: Vec<Value> = lines
        .iter()
        .map(|line| {
            let mut log_event = template.clone();
            log_event["message"] = line.to_string().into();
            log_event
        })
        .collect();
    batch["logEvents"] = log_events.into();
    encode_awslogs(&batch)
}

/// The line of `sms_fixture` changed by `edit`, as Lambda receives it.
fn edited_sms(sms_fixture: &str, edit: impl FnOnce(&mut Value)) -> Value {
    let mut line = sms_line(sms_fixture);
    edit(&mut line);
    sms_event(&[line])
}

fn only_event(parsed: Parsed) -> FeedbackEvent {
    assert_eq!(parsed.malformed, vec![], "nothing malformed");
    assert_eq!(parsed.events.len(), 1, "one event: {:?}", parsed.events);
    parsed.events.into_iter().next().expect("one event")
}

fn only_malformed(parsed: Parsed) -> Malformed {
    assert_eq!(parsed.events, vec![], "no event");
    assert_eq!(
        parsed.malformed.len(),
        1,
        "one malformed: {:?}",
        parsed.malformed
    );
    parsed.malformed.into_iter().next().expect("one malformed")
}

fn at(rfc3339: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(rfc3339)
        .expect("a test time")
        .with_timezone(&Utc)
}

// ---- the fixtures ----

#[test]
fn the_permanent_bounce_fixture_is_a_permanent_bounce_with_its_diagnostic_code() {
    let event = only_event(parse(&fixture(SES_BOUNCE)));
    assert_eq!(event.provider_message_id, ID);
    assert_eq!(event.kind, FeedbackKind::PermanentBounce);
    assert_eq!(event.subtype.as_deref(), Some("Permanent/General"));
    assert_eq!(
        event.diagnostic.as_deref(),
        Some("smtp; 550 5.1.1 user unknown")
    );
    assert_eq!(event.occurred_at, at("2017-08-05T00:41:02.669Z"));
    assert_eq!(event.raw, ses_record(SES_BOUNCE));
    assert!(event.key.starts_with("bounce:2017-08-05T00:41:02.669Z:"));
    assert!(!event.key.contains('@'), "no recipient in {}", event.key);
}

#[test]
fn the_complaint_fixture_is_a_complaint_with_its_feedback_type() {
    let event = only_event(parse(&fixture(SES_COMPLAINT)));
    assert_eq!(event.provider_message_id, ID);
    assert_eq!(event.kind, FeedbackKind::Complaint);
    assert_eq!(event.subtype.as_deref(), Some("abuse"));
    assert_eq!(event.diagnostic, None);
    assert_eq!(event.occurred_at, at("2017-08-05T00:41:02.669Z"));
    assert!(event.key.starts_with("complaint:2017-08-05T00:41:02.669Z:"));
}

#[test]
fn the_delivery_fixture_is_a_delivery_with_the_smtp_response() {
    let event = only_event(parse(&fixture(SES_DELIVERY)));
    assert_eq!(event.provider_message_id, ID);
    assert_eq!(event.kind, FeedbackKind::Delivery);
    assert_eq!(event.subtype, None);
    assert_eq!(
        event.diagnostic.as_deref(),
        Some("250 2.6.0 Message received")
    );
    assert_eq!(event.occurred_at, at("2016-10-19T23:21:04.133Z"));
}

#[test]
fn the_sms_success_fixture_is_a_delivery_at_the_notification_time() {
    let event = only_event(parse(&encode_awslogs(&fixture(SMS_SUCCESS))));
    assert_eq!(event.provider_message_id, ID);
    assert_eq!(event.kind, FeedbackKind::Delivery);
    assert_eq!(event.subtype, None);
    assert_eq!(
        event.diagnostic.as_deref(),
        Some("Message has been accepted by phone carrier")
    );
    // the line's own time, not the log event's (half a second later)
    assert_eq!(event.occurred_at, at("2016-06-28T00:40:34.558Z"));
    assert_eq!(event.key, "delivery:2016-06-28T00:40:34.558Z");
    assert_eq!(event.raw, sms_line(SMS_SUCCESS));
}

#[test]
fn the_sms_failure_fixture_is_a_failure_that_does_not_suppress() {
    let event = only_event(parse(&encode_awslogs(&fixture(SMS_FAILURE))));
    assert_eq!(event.provider_message_id, ID);
    assert_eq!(event.kind, FeedbackKind::SmsFailure { suppress: false });
    assert_eq!(
        event.diagnostic.as_deref(),
        Some("Unknown error attempting to reach phone")
    );
    assert_eq!(event.occurred_at, at("2016-06-28T00:40:34.559Z"));
    assert_eq!(event.key, "sms_failure:2016-06-28T00:40:34.559Z");
}

// ---- the other SES types ----

#[test]
fn transient_and_undetermined_bounces_are_transient() {
    for (bounce_type, sub_type) in [
        ("Transient", "MailboxFull"),
        ("Undetermined", "Undetermined"),
    ] {
        let event = only_event(parse(&edited_ses(SES_BOUNCE, |record| {
            record["bounce"]["bounceType"] = bounce_type.into();
            record["bounce"]["bounceSubType"] = sub_type.into();
        })));
        assert_eq!(event.kind, FeedbackKind::TransientBounce);
        assert_eq!(
            event.subtype.as_deref(),
            Some(format!("{bounce_type}/{sub_type}").as_str())
        );
        assert!(event.key.starts_with("transient_bounce:"));
    }
}

#[test]
fn a_bounce_without_a_diagnostic_code_gives_the_status() {
    let event = only_event(parse(&edited_ses(SES_BOUNCE, |record| {
        let recipient = &mut record["bounce"]["bouncedRecipients"][0];
        recipient
            .as_object_mut()
            .expect("a recipient")
            .remove("diagnosticCode");
    })));
    assert_eq!(event.diagnostic.as_deref(), Some("5.1.1"));
}

#[test]
fn a_reject_takes_its_reason_as_subtype_and_the_mail_time() {
    // the documented Reject record: the message and {"reason": "Bad content"}
    let event = only_event(parse(&edited_ses(SES_BOUNCE, |record| {
        let record = record.as_object_mut().expect("a record");
        record.remove("bounce");
        record.insert("eventType".into(), "Reject".into());
        record.insert("reject".into(), json!({ "reason": "Bad content" }));
    })));
    assert_eq!(event.kind, FeedbackKind::Reject);
    assert_eq!(event.subtype.as_deref(), Some("Bad content"));
    assert_eq!(event.diagnostic, None);
    assert_eq!(event.occurred_at, at("2017-08-05T00:40:02.012Z"));
}

#[test]
fn a_delivery_delay_takes_its_delay_type_and_the_recipient_diagnostic() {
    // the documented DeliveryDelay record
    let event = only_event(parse(&edited_ses(SES_BOUNCE, |record| {
        let record = record.as_object_mut().expect("a record");
        record.remove("bounce");
        record.insert("eventType".into(), "DeliveryDelay".into());
        record.insert(
            "deliveryDelay".into(),
            json!({
                "timestamp": "2020-06-16T00:25:40.095Z",
                "delayType": "TransientCommunicationFailure",
                "expirationTime": "2020-06-16T00:25:40.914Z",
                "delayedRecipients": [{
                    "emailAddress": EMAIL,
                    "status": "4.4.1",
                    "diagnosticCode": "smtp; 421 4.4.1 Unable to connect to remote host"
                }]
            }),
        );
    })));
    assert_eq!(event.kind, FeedbackKind::DeliveryDelay);
    assert_eq!(
        event.subtype.as_deref(),
        Some("TransientCommunicationFailure")
    );
    assert_eq!(
        event.diagnostic.as_deref(),
        Some("smtp; 421 4.4.1 Unable to connect to remote host")
    );
    assert_eq!(event.occurred_at, at("2020-06-16T00:25:40.095Z"));
}

#[test]
fn a_send_has_the_mail_time() {
    let event = only_event(parse(&edited_ses(SES_DELIVERY, |record| {
        let record = record.as_object_mut().expect("a record");
        record.remove("delivery");
        record.insert("eventType".into(), "Send".into());
        record.insert("send".into(), json!({}));
    })));
    assert_eq!(event.kind, FeedbackKind::Send);
    assert_eq!(event.occurred_at, at("2016-10-19T23:20:52.240Z"));
    assert_eq!((event.subtype, event.diagnostic), (None, None));
}

#[test]
fn a_rendering_failure_spelled_with_a_space_gives_its_error_message() {
    let event = only_event(parse(&edited_ses(SES_DELIVERY, |record| {
        let record = record.as_object_mut().expect("a record");
        record.remove("delivery");
        record.insert("eventType".into(), "Rendering Failure".into());
        record.insert(
            "failure".into(),
            json!({
                "errorMessage": "Attribute 'attributeName' is not present in the rendering data.",
                "templateName": "MyTemplate"
            }),
        );
    })));
    assert_eq!(event.kind, FeedbackKind::RenderingFailure);
    assert_eq!(
        event.diagnostic.as_deref(),
        Some("Attribute 'attributeName' is not present in the rendering data.")
    );
}

#[test]
fn ses_notifications_name_the_type_notification_type() {
    let event = only_event(parse(&edited_ses(SES_BOUNCE, |record| {
        let record = record.as_object_mut().expect("a record");
        let event_type = record.remove("eventType").expect("an eventType");
        record.insert("notificationType".into(), event_type);
    })));
    assert_eq!(event.kind, FeedbackKind::PermanentBounce);
}

#[test]
fn the_subscription_test_message_reports_nothing() {
    let message = json!({
        "notificationType": "AmazonSnsSubscriptionSucceeded",
        "message": "You have successfully subscribed your Amazon SNS topic to receive notifications."
    });
    assert_eq!(parse(&sns_event(&[message])), Parsed::default());
}

#[test]
fn opens_and_clicks_are_malformed_by_name() {
    let malformed = only_malformed(parse(&edited_ses(SES_DELIVERY, |record| {
        record["eventType"] = "Open".into();
    })));
    assert_eq!(malformed.at, "Records[0]");
    assert_eq!(malformed.reason, "eventType Open is not recorded");
}

#[test]
fn a_bounce_of_an_unknown_type_is_malformed() {
    let malformed = only_malformed(parse(&edited_ses(SES_BOUNCE, |record| {
        record["bounce"]["bounceType"] = "Soft".into();
    })));
    assert!(malformed.reason.contains("bounceType"), "{malformed:?}");
}

#[test]
fn the_event_time_falls_back_to_the_mail_time() {
    let event = only_event(parse(&edited_ses(SES_BOUNCE, |record| {
        record["bounce"]["timestamp"] = "yesterday".into();
    })));
    assert_eq!(event.occurred_at, at("2017-08-05T00:40:02.012Z"));
}

// ---- CloudWatch Logs batches ----

#[test]
fn a_control_message_reports_nothing() {
    // what CloudWatch Logs sends when the subscription filter is created
    let control = json!({
        "messageType": "CONTROL_MESSAGE",
        "owner": "CloudwatchLogs",
        "logGroup": "",
        "logStream": "",
        "subscriptionFilters": [],
        "logEvents": [{
            "id": "",
            "timestamp": 1432826855000_i64,
            "message": "CWL CONTROL MESSAGE: Checking health of destination Firehose."
        }]
    });
    assert_eq!(parse(&encode_awslogs(&control)), Parsed::default());
}

#[test]
fn data_that_is_not_base64_is_malformed() {
    let malformed = only_malformed(parse(&json!({ "awslogs": { "data": "not base64 ***" } })));
    assert_eq!(malformed.at, "awslogs.data");
    assert_eq!(malformed.reason, "awslogs.data is not base64");
}

#[test]
fn data_that_is_not_gzip_is_malformed() {
    let data = BASE64.encode(br#"{"messageType":"DATA_MESSAGE"}"#);
    let malformed = only_malformed(parse(&json!({ "awslogs": { "data": data } })));
    assert_eq!(malformed.at, "awslogs.data");
    assert_eq!(malformed.reason, "awslogs.data is not gzip");
}

#[test]
fn gzip_of_something_else_than_a_batch_is_malformed() {
    let malformed = only_malformed(parse(&awslogs_event(b"CWL plain text")));
    assert_eq!(malformed.at, "awslogs.data");
    assert!(
        malformed
            .reason
            .starts_with("awslogs.data does not hold JSON"),
        "{malformed:?}"
    );
    let malformed = only_malformed(parse(&awslogs_event(b"[1, 2, 3]")));
    assert_eq!(malformed.at, "awslogs.messageType");
    assert_eq!(
        malformed.reason,
        "messageType is neither DATA_MESSAGE nor CONTROL_MESSAGE"
    );
}

#[test]
fn a_log_event_that_is_not_a_status_line_is_malformed_and_the_others_read() {
    let mut batch = fixture(SMS_SUCCESS);
    let good = batch["logEvents"][0].clone();
    let mut bad = good.clone();
    bad["message"] = "SMS sent to +15555550100".into();
    batch["logEvents"] = json!([good, bad]);
    let parsed = parse(&encode_awslogs(&batch));
    assert_eq!(parsed.events.len(), 1);
    assert_eq!(parsed.malformed.len(), 1);
    assert_eq!(parsed.malformed[0].at, "awslogs.logEvents[1]");
}

#[test]
fn the_log_event_time_stands_in_for_an_unreadable_line_time() {
    let event = only_event(parse(&edited_sms(SMS_SUCCESS, |line| {
        line["notification"]["timestamp"] = "at tea time".into();
    })));
    // the fixture's log event timestamp, 1467074436123 ms (the failure fixture's envelope)
    assert_eq!(event.occurred_at, at("2016-06-28T00:40:36.123Z"));
}

#[test]
fn an_sms_status_neither_success_nor_failure_is_malformed() {
    let malformed = only_malformed(parse(&edited_sms(SMS_SUCCESS, |line| {
        line["status"] = "PENDING".into();
    })));
    assert_eq!(malformed.at, "awslogs.logEvents[0]");
    assert_eq!(malformed.reason, "status is neither SUCCESS nor FAILURE");
}

// ---- batches and malformed records ----

#[test]
fn a_malformed_record_between_two_good_ones_is_reported_at_its_index() {
    let mut event = sns_event(&[
        ses_record(SES_BOUNCE),
        ses_record(SES_COMPLAINT),
        ses_record(SES_DELIVERY),
    ]);
    event["Records"][1]["Sns"]["Message"] = "this is not JSON".into();
    let parsed = parse(&event);
    let kinds: Vec<FeedbackKind> = parsed.events.iter().map(|event| event.kind).collect();
    assert_eq!(
        kinds,
        vec![FeedbackKind::PermanentBounce, FeedbackKind::Delivery]
    );
    assert_eq!(parsed.malformed.len(), 1);
    assert_eq!(parsed.malformed[0].at, "Records[1]");
    assert!(
        parsed.malformed[0]
            .reason
            .starts_with("Sns.Message is not an SES record (not JSON)")
    );
}

#[test]
fn a_payload_of_neither_shape_is_malformed() {
    for payload in [
        json!({}),
        json!({ "detail-type": "Scheduled Event" }),
        json!([1, 2]),
        json!(null),
    ] {
        let malformed = only_malformed(parse(&payload));
        assert_eq!(malformed.at, "payload");
    }
}

#[test]
fn records_that_are_not_sns_records_are_malformed() {
    let sqs = json!({ "Records": [{ "eventSource": "aws:sqs", "body": "{}" }] });
    assert_eq!(
        only_malformed(parse(&sqs)).reason,
        "Sns.Message is missing or not a string"
    );
    let mut other = fixture(SES_BOUNCE);
    other["Records"][0]["EventSource"] = "aws:sqs".into();
    assert_eq!(
        only_malformed(parse(&other)).reason,
        "EventSource is not aws:sns"
    );
}

#[test]
fn an_sns_message_that_is_json_but_not_an_ses_record_is_malformed() {
    let malformed = only_malformed(parse(&sns_event(&[json!({ "hello": "world" })])));
    assert_eq!(
        malformed.reason,
        "neither eventType nor notificationType is a non-empty string"
    );
    let no_id = edited_ses(SES_BOUNCE, |record| {
        record["mail"]
            .as_object_mut()
            .expect("mail")
            .remove("messageId");
    });
    assert_eq!(
        only_malformed(parse(&no_id)).reason,
        "mail.messageId is missing or not a string"
    );
}

// ---- keys ----

#[test]
fn the_same_event_delivered_twice_has_the_same_key() {
    for payload in [
        fixture(SES_BOUNCE),
        fixture(SES_COMPLAINT),
        fixture(SES_DELIVERY),
        encode_awslogs(&fixture(SMS_SUCCESS)),
        encode_awslogs(&fixture(SMS_FAILURE)),
    ] {
        let first = only_event(parse(&payload));
        let mut again = payload.clone();
        if again.get("Records").is_some() {
            // SNS gives a redelivered copy the same message, in an envelope of its own
            again["Records"][0]["Sns"]["Timestamp"] = "2030-01-01T00:00:00.000Z".into();
        }
        assert_eq!(only_event(parse(&again)).key, first.key);
    }
}

#[test]
fn different_events_about_one_message_have_different_keys() {
    let bounce = only_event(parse(&fixture(SES_BOUNCE)));
    let delivery = only_event(parse(&fixture(SES_DELIVERY)));
    // the complaint fixture has the bounce's very timestamp
    let complaint = only_event(parse(&fixture(SES_COMPLAINT)));
    assert_eq!(bounce.provider_message_id, delivery.provider_message_id);
    assert_ne!(bounce.key, delivery.key);
    assert_ne!(bounce.key, complaint.key);
}

#[test]
fn bounces_of_other_recipients_at_the_same_time_have_different_keys() {
    let first = only_event(parse(&fixture(SES_BOUNCE)));
    let second = only_event(parse(&edited_ses(SES_BOUNCE, |record| {
        record["bounce"]["bouncedRecipients"][0]["emailAddress"] = "other@example.com".into();
    })));
    assert_ne!(first.key, second.key);
    assert!(!second.key.contains("example.com"));
}

// ---- raw ----

#[test]
fn a_raw_event_larger_than_the_limit_is_cut_to_its_type_and_id() {
    let big = "x".repeat(RAW_EVENT_MAX_BYTES);
    let event = only_event(parse(&edited_ses(SES_BOUNCE, |record| {
        record["mail"]["commonHeaders"]["subject"] = big.as_str().into();
    })));
    assert_eq!(
        event.raw,
        json!({ "truncated": true, "eventType": "Bounce", "messageId": ID })
    );
    // the rest is read as usual
    assert_eq!(event.kind, FeedbackKind::PermanentBounce);
    assert_eq!(event.subtype.as_deref(), Some("Permanent/General"));

    let sms = only_event(parse(&edited_sms(SMS_FAILURE, |line| {
        line["delivery"]["phoneCarrier"] = big.as_str().into();
    })));
    assert_eq!(
        sms.raw,
        json!({ "truncated": true, "status": "FAILURE", "messageId": ID })
    );
}

// ---- SMS suppression ----

#[test]
fn an_opted_out_number_is_suppressed_and_an_unreachable_one_is_not() {
    let failure = |response: &'static str| {
        only_event(parse(&edited_sms(SMS_FAILURE, |line| {
            line["delivery"]["providerResponse"] = response.into();
        })))
        .kind
    };
    assert_eq!(
        failure("This phone number is opted out"),
        FeedbackKind::SmsFailure { suppress: true }
    );
    assert_eq!(
        failure("Phone is currently unreachable/unavailable"),
        FeedbackKind::SmsFailure { suppress: false }
    );
}

#[test]
fn of_the_documented_failure_reasons_only_opted_out_and_invalid_suppress() {
    // "SMS delivery failure reasons", sms_stats_cloudwatch.html
    let documented = [
        ("Blocked as spam by phone carrier", false),
        ("Destination is on a blocked list", false),
        ("Invalid phone number", true),
        ("Message body is invalid", false),
        ("Phone carrier has blocked this message", false),
        ("Phone carrier is currently unreachable/unavailable", false),
        ("Phone has blocked SMS", false),
        ("Phone is on a blocked list", false),
        ("Phone is currently unreachable/unavailable", false),
        ("Phone number is opted out", true),
        ("This delivery would exceed max price", false),
        ("Unknown error attempting to reach phone", false),
    ];
    for (response, suppress) in documented {
        assert_eq!(suppresses(response), suppress, "{response}");
    }
    assert!(suppresses("PHONE NUMBER IS OPTED OUT"));
    assert!(suppresses("Destination is not a valid mobile number"));
    assert!(
        SUPPRESSING_RESPONSES
            .iter()
            .all(|phrase| *phrase == phrase.to_lowercase())
    );
}

#[test]
fn a_success_never_suppresses_whatever_its_response() {
    let event = only_event(parse(&edited_sms(SMS_SUCCESS, |line| {
        line["delivery"]["providerResponse"] = "opted out".into();
    })));
    assert_eq!(event.kind, FeedbackKind::Delivery);
}

// ---- recipients stay out ----

#[test]
fn a_diagnostic_that_names_the_recipient_names_it_no_more() {
    let event = only_event(parse(&edited_ses(SES_BOUNCE, |record| {
        record["bounce"]["bouncedRecipients"][0]["diagnosticCode"] =
            "smtp; 550 5.1.1 <Recipient@Example.COM>: Recipient address rejected".into();
    })));
    assert_eq!(
        event.diagnostic.as_deref(),
        Some("smtp; 550 5.1.1 <[recipient]>: Recipient address rejected")
    );
}

#[test]
fn a_long_diagnostic_is_cut() {
    let long = "é".repeat(TEXT_MAX_CHARS * 2);
    let event = only_event(parse(&edited_ses(SES_DELIVERY, |record| {
        record["delivery"]["smtpResponse"] = long.as_str().into();
    })));
    assert_eq!(
        event.diagnostic.map(|text| text.chars().count()),
        Some(TEXT_MAX_CHARS)
    );
}

/// Payloads built from records full of recipients, each broken somewhere.
fn broken_payloads_naming_recipients() -> Vec<Value> {
    let email = "someone@example.com";
    let phone = "+15555550123";
    let mut payloads = vec![
        sns_event(&[json!({ "eventType": email, "mail": { "messageId": phone } })]),
        sns_event(&[json!({ "eventType": "Bounce", "mail": { "messageId": [email] } })]),
        sns_event(&[json!({ "eventType": "Bounce", "mail": email })]),
        sns_event(&[json!(email)]),
        sns_event(&[json!({ "notificationType": phone })]),
        edited_ses(SES_BOUNCE, |record| {
            record["bounce"]["bounceType"] = email.into()
        }),
        edited_ses(SES_BOUNCE, |record| {
            record["bounce"]["timestamp"] = email.into();
            record["mail"]["timestamp"] = phone.into();
        }),
        edited_ses(SES_BOUNCE, |record| {
            record["mail"]["messageId"] = email.repeat(100).into();
        }),
        edited_sms(SMS_FAILURE, |line| line["status"] = phone.into()),
        edited_sms(SMS_FAILURE, |line| {
            line["notification"]["messageId"] = json!({ "to": phone })
        }),
        json!({ "awslogs": { "data": phone } }),
        json!({ "awslogs": { "data": email } }),
        json!({ "awslogs": email }),
        json!({ "Records": email }),
        json!({ "to": email, "phone": phone }),
        encode_awslogs(&json!({ "messageType": phone, "logEvents": [] })),
        encode_awslogs(&json!({ "messageType": "DATA_MESSAGE", "logEvents": email })),
        encode_awslogs(&json!({
            "messageType": "DATA_MESSAGE",
            "logEvents": [{ "timestamp": phone, "message": format!("to {phone}: {email}") }]
        })),
    ];
    let mut unquoted = fixture(SES_BOUNCE);
    unquoted["Records"][0]["Sns"]["Message"] = format!("{{\"to\": {email}}}").into();
    payloads.push(unquoted);
    let mut edited = sms_line(SMS_FAILURE);
    edited["notification"]["timestamp"] = phone.into();
    let mut batch = fixture(SMS_FAILURE);
    batch["logEvents"][0]["message"] = edited.to_string().into();
    batch["logEvents"][0]["timestamp"] = email.into();
    payloads.push(encode_awslogs(&batch));
    payloads
}

#[test]
fn no_malformed_reason_names_a_recipient() {
    for payload in broken_payloads_naming_recipients() {
        let parsed = parse(&payload);
        assert!(!parsed.malformed.is_empty(), "malformed: {payload}");
        for malformed in parsed.malformed {
            let shown = format!("{malformed:?}");
            assert!(
                !shown.contains('@') && !shown.contains("+1555") && !shown.contains("5555550123"),
                "{shown}"
            );
        }
    }
}

// ---- nothing panics ----

#[test]
fn nasty_payloads_do_not_panic() {
    let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
    let nasty = [
        json!({ "Records": null }),
        json!({ "Records": [null, 1, "x", [], {}, { "Sns": null }, { "Sns": { "Message": 7 } }] }),
        sns_event(&[
            json!(null),
            json!([]),
            json!(1e300),
            json!(""),
            json!({ "mail": {} }),
        ]),
        sns_event(&[json!({ "eventType": "Bounce", "mail": { "messageId": "m" }, "bounce": [] })]),
        sns_event(&[
            json!({ "eventType": "Delivery", "mail": { "messageId": "m", "timestamp": "+275760-09-13T00:00:00Z" } }),
        ]),
        json!({ "Records": [{ "Sns": { "Message": deep } }] }),
        json!({ "awslogs": null }),
        json!({ "awslogs": { "data": "" } }),
        json!({ "awslogs": { "data": "H4sI" } }),
        encode_awslogs(
            &json!({ "messageType": "DATA_MESSAGE", "logEvents": [null, 1, { "message": "" }] }),
        ),
        encode_awslogs(&json!({ "messageType": "DATA_MESSAGE", "logEvents": [
            { "timestamp": i64::MAX, "message": "{\"status\":\"FAILURE\",\"notification\":{\"messageId\":\"m\",\"timestamp\":\"9999-99-99 99:99:99.999\"}}" },
            { "timestamp": i64::MIN, "message": "{\"status\":\"SUCCESS\",\"notification\":{\"messageId\":\"m\"},\"delivery\":{\"destination\":\"\",\"providerResponse\":\"é\"}}" }
        ] })),
        edited_ses(SES_BOUNCE, |record| {
            record["mail"]["destination"] = json!(["", "é", "É", "ß"]);
            record["bounce"]["bouncedRecipients"] =
                json!([{ "emailAddress": "é" }, { "diagnosticCode": "Éé ßSS é" }]);
        }),
    ];
    for payload in nasty {
        let _ = parse(&payload);
    }
}

/// Arbitrary JSON, with the names and values this parser looks for among the arbitrary ones.
fn arbitrary_json() -> impl Strategy<Value = Value> {
    let names = prop::sample::select(vec![
        "Records",
        "EventSource",
        "aws:sns",
        "Sns",
        "Message",
        "awslogs",
        "data",
        "eventType",
        "notificationType",
        "mail",
        "messageId",
        "timestamp",
        "destination",
        "bounce",
        "bounceType",
        "Permanent",
        "bouncedRecipients",
        "emailAddress",
        "diagnosticCode",
        "Bounce",
        "Delivery",
        "Rendering Failure",
        "failure",
        "DeliveryDelay",
        "deliveryDelay",
        "messageType",
        "DATA_MESSAGE",
        "CONTROL_MESSAGE",
        "logEvents",
        "message",
        "status",
        "SUCCESS",
        "FAILURE",
        "notification",
        "delivery",
        "providerResponse",
        "2017-08-05T00:41:02.669Z",
        "2016-06-28 00:40:34.558",
        "someone@example.com",
    ]);
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<f64>().prop_map(|float| json!(float)),
        names.clone().prop_map(Value::from),
        ".{0,12}".prop_map(Value::from),
    ];
    let key = prop_oneof![names.prop_map(String::from), ".{0,6}"];
    leaf.prop_recursive(5, 96, 8, move |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::vec((key.clone(), inner), 0..8)
                .prop_map(|fields| Value::Object(fields.into_iter().collect())),
        ]
    })
}

/// Every JSON pointer into `value`.
fn pointers(value: &Value, here: String, out: &mut Vec<String>) {
    match value {
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                pointers(item, format!("{here}/{i}"), out);
            }
        }
        Value::Object(fields) => {
            for (name, field) in fields {
                let escaped = name.replace('~', "~0").replace('/', "~1");
                pointers(field, format!("{here}/{escaped}"), out);
            }
        }
        _ => {}
    }
    out.push(here);
}

/// A fixture's record with the value at one of its places replaced by arbitrary JSON.
fn mutated(record: Value, choice: prop::sample::Index, replacement: Value) -> Value {
    let mut all = Vec::new();
    pointers(&record, String::new(), &mut all);
    let mut record = record;
    let pointer = &all[choice.index(all.len())];
    if let Some(place) = record.pointer_mut(pointer) {
        *place = replacement;
    }
    record
}

proptest! {
    #[test]
    fn parse_never_panics_on_arbitrary_payloads(payload in arbitrary_json()) {
        let _ = parse(&payload);
    }

    #[test]
    fn parse_never_panics_on_arbitrary_sns_messages(message in arbitrary_json()) {
        let _ = parse(&sns_event(&[message]));
    }

    #[test]
    fn parse_never_panics_on_arbitrary_log_batches(batch in arbitrary_json()) {
        let _ = parse(&encode_awslogs(&batch));
    }

    #[test]
    fn parse_never_panics_on_a_fixture_with_one_place_changed(
        which in 0..5_usize,
        choice in any::<prop::sample::Index>(),
        replacement in arbitrary_json(),
    ) {
        let record = match which {
            0 => ses_record(SES_BOUNCE),
            1 => ses_record(SES_COMPLAINT),
            2 => ses_record(SES_DELIVERY),
            3 => sms_line(SMS_SUCCESS),
            _ => sms_line(SMS_FAILURE),
        };
        let changed = mutated(record, choice, replacement);
        let payload = if which < 3 { sns_event(&[changed]) } else { sms_event(&[changed]) };
        let parsed = parse(&payload);
        prop_assert_eq!(parsed.events.len() + parsed.malformed.len(), 1);
        for malformed in parsed.malformed {
            prop_assert!(!malformed.reason.contains('@'), "{:?}", malformed);
        }
    }
}
