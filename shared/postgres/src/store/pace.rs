//! The pace's shared state over PostgreSQL: `send_pace`, one row per channel
//! (`migrations/0007_send_pace.sql`).

use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};

use super::PgStore;
use crate::sql;
use notify_core::domain::Channel;
use notify_core::pace::{HoldChannel, PaceStore, Slots, TakeSlots};
use notify_core::store::{Now, StoreError};

/// A number of seconds from the database, as a duration (0 for anything not positive).
fn secs(value: f64) -> Duration {
    Duration::try_from_secs_f64(value.max(0.0)).unwrap_or(Duration::MAX)
}

#[async_trait]
impl PaceStore for PgStore {
    async fn take_send_slots(&self, q: TakeSlots) -> Result<Slots, StoreError> {
        let slots = i32::try_from(q.slots.max(1)).unwrap_or(i32::MAX);
        let row = self
            .query_one(
                &sql::TAKE_SEND_SLOTS,
                &[
                    &q.channel.as_str(),
                    &slots,
                    &q.rate,
                    &q.max_wait.as_secs_f64(),
                    &q.now,
                ],
            )
            .await?;
        let now = q.now.unwrap_or_else(Utc::now);
        Ok(Slots {
            wait: row.wait_secs.map(secs),
            rate: row.rate,
            held_until: Some(row.held_until).filter(|until| *until > now),
            next_in: secs(row.next_in_secs),
        })
    }

    async fn slow_send_pace(&self, channel: Channel, now: Now) -> Result<Option<f64>, StoreError> {
        let row = self
            .query_opt(&sql::SLOW_SEND_PACE, &[&channel.as_str(), &now])
            .await?;
        Ok(row.map(|row| row.factor))
    }

    async fn hold_channel(&self, q: HoldChannel<'_>) -> Result<u64, StoreError> {
        let until: DateTime<Utc> = q.until;
        let moved = self
            .query(
                &sql::HOLD_CHANNEL,
                &[
                    &q.channel.as_str(),
                    &until,
                    &q.reason,
                    &q.move_limit,
                    &q.now,
                ],
            )
            .await?;
        Ok(moved.len() as u64)
    }
}
