//! Error reporting helpers shared by the functions and tools.

use std::error::Error;

/// One line naming an error and every cause under it: `outer: inner: root`.
///
/// Causes whose text the outer message already contains are skipped, so wrapped errors
/// that repeat their source (a common habit) do not print it twice.
pub fn report(err: &(dyn Error + 'static)) -> String {
    let mut line = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        let text = cause.to_string();
        if !line.contains(&text) {
            line.push_str(": ");
            line.push_str(&text);
        }
        source = cause.source();
    }
    line
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
