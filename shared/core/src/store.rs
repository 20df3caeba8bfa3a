//! The store port: jobs ([`JobStore`]), suppression lists ([`SuppressionStore`]) and provider
//! feedback ([`FeedbackStore`]). `notify_postgres::PgStore` is the production adapter.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use serde::Serialize;
use uuid::Uuid;

pub mod events;

pub use events::EventStore;

use crate::domain::{Channel, JobStatus, Priority};

/// Why the store could not do what was asked.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The database cannot be reached now (connection refused or lost, server shutting
    /// down). Callers answer 503 and try again later.
    #[error("the database is unavailable")]
    Unavailable(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// The database answered with an error: a bug or a schema mismatch, not the caller's fault.
    #[error("database error")]
    Database(#[source] tokio_postgres::Error),
    /// A row held a value the code does not know (say, an unknown status).
    #[error("unexpected value in the database: {0}")]
    Corrupt(String),
    /// The database lacks a migration this code needs: the function refuses to serve
    /// (callers get 503) until the deploy's migration has run.
    #[error(
        "the database schema is older than this code: migration {0} is not applied \
         (run `make migrate`, or deploy with the template, which migrates)"
    )]
    SchemaBehind(&'static str),
    /// Applying or checking the migrations failed.
    #[error("cannot migrate or check the database schema")]
    Migrate(#[source] Box<dyn std::error::Error + Send + Sync>),
}

impl StoreError {
    /// Try again later: the database is unreachable, too slow, or not yet migrated.
    pub fn is_unavailable(&self) -> bool {
        matches!(
            self,
            StoreError::Unavailable(_) | StoreError::SchemaBehind(_)
        )
    }

    /// The class a failed invocation reports to Lambda (`errorType`): `Unavailable` passes
    /// on its own (an outage, a timeout, a deploy not yet migrated); the others need a look.
    pub fn kind(&self) -> &'static str {
        match self {
            StoreError::Unavailable(_) | StoreError::SchemaBehind(_) => "Unavailable",
            StoreError::Database(_) => "Database",
            StoreError::Corrupt(_) => "Corrupt",
            StoreError::Migrate(_) => "Migrate",
        }
    }
}

/// A store error failing a worker or sweeper invocation: logged once with its whole cause
/// chain, and reported to Lambda with its class as `errorType`.
impl From<StoreError> for lambda_runtime::Diagnostic {
    fn from(err: StoreError) -> Self {
        crate::error::failed_invocation(err.kind(), &err)
    }
}

/// The current time for a statement that compares with it: `None` is the database's own
/// clock (what production passes); tests pass a time instead of ageing rows.
pub type Now = Option<DateTime<Utc>>;

/// The parameters of a port method that takes nothing but the time.
#[derive(Debug, Clone, Copy, Default)]
pub struct At {
    pub now: Now,
}

impl At {
    /// The database's own clock.
    pub const SERVER: At = At { now: None };
}

/// [`JobStore::claim`]: up to `batch_size` jobs due at `now`.
#[derive(Debug, Clone, Copy)]
pub struct Claim {
    pub batch_size: u32,
    pub now: Now,
}

/// [`JobStore::complete`]: a batch of attempt results.
#[derive(Debug, Clone, Copy)]
pub struct Complete<'a> {
    pub completions: &'a [Completion],
    pub now: Now,
}

/// [`JobStore::complete_and_claim`]: a batch of attempt results, and the claim of up to
/// `next_batch` due jobs in the same transaction (0 claims none).
#[derive(Debug, Clone, Copy)]
pub struct CompleteAndClaim<'a> {
    pub completions: &'a [Completion],
    pub next_batch: u32,
    pub now: Now,
}

/// [`JobStore::release`]: claimed jobs never handed to a provider, as (job id, claim token).
#[derive(Debug, Clone, Copy)]
pub struct Release<'a> {
    pub claims: &'a [(Uuid, Uuid)],
    /// When they are due again; `None`: at once.
    pub due: Option<DateTime<Utc>>,
    pub now: Now,
}

/// [`JobStore::requeue_dead`]: which of an organization's dead jobs to put back in the queue.
#[derive(Debug, Clone, Copy)]
pub struct RequeueDead<'a> {
    pub organization_id: Uuid,
    /// Those that died at or after this.
    pub since: Option<DateTime<Utc>>,
    /// Those that died before this.
    pub until: Option<DateTime<Utc>>,
    /// Those ended by this error code (`InvalidParameter`, `Throttling`, …).
    pub error_code: Option<&'a str>,
    /// At most this many, the oldest deaths first.
    pub limit: u32,
}

