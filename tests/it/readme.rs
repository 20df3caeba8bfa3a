//! The manual as a newcomer reads it: its local commands, taken from the `sh` blocks of
//! README.md and docs/*.md (`readme::manual_examples`) and run as written (`bash -c`) against a
//! real `make watch` — the README's Quick start's three shells, then docs/api.md's curl
//! examples and the worker, sweeper and feedback invocations — each answer compared with the
//! one the page shows under it (status line, headers, JSON shape; see
//! `integration_tests::readme` for what `…` leaves open). An edit that breaks a command, or an
//! answer that no longer looks as shown, fails here, naming the page and line.
//!
//! What is adapted, and only that: `localhost:9000` and `--invoke-port 9000` become a free port
//! (`make …` gets it as `WATCH_PORT`), id placeholders (`5b0f6c0e-…`) become the ids the
//! earlier answers showed, `make watch` gets a fresh empty database (its functions migrate it
//! at cold start, as on a fresh machine) and starts its own stand-in. The API examples run
//! in the order their answers need: creations, the worker, reads, changes, feedback, the
//! sweeper; the dead job the listing shows is put in by SQL (locally nothing goes dead: the
//! stand-in accepts every number ingest accepts). Feedback's answer is compared number for
//! number too: its fixture names a message id no attempt carries, so on this fresh database the
//! answer is what the page shows, exactly.

use std::time::Duration;

use integration_tests::TestDb;
use integration_tests::readme::{self, Bindings, Example};
use integration_tests::watch::{self, Watch};
use notify_core::domain::{Channel, JobStatus};
use serde_json::Value;
use uuid::Uuid;

/// The number the manual's listing shows as a dead job's recipient.
const DEAD_TO: &str = "+15555550199";

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Kind {
    Watch,
    Create,
    Worker,
    Read,
    Change,
    Feedback,
    Sweeper,
    Token,
}

fn kind(e: &Example) -> Kind {
    let c = &e.command;
    if c.starts_with("make watch") {
        Kind::Watch
    } else if c.contains("invoke/worker") || c.contains(" invoke worker") {
        Kind::Worker
    } else if c.contains("invoke/sweeper") || c.contains(" invoke sweeper") {
        Kind::Sweeper
    } else if c.contains("invoke/feedback") || c.contains(" invoke feedback") {
        Kind::Feedback
    } else if c.contains("invoke/token") || c.contains(" invoke token") {
        Kind::Token
    } else if c.starts_with("curl") && (c.contains("/requeue") || c.contains("/cancel")) {
        Kind::Change
    } else if c.starts_with("curl") && c.contains(" -d ") {
        Kind::Create
    } else if c.starts_with("curl") && !c.contains("-X") {
        Kind::Read
    } else {
        panic!(
            "{} ({}): a local command this test does not know how to run; teach \
             tests/it/readme.rs about it:\n{c}",
            e.place(),
            e.section
        )
    }
}

/// What a command printed, and the HTTP status when it was a curl.
struct Ran {
    stdout: String,
    stderr: String,
    http_status: Option<u16>,
}

const STATUS_MARK: &str = "@@readme-http-status ";

async fn run(e: &Example, command: &str, port: u16, timeout: Duration) -> Ran {
    // curl as written, plus its status on stderr (what the user sees on stdout is unchanged)
    let script = format!(
        "curl() {{ command curl --max-time {} -w '%{{stderr}}\\n{STATUS_MARK}%{{http_code}}\\n' \"$@\"; }}\n{command}",
        timeout.as_secs()
    );
    let mut cmd = tokio::process::Command::new("bash");
    for var in watch::OUTER_MAKE {
        // as from a newcomer's shell, not from inside `make test`
        cmd.env_remove(var);
    }
    cmd.arg("-c")
        .arg(script)
        .current_dir(watch::root())
        .env("WATCH_PORT", port.to_string())
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true);
    let output = tokio::time::timeout(timeout + Duration::from_secs(30), cmd.output())
        .await
        .unwrap_or_else(|_| panic!("{}: no answer within {timeout:?}", e.place()))
        .expect("run bash");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(
        output.status.success(),
        "{} ({}) failed ({}):\n{command}\nstdout: {stdout}\nstderr: {stderr}",
        e.place(),
        e.section,
        output.status
    );
    let http_status = stderr
        .lines()
        .find_map(|l| l.strip_prefix(STATUS_MARK))
        .and_then(|s| s.trim().parse().ok());
    Ran {
        stdout,
        stderr,
        http_status,
    }
}

/// Runs one example and compares its answer with the page's.
async fn check(e: &Example, port: u16, bindings: &mut Bindings, timeout: Duration) -> Value {
    match try_check(e, port, bindings, timeout).await {
        Ok(actual) => actual,
        Err(why) => panic!("{why}"),
    }
}

