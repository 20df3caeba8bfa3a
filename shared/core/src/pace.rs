//! The providers' pace: every worker invocation at once, together, hands each channel's
//! messages to its provider no faster than the channel's rate, and a provider that says
//! "too fast" or "no more today" slows or holds the channel for all of them.
//!
//! - The rate: SES's from `SES_MAX_SEND_RATE`, else from SES v2 `GetAccount`
//!   (`SendQuota.MaxSendRate` × `SES_RATE_HEADROOM`, read at most every 10 minutes); SMS's
//!   from `SMS_MAX_SEND_RATE`, in message parts ([`sms_parts`]); unset, no limit.
//! - Shared through the store ([`PaceStore`]): each message takes a slot, slots are 1/rate
//!   apart and handed out under one row lock per channel, so the invocations' calls together
//!   never outrun the rate however many run at once.
//! - [`Paced`] wraps the deliverer the worker uses: [`Deliverer::admit`] waits for the job's
//!   slot (or says when to come back), [`Deliverer::throttled`] turns a throttle into a hold
//!   that spends no attempt, a rate throttle into a lower shared rate, and a daily-quota
//!   throttle into a hold of the whole channel until the quota can have recovered.
//!
//! Why this shape: docs/decisions/0011-pace-and-priority-lanes.md.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use rand::Rng;
use serde_json::json;

use crate::config::{ConfigError, Vars};
use crate::delivery::{Deliverer, DeliveryError, NotNow, SmsPayload};
use crate::domain::Channel;
use crate::store::{ClaimedJob, Now, StoreError};

/// How long an account's `GetAccount` answer is used before it is read again.
pub const QUOTA_MAX_AGE: Duration = Duration::from_secs(10 * 60);
/// After `GetAccount` failed, how long the channel goes unpaced before it is asked again.
pub const QUOTA_RETRY: Duration = Duration::from_secs(60);
/// The shortest and longest hold after a daily-quota throttle.
pub const MIN_QUOTA_HOLD: Duration = Duration::from_secs(60);
pub const MAX_QUOTA_HOLD: Duration = Duration::from_secs(60 * 60);
/// A hold when the quota cannot be read: long enough not to hammer a spent quota.
pub const UNKNOWN_QUOTA_HOLD: Duration = Duration::from_secs(15 * 60);
/// Jobs moved to the end of a hold by the statement that records it; deeper queues are
/// moved by their own claims.
pub const HOLD_MOVES: i64 = 10_000;
/// How long an instance trusts a hold it learned of before asking the store again (an
/// operator may end a hold early: docs/operations.md).
pub const HOLD_RECHECK: Duration = Duration::from_secs(10);
/// A job throttled for the rate goes again after about this long, at the lowered rate.
pub const THROTTLED_RETRY: Duration = Duration::from_secs(1);

/// Which rate email is sent at.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum EmailRate {
    /// `SES_MAX_SEND_RATE=0`: no limit.
    Unlimited,
    /// `SES_MAX_SEND_RATE` messages per second.
    Fixed(f64),
    /// Unset: the account's `MaxSendRate` × `SES_RATE_HEADROOM`.
    FromAccount,
}

/// The pace settings, from the environment at cold start.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PaceConfig {
    pub email: EmailRate,
    /// The share of the account's rate used (`SES_RATE_HEADROOM`, default 0.9).
    pub ses_headroom: f64,
    /// SMS message parts per second (`SMS_MAX_SEND_RATE`; unset or 0: no limit).
    pub sms_rate: Option<f64>,
}

impl Default for PaceConfig {
    fn default() -> Self {
        Self {
            email: EmailRate::FromAccount,
            ses_headroom: 0.9,
            sms_rate: None,
        }
    }
}

impl PaceConfig {
    /// No limit on either channel.
    pub fn unlimited() -> Self {
        Self {
            email: EmailRate::Unlimited,
            sms_rate: None,
            ..Self::default()
        }
    }

