//! Error reporting helpers shared by the functions and tools.

use std::error::Error;

use tokio_postgres::error::DbError;

/// One line naming an error and every cause under it: `outer: inner: root`.
///
/// Causes whose text the outer message already contains are skipped, so wrapped errors
/// that repeat their source (a common habit) do not print it twice.
///
/// A PostgreSQL error is named by its SQLSTATE, its message and the constraint, table and
/// column it names, never by its DETAIL, HINT or context: for a failing row those hold the
/// row's values (a recipient, a message body), which no log line may carry.
pub fn report(err: &(dyn Error + 'static)) -> String {
    let mut line = describe(err);
    let mut source = err.source();
    while let Some(cause) = source {
        let text = describe(cause);
        if !line.contains(&text) {
            line.push_str(": ");
            line.push_str(&text);
        }
        source = cause.source();
    }
    line
}

/// A failed worker or sweeper invocation: logged once with its whole cause chain, and
/// reported to Lambda with `kind` (its class) as `errorType`.
pub fn failed_invocation(
    kind: &'static str,
    err: &(dyn Error + 'static),
) -> lambda_runtime::Diagnostic {
    let message = report(err);
    tracing::error!(kind, error = %message, "the invocation fails");
    lambda_runtime::Diagnostic {
        error_type: kind.to_owned(),
        error_message: message,
    }
}

/// One error's own text, a PostgreSQL error's as [`database_error`] gives it.
fn describe(err: &(dyn Error + 'static)) -> String {
    if let Some(db) = err.downcast_ref::<DbError>() {
        return database_error(db);
    }
    if let Some(pg) = err.downcast_ref::<tokio_postgres::Error>() {
        // its Display appends the server's error, DETAIL included: that comes next in the
        // chain, described above
        if pg.as_db_error().is_some() {
            return "db error".to_owned();
        }
    }
    err.to_string()
}

/// What a server error may say in a log: its severity, SQLSTATE and message, and the
/// objects it names. The message of a data exception (SQLSTATE class 22) can quote the
/// offending input, so it is left out too.
pub fn database_error(db: &DbError) -> String {
    let code = db.code().code();
    let mut text = format!("{} {code}", db.severity());
    if !code.starts_with("22") {
        text.push_str(": ");
        text.push_str(db.message());
    }
    let named = [
        ("constraint", db.constraint()),
        ("table", db.table()),
        ("column", db.column()),
    ];
    for (what, name) in named {
        if let Some(name) = name {
            text.push_str(&format!(" ({what} {name})"));
        }
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("outer")]
    struct Outer(#[source] std::io::Error);

    #[test]
    fn report_joins_the_chain_on_one_line() {
        let err = Outer(std::io::Error::other("root cause"));
        assert_eq!(report(&err), "outer: root cause");
    }
}
