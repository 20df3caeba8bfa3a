//! Every statement of `notify_postgres::sql`, prepared against the migrated database: its
//! parameter types and its result columns (names and types) must be what the Rust side
//! declares and reads. A migration that renames a column a statement uses, a statement whose
//! output changes, or a declaration that drifts from its SQL fails here, not in a request.

use integration_tests::TestDb;
use notify_postgres::sql::{STATEMENTS, Statement};
use tokio_postgres::Client;
use tokio_postgres::types::Type;

/// What is wrong with one statement, as PostgreSQL prepares it, against its declaration.
fn mismatches(s: &Statement, prepared: &tokio_postgres::Statement) -> Vec<String> {
    let mut found = Vec::new();
    let params: Vec<&Type> = prepared.params().iter().collect();
    let declared: Vec<&Type> = s.params.iter().collect();
    if params != declared {
        found.push(format!(
            "{}: parameters {params:?}, declared {declared:?}",
            s.name
        ));
    }
    // the columns the Rust side reads, by name (a statement with rows of two kinds declares
    // both, and a name they share must have one type)
    let mut reads: Vec<(&str, &Type)> = Vec::new();
    for (name, ty) in s.columns.iter().flat_map(|list| list.iter()) {
        match reads.iter().find(|(n, _)| n == name) {
            Some((_, other)) if *other != ty => found.push(format!(
                "{}: column {name} declared as {ty} and as {other}",
                s.name
            )),
            Some(_) => {}
            None => reads.push((name, ty)),
        }
    }
    let answers: Vec<(&str, &Type)> = prepared
        .columns()
        .iter()
        .map(|c| (c.name(), c.type_()))
        .collect();
    for (name, ty) in &reads {
        match answers.iter().find(|(n, _)| n == name) {
            None => found.push(format!(
                "{}: the Rust side reads column {name}, which the statement does not answer \
                 (it answers {:?})",
                s.name,
                answers.iter().map(|(n, _)| *n).collect::<Vec<_>>()
            )),
            Some((_, actual)) if actual != ty => found.push(format!(
                "{}: column {name} is {actual}, the Rust side reads {ty}",
                s.name
            )),
            Some(_) => {}
        }
    }
    for (name, ty) in &answers {
        if !reads.iter().any(|(n, _)| n == name) {
            found.push(format!(
                "{}: the statement answers column {name} ({ty}), which no row type declares",
                s.name
            ));
        }
    }
    found
}

/// Every mismatch of `statements` on `client`'s database.
async fn check(client: &Client, statements: &[Statement]) -> Vec<String> {
    let mut found = Vec::new();
    for s in statements {
        match client.prepare_typed(s.sql, s.params).await {
            Ok(prepared) => found.extend(mismatches(s, &prepared)),
            Err(err) => found.push(format!(
                "{}: does not prepare: {}",
                s.name,
                err.as_db_error()
                    .map_or_else(|| err.to_string(), |db| db.message().to_owned())
            )),
        }
    }
    found
}

#[tokio::test]
async fn every_statement_prepares_with_the_declared_parameters_and_columns() {
    let db = TestDb::new().await;
    let client = db.client().await;
    let found = check(&client, STATEMENTS).await;
    assert!(found.is_empty(), "\n{}", found.join("\n"));
}

/// The check can fail: a migration renaming a column the claim reads breaks the statements
/// that use it, by name.
#[tokio::test]
async fn a_renamed_column_fails_the_check() {
    let db = TestDb::new().await;
    let client = db.client().await;
    client
        .batch_execute("ALTER TABLE job_queue RENAME COLUMN claim_token TO claim_id")
        .await
        .unwrap();
    let found = check(&client, STATEMENTS).await;
    for name in [
        "CLAIM",
        "CLAIM_FAIR",
        "COMPLETE_AND_CLAIM",
        "RELEASE",
        "SWEEP",
    ] {
        assert!(
            found
                .iter()
                .any(|f| f.starts_with(&format!("{name}: does not prepare"))),
            "{name} still prepares: {found:#?}"
        );
    }
}

/// The check can fail: a statement whose output column is renamed, or that takes a parameter
/// its declaration leaves out, is reported.
#[tokio::test]
async fn a_renamed_output_or_another_type_fails_the_check() {
    let db = TestDb::new().await;
    let client = db.client().await;
    let claim = STATEMENTS.iter().find(|s| s.name == "CLAIM").unwrap();
    // the answer's column, as the final SELECT names it
    let renamed = claim.sql.replace(
        "AS suppressed\n       -- @end suppressed",
        "AS is_suppressed\n       -- @end suppressed",
    );
    assert_ne!(renamed, claim.sql, "the rename found its place");
    let leaked: &'static str = Box::leak(renamed.into_boxed_str());
    let altered = [Statement {
        name: "CLAIM",
        sql: leaked,
        params: claim.params,
        columns: claim.columns,
    }];
    let found = check(&client, &altered).await;
    assert!(
        found.iter().any(|f| f.contains("reads column suppressed")),
        "{found:#?}"
    );
    assert!(
        found
            .iter()
            .any(|f| f.contains("answers column is_suppressed")),
        "{found:#?}"
    );
    // a parameter left undeclared: PostgreSQL infers it, and the lists differ
    let short = [Statement {
        name: "CLAIM",
        sql: claim.sql,
        params: &[Type::INT8],
        columns: claim.columns,
    }];
    let found = check(&client, &short).await;
    assert!(
        found.iter().any(|f| f.starts_with("CLAIM: parameters")),
        "{found:#?}"
    );
}