/// [`JobStore::expire`]: up to `limit` waiting jobs past their expiry.
#[derive(Debug, Clone, Copy)]
pub struct Expire {
    pub limit: u32,
    pub now: Now,
}

/// [`JobStore::sweep`]: up to `limit` jobs in processing for longer than `stuck_after`.
#[derive(Debug, Clone, Copy)]
pub struct Sweep {
    pub stuck_after: std::time::Duration,
    pub limit: u32,
    pub now: Now,
}

/// [`JobStore::prune_feedback`]: up to `limit` provider events received more than
/// `older_than_days` ago.
#[derive(Debug, Clone, Copy)]
pub struct PruneFeedback {
    pub older_than_days: u32,
    pub limit: u32,
    pub now: Now,
}

/// [`JobStore::drop_history_days`]: the days whose jobs all ended more than `keep` ago.
#[derive(Debug, Clone, Copy)]
pub struct DropHistoryDays {
    pub keep: std::time::Duration,
    pub now: Now,
}

/// [`JobStore::count_ingest`]: `requests` more ingest requests of the organization.
#[derive(Debug, Clone, Copy)]
pub struct CountIngest {
    pub organization_id: Uuid,
    pub requests: u32,
    pub now: Now,
}

/// [`FeedbackStore::record_feedback`]: one invocation's provider events.
#[derive(Debug, Clone, Copy)]
pub struct RecordFeedback<'a> {
    pub events: &'a [crate::domain::feedback::FeedbackEvent],
    pub now: Now,
}

/// [`FeedbackStore::drop_unmatched_feedback`]: up to `limit` events that waited more than
/// `older_than_secs` for their attempt.
#[derive(Debug, Clone, Copy)]
pub struct DropUnmatchedFeedback {
    pub older_than_secs: u32,
    pub limit: u32,
    pub now: Now,
}

/// A validated request, ready to persist.
#[derive(Debug, Clone)]
pub struct NewJob {
    pub organization_id: Uuid,
    pub channel: Channel,
    pub payload: serde_json::Value,
    pub max_attempts: i32,
    pub next_attempt_at: DateTime<Utc>,
    /// Never sent after this (the claim skips it; the sweeper marks it expired).
    pub expires_at: DateTime<Utc>,
    /// Its lane in the queue: due `high` jobs are claimed first, `low` ones last.
    pub priority: Priority,
    pub idempotency: Option<Idempotency>,
    /// The X-Ray trace header of the request that created it (see [`crate::telemetry`]).
    pub trace_header: Option<String>,
}

/// The caller's idempotency key and the hash of its normalised request.
#[derive(Debug, Clone)]
pub struct Idempotency {
    pub key: String,
    pub request_hash: String,
}

/// What a caller is told about a job it submitted.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct JobSummary {
    pub id: Uuid,
    pub status: JobStatus,
    pub next_attempt_at: DateTime<Utc>,
}

/// The result of [`JobStore::insert`].
#[derive(Debug, Clone, PartialEq)]
pub enum Inserted {
    /// A new job was written.
    Created(JobSummary),
    /// The same key and the same request were seen before: nothing was written.
    Existing(JobSummary),
    /// The same key came with another request: nothing was written.
    KeyReused,
    /// The organization suppressed the recipient: nothing was written (checked before the
    /// key, so a replay of a request accepted before the suppression is refused too).
    Suppressed,
}

/// A job claimed for one delivery attempt.
#[derive(Debug, Clone)]
pub struct ClaimedJob {
    pub id: Uuid,
    pub organization_id: Uuid,
    pub channel: Channel,
    pub payload: serde_json::Value,
    /// The attempts spent with this one (1 for the first), already counted in the job; the
    /// budget [`ClaimedJob::max_attempts`] is compared with it. An attempt given back
    /// (account trouble, an outage, a claim never tried) is counted again by the next claim.
    /// An attempt counts against the budget; a call ([`ClaimedJob::call`]) is every provider
    /// call, given back or not.
    pub attempt: i32,
    pub max_attempts: i32,
    /// The how-manieth provider call this is (refunds never lower it): numbers the delivery
    /// row, so every call keeps a row of its own (the queue's `tries` column).
    pub call: i32,
    pub claim_token: Uuid,
    pub claimed_at: DateTime<Utc>,
    /// When the job was accepted: the day of its history partitions, where its attempt rows
    /// go.
    pub created_at: DateTime<Utc>,
    /// The organization suppressed the recipient after the job was accepted: the worker
    /// ends the job `dead` without calling the provider.
    pub suppressed: bool,
    /// The X-Ray trace header the job was created under: logged with the delivery and passed
    /// to the provider as `X-Amzn-Trace-Id`.
    pub trace_header: Option<String>,
}

