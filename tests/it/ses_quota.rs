//! The email account's quota and SES's throttles, through the real SES v2 SDK, against the
//! SES front ([`SesFront`]): it answers `GetAccount` (which moto lacks) with the quota a test
//! sets and refuses `SendEmail` as SES does when a limit is hit; the rest goes on to moto.

use std::time::{Duration, Instant};

use integration_tests::ses_front::SesFront;
use integration_tests::stand_in::{self, Recipients};
use notify_core::delivery::{Deliverer, DeliveryConfig, DeliveryError};
use notify_core::domain::Channel;
use notify_core::pace::{Quota, SendQuota, Throttle, throttle};
use notify_core::store::ClaimedJob;
use notify_delivery::SesQuota;
use serde_json::json;

const EMAIL_FROM: &str = "noreply@notify-tests.example.com";

/// A front that needs no stand-in behind it: the calls these tests make are answered by
/// the front itself.
async fn front_alone() -> SesFront {
    SesFront::start("http://127.0.0.1:9").await
}

fn email_job(to: &str) -> ClaimedJob {
    integration_tests::stand_in::claimed_job(
        Channel::Email,
        json!({"to": to, "subject": "Your code", "text": "123456"}),
    )
}

/// The error a `SendEmail` refused with `(status, code, message)` comes back as.
async fn refused_send(front: &SesFront, refusal: (u16, &str, &str)) -> DeliveryError {
    front.refuse_sends(Some(refusal));
    let deliverer = notify_delivery::deliverer_from(
        &front.sdk_config().await,
        &DeliveryConfig::new(EMAIL_FROM),
    );
    deliverer
        .deliver(&email_job("a@example.com"))
        .await
        .expect_err("the front refuses the send")
}

#[tokio::test]
async fn ses_quota_reads_the_send_quota_the_account_answers() {
    let front = front_alone().await;
    let quota = SesQuota::from_sdk(&front.sdk_config().await);
    front.set_quota(14.0, 50_000.0, 120.0);
    assert_eq!(
        quota.email_quota().await.expect("GetAccount answers"),
        Quota {
            max_send_rate: 14.0,
            max_24_hour_send: 50_000.0,
            sent_last_24_hours: 120.0,
        }
    );
    // a sandbox account whose day is spent: read afresh, on the client's kept connection
    front.set_quota(1.0, 200.0, 200.0);
    let spent = quota.email_quota().await.expect("GetAccount answers");
    assert_eq!(
        spent,
        Quota {
            max_send_rate: 1.0,
            max_24_hour_send: 200.0,
            sent_last_24_hours: 200.0,
        }
    );
    assert!(spent.spent());
    assert_eq!(front.account_calls(), 2, "one GetAccount per read");
    assert_eq!(front.connections(), 1, "both on one kept connection");
}

#[tokio::test]
async fn an_account_that_cannot_be_read_is_a_delivery_error() {
    // nothing listens: the SDK cannot connect, retries, and gives up within SesQuota's bound
    let closed = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    let sdk = aws_config::defaults(aws_config::BehaviorVersion::v2026_01_12())
        .endpoint_url(format!("http://127.0.0.1:{closed}"))
        .region(aws_config::Region::new("us-east-1"))
        .credentials_provider(aws_sdk_sesv2::config::Credentials::new(
            "testing", "testing", None, None, "test",
        ))
        .load()
        .await;
    let started = Instant::now();
    let err = SesQuota::from_sdk(&sdk)
        .email_quota()
        .await
        .expect_err("nothing answers GetAccount");
    assert_eq!(err.code, "GetAccountFailed", "{}", err.detail());
    assert!(
        std::error::Error::source(&err).is_some(),
        "keeps the SDK error"
    );
    assert!(
        started.elapsed() < SesQuota::TIMEOUT + Duration::from_secs(2),
        "bounded by SesQuota::TIMEOUT: {:?}",
        started.elapsed()
    );

    // SES answers with an error: its code comes back
    let front = front_alone().await;
    front.refuse_account(Some((400, "BadRequestException", "Account not found.")));
    let err = SesQuota::from_sdk(&front.sdk_config().await)
        .email_quota()
        .await
        .expect_err("GetAccount is refused");
    assert_eq!(err.code, "BadRequestException", "{}", err.detail());
    assert!(
        err.detail().contains("Account not found."),
        "{}",
        err.detail()
    );
    assert_eq!(front.account_calls(), 1, "a bad request is not retried");
}

#[tokio::test]
async fn a_spent_daily_quota_reaches_the_pace_as_a_daily_quota_throttle() {
    let front = front_alone().await;
    let err = refused_send(
        &front,
        (400, "ThrottlingException", "Daily message quota exceeded."),
    )
    .await;
    assert_eq!(err.code, "ThrottlingException", "{}", err.detail());
    assert!(
        err.message.contains("Daily message quota exceeded"),
        "the message is kept: {}",
        err.message
    );
    assert_eq!(throttle(&err), Some(Throttle::DailyQuota));
    assert_eq!(front.send_times().len(), 1, "one request: no SDK retries");
    assert_eq!(front.sends_forwarded(), 0);
}

#[tokio::test]
async fn a_rate_refusal_reaches_the_pace_as_a_rate_throttle() {
    let front = front_alone().await;
    let err = refused_send(
        &front,
        (400, "ThrottlingException", "Maximum sending rate exceeded."),
    )
    .await;
    assert_eq!(err.code, "ThrottlingException", "{}", err.detail());
    assert_eq!(err.message, "Maximum sending rate exceeded.");
    assert_eq!(throttle(&err), Some(Throttle::Rate));
    assert_eq!(front.send_times().len(), 1, "one request: no SDK retries");
}

#[tokio::test]
async fn the_front_forwards_sends_to_the_stand_in_unless_told_to_refuse_them() {
    stand_in::verify_sender(EMAIL_FROM).await;
    let front = SesFront::start(&stand_in::endpoint()).await;
    let deliverer = notify_delivery::deliverer_from(
        &front.sdk_config().await,
        &DeliveryConfig::new(EMAIL_FROM),
    );
    let recipients = Recipients::new();

    // sent, refused, sent again: on the same client, its connection kept between them
    let first = recipients.email();
    let first_id = deliverer
        .deliver(&email_job(&first))
        .await
        .expect("moto accepts it");
    front.refuse_sends(Some((
        400,
        "ThrottlingException",
        "Maximum sending rate exceeded.",
    )));
    let err = deliverer
        .deliver(&email_job(&recipients.email()))
        .await
        .expect_err("the front refuses it");
    assert_eq!(throttle(&err), Some(Throttle::Rate));
    front.refuse_sends(None);
    let third = recipients.email();
    let third_id = deliverer
        .deliver(&email_job(&third))
        .await
        .expect("moto accepts it");

    let times = front.send_times();
    assert_eq!(times.len(), 3, "every SendEmail reached the front");
    assert!(times.windows(2).all(|w| w[0] <= w[1]), "in arrival order");
    assert_eq!(front.sends_forwarded(), 2);
    assert_eq!(
        front.connections(),
        1,
        "the client kept its connection through forwarded and refused sends"
    );
    let mut got: Vec<(String, Vec<String>)> = stand_in::received()
        .await
        .email
        .into_iter()
        .filter(|e| e.to.iter().any(|to| recipients.owns(to)))
        .map(|e| (e.message_id, e.to))
        .collect();
    got.sort();
    let mut want = vec![(first_id, vec![first]), (third_id, vec![third])];
    want.sort();
    assert_eq!(
        got, want,
        "moto has the forwarded sends, not the refused one"
    );
}
