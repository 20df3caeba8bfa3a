//! The scenarios, one file each, in the order the suite runs them and numbers them
//! (`--only 1,3`). Each exposes a [`Scenario`]: its title and a `run` that returns its row.
//! [`fleet`] holds what the worker fleet's scenarios share.

use std::time::{Duration, Instant};

use futures::future::LocalBoxFuture;

use super::{Row, Suite};

pub mod account;
pub mod bus;
pub mod deadline;
pub mod dispatch;
pub mod fan_out;
pub mod fleet;
pub mod hostile;
pub mod kill;
pub mod linger;
pub mod load;
pub mod lost_wakes;
pub mod outage;
pub mod pg_restart;
pub mod sweep;
pub mod tenants;

/// A random number, for the moment of a kill.
fn random_u64() -> u64 {
    (uuid::Uuid::new_v4().as_u128() >> 64) as u64
}

/// One scenario of the table.
pub struct Scenario {
    /// The table's first column, after the scenario's number.
    pub title: &'static str,
    /// Runs the scenario; its row of the table (the suite labels it).
    pub run: for<'a> fn(&'a mut Suite) -> LocalBoxFuture<'a, Row>,
}

/// Every scenario, in order. The last one searches the logs of all the others, so it stays
/// last.
pub const ALL: &[Scenario] = &[
    kill::SCENARIO,
    pg_restart::SCENARIO,
    outage::SCENARIO,
    load::SCENARIO,
    hostile::SCENARIO,
    sweep::SCENARIO,
    account::SCENARIO,
    deadline::SCENARIO,
    dispatch::SCENARIO,
    linger::SCENARIO,
    lost_wakes::SCENARIO,
    fan_out::SCENARIO,
    bus::SCENARIO,
    tenants::SCENARIO,
];

/// A scenario run against a deliberately broken service (a mutant): the suite's checks must
/// catch it. It is caught when its row fails the check whose words start with `caught_by`;
/// a mutant every check passes means the checks could pass the bug it plants.
///
/// The bug is a misconfiguration the scenario makes (`patch` None), or a change to the code:
/// `patch` names a diff under tests/mutants/ (without `.patch`), and the scenario runs the
/// binaries tests/scripts/faults.sh built from a copy of the checkout with that diff applied,
/// `{mutant_dir}/{patch}/{binary}`: the worker, and those the patch names on its
/// `Binaries:` line (ingest, say).
pub struct Mutant {
    pub title: &'static str,
    pub patch: Option<&'static str>,
    pub run: for<'a> fn(&'a mut Suite) -> LocalBoxFuture<'a, Row>,
    pub caught_by: &'static str,
}

/// Every mutant, run after the scenarios.
pub const MUTANTS: &[Mutant] = &[
    sweep::SHORT_WINDOW,
    sweep::UNFENCED,
    kill::RECORD_AT_BATCH_END,
    dispatch::RECORD_BEFORE_SEND,
    linger::LEAVE_AFTER_LAST_CLAIM,
    lost_wakes::WAITS_FOR_LAMBDA,
    fan_out::JOIN_PAST_THE_MAX,
    bus::CURSOR_BEFORE_PUBLISH,
];

/// Runs one mutant within `limit`: its row, labelled, whose checks say whether it was caught
/// (see [`Mutant`]).
pub async fn run_mutant(mutant: &Mutant, suite: &mut Suite, limit: Duration) -> (Row, bool) {
    let label = format!("mutant: {}", mutant.title);
    println!("\n== {label} (its checks must fail)");
    let started = Instant::now();
    let bins = mutant
        .patch
        .map(|patch| suite.launcher.mutant_dir.join(patch));
    if let Some(dir) = bins.as_ref().filter(|dir| !dir.is_dir()) {
        println!(
            "    NOT RUN: {} is missing (tests/scripts/faults.sh builds it)",
            dir.display()
        );
        return (Row::default(), false);
    }
    suite.launcher.mutant_bin_dir = bins;
    // a mutant that overran its limit failed no check: not caught
    let row = tokio::time::timeout(limit, (mutant.run)(suite)).await;
    suite.launcher.mutant_bin_dir = None;
    let mut row = row.unwrap_or_default();
    row.scenario = label;
    let caught = row.failures.iter().any(|f| f.starts_with(mutant.caught_by));
    println!(
        "    {} ({:.1} s)",
        if caught {
            format!("caught: {}", mutant.caught_by)
        } else {
            format!(
                "NOT CAUGHT: no failed check starts with {:?}",
                mutant.caught_by
            )
        },
        started.elapsed().as_secs_f64()
    );
    (row, caught)
}

/// `"{number}. {title}"`, the row's label.
pub fn label(number: usize, scenario: &Scenario) -> String {
    format!("{number}. {}", scenario.title)
}

/// Runs one scenario within `limit`; its labelled row (a failed one when it overran).
pub async fn run(number: usize, scenario: &Scenario, suite: &mut Suite, limit: Duration) -> Row {
    let label = label(number, scenario);
    println!("\n== {label}");
    let started = Instant::now();
    let mut row = match tokio::time::timeout(limit, (scenario.run)(suite)).await {
        Ok(row) => row,
        Err(_) => {
            let mut row = Row::default();
            row.check(false, format!("finished within {} s", limit.as_secs()));
            row
        }
    };
    row.scenario = label;
    println!("    ({:.1} s)", started.elapsed().as_secs_f64());
    row
}