    /// Reads `SES_MAX_SEND_RATE`, `SES_RATE_HEADROOM` and `SMS_MAX_SEND_RATE`.
    pub fn from_lookup(vars: &Vars) -> Result<Self, ConfigError> {
        let email = match vars.optional("SES_MAX_SEND_RATE") {
            None => EmailRate::FromAccount,
            Some(_) => {
                let rate = vars.parse_or("SES_MAX_SEND_RATE", 0.0f64, 0.0..=100_000.0)?;
                if rate > 0.0 {
                    EmailRate::Fixed(rate)
                } else {
                    EmailRate::Unlimited
                }
            }
        };
        let sms = vars.parse_or("SMS_MAX_SEND_RATE", 0.0f64, 0.0..=100_000.0)?;
        Ok(Self {
            email,
            ses_headroom: vars.parse_or("SES_RATE_HEADROOM", 0.9f64, 0.01..=1.0)?,
            sms_rate: (sms > 0.0).then_some(sms),
        })
    }
}

/// An account's sending quota, as SES v2 `GetAccount` answers it (`SendQuota`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Quota {
    /// Messages per second.
    pub max_send_rate: f64,
    /// Messages per rolling 24 hours.
    pub max_24_hour_send: f64,
    pub sent_last_24_hours: f64,
}

impl Quota {
    /// How long to hold the channel after "Daily message quota exceeded": the quota is a
    /// rolling 24 hours, so it frees as sends age past a day. Assuming the day's sends were
    /// spread evenly, the `sent − max + 1` that must age out take that share of a day;
    /// between [`MIN_QUOTA_HOLD`] and [`MAX_QUOTA_HOLD`] (after which the next send asks
    /// SES again).
    pub fn recovery(&self) -> Duration {
        if self.sent_last_24_hours < self.max_24_hour_send || self.sent_last_24_hours <= 0.0 {
            return MIN_QUOTA_HOLD;
        }
        let over = self.sent_last_24_hours - self.max_24_hour_send + 1.0;
        let secs = 86_400.0 * over / self.sent_last_24_hours;
        Duration::from_secs_f64(
            secs.clamp(MIN_QUOTA_HOLD.as_secs_f64(), MAX_QUOTA_HOLD.as_secs_f64()),
        )
    }

    /// The whole day's quota is spent.
    pub fn spent(&self) -> bool {
        self.max_24_hour_send > 0.0 && self.sent_last_24_hours >= self.max_24_hour_send
    }
}

/// Reads the email account's quota (SES v2 `GetAccount`).
#[async_trait]
pub trait SendQuota: Send + Sync {
    async fn email_quota(&self) -> Result<Quota, DeliveryError>;
}

/// What a throttle says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Throttle {
    /// Too fast: "Maximum sending rate exceeded", SNS's `Throttling`.
    Rate,
    /// SES: "Daily message quota exceeded".
    DailyQuota,
}

/// Whether a failed call was the provider pushing back, and how. SES answers both its
/// limits with `ThrottlingException`, told apart by the message; SNS with `Throttling` or
/// `Throttled`.
pub fn throttle(err: &DeliveryError) -> Option<Throttle> {
    match err.code.as_str() {
        "ThrottlingException" if err.message.to_ascii_lowercase().contains("daily") => {
            Some(Throttle::DailyQuota)
        }
        "ThrottlingException" | "Throttling" | "Throttled" | "TooManyRequestsException" => {
            Some(Throttle::Rate)
        }
        _ => None,
    }
}

/// The parts an SMS is sent as: 160 GSM-7 characters in one part, 153 per part when
/// concatenated (the characters of GSM-7's extension table count twice); with any other
/// character, 70 UCS-2 code units in one part, 67 per part.
pub fn sms_parts(text: &str) -> u32 {
    let septets: Option<usize> = text.chars().map(gsm7_septets).sum();
    let (units, single, multi) = match septets {
        Some(n) => (n, 160, 153),
        None => (text.encode_utf16().count(), 70, 67),
    };
    if units <= single {
        1
    } else {
        units.div_ceil(multi) as u32
    }
}

