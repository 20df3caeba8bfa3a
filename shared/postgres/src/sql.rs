//! Every statement the store runs: its file in `sql/`, the type of each parameter and the
//! rows it answers, declared once, here.
//!
//! - A row type ([`FromRow`]) names each column the Rust side reads, with its PostgreSQL type
//!   and its Rust type; it is read with `try_get`, so a mismatch is an error, never a panic.
//! - A statement ([`Query`]) pairs its SQL with its parameter types and its row type.
//! - The integration tests prepare every statement of [`STATEMENTS`] against the migrated
//!   database and compare what PostgreSQL says of its parameters and columns with these
//!   declarations (tests/it/statements.rs): a renamed column or a changed type fails a test,
//!   not a request.
//!
//! Statements run unnamed by default (`query_typed`): parsed, bound and executed in one round
//! trip, nothing left on the server. So they work unchanged through a transaction-pooling
//! PgBouncer or RDS Proxy, where a named prepared statement would meet another client's
//! server connection (or pin the session). Straight to the database the store prepares each
//! once per connection instead, with the declared parameter types
//! (`DATABASE_PREPARED_STATEMENTS`, [`crate::db::DbConfig::with_prepared_statements`]).
//!
//! The files are the statements as PostgreSQL runs them: one that includes another (the
//! claim inside the completion, the claim's UPDATE inside the fair claim) holds its copy,
//! which the build rewrites from the source (`src/compose.rs`).

use std::marker::PhantomData;

use chrono::{DateTime, Utc};
use serde_json::Value;
use tokio_postgres::Row;
use tokio_postgres::types::{Json, ToSql, Type};
use uuid::Uuid;

/// The columns of one row type: (name, PostgreSQL type).
pub type ColumnList = &'static [(&'static str, Type)];

/// A row as the Rust side reads it.
pub trait FromRow: Sized {
    /// Every column it reads.
    const COLUMNS: ColumnList;
    /// Reads them; a missing column or another type is an error.
    fn read(row: &Row) -> Result<Self, tokio_postgres::Error>;
}

/// A statement answering no row the Rust side reads.
#[derive(Debug)]
pub struct NoRows;

impl FromRow for NoRows {
    const COLUMNS: ColumnList = &[];
    fn read(_: &Row) -> Result<Self, tokio_postgres::Error> {
        Ok(NoRows)
    }
}

/// One statement: its SQL, its parameters' types in `$n` order, and its rows (`R`).
pub struct Query<R> {
    pub name: &'static str,
    pub sql: &'static str,
    pub params: &'static [Type],
    _rows: PhantomData<fn() -> R>,
}

impl<R> Query<R> {
    /// `params` paired with their declared types, as `query_typed` takes them.
    pub fn typed<'a>(
        &self,
        params: &[&'a (dyn ToSql + Sync)],
    ) -> Vec<(&'a (dyn ToSql + Sync), Type)> {
        debug_assert_eq!(params.len(), self.params.len(), "{}", self.name);
        params
            .iter()
            .zip(self.params)
            .map(|(value, ty)| (*value, ty.clone()))
            .collect()
    }
}

/// What the statement check reads of a statement: its name, SQL and parameter types, and
/// every column it answers (the row type's, and for a statement whose rows are of two kinds,
/// the second kind's).
pub struct Statement {
    pub name: &'static str,
    pub sql: &'static str,
    pub params: &'static [Type],
    pub columns: &'static [ColumnList],
}

