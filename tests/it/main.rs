//! The integration tests: one binary, a module per area, against a real PostgreSQL (and the
//! AWS stand-in, and `cargo lambda watch` where a test says so). `make test` starts them.
//! The fault suite (`make faults`) and the benchmark (`make bench`) have binaries of their own.

mod architecture;
mod batch;
mod claim_engine;
mod compose;
mod connect;
mod database;
mod deploy;
mod event_bus;
mod event_stream;
mod events_watch;
mod feedback;
mod fleet;
mod ingest_api;
mod ingest_property;
mod migrations;
mod migrations_custom_resource;
mod online_migration;
mod operations;
mod pace;
mod prepared;
mod rate_limits;
mod readme;
mod schema;
mod sdk_retries;
mod ses_quota;
mod statements;
mod status_events;
mod suppressions;
mod sweeper;
mod template;
mod token;
mod wake;
mod watch;
mod worker_faults;
mod worker_recording;
mod worker_stand_in;
