//! The one marker grammar of `sql/`, and its splicer. Markers are SQL line comments, so every
//! file stays a valid statement on its own, the way PostgreSQL and the tests read it.
//!
//! - `-- @part NAME` … `-- @end NAME` names the lines between as a part of its file.
//! - `-- @include FILE` … `-- @end FILE` (or `FILE#NAME` for a part) holds a copy of that
//!   file's statement (its lines after the leading comment block, markers left out), or of
//!   that part, indented as the `@include` line is.
//!
//! The build ([`refresh`], from `build.rs`) rewrites every copy from its source, so a file
//! that includes another is the composed statement itself: committed, read by PostgreSQL as
//! it is, and checked by CI (`git diff --exit-code` after the build). An included source may
//! not include anything itself: one level, no cycles.

use std::collections::BTreeMap;
use std::fmt;

const PART: &str = "-- @part ";
const INCLUDE: &str = "-- @include ";
const END: &str = "-- @end ";

/// Why a file of `sql/` could not be composed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ComposeError {
    pub file: String,
    pub line: usize,
    pub message: String,
}

impl fmt::Display for ComposeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "sql/{} line {}: {}", self.file, self.line, self.message)
    }
}

impl std::error::Error for ComposeError {}

/// A marker line: its indentation, its kind and its argument.
fn marker(line: &str) -> Option<(&str, &'static str, &str)> {
    let body = line.trim_start();
    let indent = &line[..line.len() - body.len()];
    [PART, INCLUDE, END].into_iter().find_map(|kind| {
        let arg = body.strip_prefix(kind)?.trim();
        (!arg.is_empty()).then_some((indent, kind, arg))
    })
}

/// The statement of a file: its lines after the leading comment block (and blank lines),
/// marker lines left out.
fn statement(text: &str) -> Vec<&str> {
    text.lines()
        .skip_while(|line| line.trim().is_empty() || line.trim_start().starts_with("--"))
        .filter(|line| marker(line).is_none())
        .collect()
}

/// The lines of part `name` of `text`, markers inside it left out.
fn part<'a>(text: &'a str, name: &str) -> Option<Vec<&'a str>> {
    let mut lines = text.lines();
    lines.find(|line| marker(line).is_some_and(|(_, kind, arg)| kind == PART && arg == name))?;
    let mut found = Vec::new();
    for line in lines {
        match marker(line) {
            Some((_, kind, arg)) if kind == END && arg == name => return Some(found),
            Some(_) => {}
            None => found.push(line),
        }
    }
    None
}

/// `file`'s text with every `@include` copy rewritten from `sources` (file name → text).
pub fn compose(file: &str, sources: &BTreeMap<String, String>) -> Result<String, ComposeError> {
    let text = sources.get(file).ok_or_else(|| ComposeError {
        file: file.to_owned(),
        line: 0,
        message: "no such file".into(),
    })?;
    let error = |line: usize, message: String| ComposeError {
        file: file.to_owned(),
        line: line + 1,
        message,
    };
    let mut out = String::with_capacity(text.len());
    let mut lines = text.lines().enumerate();
    while let Some((n, line)) = lines.next() {
        out.push_str(line);
        out.push('\n');
        let Some((indent, INCLUDE, target)) = marker(line) else {
            continue;
        };
        let (source, name) = match target.split_once('#') {
            Some((source, name)) => (source, Some(name)),
            None => (target, None),
        };
        let included = sources.get(source).ok_or_else(|| {
            error(
                n,
                format!("@include names {source}, which sql/ does not hold"),
            )
        })?;
        if included
            .lines()
            .any(|l| marker(l).is_some_and(|(_, kind, _)| kind == INCLUDE))
        {
            return Err(error(
                n,
                format!("{source} includes a file itself: one level only"),
            ));
        }
        let copy = match name {
            Some(name) => part(included, name)
                .ok_or_else(|| error(n, format!("{source} has no part {name}")))?,
            None => statement(included),
        };
        // skip the old copy, up to this include's end
        let closed = lines
            .by_ref()
            .any(|(_, old)| marker(old).is_some_and(|(_, kind, arg)| kind == END && arg == target));
        if !closed {
            return Err(error(
                n,
                format!("@include {target} has no `-- @end {target}`"),
            ));
        }
        let common = copy
            .iter()
            .filter(|l| !l.trim().is_empty())
            .map(|l| l.len() - l.trim_start().len())
            .min()
            .unwrap_or(0);
        for l in copy {
            if !l.trim().is_empty() {
                out.push_str(indent);
                out.push_str(&l[common..]);
            }
            out.push('\n');
        }
        out.push_str(indent);
        out.push_str(END);
        out.push_str(target);
        out.push('\n');
    }
    Ok(out)
}

