//! One call inserts a job in any state, as River's `testfactory.Job` does: status, attempts,
//! budget, organization, due in (or ago), claimed so long ago, created or updated so long ago.
//! Tests arrange rows with it instead of rewriting them with ad-hoc UPDATEs; together with the
//! store's `now` parameter, time in a test is set, never waited for.
//!
//! ```ignore
//! let id = Job::new().status(JobStatus::Failed).attempts(2).due_in(-1).insert(&client).await;
//! ```

use notify_core::domain::JobStatus;
use tokio_postgres::Client;
use uuid::Uuid;

/// A job to insert; every field has a default (a pending SMS due a second ago, 5 attempts).
#[derive(Debug, Clone)]
pub struct Job {
    organization_id: Uuid,
    /// [`Job::insert_many`] gives each job an organization of its own.
    own_organizations: bool,
    channel: &'static str,
    status: JobStatus,
    attempts: i32,
    max_attempts: i32,
    due_in_secs: f64,
    claimed_secs_ago: Option<f64>,
    created_secs_ago: f64,
    updated_secs_ago: f64,
    expires_in_secs: Option<f64>,
}

impl Default for Job {
    fn default() -> Self {
        Self::new()
    }
}

impl Job {
    pub fn new() -> Self {
        Self {
            organization_id: Uuid::new_v4(),
            own_organizations: false,
            channel: "sms",
            status: JobStatus::Pending,
            attempts: 0,
            max_attempts: 5,
            due_in_secs: -1.0,
            claimed_secs_ago: None,
            created_secs_ago: 0.0,
            updated_secs_ago: 0.0,
            expires_in_secs: None,
        }
    }

    pub fn org(mut self, organization_id: Uuid) -> Self {
        self.organization_id = organization_id;
        self
    }

    /// Each job of [`Job::insert_many`] of an organization of its own.
    pub fn own_organizations(mut self) -> Self {
        self.own_organizations = true;
        self
    }

    pub fn email(mut self) -> Self {
        self.channel = "email";
        self
    }

    /// The status; `Processing` also gets a claim token, claimed now unless
    /// [`Job::claimed_ago`] says otherwise.
    pub fn status(mut self, status: JobStatus) -> Self {
        self.status = status;
        if status == JobStatus::Processing && self.claimed_secs_ago.is_none() {
            self.claimed_secs_ago = Some(0.0);
        }
        self
    }

    pub fn attempts(mut self, attempts: i32) -> Self {
        self.attempts = attempts;
        self
    }

    pub fn max_attempts(mut self, max_attempts: i32) -> Self {
        self.max_attempts = max_attempts;
        self
    }

    /// Due this many seconds from now (negative: overdue).
    pub fn due_in(mut self, secs: f64) -> Self {
        self.due_in_secs = secs;
        self
    }

    /// In processing, claimed this many seconds ago (a worker that may be lost).
    pub fn claimed_ago(mut self, secs: f64) -> Self {
        self.status = JobStatus::Processing;
        self.claimed_secs_ago = Some(secs);
        self
    }

    /// Expires this many seconds from now (negative: already expired); default never.
    pub fn expires_in(mut self, secs: f64) -> Self {
        self.expires_in_secs = Some(secs);
        self
    }

    /// Created this many seconds ago (listing order).
    pub fn created_ago(mut self, secs: f64) -> Self {
        self.created_secs_ago = secs;
        self
    }

    /// Last changed this many seconds ago (retention).
    pub fn updated_ago(mut self, secs: f64) -> Self {
        self.updated_secs_ago = secs;
        self
    }

    /// Inserts one job; its id.
    pub async fn insert(&self, client: &Client) -> Uuid {
        self.insert_many(client, 1).await[0]
    }