/// [`check`] again until it answers as shown, for up to `within`: a read of what the worker
/// does on its own once woken (the page says "a second later").
async fn check_eventually(
    e: &Example,
    port: u16,
    bindings: &mut Bindings,
    within: Duration,
) -> Value {
    let until = std::time::Instant::now() + within;
    loop {
        let mut attempt = bindings.clone();
        match try_check(e, port, &mut attempt, watch::CALL).await {
            Ok(actual) => {
                *bindings = attempt;
                return actual;
            }
            Err(why) if std::time::Instant::now() > until => panic!("{why}"),
            Err(_) => tokio::time::sleep(Duration::from_millis(250)).await,
        }
    }
}

/// [`check`], with a mismatch as an error instead of a panic (a command that fails to run
/// still panics).
async fn try_check(
    e: &Example,
    port: u16,
    bindings: &mut Bindings,
    timeout: Duration,
) -> Result<Value, String> {
    let command = readme::substitute(&e.command, bindings)
        .unwrap_or_else(|err| panic!("{}: {err}", e.place()))
        .replace("localhost:9000", &format!("localhost:{port}"))
        .replace("--invoke-port 9000", &format!("--invoke-port {port}"));
    let ran = run(e, &command, port, timeout).await;
    let where_ = format!("{} ({})", e.place(), e.section);
    let shown = readme::parse_shown(&e.shown).unwrap_or_else(|err| panic!("{where_}: {err}"));
    let (status_line, headers, body) = split_answer(&ran.stdout);
    if let Some(code) = ran.http_status {
        let expected = shown
            .status_line
            .as_deref()
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|c| c.parse::<u16>().ok());
        match expected {
            Some(want) if code != want => {
                return Err(format!(
                    "{where_}: HTTP status {code}, the page shows {want}\n{}",
                    ran.stdout
                ));
            }
            None if !(200..300).contains(&code) => {
                return Err(format!(
                    "{where_}: HTTP {code}, the page shows a success\n{}",
                    ran.stdout
                ));
            }
            _ => {}
        }
    } else {
        assert!(
            !command.trim_start().starts_with("curl"),
            "{where_}: no HTTP status from curl: {}",
            ran.stderr
        );
    }
    if let Some(want) = &shown.status_line
        && status_line.as_deref() != Some(want.as_str())
    {
        return Err(format!(
            "{where_}: status line {status_line:?}, the page shows {want:?}"
        ));
    }
    for (name, want) in &shown.headers {
        let Some(got) = headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
        else {
            return Err(format!("{where_}: no {name} header in {headers:?}"));
        };
        if !readme::matches_text(want, got, bindings) {
            return Err(format!(
                "{where_}: header {name}: shown {want:?}, answered {got:?}"
            ));
        }
    }
    let actual: Value = if body.trim().is_empty() {
        Value::Null
    } else {
        serde_json::from_str(body.trim())
            .map_err(|err| format!("{where_}: the answer is not JSON ({err}): {body}"))?
    };
    if let Some(want) = &shown.body
        && let Err(diff) = readme::matches_json(want, &actual, bindings, "")
    {
        return Err(format!(
            "{where_}: the answer differs from the page's: {diff}\nanswered: {body}"
        ));
    }
    eprintln!(
        "readme: {} ok: {}",
        e.place(),
        e.command.lines().next().unwrap_or("")
    );
    Ok(actual)
}

/// Splits `curl -i` output (status line, headers, body); anything else is all body.
fn split_answer(stdout: &str) -> (Option<String>, Vec<(String, String)>, String) {
    if !stdout.starts_with("HTTP/") {
        return (None, Vec::new(), stdout.to_owned());
    }
    let normalized = stdout.replace("\r\n", "\n");
    let (head, body) = normalized
        .split_once("\n\n")
        .unwrap_or((normalized.as_str(), ""));
    let mut lines = head.lines();
    let status = lines.next().map(|l| l.trim().to_owned());
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    (status, headers, body.to_owned())
}

