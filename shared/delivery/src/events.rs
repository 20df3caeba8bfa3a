//! The EventBridge adapter of [`EventBus`]: status events put on a bus with `PutEvents`.
//!
//! Each event is one entry: `Source` [`EVENT_SOURCE`], `DetailType` [`EVENT_DETAIL_TYPE`],
//! `Detail` the event's envelope (the same JSON a webhook receives), `Time` the change's
//! timestamp, no `Resources`. The entries go in calls that respect both limits of `PutEvents`
//! ([`plan_calls`]): at most [`MAX_ENTRIES_PER_CALL`] entries and [`MAX_CALL_BYTES`] as AWS
//! counts them ([`entry_size`]). Entries the bus answers as failed are sent again in a new
//! call, [`MAX_CALLS`] calls at most per entry. Nothing here logs: the answer says, per
//! event, why it was not taken, and never carries the event's data.

use std::time::Duration;

use async_trait::async_trait;
use aws_sdk_eventbridge::error::SdkError;
use aws_sdk_eventbridge::operation::put_events::{PutEventsError, PutEventsOutput};
use aws_sdk_eventbridge::types::PutEventsRequestEntry;

use crate::aws::sdk_error_code;
use notify_core::events::{EVENT_DETAIL_TYPE, EVENT_SOURCE, EventBus, PublishError, StatusEvent};

type HttpResponse = aws_sdk_eventbridge::config::http::HttpResponse;

/// The most entries one `PutEvents` call may carry (the API's limit).
pub const MAX_ENTRIES_PER_CALL: usize = 10;
/// The most bytes one `PutEvents` call may carry, its entries' sizes summed (the API's
/// limit, 256 KiB).
pub const MAX_CALL_BYTES: usize = 256 * 1024;
/// What AWS counts for an entry's `Time`, whatever its value.
const TIME_BYTES: usize = 14;
/// The most calls one entry is sent in: the first, and two more for an entry the bus
/// answered as failed.
pub const MAX_CALLS: usize = RETRY_PAUSES.len() + 1;
/// The pause before each further call for the entries that failed (half a second in all):
/// short, because the worker's invocation has a deadline, and an entry that still fails is
/// published again by a later invocation (the outbox keeps it).
const RETRY_PAUSES: [Duration; 2] = [Duration::from_millis(100), Duration::from_millis(400)];

/// The code of an event too large for any `PutEvents` call: never sent.
pub const ENTRY_TOO_LARGE: &str = "EntryTooLarge";
/// The code of an entry the bus's answer says nothing about (it answered for fewer entries
/// than it was sent): sent again like a failed one.
pub const NO_RESULT: &str = "NoResult";
/// The code of an entry the bus refused without naming a code.
pub const ENTRY_FAILED: &str = "EntryFailed";

/// Builds the EventBridge client from aws-config's defaults (region, credentials and
/// `AWS_ENDPOINT_URL` from the environment), under the same pinned behaviour version as
/// [`aws_deliverer`](crate::aws_deliverer), for the bus named `bus_name`. Call once, at cold
/// start.
pub async fn event_bus(bus_name: &str) -> EventBridgeBus {
    let sdk = aws_config::defaults(aws_config::BehaviorVersion::v2026_01_12())
        .load()
        .await;
    event_bus_from(&sdk, bus_name)
}

/// The EventBridge adapter on `sdk`'s settings, **with the SDK's standard retries**, unlike
/// the SNS and SES senders ([`deliverer_from`](crate::deliverer_from)): a call the SDK
/// repeats after a timeout may put an event on the bus twice, which delivery allows, since
/// it is at least once anyway (the outbox publishes an event again whenever its outcome is
/// not recorded) and every event carries its `id` for consumers to drop a repeat.
pub fn event_bus_from(sdk: &aws_config::SdkConfig, bus_name: &str) -> EventBridgeBus {
    // each request within CALL_TIMEOUT (the SDK's retries each get their own): a hung call
    // must not eat the time the worker keeps for its dispatch
    let config = aws_sdk_eventbridge::config::Builder::from(sdk)
        .timeout_config(
            aws_sdk_eventbridge::config::timeout::TimeoutConfig::builder()
                .operation_attempt_timeout(CALL_TIMEOUT)
                .build(),
        )
        .build();
    EventBridgeBus::new(aws_sdk_eventbridge::Client::from_conf(config), bus_name)
}

