//! One line of the result table, the checks that make it, and the table as Markdown.

use std::collections::HashMap;

/// One line of the result table; `scenario` is set from the scenario table.
#[derive(Debug, Default, Clone)]
pub struct Row {
    pub scenario: String,
    pub runs: u64,
    pub accepted: u64,
    pub delivered: Option<u64>,
    pub dead: Option<u64>,
    pub lost: u64,
    /// Claims examined by the claimed-twice check.
    pub claims: Option<u64>,
    pub claimed_twice: Option<u64>,
    pub duplicate_sends: Option<u64>,
    pub notes: Vec<String>,
    pub failures: Vec<String>,
}

impl Row {
    pub fn note(&mut self, text: impl Into<String>) {
        let text = text.into();
        println!("    {text}");
        self.notes.push(text);
    }

    /// Records a check; a failed one makes the suite exit non-zero.
    pub fn check(&mut self, ok: bool, what: impl Into<String>) {
        let what = what.into();
        if ok {
            println!("    ok: {what}");
        } else {
            println!("    FAILED: {what}");
            self.failures.push(what);
        }
    }
}

fn cell(v: Option<u64>) -> String {
    v.map(|v| v.to_string()).unwrap_or_else(|| "n/a".into())
}

/// The table, as Markdown (printed, written to `FAULTS_TABLE` and pasted into docs/operations.md).
pub fn table(rows: &[Row]) -> String {
    let mut out = String::from(
        "| scenario | runs | accepted | delivered | dead | lost | claims | claimed twice | duplicate sends |\n\
         | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n",
    );
    for r in rows {
        out.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} |\n",
            r.scenario,
            r.runs,
            r.accepted,
            cell(r.delivered),
            cell(r.dead),
            r.lost,
            cell(r.claims),
            cell(r.claimed_twice),
            cell(r.duplicate_sends),
        ));
    }
    out
}

/// `202×10, 503×2`: HTTP statuses and how often each came.
pub fn statuses_text(statuses: &HashMap<u16, u64>) -> String {
    let mut v: Vec<_> = statuses.iter().collect();
    v.sort();
    v.iter()
        .map(|(s, n)| format!("{s}×{n}"))
        .collect::<Vec<_>>()
        .join(", ")
}