/// Waits until no job is due or in flight and no worker holds a slot (the woken workers
/// delivered what was due and left); fails the test past [`watch::FIRST_CALL`].
async fn wait_for_woken_workers(db: &TestDb) {
    let client = db.client().await;
    let until = std::time::Instant::now() + watch::FIRST_CALL;
    loop {
        let waiting = integration_tests::count(
            &client,
            "SELECT (SELECT count(*) FROM job_queue WHERE next_attempt_at <= now())
                  + (SELECT count(*) FROM worker_slots WHERE until > now())",
        )
        .await;
        if waiting == 0 {
            return;
        }
        assert!(
            std::time::Instant::now() < until,
            "the woken workers left {waiting} jobs due or slots held"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn org_of(command: &str) -> Uuid {
    let at = command
        .find("X-Organization-Id: ")
        .expect("the listing example names its organization");
    let rest = &command[at + "X-Organization-Id: ".len()..];
    Uuid::parse_str(&rest[..36]).expect("a UUID organization")
}

#[tokio::test(flavor = "multi_thread")]
async fn the_readme_local_commands_answer_as_shown() {
    // first: without cargo-lambda this test cannot run, and says so
    integration_tests::watch::cargo_lambda();
    let examples = readme::manual_examples();
    let kinds: Vec<Kind> = examples.iter().map(kind).collect();
    // what the manual must keep showing for this test to mean something
    for needed in [
        Kind::Watch,
        Kind::Create,
        Kind::Worker,
        Kind::Read,
        Kind::Change,
        Kind::Feedback,
        Kind::Sweeper,
        Kind::Token,
    ] {
        assert!(
            kinds.contains(&needed),
            "neither README.md nor docs/ has a local {needed:?} example"
        );
    }
    let quick_block = &examples[kinds.iter().position(|k| *k == Kind::Watch).unwrap()];
    let (quick, api): (Vec<_>, Vec<_>) = examples
        .iter()
        .zip(&kinds)
        .partition(|(e, _)| e.file == quick_block.file && e.block == quick_block.block);

    let db = TestDb::empty().await;
    let server = std::env::var("DATABASE_URL").expect("DATABASE_URL is set by make test");
    let url = notify_postgres::db::url_with_dbname(&server, &db.name)
        .expect("DATABASE_URL must be a postgres:// URL for this test");
    let port = watch::free_port();
    let mut bindings = Bindings::new();

    // the Quick start's three shells, in order: shell 1 starts make watch
    let (first, first_kind) = quick[0];
    assert_eq!(
        (*first_kind, first.command.split('#').next().unwrap().trim()),
        (Kind::Watch, "make watch"),
        "{}: the three-shell recipe starts with `make watch`",
        first.place()
    );
    let started = std::time::Instant::now();
    let instance = Watch::make(
        &[
            ("WATCH_PORT", port.to_string()),
            ("DATABASE_URL", url.clone()),
        ],
        &[
            "TEST_POOLER_URL",
            "AWS_ENDPOINT_URL",
            "AWS_ACCESS_KEY_ID",
            "AWS_SECRET_ACCESS_KEY",
            "AWS_REGION",
        ],
    )
    .await;
    for (e, k) in &quick[1..] {
        assert_ne!(*k, &Kind::Watch, "{}: a second make watch", e.place());
        if **k == Kind::Read {
            // what the woken worker did meanwhile: the first call compiles it
            check_eventually(e, port, &mut bindings, watch::FIRST_CALL).await;
        } else {
            check(e, port, &mut bindings, watch::FIRST_CALL).await;
        }
    }
    eprintln!(
        "readme: Quick start done in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    let log = instance.log();
    assert!(
        log.contains(&format!(
            "ingest at http://localhost:{port}/lambda-url/ingest/notifications"
        )),
        "make watch says where ingest answers:\n{log}"
    );

    // the API examples, in the order their answers need (a stable sort: reading order within
    // a kind, across pages)
    let mut api: Vec<(&Example, Kind)> = api.into_iter().map(|(e, k)| (e, *k)).collect();
    api.sort_by_key(|(_, k)| *k);
    let listing = api
        .iter()
        .find(|(e, _)| e.command.contains("status=dead"))
        .expect("the manual lists dead jobs (GET /notifications?status=dead…)");
    let org = org_of(&listing.0.command);
    let mut seeded = false;
    let mut drained = false;
    for (e, k) in api {
        assert_ne!(k, Kind::Watch, "{}: a second make watch", e.place());
        if k >= Kind::Worker && !drained {
            // every job the examples made due was sent by the worker its request woke, with
            // no invoke by hand, and that worker left: the page's invocation finds nothing
            wait_for_woken_workers(&db).await;
            drained = true;
        }
        if k >= Kind::Read && !seeded {
            // the dead job the listing shows, as a worker would have left it: its request and
            // its outcome row
            let dead = notify_postgres::testing::TestJob {
                status: JobStatus::Dead,
                attempts: 1,
                next_attempt_at: chrono::Utc::now(),
                last_error: Some("InvalidParameter: the provider refused the number".into()),
                ..notify_postgres::testing::TestJob::due(
                    org,
                    Channel::Sms,
                    serde_json::json!({"to": DEAD_TO, "message": "hi"}),
                )
            };
            notify_postgres::testing::insert_jobs(&db.client().await, &[dead])
                .await
                .expect("seed a dead job");
            seeded = true;
        }
        check(e, port, &mut bindings, watch::FIRST_CALL).await;
    }
    drop(instance);
    eprintln!("readme: done in {:.1} s", started.elapsed().as_secs_f64());
}