/// The longest one `PutEvents` request may take (each of the SDK's retries as long).
pub const CALL_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(2);

/// Status events on one EventBridge bus, through `PutEvents`.
#[derive(Debug, Clone)]
pub struct EventBridgeBus {
    client: aws_sdk_eventbridge::Client,
    bus_name: String,
}

impl EventBridgeBus {
    /// The adapter over a client built elsewhere, for the bus `bus_name` (a name or an ARN).
    pub fn new(client: aws_sdk_eventbridge::Client, bus_name: &str) -> Self {
        Self {
            client,
            bus_name: bus_name.to_owned(),
        }
    }

    /// The bus every entry names.
    pub fn bus_name(&self) -> &str {
        &self.bus_name
    }
}

#[async_trait]
impl EventBus for EventBridgeBus {
    async fn publish(&self, events: &[StatusEvent]) -> Vec<Option<PublishError>> {
        let entries: Vec<PutEventsRequestEntry> = events
            .iter()
            .map(|event| entry(&self.bus_name, event))
            .collect();
        publish_entries(&ClientCalls(&self.client), entries, &RETRY_PAUSES).await
    }
}

/// The entry of one event (its envelope as `Detail`).
fn entry(bus_name: &str, event: &StatusEvent) -> PutEventsRequestEntry {
    PutEventsRequestEntry::builder()
        .event_bus_name(bus_name)
        .source(EVENT_SOURCE)
        .detail_type(EVENT_DETAIL_TYPE)
        .detail(event.envelope())
        .time(aws_smithy_types::DateTime::from_millis(
            event.timestamp.timestamp_millis(),
        ))
        .build()
}

/// An entry's size as AWS computes it for the `PutEvents` limit: 14 bytes for `Time` (when
/// given), then the UTF-8 bytes of `Source`, `DetailType`, `Detail` and each resource. The
/// bus name does not count.
pub fn entry_size(entry: &PutEventsRequestEntry) -> usize {
    let time = if entry.time().is_some() {
        TIME_BYTES
    } else {
        0
    };
    time + entry.source().map_or(0, str::len)
        + entry.detail_type().map_or(0, str::len)
        + entry.detail().map_or(0, str::len)
        + entry.resources().iter().map(String::len).sum::<usize>()
}

/// How entries of the given sizes go out: `calls` lists, per call, the positions (into
/// `sizes`) of its entries, in order, each call at most [`MAX_ENTRIES_PER_CALL`] entries and
/// [`MAX_CALL_BYTES`] bytes; `too_large` the positions of entries larger than a call may be,
/// which no call carries.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CallPlan {
    pub calls: Vec<Vec<usize>>,
    pub too_large: Vec<usize>,
}

/// Fills calls in order, starting a new one when the next entry would pass either limit.
/// Every position of `sizes` is in exactly one call or in `too_large`.
pub fn plan_calls(sizes: &[usize]) -> CallPlan {
    let mut plan = CallPlan::default();
    let mut current: Vec<usize> = Vec::new();
    let mut bytes = 0;
    for (position, &size) in sizes.iter().enumerate() {
        if size > MAX_CALL_BYTES {
            plan.too_large.push(position);
            continue;
        }
        if current.len() == MAX_ENTRIES_PER_CALL || bytes + size > MAX_CALL_BYTES {
            plan.calls.push(std::mem::take(&mut current));
            bytes = 0;
        }
        current.push(position);
        bytes += size;
    }
    if !current.is_empty() {
        plan.calls.push(current);
    }
    plan
}

