//! The EventBridge adapter (`notify_delivery::EventBridgeBus`) through the real SDK: against
//! the local AWS stand-in (moto's server), which routes a bus's rules to SQS queues, events
//! reach a rule's target exactly as their envelopes; a bus that does not exist and an
//! endpoint that does not answer give each event an error. Against a proxy answering with
//! EventBridge's own words, an entry the bus fails is sent again (three calls at most), and a
//! whole call that fails is retried by the SDK's standard policy.
//!
//! Each test on the stand-in makes a bus and a queue of its own (unique names), so tests
//! running at once never read each other's events.

use std::collections::HashMap;

use chrono::{DateTime, TimeDelta, TimeZone, Utc};
use integration_tests::proxy::Proxy;
use integration_tests::stand_in;
use notify_core::events::{
    EVENT_DETAIL_TYPE, EVENT_SOURCE, EVENT_TYPES, EventBus, PublishError, StatusEvent,
};
use notify_delivery::{EventBridgeBus, event_bus_from};
use serde_json::{Value, json};
use uuid::Uuid;

const BOUNCED: &str = "notification.bounced";

/// aws-config's defaults as the worker loads them, pointed at `endpoint` explicitly (never
/// at AWS, whatever the environment says), with the stand-in's dummy credentials.
async fn sdk(endpoint: &str) -> aws_config::SdkConfig {
    aws_config::defaults(aws_config::BehaviorVersion::v2026_01_12())
        .endpoint_url(endpoint)
        .region(aws_config::Region::new("us-east-1"))
        .credentials_provider(aws_sdk_eventbridge::config::Credentials::new(
            "testing", "testing", None, None, "test",
        ))
        .load()
        .await
}

/// A name no other test (or run) uses.
fn unique(prefix: &str) -> String {
    format!("{prefix}-{}", Uuid::new_v4().simple())
}

/// `n` events, every third a bounce, every fifth carrying 60 kB of data (so a call of ten
/// would pass 256 KiB: the calls are cut by size too), each at its own millisecond.
fn mixed_events(n: usize) -> Vec<StatusEvent> {
    let others: Vec<&str> = EVENT_TYPES
        .iter()
        .copied()
        .filter(|t| *t != BOUNCED)
        .collect();
    let start: DateTime<Utc> = Utc.with_ymd_and_hms(2026, 3, 1, 12, 0, 0).unwrap();
    let organization_id = Uuid::new_v4();
    (0..n)
        .map(|i| {
            let event_type = if i % 3 == 1 {
                BOUNCED
            } else {
                others[i % others.len()]
            };
            let mut data = json!({
                "notification_id": Uuid::new_v4(),
                "channel": if i % 2 == 0 { "email" } else { "sms" },
                "status": event_type.trim_start_matches("notification."),
                "attempt": i,
            });
            if i % 5 == 0 {
                data["note"] = json!("n".repeat(60_000));
            }
            StatusEvent {
                id: Uuid::now_v7(),
                event_type: event_type.to_owned(),
                timestamp: start + TimeDelta::seconds(i as i64) + TimeDelta::milliseconds(250),
                organization_id,
                sequence: i as i64 + 1,
                data,
            }
        })
        .collect()
}

#[tokio::test]
async fn published_events_reach_the_rule_that_matches_them_as_their_envelopes() {
    let sdk = sdk(&stand_in::endpoint()).await;
    let bus_name = unique("notify-events");
    let queue_url = stand_in::rule_to_queue(
        &sdk,
        &bus_name,
        json!({
            "source": [EVENT_SOURCE],
            "detail-type": [EVENT_DETAIL_TYPE],
            "detail": {"type": [BOUNCED]},
        }),
    )
    .await;
    let bus = event_bus_from(&sdk, &bus_name);
    assert_eq!(bus.bus_name(), bus_name);

    let events = mixed_events(23);
    let results = bus.publish(&events).await;
    assert_eq!(
        results,
        vec![None; events.len()],
        "the bus took every event"
    );

    let bounced: HashMap<String, &StatusEvent> = events
        .iter()
        .filter(|e| e.event_type == BOUNCED)
        .map(|e| (e.id.to_string(), e))
        .collect();
    assert_eq!(bounced.len(), 8);
    let received = stand_in::read_queue(&sdk, &queue_url, bounced.len()).await;
    let mut seen = Vec::new();
    for message in &received {
        let detail = &message["detail"];
        let id = detail["id"].as_str().expect("the envelope's id");
        let event = bounced
            .get(id)
            .unwrap_or_else(|| panic!("an event the rule does not match arrived: {detail}"));
        let envelope: Value = serde_json::from_str(&event.envelope()).unwrap();
        assert_eq!(*detail, envelope, "the detail is the envelope");
        assert_eq!(message["source"], EVENT_SOURCE);
        assert_eq!(message["detail-type"], EVENT_DETAIL_TYPE);
        assert_eq!(message["resources"], json!([]));
        // moto writes the entry's Time to the second
        assert_eq!(
            message["time"],
            event.timestamp.format("%Y-%m-%dT%H:%M:%SZ").to_string(),
            "the entry's Time is the event's timestamp"
        );
        seen.push(id.to_owned());
    }
    seen.sort();
    let mut expected: Vec<String> = bounced.keys().cloned().collect();
    expected.sort();
    assert_eq!(seen, expected, "each bounce arrived once, and nothing else");
}

