//! `shared/postgres/schema.sql`, the schema the migrations build, as `pg_dump --schema-only`
//! prints it: a snapshot to read and to review in a diff. It must match what the
//! migrations make of an empty database; after changing a migration, write it again with
//! `make schema`.

use std::path::{Path, PathBuf};
use std::process::Command;

use integration_tests::TestDb;
use notify_postgres::migrate;

/// The snapshot, beside the statements that run against it.
fn snapshot_path() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/postgres/schema.sql")
}

/// The PostgreSQL binaries to use: `PG_BINDIR`, else `pg_config --bindir`, else the highest
/// version under Debian's /usr/lib/postgresql.
fn pg_dump() -> PathBuf {
    if let Ok(dir) = std::env::var("PG_BINDIR") {
        return Path::new(&dir).join("pg_dump");
    }
    if let Ok(out) = Command::new("pg_config").arg("--bindir").output() {
        let dir = String::from_utf8_lossy(&out.stdout).trim().to_owned();
        if out.status.success() && Path::new(&dir).join("pg_dump").exists() {
            return Path::new(&dir).join("pg_dump");
        }
    }
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .filter_map(|entry| {
            let entry = entry.ok()?;
            let version = entry.file_name().to_string_lossy().parse().ok()?;
            let dump = entry.path().join("bin/pg_dump");
            dump.exists().then_some((version, dump))
        })
        .collect();
    versions.sort();
    versions
        .pop()
        .map(|(_, dump)| dump)
        .unwrap_or_else(|| PathBuf::from("pg_dump"))
}

/// The schema of `url`'s database, without what changes from one dump to the next: the
/// history's day partitions (named by the day the migrations ran), the versions in the
/// header, and the `\restrict` keys of recent pg_dump releases.
fn dump(url: &str) -> String {
    let out = Command::new(pg_dump())
        .args([
            "--schema-only",
            "--no-owner",
            "--no-privileges",
            "--exclude-table=*_2[0-9][0-9][0-9][0-9][0-9][0-9][0-9]",
            "--dbname",
            url,
        ])
        .output()
        .expect("run pg_dump (set PG_BINDIR to PostgreSQL's binaries)");
    assert!(
        out.status.success(),
        "pg_dump failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .filter(|line| {
            !line.starts_with("-- Dumped ")
                && !line.starts_with("\\restrict")
                && !line.starts_with("\\unrestrict")
        })
        .map(|line| format!("{line}\n"))
        .collect()
}

#[tokio::test]
async fn the_schema_snapshot_is_what_the_migrations_build() {
    let db = TestDb::empty().await;
    let mut client = db.client().await;
    migrate::run(&mut client).await.unwrap();
    let major: String = client
        .query_one("SELECT current_setting('server_version_num')", &[])
        .await
        .unwrap()
        .get(0);
    let major = &major[..major.len() - 4];
    let server = std::env::var("DATABASE_URL").expect("DATABASE_URL");
    let url = notify_postgres::db::url_with_dbname(&server, &db.name).expect("a URL");
    let header = format!(
        "-- The schema the migrations build (PostgreSQL {major}, pg_dump --schema-only, the day\n\
         -- partitions left out). Written by `make schema`; a test compares it with migrations/.\n"
    );
    let current = header + &dump(&url);
    let path = snapshot_path();
    if std::env::var_os("WRITE_SCHEMA").is_some() {
        std::fs::write(&path, &current).unwrap();
    }
    let committed = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e}: run `make schema`", path.display()));
    let made_by = committed.lines().next().unwrap_or_default();
    if !made_by.contains(&format!("(PostgreSQL {major},")) {
        // pg_dump prints each major version its own way: compare like with like only
        eprintln!(
            "schema.sql was written by another PostgreSQL than this server's {major} \
             ({made_by:?}): not compared"
        );
        return;
    }
    if committed != current {
        let first = committed
            .lines()
            .zip(current.lines())
            .position(|(a, b)| a != b)
            .unwrap_or(committed.lines().count().min(current.lines().count()));
        panic!(
            "shared/postgres/schema.sql differs from what migrations/ build, from line {}:\n\
             committed: {:?}\nmigrated:  {:?}\nrun `make schema` and review the diff",
            first + 1,
            committed.lines().nth(first),
            current.lines().nth(first)
        );
    }
}