/// What the worker decided for one attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    Sent,
    /// Try again at `at`; the attempt stays spent.
    Retry {
        at: DateTime<Utc>,
    },
    /// Not the message's fault (account or configuration trouble, an outage): try again at
    /// `at`, the attempt given back.
    Hold {
        at: DateTime<Utc>,
    },
    Dead,
}

impl Decision {
    pub fn as_str(&self) -> &'static str {
        match self {
            Decision::Sent => "sent",
            Decision::Retry { .. } => "retry",
            Decision::Hold { .. } => "held",
            Decision::Dead => "dead",
        }
    }
}

/// One attempt's result, to record and apply.
#[derive(Debug, Clone)]
pub struct Completion {
    pub job_id: Uuid,
    pub claim_token: Uuid,
    /// The delivery row's number: the claimed job's [`ClaimedJob::call`].
    pub call: i32,
    pub channel: Channel,
    pub decision: Decision,
    pub provider_message_id: Option<String>,
    pub error_code: Option<String>,
    pub error_message: Option<String>,
    pub started_at: DateTime<Utc>,
    pub finished_at: DateTime<Utc>,
    /// The claimed job's [`ClaimedJob::created_at`]: the partition of the delivery row.
    pub job_created_at: DateTime<Utc>,
}

/// The result of [`JobStore::complete`]: which jobs changed, which were fenced.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CompleteReport {
    /// Recorded and applied: by this call, or by an earlier call with the same completion
    /// that committed (recording again changes nothing).
    pub applied: Vec<Uuid>,
    /// The job had been swept (and perhaps claimed again): its state was left alone.
    pub fenced: Vec<Uuid>,
}

/// The result of one [`JobStore::sweep`] statement.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct SweepReport {
    pub requeued: u64,
    pub dead: u64,
}

/// The open jobs by state ([`JobStore::queue_depth`]).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct QueueDepth {
    /// How long the oldest due job has waited, in seconds (0 when none is due).
    pub backlog_age_secs: f64,
    /// Unclaimed and due now.
    pub due: u64,
    /// Claimed by a worker.
    pub processing: u64,
    /// Waiting to be tried again after a failed or held attempt.
    pub held: u64,
    /// Not due yet and never tried.
    pub scheduled: u64,
}

/// The history's days a [`JobStore::drop_history_days`] call dropped.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct DroppedDays {
    pub dropped: u32,
    /// Which (`2026-11-01,2026-11-02`).
    pub dropped_days: String,
}

/// A job as its owner sees it.
#[derive(Debug, Clone, Serialize)]
pub struct JobView {
    pub id: Uuid,
    pub channel: Channel,
    pub to: String,
    pub status: JobStatus,
    pub attempts: i32,
    pub max_attempts: i32,
    pub next_attempt_at: DateTime<Utc>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    pub last_error: Option<String>,
    /// The lane the caller asked for.
    pub priority: Priority,
    /// The attempts, in order (left out of listings).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub deliveries: Option<Vec<DeliveryView>>,
}

/// The result of a state change asked for by a job's organization (cancel, requeue).
#[derive(Debug, Clone, PartialEq)]
pub enum Transition {
    Done(JobSummary),
    /// No such job for this organization.
    NotFound,
    /// The job's current state does not allow the change.
    Refused(JobStatus),
}

/// An organization's ingest requests in the current one-minute window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IngestWindow {
    /// Requests counted in this window, the current one included.
    pub used: u32,
    pub resets_in_secs: u32,
}

/// Where a listing page starts: after this (created_at, id).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ListCursor {
    pub created_at: DateTime<Utc>,
    pub id: Uuid,
}

/// One recorded attempt.
#[derive(Debug, Clone, Serialize)]
pub struct DeliveryView {
    pub attempt: i32,
    pub provider: String,
    pub provider_message_id: Option<String>,
    pub error_code: Option<String>,
    pub error_message: Option<String>,
    pub outcome: String,
    pub fenced: bool,
    pub started_at: DateTime<Utc>,
    pub finished_at: DateTime<Utc>,
    /// What the provider reported about this attempt, oldest first.
    pub feedback: Vec<FeedbackView>,
}