/// Septets of one character in GSM 03.38 (basic table 1, extension table 2), `None` when
/// it has none.
fn gsm7_septets(c: char) -> Option<usize> {
    const BASIC: &str = "@£$¥èéùìòÇ\nØø\rÅåΔ_ΦΓΛΩΠΨΣΘΞÆæßÉ !\"#¤%&'()*+,-./0123456789:;<=>?\
                         ¡ABCDEFGHIJKLMNOPQRSTUVWXYZÄÖÑÜ§¿abcdefghijklmnopqrstuvwxyzäöñüà";
    const EXTENSION: &str = "\u{000C}^{}\\[~]|€";
    if BASIC.contains(c) {
        Some(1)
    } else if EXTENSION.contains(c) {
        Some(2)
    } else {
        None
    }
}

/// [`PaceStore::take_send_slots`]'s question.
#[derive(Debug, Clone, Copy)]
pub struct TakeSlots {
    pub channel: Channel,
    /// Slots taken together: 1 per email, its parts per SMS.
    pub slots: u32,
    /// The channel's full rate, per second (the store applies the lowered share).
    pub rate: f64,
    /// Take none if the first free slot is further ahead than this.
    pub max_wait: Duration,
    pub now: Now,
}

/// [`PaceStore::take_send_slots`]'s answer.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Slots {
    /// How long until the first slot taken; `None`: none taken.
    pub wait: Option<Duration>,
    /// The rate in force (the full rate times the share a throttle left).
    pub rate: f64,
    /// The channel is held by a quota until then.
    pub held_until: Option<DateTime<Utc>>,
    /// How far ahead the first free slot is.
    pub next_in: Duration,
}

/// [`PaceStore::hold_channel`]'s question.
#[derive(Debug, Clone, Copy)]
pub struct HoldChannel<'a> {
    pub channel: Channel,
    pub until: DateTime<Utc>,
    pub reason: &'a str,
    /// Due jobs moved to `until` by this call, at most.
    pub move_limit: i64,
    pub now: Now,
}

/// The pace's shared state; `notify-postgres` keeps it in `send_pace`.
#[async_trait]
pub trait PaceStore: Send + Sync {
    /// Takes consecutive send slots of a channel, if the first begins within `max_wait`.
    async fn take_send_slots(&self, q: TakeSlots) -> Result<Slots, StoreError>;
    /// Halves the channel's share of its rate (once a second at most); the new share, or
    /// `None` when it was lowered within the last second.
    async fn slow_send_pace(&self, channel: Channel, now: Now) -> Result<Option<f64>, StoreError>;
    /// Holds the channel until `until`; the due jobs moved there.
    async fn hold_channel(&self, q: HoldChannel<'_>) -> Result<u64, StoreError>;
}

/// What the pace did during one invocation, for its metrics.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PaceStats {
    /// Provider calls answered with a throttle.
    pub throttled: u64,
    /// Seconds deliveries waited for their slots, summed over them.
    pub paced_seconds: f64,
    /// Jobs held (or given back) because a quota was spent.
    pub quota_held: u64,
    /// Jobs given back untried for want of a slot before the deadline.
    pub no_slot: u64,
    /// The rate in force per channel when last read (SMS, email); `None`: no limit.
    pub rate: [Option<f64>; 2],
}

/// The email account's quota as last read.
#[derive(Debug, Clone, Copy)]
enum QuotaCache {
    Empty,
    Read { at: Instant, quota: Quota },
    Failed { at: Instant },
}

/// A hold an instance learned of: until when, and when it learned it.
type KnownHold = Option<(DateTime<Utc>, Instant)>;

/// The deliverer the worker uses, paced: see the module's documentation.
pub struct Paced<D> {
    inner: D,
    store: std::sync::Arc<dyn PaceStore>,
    quota: Option<Box<dyn SendQuota>>,
    config: PaceConfig,
    cache: tokio::sync::Mutex<QuotaCache>,
    /// Holds this instance learned of, and when (it skips the store for
    /// [`HOLD_RECHECK`]), per channel.
    held: Mutex<[KnownHold; 2]>,
    stats: Mutex<PaceStats>,
}