#[tokio::test]
async fn a_bus_that_does_not_exist_refuses_each_event() {
    let sdk = sdk(&stand_in::endpoint()).await;
    let bus = event_bus_from(&sdk, &unique("no-such-bus"));
    let results = bus.publish(&mixed_events(12)).await;
    assert_eq!(results.len(), 12);
    for result in &results {
        let err = result.as_ref().expect("an error for each event");
        // moto refuses the whole call, as AWS does
        assert_eq!(err.code, "ResourceNotFoundException", "{err:?}");
        assert!(err.message.contains("does not exist"), "{}", err.message);
    }
}

#[tokio::test]
async fn an_endpoint_that_does_not_answer_gives_each_event_an_error() {
    // port 9 (discard): nothing listens there
    let bus = event_bus_from(&sdk("http://127.0.0.1:9").await, "any");
    let results = bus.publish(&mixed_events(3)).await;
    assert_eq!(results.len(), 3);
    for result in &results {
        let err = result.as_ref().expect("an error for each event");
        assert_eq!(err.code, "DispatchFailure", "{err:?}");
        assert!(
            err.message.contains("dispatch failure")
                && err.message.len() > "dispatch failure".len(),
            "the message carries the cause chain: {}",
            err.message
        );
    }
}

/// EventBridge's (JSON 1.1 protocol) answer with every entry failed.
fn every_entry_failed(entries: usize) -> Vec<u8> {
    let failed = json!({"ErrorCode": "ThrottlingException", "ErrorMessage": "Rate exceeded"});
    let body = json!({"FailedEntryCount": entries, "Entries": vec![failed; entries]}).to_string();
    format!(
        "HTTP/1.1 200 OK\r\nx-amzn-RequestId: 0a1b2c3d-4e5f-6a7b-8c9d-0e1f2a3b4c5d\r\n\
         Content-Type: application/x-amz-json-1.1\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

/// EventBridge's answer to an internal failure of the whole call.
fn internal_failure() -> Vec<u8> {
    let body = r#"{"__type":"InternalException","message":"Internal failure"}"#;
    format!(
        "HTTP/1.1 500 Internal Server Error\r\nx-amzn-RequestId: 1a1b2c3d-4e5f-6a7b-8c9d-0e1f2a3b4c5d\r\n\
         Content-Type: application/x-amz-json-1.1\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

#[tokio::test]
async fn an_entry_the_bus_fails_is_sent_in_three_calls_then_reported_with_its_code() {
    let proxy = Proxy::answering(every_entry_failed(1)).await;
    let bus: EventBridgeBus = event_bus_from(&sdk(&proxy.endpoint()).await, "bus");
    let results = bus.publish(&mixed_events(1)).await;
    assert_eq!(
        results,
        vec![Some(PublishError {
            code: "ThrottlingException".into(),
            message: "Rate exceeded".into(),
        })]
    );
    assert_eq!(
        proxy.answered(),
        notify_delivery::events::MAX_CALLS as u64,
        "the first call and two more"
    );
}

#[tokio::test]
async fn a_call_that_fails_whole_is_retried_by_the_sdk_and_not_again_by_the_adapter() {
    let proxy = Proxy::answering(internal_failure()).await;
    let bus = event_bus_from(&sdk(&proxy.endpoint()).await, "bus");
    let results = bus.publish(&mixed_events(2)).await;
    for result in &results {
        let err = result.as_ref().expect("an error for each event");
        assert_eq!(err.code, "InternalException", "{err:?}");
        assert!(err.message.contains("Internal failure"), "{}", err.message);
    }
    assert_eq!(
        proxy.answered(),
        3,
        "the SDK's standard policy: three attempts of the one call"
    );
}