/// One `PutEvents` call; a call that fails as a whole answers the error each of its entries
/// gets.
#[async_trait]
trait PutEvents: Send + Sync {
    async fn put_events(
        &self,
        entries: Vec<PutEventsRequestEntry>,
    ) -> Result<PutEventsOutput, PublishError>;
}

struct ClientCalls<'a>(&'a aws_sdk_eventbridge::Client);

#[async_trait]
impl PutEvents for ClientCalls<'_> {
    async fn put_events(
        &self,
        entries: Vec<PutEventsRequestEntry>,
    ) -> Result<PutEventsOutput, PublishError> {
        self.0
            .put_events()
            .set_entries(Some(entries))
            .send()
            .await
            .map_err(|err| call_error(&err))
    }
}

/// A failed call as the error of each of its entries: the service's error code when it
/// answered one, else what went wrong on the way (`DispatchFailure`, `Timeout`, …, as the
/// senders name them: [`sdk_error_code`]), and the whole cause chain as the message.
fn call_error(err: &SdkError<PutEventsError, HttpResponse>) -> PublishError {
    PublishError {
        code: sdk_error_code(err),
        message: notify_core::error::report(err),
    }
}

/// Puts `entries` on the bus: every entry not too large is sent, in calls [`plan_calls`]
/// forms; the entries the answer marks failed (and any it says nothing of) are planned again
/// and sent after the next of `pauses`, until each entry has been in `pauses.len() + 1` calls.
/// Answers one result per entry, in order: `None` when the bus took it, else its last error.
/// A call that fails as a whole is not repeated here (the SDK's retries have run): its
/// entries keep that error.
async fn publish_entries(
    calls: &dyn PutEvents,
    entries: Vec<PutEventsRequestEntry>,
    pauses: &[Duration],
) -> Vec<Option<PublishError>> {
    let sizes: Vec<usize> = entries.iter().map(entry_size).collect();
    let mut results: Vec<Option<PublishError>> = vec![None; entries.len()];
    let mut pending: Vec<usize> = (0..entries.len()).collect();
    for round in 0..=pauses.len() {
        if pending.is_empty() {
            break;
        }
        if let Some(pause) = round.checked_sub(1).and_then(|i| pauses.get(i)) {
            tokio::time::sleep(*pause).await;
        }
        let plan = plan_calls(&pending.iter().map(|&i| sizes[i]).collect::<Vec<_>>());
        for position in plan.too_large {
            let index = pending[position];
            results[index] = Some(PublishError {
                code: ENTRY_TOO_LARGE.to_owned(),
                message: format!(
                    "the entry is {} bytes, more than the {MAX_CALL_BYTES} one PutEvents call may carry",
                    sizes[index]
                ),
            });
        }
        let mut failed = Vec::new();
        for call in plan.calls {
            let indices: Vec<usize> = call.iter().map(|&position| pending[position]).collect();
            let batch = indices.iter().map(|&i| entries[i].clone()).collect();
            match calls.put_events(batch).await {
                Ok(output) => {
                    for (k, &index) in indices.iter().enumerate() {
                        match entry_error(output.entries().get(k)) {
                            None => results[index] = None,
                            Some(err) => {
                                results[index] = Some(err);
                                failed.push(index);
                            }
                        }
                    }
                }
                Err(err) => {
                    for &index in &indices {
                        results[index] = Some(err.clone());
                    }
                }
            }
        }
        pending = failed;
    }
    results
}