fn slot(channel: Channel) -> usize {
    match channel {
        Channel::Sms => 0,
        Channel::Email => 1,
    }
}

impl<D: Deliverer> Paced<D> {
    /// `quota` reads the email account's quota; without one, [`EmailRate::FromAccount`]
    /// means no limit.
    pub fn new(
        inner: D,
        store: std::sync::Arc<dyn PaceStore>,
        quota: Option<Box<dyn SendQuota>>,
        config: PaceConfig,
    ) -> Self {
        Self {
            inner,
            store,
            quota,
            config,
            cache: tokio::sync::Mutex::new(QuotaCache::Empty),
            held: Mutex::new([None, None]),
            stats: Mutex::new(PaceStats::default()),
        }
    }

    /// What the pace did since the last call (the rates are kept).
    pub fn take_stats(&self) -> PaceStats {
        let mut stats = self.stats.lock().unwrap_or_else(|e| e.into_inner());
        let rate = stats.rate;
        std::mem::replace(
            &mut *stats,
            PaceStats {
                rate,
                ..PaceStats::default()
            },
        )
    }

    /// The metric line ([`pace_line`]) of what the pace did since the last one.
    pub fn metric_line(&self) -> String {
        pace_line(&self.take_stats(), Utc::now().timestamp_millis())
    }

    fn count(&self, f: impl FnOnce(&mut PaceStats)) {
        f(&mut self.stats.lock().unwrap_or_else(|e| e.into_inner()));
    }

    /// The channel's full rate now, `None` for no limit.
    async fn rate(&self, channel: Channel) -> Option<f64> {
        match channel {
            Channel::Sms => self.config.sms_rate,
            Channel::Email => match self.config.email {
                EmailRate::Unlimited => None,
                EmailRate::Fixed(rate) => Some(rate),
                EmailRate::FromAccount => self
                    .account_quota(false)
                    .await
                    .map(|q| q.max_send_rate * self.config.ses_headroom)
                    .filter(|rate| *rate > 0.0),
            },
        }
    }

    /// The account's quota, read again when older than [`QUOTA_MAX_AGE`] (or `fresh`); a
    /// spent daily quota read here holds the channel at once.
    async fn account_quota(&self, fresh: bool) -> Option<Quota> {
        let source = self.quota.as_ref()?;
        let mut cache = self.cache.lock().await;
        match *cache {
            QuotaCache::Read { at, quota } if !fresh && at.elapsed() < QUOTA_MAX_AGE => {
                return Some(quota);
            }
            QuotaCache::Failed { at } if !fresh && at.elapsed() < QUOTA_RETRY => return None,
            _ => {}
        }
        match source.email_quota().await {
            Ok(quota) => {
                *cache = QuotaCache::Read {
                    at: Instant::now(),
                    quota,
                };
                drop(cache);
                tracing::info!(
                    max_send_rate = quota.max_send_rate,
                    max_24_hour_send = quota.max_24_hour_send,
                    sent_last_24_hours = quota.sent_last_24_hours,
                    "read the SES sending quota"
                );
                if quota.spent() && !fresh {
                    self.hold(
                        Channel::Email,
                        quota.recovery(),
                        "daily quota spent (GetAccount)",
                    )
                    .await;
                }
                Some(quota)
            }
            Err(err) => {
                *cache = QuotaCache::Failed { at: Instant::now() };
                tracing::warn!(
                    error = %crate::error::report(&err),
                    retry_secs = QUOTA_RETRY.as_secs(),
                    "cannot read the SES sending quota (GetAccount); email goes unpaced until \
                     it can be read (set SES_MAX_SEND_RATE to pace without it)"
                );
                None
            }
        }
    }