    /// Inserts `n` such jobs (each its own recipient); their ids, in insertion order.
    pub async fn insert_many(&self, client: &Client, n: i64) -> Vec<Uuid> {
        let payload = match self.channel {
            "sms" => "jsonb_build_object('to', '+1555' || lpad(g::text, 7, '0'), 'message', 'hi')",
            _ => "jsonb_build_object('to', 'user' || g || '@example.com', 'subject', 'Hi', 'text', 'hi')",
        };
        // The request in job_requests as ingest writes it, and where the job stands as the
        // worker leaves it: an open job (pending, failed or processing) its queue row, an
        // ended one its outcome row. Ids are UUIDv7s of the job's creation time, as ingest
        // makes them (a lookup by id reads the days around the id's time).
        // the day's partitions first, as the sweeper would have made them on that day
        client
            .execute(
                "SELECT history_add_days(((now() - make_interval(secs => $1)) AT TIME ZONE 'UTC')::date, 1)",
                &[&self.created_secs_ago],
            )
            .await
            .expect("make the day's partitions");
        let sql = format!(
            "WITH jobs AS (
                 INSERT INTO job_requests
                     (id, organization_id, channel, payload, max_attempts, send_at,
                      created_at, expires_at)
                 SELECT {V7_ID}, CASE WHEN $11 THEN gen_random_uuid() ELSE $1 END, $2,
                        {payload}, $5, now() + make_interval(secs => $6), t.created_at,
                        now() + make_interval(secs => $12)
                 FROM generate_series(1, $10::bigint) AS g,
                      LATERAL (SELECT now() - make_interval(secs => $8)
                                      + g * interval '1 microsecond' AS created_at) AS t
                 ORDER BY g
                 RETURNING id, organization_id, channel, payload, send_at, expires_at,
                           max_attempts, created_at
             ),
             queued AS (
                 INSERT INTO job_queue
                     (id, organization_id, channel, payload, next_attempt_at, expires_at,
                      attempts, max_attempts, tries, claim_token, claimed_at, created_at,
                      updated_at, last_error)
                 SELECT id, organization_id, channel, payload, send_at, expires_at,
                        $4, max_attempts, $4,
                        CASE WHEN $7::float8 IS NULL THEN NULL ELSE gen_random_uuid() END,
                        now() - make_interval(secs => $7), created_at,
                        now() - make_interval(secs => $9),
                        -- job_states: a job whose last attempt failed is `failed`
                        CASE WHEN $3 = 'failed' THEN 'Throttling: factory' END
                 FROM jobs
                 WHERE $3 IN ('pending', 'failed', 'processing')
             ),
             ended AS (
                 INSERT INTO job_outcomes
                     (job_id, organization_id, created_at, status, attempts, max_attempts,
                      tries, next_attempt_at, updated_at)
                 SELECT id, organization_id, created_at, $3::text::job_status, $4,
                        max_attempts, $4, send_at, now() - make_interval(secs => $9)
                 FROM jobs
                 WHERE $3 NOT IN ('pending', 'failed', 'processing')
             )
             SELECT id FROM jobs ORDER BY created_at",
            V7_ID = v7_id("t.created_at"),
        );
        client
            .query(
                &sql,
                &[
                    &self.organization_id,
                    &self.channel,
                    &self.status.as_str(),
                    &self.attempts,
                    &self.max_attempts,
                    &self.due_in_secs,
                    &self.claimed_secs_ago,
                    &self.created_secs_ago,
                    &self.updated_secs_ago,
                    &n,
                    &self.own_organizations,
                    &self.expires_in_secs,
                ],
            )
            .await
            .unwrap_or_else(|e| panic!("factory insert {self:?}: {e:?}"))
            .iter()
            .map(|row| row.get(0))
            .collect()
    }
}

/// A worker's claim taken over, as when its job was swept and claimed again by another
/// invocation: a fresh claim token, so the first holder's completion is fenced.
pub async fn steal_claim(client: &Client, id: Uuid) {
    client
        .execute(
            "UPDATE job_queue SET claim_token = gen_random_uuid(), claimed_at = now()
             WHERE id = $1",
            &[&id],
        )
        .await
        .expect("take the claim over");
}

/// Makes every `failed` job due now (the fault suite's "the provider is back": skip the
/// backoff); how many.
pub async fn make_retries_due(client: &Client) -> u64 {
    client
        .execute(
            "UPDATE job_queue SET next_attempt_at = now()
             WHERE last_error IS NOT NULL AND claim_token IS NULL AND next_attempt_at > now()",
            &[],
        )
        .await
        .expect("move next_attempt_at back")
}

/// Makes the given jobs due now (skip a backoff).
pub async fn make_due_now(client: &Client, ids: &[Uuid]) -> u64 {
    client
        .execute(
            "UPDATE job_queue SET next_attempt_at = now() WHERE id = ANY($1)",
            &[&ids],
        )
        .await
        .expect("make jobs due")
}

/// A SQL expression for a UUIDv7 made at the time `at` (an SQL expression of type
/// timestamptz), as ingest makes job ids: the time's milliseconds, then random bits.
pub fn v7_id(at: &str) -> String {
    format!(
        "(lpad(to_hex(floor(extract(epoch FROM {at}) * 1000)::bigint), 12, '0') || '7' \
          || substr(md5(random()::text), 1, 3) || '8' || substr(md5(random()::text), 1, 15))::uuid"
    )
}
