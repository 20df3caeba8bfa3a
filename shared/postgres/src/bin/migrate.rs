//! `make migrate`: applies the embedded migrations to `DATABASE_URL`.

use notify_core::error::report;
use notify_postgres::{db::DbConfig, migrate};

#[tokio::main(flavor = "current_thread")]
async fn main() -> std::process::ExitCode {
    match run().await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("migrate: {}", report(err.as_ref()));
            std::process::ExitCode::FAILURE
        }
    }
}

async fn run() -> Result<(), Box<dyn std::error::Error>> {
    let mut client = DbConfig::from_env().await?.connect().await?;
    let done = migrate::run(&mut client).await?;
    for name in &done.applied {
        println!("applied {name}");
    }
    println!(
        "migrations: {} applied now, {} already applied",
        done.applied.len(),
        done.already_applied
    );
    Ok(())
}