    /// Holds the channel for `hold` from now, in the store and here; when it ends.
    async fn hold(&self, channel: Channel, hold: Duration, reason: &str) -> DateTime<Utc> {
        let until = Utc::now() + chrono::Duration::from_std(hold).unwrap_or(chrono::Duration::MAX);
        self.learn_hold(channel, until);
        match self
            .store
            .hold_channel(HoldChannel {
                channel,
                until,
                reason,
                move_limit: HOLD_MOVES,
                now: None,
            })
            .await
        {
            Ok(moved) => tracing::warn!(
                channel = channel.as_str(),
                until = %until,
                moved,
                reason,
                "the provider's quota is spent; the channel is held"
            ),
            Err(err) => tracing::error!(
                channel = channel.as_str(),
                error = %crate::error::report(&err),
                "cannot record the channel's hold; this invocation holds it alone"
            ),
        }
        until
    }

    /// The hold this instance learned of within [`HOLD_RECHECK`], if it is not over.
    fn held_here(&self, channel: Channel) -> Option<DateTime<Utc>> {
        let held = self.held.lock().unwrap_or_else(|e| e.into_inner())[slot(channel)];
        held.filter(|(until, learned)| *until > Utc::now() && learned.elapsed() < HOLD_RECHECK)
            .map(|(until, _)| until)
    }

    fn learn_hold(&self, channel: Channel, until: DateTime<Utc>) {
        self.held.lock().unwrap_or_else(|e| e.into_inner())[slot(channel)] =
            Some((until, Instant::now()));
    }
}

/// The job's slots: its parts for an SMS, one for an email.
fn slots_of(job: &ClaimedJob) -> u32 {
    match job.channel {
        Channel::Sms => SmsPayload::parse(&job.payload)
            .map(|sms| sms_parts(&sms.message))
            .unwrap_or(1),
        Channel::Email => 1,
    }
}

#[async_trait]
impl<D: Deliverer> Deliverer for Paced<D> {
    async fn deliver(&self, job: &ClaimedJob) -> Result<String, DeliveryError> {
        self.inner.deliver(job).await
    }

    async fn send_rate(&self, channel: Channel) -> Option<f64> {
        self.rate(channel).await
    }

    async fn admit(&self, job: &ClaimedJob, max_wait: Duration) -> Result<(), NotNow> {
        if let Some(until) = self.held_here(job.channel) {
            self.count(|s| s.quota_held += 1);
            return Err(NotNow::Held { until });
        }
        let Some(rate) = self.rate(job.channel).await else {
            self.count(|s| s.rate[slot(job.channel)] = None);
            return self.inner.admit(job, max_wait).await;
        };
        let slots = self
            .store
            .take_send_slots(TakeSlots {
                channel: job.channel,
                slots: slots_of(job),
                rate,
                max_wait,
                now: None,
            })
            .await
            .map_err(|err| {
                tracing::error!(
                    error = %crate::error::report(&err),
                    "cannot take a send slot; the job goes back"
                );
                NotNow::NoSlot { at: Utc::now() }
            })?;
        self.count(|s| s.rate[slot(job.channel)] = Some(slots.rate));
        match slots {
            Slots {
                held_until: Some(until),
                ..
            } if until > Utc::now() => {
                self.learn_hold(job.channel, until);
                self.count(|s| s.quota_held += 1);
                Err(NotNow::Held { until })
            }
            Slots {
                wait: Some(wait), ..
            } => {
                if !wait.is_zero() {
                    self.count(|s| s.paced_seconds += wait.as_secs_f64());
                    tokio::time::sleep(wait).await;
                }
                self.inner.admit(job, max_wait.saturating_sub(wait)).await
            }
            Slots { next_in, .. } => {
                self.count(|s| s.no_slot += 1);
                Err(NotNow::NoSlot {
                    at: Utc::now()
                        + chrono::Duration::from_std(next_in).unwrap_or(chrono::Duration::MAX),
                })
            }
        }
    }