/// Why the bus did not take an entry, from its place in the answer (`None`: it took it).
fn entry_error(
    result: Option<&aws_sdk_eventbridge::types::PutEventsResultEntry>,
) -> Option<PublishError> {
    let Some(result) = result else {
        return Some(PublishError {
            code: NO_RESULT.to_owned(),
            message: "the PutEvents answer has no result for this entry".to_owned(),
        });
    };
    if result.error_code().is_none() && result.error_message().is_none() {
        return None;
    }
    Some(PublishError {
        code: result
            .error_code()
            .filter(|code| !code.is_empty())
            .unwrap_or(ENTRY_FAILED)
            .to_owned(),
        message: result.error_message().unwrap_or_default().to_owned(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    use aws_sdk_eventbridge::error::ErrorMetadata;
    use aws_sdk_eventbridge::types::PutEventsResultEntry;
    use chrono::{TimeZone, Utc};

    fn event(n: u128, data_bytes: usize) -> StatusEvent {
        StatusEvent {
            id: uuid::Uuid::from_u128(n),
            event_type: "notification.bounced".to_owned(),
            timestamp: Utc.with_ymd_and_hms(2026, 3, 1, 12, 0, 0).unwrap(),
            organization_id: uuid::Uuid::from_u128(7),
            sequence: n as i64,
            data: serde_json::json!({ "pad": "x".repeat(data_bytes) }),
        }
    }

    /// Entries for events of these data sizes, each one's `Detail` its position (to find
    /// it in the calls a fake receives).
    fn entries(data_bytes: &[usize]) -> Vec<PutEventsRequestEntry> {
        data_bytes
            .iter()
            .enumerate()
            .map(|(i, &bytes)| entry("bus", &event(i as u128, bytes)))
            .collect()
    }

    #[test]
    fn an_entry_names_the_bus_the_source_the_detail_type_and_carries_the_envelope() {
        let event = event(1, 3);
        let entry = entry("orders", &event);
        assert_eq!(entry.event_bus_name(), Some("orders"));
        assert_eq!(entry.source(), Some(EVENT_SOURCE));
        assert_eq!(entry.detail_type(), Some(EVENT_DETAIL_TYPE));
        assert_eq!(entry.detail(), Some(event.envelope().as_str()));
        assert_eq!(
            entry.time().map(|t| t.to_millis().unwrap()),
            Some(event.timestamp.timestamp_millis())
        );
        assert!(entry.resources().is_empty());
    }

    #[test]
    fn an_entrys_size_is_time_source_detail_type_and_detail_in_utf8_bytes() {
        let entry = PutEventsRequestEntry::builder()
            .event_bus_name("a bus name that does not count")
            .source(EVENT_SOURCE)
            .detail_type(EVENT_DETAIL_TYPE)
            .detail(r#"{"é":1}"#)
            .time(aws_smithy_types::DateTime::from_secs(0))
            .build();
        // {"é":1} is 7 characters, 8 bytes
        assert_eq!(entry_size(&entry), 14 + 20 + 27 + 8);
        let bare = PutEventsRequestEntry::builder()
            .source(EVENT_SOURCE)
            .detail_type(EVENT_DETAIL_TYPE)
            .detail(r#"{"é":1}"#)
            .resources("arn:x")
            .build();
        assert_eq!(entry_size(&bare), 20 + 27 + 8 + 5, "no Time, one resource");
    }

    #[test]
    fn eleven_small_entries_take_a_call_of_ten_and_one_of_one() {
        let plan = plan_calls(&[100; 11]);
        assert_eq!(plan.calls, vec![(0..10).collect::<Vec<_>>(), vec![10]]);
        assert!(plan.too_large.is_empty());
    }

    #[test]
    fn big_entries_are_split_by_size_and_a_call_may_be_exactly_full() {
        let plan = plan_calls(&[100_000, 100_000, 100_000, MAX_CALL_BYTES - 100_000, 1]);
        assert_eq!(plan.calls, vec![vec![0, 1], vec![2, 3], vec![4]]);
        for call in &plan.calls {
            assert!(call.len() <= MAX_ENTRIES_PER_CALL);
        }
        assert_eq!(plan_calls(&[MAX_CALL_BYTES]).calls, vec![vec![0]]);
    }

    #[test]
    fn an_entry_larger_than_a_call_is_refused_and_the_rest_still_go() {
        let plan = plan_calls(&[10, MAX_CALL_BYTES + 1, 10]);
        assert_eq!(plan.calls, vec![vec![0, 2]]);
        assert_eq!(plan.too_large, vec![1]);
        assert_eq!(plan_calls(&[]), CallPlan::default());
    }

    /// A bus that answers each call by the script: per call, the positions of its entries
    /// to fail; a call past the script takes everything. Records each call's entries (as
    /// the positions their `Detail` names).
    struct Fake {
        script: Mutex<Vec<Result<Vec<usize>, PublishError>>>,
        calls: Mutex<Vec<Vec<String>>>,
        short_answer: bool,
    }

    impl Fake {
        fn new(script: Vec<Result<Vec<usize>, PublishError>>) -> Self {
            Self {
                script: Mutex::new(script.into_iter().rev().collect()),
                calls: Mutex::new(Vec::new()),
                short_answer: false,
            }
        }

        fn calls(&self) -> Vec<Vec<String>> {
            self.calls.lock().unwrap().clone()
        }
    }

    #[async_trait]
    impl PutEvents for Fake {
        async fn put_events(
            &self,
            entries: Vec<PutEventsRequestEntry>,
        ) -> Result<PutEventsOutput, PublishError> {
            let ids: Vec<String> = entries
                .iter()
                .map(|e| {
                    let detail: serde_json::Value =
                        serde_json::from_str(e.detail().unwrap()).unwrap();
                    detail["id"].as_str().unwrap().to_owned()
                })
                .collect();
            assert!(entries.len() <= MAX_ENTRIES_PER_CALL);
            assert!(entries.iter().map(entry_size).sum::<usize>() <= MAX_CALL_BYTES);
            self.calls.lock().unwrap().push(ids);
            let failing = self
                .script
                .lock()
                .unwrap()
                .pop()
                .unwrap_or(Ok(Vec::new()))?;
            let answered = if self.short_answer {
                entries.len() - 1
            } else {
                entries.len()
            };
            let results = (0..answered).map(|k| {
                if failing.contains(&k) {
                    PutEventsResultEntry::builder()
                        .error_code("ThrottlingException")
                        .error_message("Rate exceeded")
                        .build()
                } else {
                    PutEventsResultEntry::builder()
                        .event_id(format!("e{k}"))
                        .build()
                }
            });
            Ok(PutEventsOutput::builder()
                .failed_entry_count(failing.len() as i32)
                .set_entries(Some(results.collect()))
                .build())
        }
    }

    fn id(n: u128) -> String {
        uuid::Uuid::from_u128(n).to_string()
    }

    const NO_PAUSE: [Duration; 2] = [Duration::ZERO, Duration::ZERO];

    #[tokio::test]
    async fn every_entry_goes_out_once_in_calls_of_at_most_ten() {
        let fake = Fake::new(Vec::new());
        let results = publish_entries(&fake, entries(&[10; 23]), &NO_PAUSE).await;
        assert_eq!(results, vec![None; 23]);
        let sizes: Vec<usize> = fake.calls().iter().map(Vec::len).collect();
        assert_eq!(sizes, [10, 10, 3]);
        let sent: Vec<String> = fake.calls().concat();
        assert_eq!(
            sent,
            (0..23).map(id).collect::<Vec<_>>(),
            "in order, once each"
        );
        assert!(
            publish_entries(&fake, Vec::new(), &NO_PAUSE)
                .await
                .is_empty()
        );
    }

    #[tokio::test]
    async fn failed_entries_are_sent_again_in_a_new_call_until_the_bus_takes_them() {
        // first call: positions 1 and 3 fail; second call (those two): the first fails again
        let fake = Fake::new(vec![Ok(vec![1, 3]), Ok(vec![0])]);
        let results = publish_entries(&fake, entries(&[10; 5]), &NO_PAUSE).await;
        assert_eq!(results, vec![None; 5]);
        assert_eq!(
            fake.calls(),
            vec![
                (0..5).map(id).collect::<Vec<_>>(),
                vec![id(1), id(3)],
                vec![id(1)],
            ]
        );
    }

    #[tokio::test]
    async fn an_entry_failed_in_three_calls_reports_its_last_error_and_is_not_sent_again() {
        let fake = Fake::new(vec![Ok(vec![0]), Ok(vec![0]), Ok(vec![0]), Ok(vec![0])]);
        let results = publish_entries(&fake, entries(&[10; 2]), &NO_PAUSE).await;
        assert_eq!(fake.calls().len(), MAX_CALLS);
        assert_eq!(
            results,
            vec![
                Some(PublishError {
                    code: "ThrottlingException".into(),
                    message: "Rate exceeded".into()
                }),
                None
            ]
        );
    }

    #[tokio::test]
    async fn the_pauses_come_before_the_second_and_third_calls() {
        let fake = Fake::new(vec![Ok(vec![0]), Ok(vec![0]), Ok(vec![0])]);
        let started = std::time::Instant::now();
        let pauses = [Duration::from_millis(30), Duration::from_millis(60)];
        publish_entries(&fake, entries(&[10]), &pauses).await;
        assert!(started.elapsed() >= Duration::from_millis(90));
        assert_eq!(
            RETRY_PAUSES.iter().sum::<Duration>(),
            Duration::from_millis(500)
        );
    }

    #[tokio::test]
    async fn a_call_that_fails_gives_each_of_its_entries_its_error_and_others_still_go() {
        let down = PublishError {
            code: "DispatchFailure".into(),
            message: "dispatch failure: connection refused".into(),
        };
        let fake = Fake::new(vec![Err(down.clone())]);
        let results = publish_entries(&fake, entries(&[10; 12]), &NO_PAUSE).await;
        let mut expected = vec![Some(down); 10];
        expected.extend([None, None]);
        assert_eq!(results, expected);
        assert_eq!(fake.calls().len(), 2, "a failed call is not repeated here");
    }

    #[tokio::test]
    async fn an_oversize_event_is_refused_unsent_and_the_others_go() {
        let fake = Fake::new(Vec::new());
        let results = publish_entries(&fake, entries(&[10, MAX_CALL_BYTES, 10]), &NO_PAUSE).await;
        assert_eq!(results[0], None);
        assert_eq!(results[2], None);
        assert_eq!(
            results[1].as_ref().map(|e| e.code.as_str()),
            Some(ENTRY_TOO_LARGE)
        );
        assert_eq!(fake.calls(), vec![vec![id(0), id(2)]]);
    }

    #[tokio::test]
    async fn an_entry_the_answer_leaves_out_is_sent_again() {
        let mut fake = Fake::new(Vec::new());
        fake.short_answer = true;
        let results = publish_entries(&fake, entries(&[10; 3]), &NO_PAUSE).await;
        // every answer leaves its last entry out: the third twice more, alone
        assert_eq!(
            fake.calls(),
            vec![vec![id(0), id(1), id(2)], vec![id(2)], vec![id(2)]]
        );
        assert_eq!(results[..2], [None, None]);
        assert_eq!(
            results[2].as_ref().map(|e| e.code.as_str()),
            Some(NO_RESULT)
        );
    }

    #[test]
    fn a_failed_call_keeps_the_service_code_or_names_what_went_wrong_with_the_whole_chain() {
        let response = HttpResponse::new(
            400.try_into().unwrap(),
            aws_smithy_types::body::SdkBody::empty(),
        );
        let meta = ErrorMetadata::builder()
            .code("ResourceNotFoundException")
            .message("Event bus nope does not exist.")
            .build();
        let err: SdkError<PutEventsError, HttpResponse> =
            SdkError::service_error(PutEventsError::generic(meta), response);
        let published = call_error(&err);
        assert_eq!(published.code, "ResourceNotFoundException");
        assert!(
            published.message.contains("Event bus nope does not exist."),
            "{}",
            published.message
        );

        let refused: SdkError<PutEventsError, HttpResponse> =
            SdkError::dispatch_failure(aws_sdk_eventbridge::error::ConnectorError::io(
                std::io::Error::other("connection refused").into(),
            ));
        let published = call_error(&refused);
        assert_eq!(published.code, "DispatchFailure");
        assert!(
            published.message.contains("connection refused"),
            "{}",
            published.message
        );
    }
}
