//! Lambda's timeout, mid-completion: a worker whose database answers too slowly is killed at
//! its invocation's deadline, as Lambda kills an environment that outlives its timeout, with
//! the results of the calls it made still on their way to PostgreSQL.
//!
//! The worker reaches PostgreSQL through a delaying proxy of its own. Each round invokes it
//! (timeout [`WORKER_TIMEOUT`], batches of 16, 4 calls in flight, each provider call about
//! 600 ms), and 1.5 s in, while it records results as they arrive, slows its database to 5 s
//! each way: the recording outlives the deadline, and the emulator kills the process there
//! and starts a fresh one for the next round, as Lambda does. Then sweeps and healthy runs
//! until every job is final. Nothing accepted may be lost or buried, every duplicate send is
//! given to a timed-out invocation that held its job (or to its own call that timed out), and
//! no job is claimed while a live invocation still holds it.

use std::net::SocketAddr;
use std::time::Duration;

use super::Scenario;
use crate::TestDb;
use crate::faults::api::SCHEDULED_EVENT;
use crate::faults::endgame::{drain, settle};
use crate::faults::process::Function;
use crate::faults::runtime::Ending;
use crate::faults::suite::WORKER_TIMEOUT;
use crate::faults::{Row, Suite, claims, db, sends};
use crate::proxy::Proxy;
use crate::stand_in::Recipients;

pub const SCENARIO: Scenario = Scenario {
    title: "worker killed at its deadline, mid-completion",
    run: |s| Box::pin(run(s)),
};

const PROVIDER_DELAY: Duration = Duration::from_millis(300);
/// When the database slows down, into each invocation: its first results are being recorded.
const SLOW_AFTER: Duration = Duration::from_millis(1500);
/// Each way, per chunk: a recording then takes 10 s, past the 6 s deadline.
const SLOW_DATABASE: Duration = Duration::from_secs(5);

async fn run(s: &mut Suite) -> Row {
    let mut row = Row::default();
    let rounds = if s.quick { 3 } else { 6 };
    let db = TestDb::new().await;
    let client = db.client().await;
    claims::install(&client).await;
    let recipients = Recipients::new();
    let accepted = s.accept_jobs(&db, &recipients, rounds * 40, &mut row).await;
    let url = s.url(&db);
    let Some(upstream) = postgres_address(&url) else {
        row.check(false, format!("a host:port in DATABASE_URL ({url})"));
        return row;
    };
    let db_proxy = Proxy::start(upstream).await;
    let mut env = s.worker_env(&db, 16, 4);
    for (k, v) in env.iter_mut() {
        if *k == "DATABASE_URL" {
            *v = v.replacen(
                &upstream.to_string(),
                &format!("127.0.0.1:{}", db_proxy.port),
                1,
            );
        }
    }
    let worker = Function::start(&s.launcher, "worker", env, 1).await;
    s.proxy.set_delay(PROVIDER_DELAY);
    row.note(format!(
        "provider calls delayed {} ms each way; {} ms into each invocation the worker's \
         database is slowed to {} s each way; deadline {} s",
        PROVIDER_DELAY.as_millis(),
        SLOW_AFTER.as_millis(),
        SLOW_DATABASE.as_secs(),
        WORKER_TIMEOUT.as_secs()
    ));
    let mut answered = 0;
    for _ in 0..rounds {
        db_proxy.set_delay(Duration::ZERO);
        let call = worker.call(SCHEDULED_EVENT.as_bytes(), WORKER_TIMEOUT);
        let slow = async {
            tokio::time::sleep(SLOW_AFTER).await;
            db_proxy.set_delay(SLOW_DATABASE);
        };
        let (outcome, ()) = tokio::join!(call, slow);
        answered += u64::from(outcome.is_some());
        row.runs += 1;
    }
    db_proxy.set_delay(Duration::ZERO);
    s.proxy.set_delay(Duration::from_millis(5));
    let spans = s.launcher.ledger.spans();
    let timed_out = spans
        .iter()
        .filter(|sp| matches!(sp.ended, Some((_, Ending::TimedOut))))
        .count();
    row.check(
        timed_out == rounds && answered == 0,
        format!(
            "every round outlived its deadline and was killed there: {timed_out} of {rounds} \
             (answered in time: {answered}); {} processes started for them",
            worker.spawned()
        ),
    );
    let held = claims::held_at_kills(&claims::load(&client).await, &spans);
    let held_jobs: usize = held.values().map(Vec::len).sum();
    row.check(
        held_jobs > 0,
        format!("jobs the timed-out invocations held when they were killed: {held_jobs}"),
    );
    let sweeper = s.sweeper(&db).await;
    let healthy = s.worker(&db, 1).await;
    drain(&client, &healthy, &sweeper, &mut row).await;
    settle(
        &client,
        &s.launcher.ledger,
        &mut row,
        &accepted,
        &recipients,
    )
    .await;
    let lost = db::lost_attempts(&client).await;
    row.check(
        lost > 0,
        format!("attempts the sweeper recorded as lost: {lost}"),
    );
    let received = sends::received(|to| recipients.owns(to)).await;
    let (duplicates, unanswered) = sends::duplicates_by_job(&client, &received).await;
    let shares = claims::attribute(&duplicates, &unanswered, &held);
    row.check(
        shares.unexplained.is_empty(),
        format!(
            "duplicate sends, each given to a timed-out invocation that held its job or to its \
             own unanswered call: {} to the timeouts, {} to unanswered calls, {} to nothing",
            shares.per_kill.values().sum::<u64>(),
            shares.by_unanswered,
            shares.unexplained.iter().map(|(_, n)| n).sum::<u64>()
        ),
    );
    row
}

/// The `host:port` of a `postgres://` URL.
fn postgres_address(url: &str) -> Option<SocketAddr> {
    let rest = url.split_once("://")?.1;
    let authority = rest.split(['/', '?']).next()?;
    let host_port = authority.rsplit_once('@').map_or(authority, |(_, hp)| hp);
    host_port.parse().ok()
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_address_is_read_from_the_url() {
        assert_eq!(
            super::postgres_address("postgres://postgres@127.0.0.1:5433/db?sslmode=disable"),
            Some("127.0.0.1:5433".parse().unwrap())
        );
        assert_eq!(super::postgres_address("postgres://localhost/db"), None);
    }
}