    async fn throttled(&self, job: &ClaimedJob, err: &DeliveryError) -> Option<DateTime<Utc>> {
        let Some(kind) = throttle(err) else {
            return self.inner.throttled(job, err).await;
        };
        self.count(|s| s.throttled += 1);
        match kind {
            Throttle::DailyQuota => {
                let hold = match self.account_quota(true).await {
                    Some(quota) => quota.recovery(),
                    None => UNKNOWN_QUOTA_HOLD,
                };
                self.count(|s| s.quota_held += 1);
                Some(self.hold(job.channel, hold, "daily quota exceeded").await)
            }
            Throttle::Rate => {
                // unpaced, the worker holds the job by its own backoff (an outage)
                self.rate(job.channel).await?;
                match self.store.slow_send_pace(job.channel, None).await {
                    Ok(Some(factor)) => tracing::warn!(
                        channel = job.channel.as_str(),
                        share = factor,
                        "the provider throttled the rate; the shared rate is lowered"
                    ),
                    Ok(None) => {}
                    Err(err) => tracing::error!(
                        error = %crate::error::report(&err),
                        "cannot lower the shared rate"
                    ),
                }
                let jitter = rand::rng().random_range(0..=THROTTLED_RETRY.as_millis() as i64);
                Some(
                    Utc::now()
                        + chrono::Duration::from_std(THROTTLED_RETRY).unwrap_or_default()
                        + chrono::Duration::milliseconds(jitter),
                )
            }
        }
    }
}