/// One provider event recorded against an attempt.
#[derive(Debug, Clone, Serialize, serde::Deserialize, PartialEq)]
pub struct FeedbackView {
    /// delivery, bounce, transient_bounce, complaint, reject, delivery_delay, send,
    /// rendering_failure, sms_failure.
    #[serde(rename = "type")]
    pub kind: String,
    pub subtype: Option<String>,
    pub diagnostic: Option<String>,
    pub occurred_at: DateTime<Utc>,
}

/// A recipient on an organization's suppression list.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Suppression {
    /// Email in lower case, phone in E.164.
    pub recipient: String,
    /// bounce, complaint, sms_failure or manual.
    pub reason: String,
    pub detail: Option<String>,
    pub created_at: DateTime<Utc>,
}

/// What recording one invocation's events did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct FeedbackReport {
    /// Events recorded for the first time, by channel and kind (a redelivered copy is not
    /// counted): `{"email": {"delivery": 2, "bounce": 1}}`.
    pub recorded: std::collections::BTreeMap<String, std::collections::BTreeMap<String, u64>>,
    /// Events copied before (SNS delivers at least once).
    pub duplicates: u64,
    /// Events applied to their attempt (these and any that waited for it).
    pub applied: u64,
    /// Jobs whose status changed (delivered or bounced).
    pub jobs_changed: u64,
    /// Recipients newly suppressed.
    pub suppressed: u64,
    /// Of the email bounces recorded, those SES reported for an address on the account's own
    /// suppression list (`Permanent/OnAccountSuppressionList`): SES leaves them out of the
    /// bounce rate it judges the account by, and so does the `Bounces` metric.
    #[serde(skip_serializing_if = "is_zero")]
    pub account_suppressed_bounces: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// The bounce subtype SES gives a send to an address on the account's suppression list.
pub const ON_ACCOUNT_SUPPRESSION_LIST: &str = "Permanent/OnAccountSuppressionList";

/// The suppression list port (ingest and the suppression routes).
#[async_trait]
pub trait SuppressionStore: Send + Sync {
    /// A page of the organization's list in recipient order, after `after`.
    async fn list_suppressions(
        &self,
        organization_id: Uuid,
        after: Option<&str>,
        limit: u32,
    ) -> Result<Vec<Suppression>, StoreError>;

    /// Suppresses a normalised recipient by hand; `true` when it was not suppressed before
    /// (an existing entry is returned unchanged with `false`).
    async fn add_suppression(
        &self,
        organization_id: Uuid,
        recipient: &str,
        detail: Option<&str>,
    ) -> Result<(Suppression, bool), StoreError>;

    /// Lifts a suppression; `false` when the recipient was not suppressed.
    async fn remove_suppression(
        &self,
        organization_id: Uuid,
        recipient: &str,
    ) -> Result<bool, StoreError>;
}

/// The provider-feedback port (the feedback function and the sweeper).
#[async_trait]
pub trait FeedbackStore: Send + Sync {
    /// Records the events (copies of recorded ones are skipped) and applies every recorded
    /// event whose attempt is known, among the jobs accepted in the days around these events
    /// ([`crate::domain::feedback::jobs_window`]); [`FeedbackStore::apply_waiting_feedback`] (the
    /// sweeper's, once a minute) applies the others.
    async fn record_feedback(&self, p: RecordFeedback<'_>) -> Result<FeedbackReport, StoreError>;

    /// Applies waiting events whose attempt has been recorded since, whatever its job's day
    /// (`recorded` and `duplicates` stay empty).
    async fn apply_waiting_feedback(&self, p: At) -> Result<FeedbackReport, StoreError>;

    /// Drops up to `limit` events that waited more than `older_than_secs` for their attempt.
    async fn drop_unmatched_feedback(&self, p: DropUnmatchedFeedback) -> Result<u64, StoreError>;
}

/// Everything the service keeps: jobs, the suppression list, provider feedback, and the
/// status events with their webhook endpoints.
pub trait Store: JobStore + SuppressionStore + FeedbackStore + EventStore {}

impl<T: JobStore + SuppressionStore + FeedbackStore + EventStore> Store for T {}

/// The job repository port.
#[async_trait]
pub trait JobStore: Send + Sync {
    /// Persists a new job; with an idempotency key, a repeat writes nothing.
    async fn insert(&self, job: &NewJob) -> Result<Inserted, StoreError>;

    /// Persists many jobs in one statement; the results are in the order of `jobs`.
    async fn insert_many(&self, jobs: &[NewJob]) -> Result<Vec<Inserted>, StoreError>;

