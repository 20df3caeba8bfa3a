//! Domain vocabulary: channels and job states.

use serde::{Deserialize, Serialize};

/// How a notification travels.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Channel {
    Sms,
    Email,
}

impl Channel {
    pub fn as_str(self) -> &'static str {
        match self {
            Channel::Sms => "sms",
            Channel::Email => "email",
        }
    }

    /// The provider that delivers this channel, as recorded in delivery rows.
    pub fn provider(self) -> &'static str {
        match self {
            Channel::Sms => "sns",
            Channel::Email => "ses",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "sms" => Some(Channel::Sms),
            "email" => Some(Channel::Email),
            _ => None,
        }
    }
}

/// A job's state (the `job_status` enum in PostgreSQL).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum JobStatus {
    /// Accepted, waiting for its first attempt.
    Pending,
    /// Claimed by a worker; an attempt is under way.
    Processing,
    Sent,
    /// An attempt failed; the next one is due at `next_attempt_at`.
    Failed,
    /// No more attempts: a permanent error or the budget is spent.
    Dead,
    /// Cancelled by its organization before it went out; never claimed.
    Cancelled,
    /// Past its expiry before it could be delivered; never sent.
    Expired,
}

impl JobStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            JobStatus::Pending => "pending",
            JobStatus::Processing => "processing",
            JobStatus::Sent => "sent",
            JobStatus::Failed => "failed",
            JobStatus::Dead => "dead",
            JobStatus::Cancelled => "cancelled",
            JobStatus::Expired => "expired",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "pending" => Some(JobStatus::Pending),
            "processing" => Some(JobStatus::Processing),
            "sent" => Some(JobStatus::Sent),
            "failed" => Some(JobStatus::Failed),
            "dead" => Some(JobStatus::Dead),
            "cancelled" => Some(JobStatus::Cancelled),
            "expired" => Some(JobStatus::Expired),
            _ => None,
        }
    }
}
