//! `make queue`: the queue of `DATABASE_URL`'s database as an operator reads it (by state and
//! organization, the oldest due job, the last day's dead jobs by error code, the suppression
//! lists). `QUEUE_TOP` organizations and codes at most (20).

use std::time::Duration;

use notify_core::error::report;
use notify_postgres::{PgStore, db::DbConfig};

#[tokio::main(flavor = "current_thread")]
async fn main() -> std::process::ExitCode {
    match run().await {
        Ok(text) => {
            print!("{text}");
            std::process::ExitCode::SUCCESS
        }
        Err(err) => {
            eprintln!("queue: {}", report(err.as_ref()));
            std::process::ExitCode::FAILURE
        }
    }
}

async fn run() -> Result<String, Box<dyn std::error::Error>> {
    let top = std::env::var("QUEUE_TOP").map_or(Ok(20), |v| v.parse())?;
    let store = PgStore::new(DbConfig::from_env().await?);
    let day = Duration::from_secs(24 * 3600);
    Ok(store.queue_report(None, day, top).await?.to_string())
}