/// Every file of `sql/` (name → text) that includes another, composed: the files whose
/// committed text differs from their composition, with the text they must hold.
pub fn refresh(
    sources: &BTreeMap<String, String>,
) -> Result<BTreeMap<String, String>, ComposeError> {
    let mut stale = BTreeMap::new();
    for (file, text) in sources {
        let composed = compose(file, sources)?;
        if composed != *text {
            stale.insert(file.clone(), composed);
        }
    }
    Ok(stale)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sources(files: &[(&str, &str)]) -> BTreeMap<String, String> {
        files
            .iter()
            .map(|(name, text)| (name.to_string(), text.to_string()))
            .collect()
    }

    const CLAIM: &str = "-- the claim\n-- $1 batch\nWITH due AS (SELECT 1)\n-- @part update\nUPDATE q\nSET a = 1\n-- @end update\n";

    #[test]
    fn an_include_is_filled_with_the_statement_indented_as_its_marker() {
        let files = sources(&[
            ("claim.sql", CLAIM),
            (
                "complete.sql",
                "WITH x AS (\n    -- @include claim.sql\n    stale\n    -- @end claim.sql\n)\nSELECT 1\n",
            ),
        ]);
        assert_eq!(
            compose("complete.sql", &files).unwrap(),
            "WITH x AS (\n    -- @include claim.sql\n    WITH due AS (SELECT 1)\n    UPDATE q\n    SET a = 1\n    -- @end claim.sql\n)\nSELECT 1\n"
        );
    }

    #[test]
    fn a_part_include_takes_only_the_part() {
        let files = sources(&[
            ("claim.sql", CLAIM),
            (
                "fair.sql",
                "WITH due AS (SELECT 2)\n-- @include claim.sql#update\n-- @end claim.sql#update\n",
            ),
        ]);
        let composed = compose("fair.sql", &files).unwrap();
        assert_eq!(
            composed,
            "WITH due AS (SELECT 2)\n-- @include claim.sql#update\nUPDATE q\nSET a = 1\n-- @end claim.sql#update\n"
        );
        // composing again changes nothing: the committed file is its own composition
        let files = sources(&[("claim.sql", CLAIM), ("fair.sql", &composed)]);
        assert!(refresh(&files).unwrap().is_empty());
    }

    #[test]
    fn a_changed_source_makes_its_includer_stale() {
        let files = sources(&[
            ("claim.sql", &CLAIM.replace("SET a = 1", "SET a = 2")),
            (
                "fair.sql",
                "-- @include claim.sql#update\nUPDATE q\nSET a = 1\n-- @end claim.sql#update\n",
            ),
        ]);
        let stale = refresh(&files).unwrap();
        assert_eq!(stale.keys().collect::<Vec<_>>(), ["fair.sql"]);
        assert!(stale["fair.sql"].contains("SET a = 2"));
    }

    #[test]
    fn bad_markers_are_errors_that_name_the_place() {
        let cases = [
            (
                "-- @include nope.sql\n-- @end nope.sql\n",
                "which sql/ does not hold",
            ),
            (
                "-- @include claim.sql#nope\n-- @end claim.sql#nope\n",
                "has no part nope",
            ),
            (
                "-- @include claim.sql\nSELECT 1\n",
                "has no `-- @end claim.sql`",
            ),
        ];
        for (text, expected) in cases {
            let files = sources(&[("claim.sql", CLAIM), ("x.sql", text)]);
            let err = compose("x.sql", &files).unwrap_err();
            assert!(err.to_string().contains(expected), "{err}");
            assert!(err.to_string().starts_with("sql/x.sql line 1: "), "{err}");
        }
        let nested = sources(&[
            ("claim.sql", CLAIM),
            ("a.sql", "-- @include claim.sql\n-- @end claim.sql\n"),
            ("b.sql", "-- @include a.sql\n-- @end a.sql\n"),
        ]);
        let err = compose("b.sql", &nested).unwrap_err();
        assert!(err.to_string().contains("one level only"), "{err}");
    }
}