    /// The organization's job with its delivery attempts, `None` if unknown or another's.
    async fn get(&self, organization_id: Uuid, id: Uuid) -> Result<Option<JobView>, StoreError>;

    /// Cancels a pending or failed job of the organization.
    async fn cancel(&self, organization_id: Uuid, id: Uuid) -> Result<Transition, StoreError>;

    /// Puts a dead job of the organization back to pending with a fresh attempt budget.
    async fn requeue(&self, organization_id: Uuid, id: Uuid) -> Result<Transition, StoreError>;

    /// Puts the organization's dead jobs that `p` names back to pending, each as
    /// [`JobStore::requeue`] does one, in one statement; how many.
    async fn requeue_dead(&self, p: RequeueDead<'_>) -> Result<u64, StoreError>;

    /// A page of the organization's jobs, oldest first, after `after`, optionally one status.
    async fn list(
        &self,
        organization_id: Uuid,
        status: Option<JobStatus>,
        after: Option<ListCursor>,
        limit: u32,
    ) -> Result<Vec<JobView>, StoreError>;

    /// Claims up to `batch_size` jobs due at `now` in one committed statement.
    async fn claim(&self, p: Claim) -> Result<Vec<ClaimedJob>, StoreError>;

    /// Records and applies a batch of attempt results in one transaction.
    async fn complete(&self, p: Complete<'_>) -> Result<CompleteReport, StoreError>;

    /// [`JobStore::complete`], and in the same transaction (one round trip, one commit) the
    /// claim of up to `next_batch` due jobs, as [`JobStore::claim`] would.
    async fn complete_and_claim(
        &self,
        p: CompleteAndClaim<'_>,
    ) -> Result<(CompleteReport, Vec<ClaimedJob>), StoreError>;

    /// Gives back claimed jobs never handed to a provider (the worker stops early): due at
    /// once, attempt refunded, claim token cleared; only those still held under their token.
    /// Returns the ids released.
    async fn release(&self, p: Release<'_>) -> Result<Vec<Uuid>, StoreError>;

    /// Marks up to `limit` waiting jobs past their expiry `expired`, each with a delivery row
    /// saying why; returns how many.
    async fn expire(&self, p: Expire) -> Result<u64, StoreError>;

    /// Requeues (or buries) up to `limit` jobs in processing for longer than `stuck_after`.
    async fn sweep(&self, p: Sweep) -> Result<SweepReport, StoreError>;

    /// Deletes up to `limit` provider events received more than `older_than_days` ago;
    /// returns how many.
    async fn prune_feedback(&self, p: PruneFeedback) -> Result<u64, StoreError>;

    /// Creates the history's day partitions from yesterday to a week ahead that are missing;
    /// returns how many it created.
    async fn add_history_days(&self, p: At) -> Result<u32, StoreError>;

    /// Drops the history of every day whose jobs all ended more than `keep` ago and none of
    /// which is open, each day whole with its idempotency keys.
    async fn drop_history_days(&self, p: DropHistoryDays) -> Result<DroppedDays, StoreError>;

    /// Counts `requests` ingest requests of the organization in the current minute.
    async fn count_ingest(&self, p: CountIngest) -> Result<IngestWindow, StoreError>;

    /// Deletes rate-limit windows older than an hour.
    async fn prune_rate_windows(&self, p: At) -> Result<u64, StoreError>;

    /// The open jobs by state, and how long the oldest due job has waited.
    async fn queue_depth(&self, p: At) -> Result<QueueDepth, StoreError>;
}

#[cfg(test)]
mod tests {
    use super::StoreError;
    use lambda_runtime::Diagnostic;

    #[test]
    fn a_failed_invocation_reports_the_class_and_the_whole_chain() {
        let outage = StoreError::Unavailable(Box::new(std::io::Error::other("connection refused")));
        let diagnostic = Diagnostic::from(outage);
        assert_eq!(diagnostic.error_type, "Unavailable");
        assert_eq!(
            diagnostic.error_message,
            "the database is unavailable: connection refused"
        );
        let behind = Diagnostic::from(StoreError::SchemaBehind("0009_next.sql"));
        assert_eq!(behind.error_type, "Unavailable");
        assert!(behind.error_message.contains("0009_next.sql"));
        let corrupt = Diagnostic::from(StoreError::Corrupt("job status \"x\"".into()));
        assert_eq!(corrupt.error_type, "Corrupt");
    }
}
