//! Domain vocabulary: channels, job states and provider feedback.

pub mod feedback;
pub mod status_event;

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

/// A job's lane (the `job_priority` enum in PostgreSQL): the claim takes due `high` jobs
/// first, then `normal`, then `low`, each oldest first. The caller chooses it per request;
/// `normal` when it does not.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Priority {
    /// One-time codes, logins: what a person is waiting for.
    High,
    #[default]
    Normal,
    /// Bulk sends that may wait behind the others.
    Low,
}

impl Priority {
    /// Every priority, in the order the claim takes them (for messages that list them).
    pub const ALL: [Priority; 3] = [Priority::High, Priority::Normal, Priority::Low];

    pub fn as_str(self) -> &'static str {
        match self {
            Priority::High => "high",
            Priority::Normal => "normal",
            Priority::Low => "low",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "high" => Some(Priority::High),
            "normal" => Some(Priority::Normal),
            "low" => Some(Priority::Low),
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
    /// Sent, and the provider confirmed delivery.
    Delivered,
    /// Sent, and the provider reported it undeliverable (a permanent bounce, a reject, an
    /// SMS carrier failure).
    Bounced,
}

impl JobStatus {
    /// Every status, in the order a job may pass through them (for messages that list them).
    pub const ALL: [JobStatus; 9] = [
        JobStatus::Pending,
        JobStatus::Processing,
        JobStatus::Sent,
        JobStatus::Failed,
        JobStatus::Dead,
        JobStatus::Cancelled,
        JobStatus::Expired,
        JobStatus::Delivered,
        JobStatus::Bounced,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            JobStatus::Pending => "pending",
            JobStatus::Processing => "processing",
            JobStatus::Sent => "sent",
            JobStatus::Failed => "failed",
            JobStatus::Dead => "dead",
            JobStatus::Cancelled => "cancelled",
            JobStatus::Expired => "expired",
            JobStatus::Delivered => "delivered",
            JobStatus::Bounced => "bounced",
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
            "delivered" => Some(JobStatus::Delivered),
            "bounced" => Some(JobStatus::Bounced),
            _ => None,
        }
    }
}

/// A recipient as the suppression list keys it, and the one place a recipient is normalised:
/// ingest stores `to` this way, and the claim, feedback and the suppression routes compare
/// what it gives as it is (no statement folds case again). An email address in ASCII lower
/// case (validated addresses are 7-bit ASCII, so there is one way to fold them, whatever the
/// database's locale), a phone number as it is (E.164 has no case). Validated values have no
/// surrounding space; trimming keeps any input comparable.
pub fn normalize_recipient(channel: Channel, to: &str) -> String {
    let to = to.trim();
    match channel {
        Channel::Email => to.to_ascii_lowercase(),
        Channel::Sms => to.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_status_reads_back_from_its_name() {
        for status in JobStatus::ALL {
            assert_eq!(JobStatus::parse(status.as_str()), Some(status));
        }
    }

    #[test]
    fn every_priority_reads_back_from_its_name_and_serializes_as_it() {
        for priority in Priority::ALL {
            assert_eq!(Priority::parse(priority.as_str()), Some(priority));
            assert_eq!(
                serde_json::to_value(priority).unwrap(),
                priority.as_str(),
                "serde and as_str agree"
            );
        }
        assert_eq!(Priority::default(), Priority::Normal);
        assert_eq!(Priority::parse("HIGH"), None);
    }

    #[test]
    fn recipients_compare_as_the_database_compares_them() {
        assert_eq!(
            normalize_recipient(Channel::Email, " User@Example.COM"),
            "user@example.com"
        );
        assert_eq!(
            normalize_recipient(Channel::Sms, "+15555550100"),
            "+15555550100"
        );
    }
}
