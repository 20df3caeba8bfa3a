//! The worker fleet over PostgreSQL: `worker_slots` and `worker_fleet`
//! (`migrations/0008_worker_fleet.sql`).

use std::time::Duration;

use async_trait::async_trait;

use super::PgStore;
use crate::sql;
use notify_core::fleet::{Census, FleetStore, Grow, Join, Leave, Member, TakeCensus, TakeWake};
use notify_core::store::StoreError;

/// `u32` → the `int4` PostgreSQL compares slots with.
fn int4(n: u32) -> i32 {
    i32::try_from(n).unwrap_or(i32::MAX)
}

fn secs(d: Duration) -> f64 {
    d.as_secs_f64()
}

#[async_trait]
impl FleetStore for PgStore {
    async fn wake(&self, p: TakeWake) -> Result<Option<uuid::Uuid>, StoreError> {
        let row = self
            .query_opt(
                &sql::WAKE_WORKER,
                &[&secs(p.join_within), &p.only_if_due, &p.now],
            )
            .await?;
        Ok(row.map(|row| row.lease))
    }

    async fn join(&self, p: Join) -> Result<Option<Member>, StoreError> {
        let row = self
            .query_opt(
                &sql::JOIN_FLEET,
                &[&p.lease, &p.until, &int4(p.max), &p.now],
            )
            .await?;
        Ok(row.map(|row| Member {
            slot: row.slot,
            lease: row.lease,
        }))
    }

    async fn leave(&self, p: Leave) -> Result<(), StoreError> {
        self.query(
            &sql::LEAVE_FLEET,
            &[&p.member.slot, &p.member.lease, &p.now],
        )
        .await?;
        Ok(())
    }

    async fn census(&self, p: TakeCensus) -> Result<Option<Census>, StoreError> {
        let count_up_to = i64::try_from(p.count_up_to).unwrap_or(i64::MAX);
        let row = self
            .query_one(&sql::FLEET_CENSUS, &[&secs(p.every), &count_up_to, &p.now])
            .await?;
        Ok(row.turn.then(|| Census {
            held: u64::try_from(row.held).unwrap_or(0),
            due: u64::try_from(row.due).unwrap_or(0),
        }))
    }

    async fn grow(&self, p: Grow) -> Result<Vec<uuid::Uuid>, StoreError> {
        let rows = self
            .query(
                &sql::GROW_FLEET,
                &[
                    &i64::from(p.count),
                    &int4(p.max),
                    &secs(p.join_within),
                    &p.now,
                ],
            )
            .await?;
        Ok(rows.into_iter().map(|row| row.lease).collect())
    }
}