macro_rules! rows {
    ($($(#[$doc:meta])* $name:ident { $($field:ident: $rust:ty = $pg:ident),* $(,)? })*) => {
        $(
            $(#[$doc])*
            #[derive(Debug, Clone)]
            pub struct $name { $(pub $field: $rust),* }

            impl FromRow for $name {
                const COLUMNS: ColumnList = &[$((stringify!($field), Type::$pg)),*];
                fn read(row: &Row) -> Result<Self, tokio_postgres::Error> {
                    Ok(Self { $($field: row.try_get(stringify!($field))?),* })
                }
            }
        )*
    };
}

macro_rules! queries {
    ($($(#[$doc:meta])* $name:ident = $file:literal [$($ty:ident),*] -> $row:ident $(+ $also:ident)?;)*) => {
        $(
            $(#[$doc])*
            pub static $name: Query<$row> = Query {
                name: stringify!($name),
                sql: include_str!(concat!("../sql/", $file)),
                params: &[$(Type::$ty),*],
                _rows: PhantomData,
            };
        )*

        /// Every statement, for the statement check.
        pub static STATEMENTS: &[Statement] = &[$(
            Statement {
                name: stringify!($name),
                sql: include_str!(concat!("../sql/", $file)),
                params: &[$(Type::$ty),*],
                columns: &[<$row as FromRow>::COLUMNS $(, <$also as FromRow>::COLUMNS)?],
            }
        ),*];
    };
}

rows! {
    /// A claimed job (claim.sql, claim_fair.sql, and the claim part of complete.sql).
    ClaimRow {
        id: Uuid = UUID,
        organization_id: Uuid = UUID,
        channel: String = TEXT,
        payload: Value = JSONB,
        attempts: i32 = INT4,
        max_attempts: i32 = INT4,
        tries: i32 = INT4,
        claim_token: Uuid = UUID,
        claimed_at: DateTime<Utc> = TIMESTAMPTZ,
        trace_header: Option<String> = TEXT,
        created_at: DateTime<Utc> = TIMESTAMPTZ,
        suppressed: bool = BOOL,
    }

    /// A completion's row of complete.sql: `applied` true or false; null on a claimed job's row.
    CompletionRow {
        id: Uuid = UUID,
        applied: Option<bool> = BOOL,
    }

    /// A job as its owner reads it, with its idempotency key (get_job.sql, jobs_within.sql).
    JobRow {
        id: Uuid = UUID,
        channel: String = TEXT,
        recipient: Option<String> = TEXT,
        status: String = TEXT,
        attempts: i32 = INT4,
        max_attempts: i32 = INT4,
        next_attempt_at: DateTime<Utc> = TIMESTAMPTZ,
        created_at: DateTime<Utc> = TIMESTAMPTZ,
        updated_at: DateTime<Utc> = TIMESTAMPTZ,
        last_error: Option<String> = TEXT,
        request_hash: Option<String> = TEXT,
        idempotency_key: Option<String> = TEXT,
        priority: String = TEXT,
    }

    /// What a caller is told of a job (cancel.sql, requeue.sql).
    SummaryRow {
        id: Uuid = UUID,
        status: String = TEXT,
        next_attempt_at: DateTime<Utc> = TIMESTAMPTZ,
    }

    /// One job of a batch insert (insert_jobs.sql): written, or refused as suppressed (then
    /// without a status).
    InsertedRow {
        id: Uuid = UUID,
        status: Option<String> = TEXT,
        next_attempt_at: Option<DateTime<Utc>> = TIMESTAMPTZ,
        suppressed: bool = BOOL,
    }

    /// A job's status (job_status.sql).
    StatusRow {
        status: String = TEXT,
    }

    /// A job's id and the day of its history (list_jobs.sql).
    PageRow {
        id: Uuid = UUID,
        created_at: DateTime<Utc> = TIMESTAMPTZ,
    }

    /// The job holding an idempotency key (idempotency_key_jobs.sql).
    KeyJobRow {
        job_id: Uuid = UUID,
        job_created_at: DateTime<Utc> = TIMESTAMPTZ,
    }

    /// One recorded attempt with its provider feedback (list_deliveries.sql).
    DeliveryRow {
        attempt: i32 = INT4,
        provider: String = TEXT,
        provider_message_id: Option<String> = TEXT,
        error_code: Option<String> = TEXT,
        error_message: Option<String> = TEXT,
        outcome: String = TEXT,
        fenced: bool = BOOL,
        started_at: DateTime<Utc> = TIMESTAMPTZ,
        finished_at: DateTime<Utc> = TIMESTAMPTZ,
        feedback: Json<Vec<notify_core::store::FeedbackView>> = JSONB,
    }

    /// A completion told apart (record_late.sql): recorded before (a repeat), or late now.
    LateRow {
        id: Uuid = UUID,
        recorded: bool = BOOL,
    }

    /// requeue_dead.sql
    RequeuedRow {
        requeued: i64 = INT8,
    }

    /// One organization's open jobs by state (queue_by_organization.sql).
    OrganizationQueueRow {
        organization_id: Uuid = UUID,
        due: i64 = INT8,
        processing: i64 = INT8,
        held: i64 = INT8,
        scheduled: i64 = INT8,
        oldest_due: Option<DateTime<Utc>> = TIMESTAMPTZ,
    }

    /// The jobs one error code ended (dead_by_error.sql).
    DeadByErrorRow {
        error_code: String = TEXT,
        jobs: i64 = INT8,
        last_died: DateTime<Utc> = TIMESTAMPTZ,
    }

    /// The suppression lists' entries of one reason (suppression_counts.sql).
    SuppressionCountRow {
        reason: String = TEXT,
        entries: i64 = INT8,
    }

    /// A job's id (release.sql, and the statements for tests).
    IdRow {
        id: Uuid = UUID,
    }

    /// expire.sql
    ExpiredRow {
        expired: i64 = INT8,
    }

    /// sweep.sql
    SweptRow {
        requeued: i64 = INT8,
        dead: i64 = INT8,
    }

    /// prune_feedback.sql
    PrunedRow {
        pruned: i64 = INT8,
    }

    /// add_history_days.sql
    AddedDaysRow {
        added: i32 = INT4,
    }

    /// drop_history_days.sql
    DroppedDaysRow {
        dropped: i32 = INT4,
        dropped_days: String = TEXT,
    }

    /// count_ingest.sql
    IngestWindowRow {
        requests: i32 = INT4,
        resets_in_secs: i32 = INT4,
    }

    /// queue_depth.sql
    QueueDepthRow {
        age: f64 = FLOAT8,
        due: i64 = INT8,
        processing: i64 = INT8,
        held: i64 = INT8,
        scheduled: i64 = INT8,
    }

    /// An entry of a suppression list (list_suppressions.sql).
    SuppressionRow {
        recipient: String = TEXT,
        reason: String = TEXT,
        detail: Option<String> = TEXT,
        created_at: DateTime<Utc> = TIMESTAMPTZ,
    }

    /// add_suppression.sql: the entry, and whether this call made it.
    AddedSuppressionRow {
        recipient: String = TEXT,
        reason: String = TEXT,
        detail: Option<String> = TEXT,
        created_at: DateTime<Utc> = TIMESTAMPTZ,
        created: bool = BOOL,
    }

    /// remove_suppression.sql
    RemovedRow {
        recipient: String = TEXT,
    }

    /// An event recorded for the first time (record_feedback.sql).
    RecordedFeedbackRow {
        channel: String = TEXT,
        kind: String = TEXT,
        subtype: Option<String> = TEXT,
    }

    /// An event applied to its attempt (apply_feedback.sql), with the statement's totals.
    AppliedFeedbackRow {
        jobs_changed: i32 = INT4,
        suppressed: i32 = INT4,
    }

    /// drop_unmatched_feedback.sql
    DroppedFeedbackRow {
        dropped: i64 = INT8,
    }

    /// An event claimed for the bus (claim_events.sql).
    EventRow {
        id: Uuid = UUID,
        event_type: String = TEXT,
        created_at: DateTime<Utc> = TIMESTAMPTZ,
        organization_id: Uuid = UUID,
        sequence: i64 = INT8,
        data: Value = JSONB,
        claim_token: Uuid = UUID,
        attempts: i32 = INT4,
    }

    /// A webhook delivery claimed, with its endpoint and event (claim_webhooks.sql).
    WebhookClaimRow {
        delivery_id: i64 = INT8,
        claim_token: Uuid = UUID,
        endpoint_id: Uuid = UUID,
        url: String = TEXT,
        secret: String = TEXT,
        previous_secret: Option<String> = TEXT,
        attempt: i32 = INT4,
        event_id: Uuid = UUID,
        event_type: String = TEXT,
        created_at: DateTime<Utc> = TIMESTAMPTZ,
        organization_id: Uuid = UUID,
        sequence: i64 = INT8,
        data: Value = JSONB,
    }

    /// complete_webhooks.sql
    WebhookCompletedRow {
        applied: i64 = INT8,
        disabled: i64 = INT8,
    }

    /// any_webhook_endpoint.sql
    AnyRow {
        any: bool = BOOL,
    }

    /// take_send_slots.sql
    SendSlotsRow {
        wait_secs: Option<f64> = FLOAT8,
        rate: f64 = FLOAT8,
        held_until: DateTime<Utc> = TIMESTAMPTZ,
        next_in_secs: f64 = FLOAT8,
    }

    /// A lease: of a slot taken for a worker about to be started (wake_worker.sql,
    /// grow_fleet.sql).
    LeaseRow {
        lease: Uuid = UUID,
    }

    /// The slot a worker invocation holds, and its lease (join_fleet.sql).
    SlotRow {
        slot: i32 = INT4,
        lease: Uuid = UUID,
    }

    /// fleet_census.sql: whether the caller has the turn, and then what it counted.
    CensusRow {
        turn: bool = BOOL,
        held: i64 = INT8,
        due: i64 = INT8,
    }

    /// slow_send_pace.sql
    PaceFactorRow {
        factor: f64 = FLOAT8,
    }

    /// webhook_backlog.sql
    AgeRow {
        age: f64 = FLOAT8,
    }

    /// sweep_dispatch.sql
    SweptDispatchRow {
        events: i64 = INT8,
        deliveries: i64 = INT8,
    }

    /// prune_events.sql
    PrunedEventsRow {
        events: i64 = INT8,
        attempts: i64 = INT8,
    }

    /// A webhook endpoint (create_webhook.sql, list_webhooks.sql, rotate_webhook_secret.sql).
    WebhookEndpointRow {
        id: Uuid = UUID,
        url: String = TEXT,
        event_types: Option<Vec<String>> = TEXT_ARRAY,
        created_at: DateTime<Utc> = TIMESTAMPTZ,
        disabled_at: Option<DateTime<Utc>> = TIMESTAMPTZ,
        disabled_reason: Option<String> = TEXT,
        failing_since: Option<DateTime<Utc>> = TIMESTAMPTZ,
    }

    /// One webhook attempt, or nothing for an endpoint without any (list_webhook_attempts.sql).
    WebhookAttemptRow {
        event_id: Option<Uuid> = UUID,
        event_type: Option<String> = TEXT,
        attempt: Option<i32> = INT4,
        outcome: Option<String> = TEXT,
        status_code: Option<i32> = INT4,
        latency_ms: Option<i32> = INT4,
        error: Option<String> = TEXT,
        attempted_at: Option<DateTime<Utc>> = TIMESTAMPTZ,
        next_attempt_at: Option<DateTime<Utc>> = TIMESTAMPTZ,
    }
}

queries! {
    CLAIM = "claim.sql" [INT8, TIMESTAMPTZ] -> ClaimRow;
    /// The fair, rate-limited claim: claim_fair.sql's choice of rows, claim.sql's UPDATE.
    CLAIM_FAIR = "claim_fair.sql" [INT8, TIMESTAMPTZ, INT4] -> ClaimRow;
    /// The statement the worker runs after each batch: the completion, with claim.sql in its
    /// `claimed` CTE (one source for the claim). Both take the batch size as `$1` and the
    /// current time as `$2`, so the claim goes in unchanged. Its rows are completions
    /// ([`CompletionRow`]) and claimed jobs ([`ClaimRow`]).
    COMPLETE_AND_CLAIM = "complete.sql" [
        INT8, TIMESTAMPTZ, UUID_ARRAY, UUID_ARRAY, INT4_ARRAY, TEXT_ARRAY,
        TIMESTAMPTZ_ARRAY, TEXT_ARRAY, TEXT_ARRAY, TEXT_ARRAY, TEXT_ARRAY, TIMESTAMPTZ_ARRAY,
        TIMESTAMPTZ_ARRAY, TIMESTAMPTZ_ARRAY
    ] -> CompletionRow + ClaimRow;
    COUNT_INGEST = "count_ingest.sql" [UUID, INT4, TIMESTAMPTZ] -> IngestWindowRow;
    PRUNE_COUNTERS = "prune_counters.sql" [TIMESTAMPTZ] -> NoRows;
    QUEUE_DEPTH = "queue_depth.sql" [TIMESTAMPTZ] -> QueueDepthRow;
    QUEUE_BY_ORGANIZATION = "queue_by_organization.sql" [TIMESTAMPTZ, INT8]
        -> OrganizationQueueRow;
    DEAD_BY_ERROR = "dead_by_error.sql" [TIMESTAMPTZ, INT8] -> DeadByErrorRow;
    SUPPRESSION_COUNTS = "suppression_counts.sql" [] -> SuppressionCountRow;
    INSERT_JOBS = "insert_jobs.sql" [
        UUID_ARRAY, UUID_ARRAY, TEXT_ARRAY, JSONB_ARRAY, INT4_ARRAY, TIMESTAMPTZ_ARRAY,
        TEXT_ARRAY, TEXT_ARRAY, TIMESTAMPTZ_ARRAY, TEXT_ARRAY, TEXT_ARRAY
    ] -> InsertedRow;
    RECORD_LATE = "record_late.sql" [
        UUID_ARRAY, INT4_ARRAY, TEXT_ARRAY, TEXT_ARRAY, TEXT_ARRAY, TEXT_ARRAY, TEXT_ARRAY,
        TIMESTAMPTZ_ARRAY, TIMESTAMPTZ_ARRAY, TIMESTAMPTZ_ARRAY, TIMESTAMPTZ, TIMESTAMPTZ
    ] -> LateRow;
    EXPIRE = "expire.sql" [INT8, TIMESTAMPTZ] -> ExpiredRow;
    IDEMPOTENCY_KEY_JOBS = "idempotency_key_jobs.sql" [UUID, TEXT_ARRAY] -> KeyJobRow;
    JOBS_WITHIN = "jobs_within.sql" [UUID_ARRAY, TIMESTAMPTZ, TIMESTAMPTZ] -> JobRow;
    GET_JOB = "get_job.sql" [UUID, UUID] -> JobRow;
    LIST_DELIVERIES = "list_deliveries.sql" [UUID] -> DeliveryRow;
    SWEEP = "sweep.sql" [FLOAT8, INT8, TIMESTAMPTZ] -> SweptRow;
    PRUNE_FEEDBACK = "prune_feedback.sql" [INT4, INT8, TIMESTAMPTZ] -> PrunedRow;
    ADD_HISTORY_DAYS = "add_history_days.sql" [TIMESTAMPTZ] -> AddedDaysRow;
    DROP_HISTORY_DAYS = "drop_history_days.sql" [TIMESTAMPTZ, FLOAT8] -> DroppedDaysRow;
    RELEASE = "release.sql" [UUID_ARRAY, UUID_ARRAY, TIMESTAMPTZ, TIMESTAMPTZ] -> IdRow;
    TAKE_SEND_SLOTS = "take_send_slots.sql" [TEXT, INT4, FLOAT8, FLOAT8, TIMESTAMPTZ]
        -> SendSlotsRow;
    SLOW_SEND_PACE = "slow_send_pace.sql" [TEXT, TIMESTAMPTZ] -> PaceFactorRow;
    HOLD_CHANNEL = "hold_channel.sql" [TEXT, TIMESTAMPTZ, TEXT, INT8, TIMESTAMPTZ] -> IdRow;
    WAKE_WORKER = "wake_worker.sql" [FLOAT8, BOOL, TIMESTAMPTZ] -> LeaseRow;
    JOIN_FLEET = "join_fleet.sql" [UUID, TIMESTAMPTZ, INT4, TIMESTAMPTZ] -> SlotRow;
    LEAVE_FLEET = "leave_fleet.sql" [INT4, UUID, TIMESTAMPTZ] -> NoRows;
    FLEET_CENSUS = "fleet_census.sql" [FLOAT8, INT8, TIMESTAMPTZ] -> CensusRow;
    GROW_FLEET = "grow_fleet.sql" [INT8, INT4, FLOAT8, TIMESTAMPTZ] -> LeaseRow;
    CANCEL = "cancel.sql" [UUID, UUID] -> SummaryRow;
    REQUEUE = "requeue.sql" [UUID, UUID] -> SummaryRow;
    REQUEUE_DEAD = "requeue_dead.sql" [UUID, TIMESTAMPTZ, TIMESTAMPTZ, TEXT, INT8] -> RequeuedRow;
    JOB_STATUS = "job_status.sql" [UUID, UUID] -> StatusRow;
    LIST_JOBS = "list_jobs.sql" [UUID, TEXT, TIMESTAMPTZ, UUID, INT8] -> PageRow;
    RECORD_FEEDBACK = "record_feedback.sql" [
        TEXT_ARRAY, TEXT_ARRAY, TEXT_ARRAY, TEXT_ARRAY, TEXT_ARRAY, BOOL_ARRAY,
        TIMESTAMPTZ_ARRAY, JSONB_ARRAY, TIMESTAMPTZ, TEXT_ARRAY
    ] -> RecordedFeedbackRow;
    APPLY_FEEDBACK = "apply_feedback.sql" [TIMESTAMPTZ, TIMESTAMPTZ, TIMESTAMPTZ]
        -> AppliedFeedbackRow;
    DROP_UNMATCHED_FEEDBACK = "drop_unmatched_feedback.sql" [FLOAT8, INT8, TIMESTAMPTZ]
        -> DroppedFeedbackRow;
    LIST_SUPPRESSIONS = "list_suppressions.sql" [UUID, TEXT, INT8] -> SuppressionRow;
    ADD_SUPPRESSION = "add_suppression.sql" [UUID, TEXT, TEXT] -> AddedSuppressionRow;
    REMOVE_SUPPRESSION = "remove_suppression.sql" [UUID, TEXT] -> RemovedRow;
    CLAIM_EVENTS = "claim_events.sql" [INT8, TIMESTAMPTZ, FLOAT8] -> EventRow;
    COMPLETE_EVENTS = "complete_events.sql" [
        UUID_ARRAY, UUID_ARRAY, TIMESTAMPTZ_ARRAY, TEXT_ARRAY, TIMESTAMPTZ
    ] -> IdRow;
    CLAIM_WEBHOOKS = "claim_webhooks.sql" [INT8, INT8, TIMESTAMPTZ] -> WebhookClaimRow;
    COMPLETE_WEBHOOKS = "complete_webhooks.sql" [
        INT8_ARRAY, UUID_ARRAY, TEXT_ARRAY, TIMESTAMPTZ_ARRAY, INT4_ARRAY, INT4_ARRAY,
        TEXT_ARRAY, TIMESTAMPTZ_ARRAY, TIMESTAMPTZ, FLOAT8
    ] -> WebhookCompletedRow;
    WEBHOOK_BACKLOG = "webhook_backlog.sql" [TIMESTAMPTZ] -> AgeRow;
    ANY_WEBHOOK_ENDPOINT = "any_webhook_endpoint.sql" [] -> AnyRow;
    SWEEP_DISPATCH = "sweep_dispatch.sql" [FLOAT8, TIMESTAMPTZ] -> SweptDispatchRow;
    PRUNE_EVENTS = "prune_events.sql" [INT4, INT8, TIMESTAMPTZ] -> PrunedEventsRow;
    CREATE_WEBHOOK = "create_webhook.sql" [UUID, UUID, TEXT, TEXT_ARRAY, TEXT, INT8]
        -> WebhookEndpointRow;
    LIST_WEBHOOKS = "list_webhooks.sql" [UUID] -> WebhookEndpointRow;
    DELETE_WEBHOOK = "delete_webhook.sql" [UUID, UUID] -> IdRow;
    ROTATE_WEBHOOK_SECRET = "rotate_webhook_secret.sql" [UUID, UUID, TEXT, FLOAT8]
        -> WebhookEndpointRow;
    LIST_WEBHOOK_ATTEMPTS = "list_webhook_attempts.sql" [UUID, UUID, INT8] -> WebhookAttemptRow;

    /// For tests only (`crate::testing`): jobs in any state, laid out as the store does.
    TEST_INSERT_JOBS = "test_insert_jobs.sql" [
        UUID_ARRAY, TEXT_ARRAY, JSONB_ARRAY, TEXT_ARRAY, INT4_ARRAY, INT4_ARRAY,
        TIMESTAMPTZ_ARRAY, TIMESTAMPTZ_ARRAY, TIMESTAMPTZ_ARRAY, TIMESTAMPTZ_ARRAY,
        TIMESTAMPTZ_ARRAY, TEXT_ARRAY
    ] -> IdRow;
    /// For tests only: the history's partitions of some days.
    TEST_HISTORY_DAYS = "test_history_days.sql" [DATE_ARRAY] -> AddedDaysRow;
    /// For tests only: queued jobs due at a time.
    TEST_MAKE_DUE = "test_make_due.sql" [UUID_ARRAY, TIMESTAMPTZ] -> IdRow;
    /// For tests only: a claim taken over.
    TEST_STEAL_CLAIM = "test_steal_claim.sql" [UUID] -> IdRow;
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The highest `$n` a statement uses.
    fn highest_parameter(sql: &str) -> usize {
        let mut highest = 0;
        let bytes = sql.as_bytes();
        for (i, _) in sql.match_indices('$') {
            let digits: String = bytes[i + 1..]
                .iter()
                .take_while(|b| b.is_ascii_digit())
                .map(|b| *b as char)
                .collect();
            highest = highest.max(digits.parse().unwrap_or(0));
        }
        highest
    }

    #[test]
    fn every_statement_declares_one_type_per_parameter() {
        for s in STATEMENTS {
            assert_eq!(highest_parameter(s.sql), s.params.len(), "{}", s.name);
        }
    }

    #[test]
    fn the_composed_statements_hold_the_claim() {
        assert_eq!(CLAIM_FAIR.sql.matches("UPDATE job_queue AS q").count(), 1);
        assert!(
            CLAIM_FAIR.sql.contains("    -- @end claim.sql#update\n)"),
            "claim.sql's UPDATE, whole, is the CTE `claimed`"
        );
        assert!(
            CLAIM_FAIR
                .sql
                .trim_end()
                .ends_with("ORDER BY l.priority, l.turn, l.next_attempt_at"),
            "the fair claim answers in the batch's order"
        );
        assert!(COMPLETE_AND_CLAIM.sql.contains("FOR UPDATE SKIP LOCKED"));
        assert!(
            COMPLETE_AND_CLAIM.sql.contains("    LIMIT $1\n"),
            "the claim's size is $1"
        );
    }

    /// The files as committed are their own composition (the build rewrote them, or CI's
    /// diff refuses them).
    #[test]
    fn every_file_is_composed() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("sql");
        let sources = std::fs::read_dir(&dir)
            .unwrap()
            .map(|entry| entry.unwrap().path())
            .filter(|path| path.extension().is_some_and(|ext| ext == "sql"))
            .map(|path| {
                let name = path.file_name().unwrap().to_string_lossy().into_owned();
                (name, std::fs::read_to_string(&path).unwrap())
            })
            .collect();
        assert_eq!(
            crate::compose::refresh(&sources)
                .unwrap()
                .keys()
                .collect::<Vec<_>>(),
            Vec::<&String>::new()
        );
    }
}
