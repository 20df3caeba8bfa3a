//! `make faults`: the fault suite. Runs the real function binaries (target/debug/{ingest,
//! worker,sweeper}) through a Lambda Runtime API emulator against a real PostgreSQL and the
//! AWS stand-in (moto) behind a delaying proxy, walks the scenario table
//! (`integration_tests::faults::scenarios::ALL`, one file per scenario) and prints one table
//! row per scenario; exits non-zero when any check failed.
//!
//! Started by `tests/scripts/faults.sh` (which provides PostgreSQL and moto). With no
//! argument it runs the full suite, then the mutants (scenarios against a deliberately broken
//! service, which the checks must catch), which is what CI runs; `--quick` is a shorter
//! version for a local check, `--only 1,3` runs some scenarios (numbered as in the table) and
//! no mutant, `--no-mutants` skips them.

use std::time::{Duration, Instant};

use integration_tests::faults::scenarios::{self, ALL};
use integration_tests::faults::{Row, Suite, table};

struct Options {
    quick: bool,
    only: Option<Vec<usize>>,
    /// Run the mutants after the scenarios: a full run does, `--only` and `--no-mutants` not.
    mutants: bool,
}

impl Options {
    fn from_args() -> Self {
        let args: Vec<String> = std::env::args().skip(1).collect();
        let only = args
            .iter()
            .position(|a| a == "--only")
            .and_then(|i| args.get(i + 1))
            .map(|v| v.split(',').filter_map(|n| n.trim().parse().ok()).collect());
        Self {
            quick: args.iter().any(|a| a == "--quick"),
            mutants: only.is_none() && !args.iter().any(|a| a == "--no-mutants"),
            only,
        }
    }

    fn wanted(&self, number: usize) -> bool {
        self.only.as_ref().is_none_or(|o| o.contains(&number))
    }
}

#[tokio::main]
async fn main() {
    let options = Options::from_args();
    let mut suite = Suite::start(options.quick).await;
    println!(
        "fault suite ({}): binaries in {}, logs in {}",
        if options.quick { "quick" } else { "full" },
        suite.launcher.bin_dir.display(),
        suite.launcher.log_dir.display()
    );
    let limit = Duration::from_secs(if options.quick { 240 } else { 420 });
    let started = Instant::now();
    let mut rows = Vec::new();
    for (number, scenario) in (1..).zip(ALL) {
        if options.wanted(number) {
            rows.push(scenarios::run(number, scenario, &mut suite, limit).await);
        }
    }
    let mut survived = Vec::new();
    if options.mutants {
        for mutant in scenarios::MUTANTS {
            let (_, caught) = scenarios::run_mutant(mutant, &mut suite, limit).await;
            if !caught {
                survived.push(mutant.title);
            }
        }
    }
    let failed = report(&rows, started);
    if options.mutants {
        println!(
            "mutants: {} of {} caught{}",
            scenarios::MUTANTS.len() - survived.len(),
            scenarios::MUTANTS.len(),
            survived
                .iter()
                .map(|t| format!("\n  NOT CAUGHT: {t}"))
                .collect::<String>()
        );
    }
    std::process::exit(if failed == 0 && survived.is_empty() {
        0
    } else {
        1
    });
}

/// Prints the table and every failed check, writes the table to `FAULTS_TABLE`; how many
/// checks failed.
fn report(rows: &[Row], started: Instant) -> usize {
    println!("\n{}", table(rows));
    let failures: Vec<(&str, &str)> = rows
        .iter()
        .flat_map(|r| r.failures.iter().map(|f| (r.scenario.as_str(), f.as_str())))
        .collect();
    println!(
        "{} scenario(s) in {:.0} s; {} failed check(s)",
        rows.len(),
        started.elapsed().as_secs_f64(),
        failures.len()
    );
    for (scenario, f) in &failures {
        println!("  FAILED {scenario}: {f}");
    }
    if let Ok(path) = std::env::var("FAULTS_TABLE") {
        let _ = std::fs::write(path, table(rows));
    }
    failures.len()
}
