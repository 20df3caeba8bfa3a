//! One call inserts a job in any state, as River's `testfactory.Job` does, through the
//! store's statements for tests (`notify_postgres::testing`): status, attempts,
//! budget, organization, due in (or ago), claimed so long ago, created or updated so long ago.
//! Tests arrange rows with it instead of rewriting them with ad-hoc UPDATEs; together with the
//! store's `now` parameter, time in a test is set, never waited for.
//!
//! ```ignore
//! let id = Job::new().status(JobStatus::Failed).attempts(2).due_in(-1).insert(&client).await;
//! ```

use chrono::{TimeDelta, Utc};
use notify_core::domain::{Channel, JobStatus};
use notify_postgres::testing::{self, TestJob};
use serde_json::json;
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
    last_error: Option<String>,
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
            last_error: None,
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

    /// The last attempt's error (`Code: message`): what ended a dead job, say.
    pub fn last_error(mut self, error: &str) -> Self {
        self.last_error = Some(error.to_owned());
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

    /// `n` such jobs (each its own recipient), created a microsecond apart in this order.
    pub fn jobs(&self, n: i64) -> Vec<TestJob> {
        let now = Utc::now();
        let secs = |s: f64| TimeDelta::microseconds((s * 1e6) as i64);
        (1..=n)
            .map(|g| {
                let (channel, payload) = match self.channel {
                    "sms" => (
                        Channel::Sms,
                        json!({"to": format!("+1555{g:07}"), "message": "hi"}),
                    ),
                    _ => (
                        Channel::Email,
                        json!({"to": format!("user{g}@example.com"), "subject": "Hi", "text": "hi"}),
                    ),
                };
                TestJob {
                    organization_id: if self.own_organizations {
                        Uuid::new_v4()
                    } else {
                        self.organization_id
                    },
                    channel,
                    payload,
                    status: self.status,
                    attempts: self.attempts,
                    max_attempts: self.max_attempts,
                    next_attempt_at: now + secs(self.due_in_secs),
                    claimed_at: self.claimed_secs_ago.map(|ago| now - secs(ago)),
                    created_at: now - secs(self.created_secs_ago) + TimeDelta::microseconds(g),
                    updated_at: now - secs(self.updated_secs_ago),
                    expires_at: self.expires_in_secs.map(|s| now + secs(s)),
                    last_error: self.last_error.clone(),
                }
            })
            .collect()
    }

    /// Inserts `n` such jobs (each its own recipient); their ids, in insertion order.
    pub async fn insert_many(&self, client: &Client, n: i64) -> Vec<Uuid> {
        testing::insert_jobs(client, &self.jobs(n))
            .await
            .unwrap_or_else(|e| panic!("factory insert {self:?}: {e:?}"))
    }
}

/// A worker's claim taken over, as when its job was swept and claimed again by another
/// invocation: a fresh claim token, so the first holder's completion is fenced.
pub async fn steal_claim(client: &Client, id: Uuid) {
    assert!(
        testing::steal_claim(client, id)
            .await
            .expect("take the claim over"),
        "{id} is not queued"
    );
}

/// Makes every `failed` job due now (the fault suite's "the provider is back": skip the
/// backoff); how many.
pub async fn make_retries_due(client: &Client) -> u64 {
    let waiting: Vec<Uuid> = client
        .query(
            "SELECT id FROM job_states WHERE status = 'failed' AND next_attempt_at > now()",
            &[],
        )
        .await
        .expect("the failed jobs")
        .iter()
        .map(|row| row.get(0))
        .collect();
    make_due_now(client, &waiting).await
}

/// Makes the given jobs due now (skip a backoff).
pub async fn make_due_now(client: &Client, ids: &[Uuid]) -> u64 {
    testing::make_due(client, ids, Utc::now())
        .await
        .expect("make jobs due")
}