/// The Embedded Metric Format line of the pace's figures for one invocation.
pub fn pace_line(stats: &PaceStats, timestamp_ms: i64) -> String {
    let mut line = json!({
        "_aws": {
            "Timestamp": timestamp_ms,
            "CloudWatchMetrics": [{
                "Namespace": crate::telemetry::emf::METRIC_NAMESPACE,
                "Dimensions": [["Service"]],
                "Metrics": [
                    {"Name": "Throttled", "Unit": "Count"},
                    {"Name": "PacedSeconds", "Unit": "Seconds"},
                    {"Name": "QuotaHeld", "Unit": "Count"},
                ],
            }],
        },
        "Service": crate::telemetry::emf::SERVICE,
        "Throttled": stats.throttled,
        "PacedSeconds": (stats.paced_seconds * 1e3).round() / 1e3,
        "QuotaHeld": stats.quota_held,
    });
    let rates: Vec<_> = [Channel::Sms, Channel::Email]
        .into_iter()
        .filter_map(|c| stats.rate[slot(c)].map(|r| (c, r)))
        .collect();
    for (channel, rate) in rates {
        let name = match channel {
            Channel::Sms => "SmsSendRate",
            Channel::Email => "EmailSendRate",
        };
        if let Some(metrics) = line["_aws"]["CloudWatchMetrics"][0]["Metrics"].as_array_mut() {
            metrics.push(json!({"Name": name, "Unit": "Count/Second"}));
        }
        line[name] = json!((rate * 1e3).round() / 1e3);
    }
    line.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sms_parts_follow_gsm7_and_ucs2() {
        assert_eq!(sms_parts(""), 1);
        assert_eq!(sms_parts(&"a".repeat(160)), 1);
        assert_eq!(sms_parts(&"a".repeat(161)), 2);
        assert_eq!(sms_parts(&"a".repeat(306)), 2);
        assert_eq!(sms_parts(&"a".repeat(307)), 3);
        // extension characters count twice
        assert_eq!(sms_parts(&"€".repeat(80)), 1);
        assert_eq!(sms_parts(&"€".repeat(81)), 2);
        // one character outside GSM-7 makes the whole message UCS-2
        assert_eq!(sms_parts(&format!("{}ł", "a".repeat(69))), 1);
        assert_eq!(sms_parts(&format!("{}ł", "a".repeat(70))), 2);
        assert_eq!(sms_parts(&"ł".repeat(134)), 2);
        assert_eq!(sms_parts(&"ł".repeat(135)), 3);
        // an emoji is two UTF-16 code units
        assert_eq!(sms_parts(&"🙂".repeat(35)), 1);
        assert_eq!(sms_parts(&"🙂".repeat(36)), 2);
    }

    #[test]
    fn throttles_are_told_apart_by_message() {
        let e = |code: &str, message: &str| DeliveryError::new(code, message);
        assert_eq!(
            throttle(&e("ThrottlingException", "Maximum sending rate exceeded.")),
            Some(Throttle::Rate)
        );
        assert_eq!(
            throttle(&e("ThrottlingException", "Daily message quota exceeded.")),
            Some(Throttle::DailyQuota)
        );
        assert_eq!(
            throttle(&e("Throttling", "Rate exceeded")),
            Some(Throttle::Rate)
        );
        assert_eq!(
            throttle(&e("Throttled", "Rate exceeded")),
            Some(Throttle::Rate)
        );
        assert_eq!(throttle(&e("KMSThrottling", "Rate exceeded")), None);
        assert_eq!(throttle(&e("MessageRejected", "daily")), None);
    }

    #[test]
    fn a_spent_quota_recovers_as_its_sends_age() {
        let q = |max, sent| Quota {
            max_send_rate: 14.0,
            max_24_hour_send: max,
            sent_last_24_hours: sent,
        };
        assert_eq!(q(50_000.0, 10.0).recovery(), MIN_QUOTA_HOLD);
        assert!(!q(50_000.0, 10.0).spent());
        assert!(q(200.0, 200.0).spent());
        // one send of 200 must age out: 1/200 of a day
        assert_eq!(q(200.0, 200.0).recovery(), Duration::from_secs(432));
        assert_eq!(q(50_000.0, 50_000.0).recovery(), MIN_QUOTA_HOLD);
        assert_eq!(q(10.0, 20.0).recovery(), MAX_QUOTA_HOLD);
        assert_eq!(q(0.0, 0.0).recovery(), MIN_QUOTA_HOLD);
    }

    #[test]
    fn config_from_lookup() {
        let read = |pairs: &[(&str, &str)]| {
            let lookup = crate::config::pairs(pairs);
            PaceConfig::from_lookup(&Vars::new(&lookup))
        };
        assert_eq!(read(&[]).unwrap(), PaceConfig::default());
        let c = read(&[
            ("SES_MAX_SEND_RATE", "5"),
            ("SMS_MAX_SEND_RATE", "3"),
            ("SES_RATE_HEADROOM", "0.8"),
        ])
        .unwrap();
        assert_eq!(c.email, EmailRate::Fixed(5.0));
        assert_eq!(c.sms_rate, Some(3.0));
        assert_eq!(c.ses_headroom, 0.8);
        let c = read(&[("SES_MAX_SEND_RATE", "0"), ("SMS_MAX_SEND_RATE", "0")]).unwrap();
        assert_eq!(c, PaceConfig::unlimited());
        for bad in [
            ("SES_MAX_SEND_RATE", "-1"),
            ("SES_MAX_SEND_RATE", "fast"),
            ("SES_RATE_HEADROOM", "0"),
            ("SES_RATE_HEADROOM", "1.5"),
            ("SMS_MAX_SEND_RATE", "x"),
        ] {
            let err = read(&[bad]).unwrap_err().to_string();
            assert!(err.contains(bad.0), "{bad:?}: {err}");
        }
    }

    #[test]
    fn the_metric_line_names_every_figure() {
        let stats = PaceStats {
            throttled: 2,
            paced_seconds: 1.5,
            quota_held: 3,
            no_slot: 0,
            rate: [Some(3.0), Some(4.5)],
        };
        let line: serde_json::Value = serde_json::from_str(&pace_line(&stats, 1)).unwrap();
        let names: Vec<_> = line["_aws"]["CloudWatchMetrics"][0]["Metrics"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["Name"].as_str().unwrap().to_owned())
            .collect();
        let mut expected = crate::telemetry::emf::PACE_METRICS.to_vec();
        expected.sort_unstable();
        let mut sorted = names.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, expected, "the line names every pace metric");
        for name in names {
            assert!(line.get(&name).is_some(), "{name}");
        }
        assert_eq!(line["EmailSendRate"], 4.5);
        // an unpaced channel has no rate
        let unpaced = PaceStats {
            rate: [None, Some(4.5)],
            ..stats
        };
        let line: serde_json::Value = serde_json::from_str(&pace_line(&unpaced, 1)).unwrap();
        assert!(line.get("SmsSendRate").is_none());
    }
}
