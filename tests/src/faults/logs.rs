//! Every line every binary logged, searched for the message bodies and full recipients the
//! suite sent: none may appear.

use std::collections::HashSet;

use super::{Row, Suite};

/// Every body the suite sends carries this marker: one scan finds any of them.
pub const SECRET_MARKER: &str = "faults-secret-";

/// The logs of every process started so far, against every secret sent so far.
pub fn check(s: &Suite, row: &mut Row) {
    let logs = s.launcher.all_logs();
    let lines = logs.lines().count();
    row.check(lines > 0, format!("captured log lines: {lines}"));
    let bodies = logs.matches(SECRET_MARKER).count();
    row.check(
        bodies == 0,
        format!("message bodies in the logs: {bodies} (every body sent carries a marker)"),
    );
    let words = words(&logs);
    let leaked: Vec<&String> = s
        .secrets
        .iter()
        .filter(|x| !x.starts_with(SECRET_MARKER) && words.contains(x.as_str()))
        .collect();
    row.check(
        leaked.is_empty(),
        format!(
            "full recipients in the logs: {} of {} searched{}",
            leaked.len(),
            s.secrets.len(),
            leaked
                .first()
                .map(|l| format!(" (first: {l})"))
                .unwrap_or_default()
        ),
    );
}

/// Every word of the logs (split where an address or number cannot go on), and each word's
/// tail from every '+'.
fn words(logs: &str) -> HashSet<&str> {
    let mut words = HashSet::new();
    for word in logs.split(|c: char| !(c.is_alphanumeric() || "+@._-".contains(c))) {
        words.insert(word);
        for (i, _) in word.match_indices('+') {
            words.insert(&word[i..]);
        }
    }
    words
}
