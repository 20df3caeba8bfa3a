//! Account trouble on the wire: SES v2 answers `AccountSuspendedException` — its real error
//! response (HTTP 400, `x-amzn-ErrorType`, a JSON body), served by a proxy in front of the
//! stand-in to the worker's real SDK client — for three worker runs, then the account is back.
//! Account trouble is not the message's fault (invariant 8): each email job is held with its
//! attempt given back, and delivered with its budget intact once SES sends again; SMS (SNS,
//! unaffected) goes out at once.

use std::time::Duration;

use uuid::Uuid;

use super::Scenario;
use crate::TestDb;
use crate::faults::api::invoke_scheduled;
use crate::faults::db::STANDS;
use crate::faults::endgame::{run_once_recovered, settle_all_delivered};
use crate::faults::process::Function;
use crate::faults::{Row, Suite, claims};
use crate::proxy::Proxy;
use crate::stand_in::Recipients;

pub const SCENARIO: Scenario = Scenario {
    title: "SES account suspended, then back",
    run: |s| Box::pin(run(s)),
};

const ROUNDS: i64 = 3;
const TIMEOUT: Duration = Duration::from_secs(20);

/// SES v2's answer to SendEmail from a suspended account, as it is sent on the wire.
fn suspended() -> Vec<u8> {
    let body = r#"{"message":"Your account has been suspended. Contact AWS Support."}"#;
    format!(
        "HTTP/1.1 400 Bad Request\r\n\
         x-amzn-RequestId: 3f1c9e2a-7b1d-4c55-9a8e-2b6f0d4e8c11\r\n\
         x-amzn-ErrorType: AccountSuspendedException:http://internal.amazon.com/coral/com.amazonaws.sesv2/\r\n\
         Content-Type: application/json\r\n\
         Content-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

async fn run(s: &mut Suite) -> Row {
    let mut row = Row::default();
    let jobs = if s.quick { 20 } else { 40 };
    let db = TestDb::new().await;
    let client = db.client().await;
    claims::install(&client).await;
    let recipients = Recipients::new();
    let accepted = s.accept_jobs(&db, &recipients, jobs, &mut row).await;
    // SES through a proxy of its own that answers the error; SNS as in every scenario
    let mut ses = Proxy::start(crate::faults::suite::stand_in().await).await;
    ses.answer_with(Some(suspended())).await;
    let mut env = s.worker_env(&db, 100, 32);
    env.push(("AWS_ENDPOINT_URL_SESV2", ses.endpoint()));
    let worker = Function::start(&s.launcher, "worker", env, 1).await;
    s.proxy.set_delay(Duration::ZERO);
    row.note("SES answers AccountSuspendedException (HTTP 400, its JSON error) to every send");
    for round in 1..=ROUNDS {
        if round > 1 {
            crate::factory::make_retries_due(&client).await;
        }
        let summary = invoke_scheduled(&worker, TIMEOUT).await;
        row.runs += 1;
        row.note(format!("round {round}: {summary:?}"));
        check_round(&client, round, &mut row).await;
    }
    ses.answer_with(None).await;
    row.note("SES sends again");
    run_once_recovered(&client, &worker, TIMEOUT, &mut row).await;
    check_histories(&client, &accepted, &mut row).await;
    settle_all_delivered(
        &client,
        &s.launcher.ledger,
        &mut row,
        &accepted,
        &recipients,
    )
    .await;
    row
}

/// After each round: every email job waiting in the queue, unclaimed, with no attempt spent
/// and `round` held rows carrying SES's code; every SMS job sent. Jobs as they stand.
async fn check_round(client: &tokio_postgres::Client, round: i64, row: &mut Row) {
    let bad_email = crate::count(
        client,
        &format!(
            "SELECT count(*) FROM ({STANDS}) j
             WHERE j.channel = 'email'
               AND NOT (j.status = 'failed' AND j.queued AND j.attempts = 0
                        AND (SELECT count(*) FROM job_attempt_history d
                             WHERE d.job_id = j.id AND d.outcome = 'held'
                               AND d.error_code = 'AccountSuspendedException') = {round})"
        ),
    )
    .await;
    row.check(
        bad_email == 0,
        format!(
            "round {round}: every email held by AccountSuspendedException, no attempt spent \
             ({bad_email} not)"
        ),
    );
    let unsent_sms = crate::count(
        client,
        &format!("SELECT count(*) FROM ({STANDS}) j WHERE channel = 'sms' AND status <> 'sent'"),
    )
    .await;
    row.check(
        unsent_sms == 0,
        format!("round {round}: SMS unaffected, all sent ({unsent_sms} not)"),
    );
}

/// Every email job: `ROUNDS` held calls, then the send, on attempt 1 of its budget.
async fn check_histories(client: &tokio_postgres::Client, accepted: &[Uuid], row: &mut Row) {
    let wrong = crate::count(
        client,
        &format!(
            "SELECT count(*) FROM ({STANDS}) j
             WHERE j.channel = 'email'
               AND NOT (j.status = 'sent' AND NOT j.queued AND j.attempts = 1
                        AND (SELECT array_agg(d.outcome ORDER BY d.attempt)
                             FROM job_attempt_history d WHERE d.job_id = j.id)
                            = array_fill('held'::text, ARRAY[{ROUNDS}::int]) || 'sent'::text)"
        ),
    )
    .await;
    let emails = accepted.len() / 2;
    row.check(
        wrong == 0,
        format!(
            "all {emails} emails sent on attempt 1 after {ROUNDS} held calls ({wrong} otherwise)"
        ),
    );
}
