//! The manual's local examples, read from README.md and every Markdown file under docs/: each
//! `sh` code block that talks to `make watch` (a `localhost:9000` URL, `make watch`,
//! `make invoke/…`, `cargo-lambda … invoke`) split into commands and the answers the page shows
//! under them, and a matcher that says whether a real answer has the shown one's status and
//! shape.
//!
//! What a shown answer may leave open:
//! - `…` inside a string: any text (`"provider_message_id":"…"`);
//! - `5b0f6c0e-…` (8 hex digits, `-…`): an id placeholder, bound to the real id the first time
//!   an answer shows it and substituted into every later command that uses it;
//! - `,…}` at the end of an object: more fields than those shown;
//! - a timestamp: any timestamp; a measurement's number (a key in [`VARYING_NUMBERS`],
//!   such as `elapsed_ms`): any number. Every other number must be as shown.
//!
//! Everything else must be as shown: every field of an object (no more, unless `,…`), every
//! element of a list, every other string and literal.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use serde_json::Value;

/// One command of a manual page's code block and what the page shows it answers.
#[derive(Debug, Clone, PartialEq)]
pub struct Example {
    /// The page it is on, relative to the repository's root (`README.md`, `docs/api.md`).
    pub file: String,
    /// The nearest heading above it.
    pub section: String,
    /// Line number in `file` (1-based) where the command starts.
    pub line: usize,
    /// The command as written (continuation lines included, trailing comment kept).
    pub command: String,
    /// The answer shown under it (or in its `# …: answer` comment); empty if none.
    pub shown: Vec<String>,
    /// Its code block's first line: examples of one block share it.
    pub block: usize,
}

impl Example {
    /// Where it is written, for messages: `docs/api.md line 12`.
    pub fn place(&self) -> String {
        format!("{} line {}", self.file, self.line)
    }
}

/// The manual's pages, in reading order: README.md, then every `.md` under docs/ (sorted by
/// path, folders included).
pub fn manual_files(root: &Path) -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        let mut paths: Vec<PathBuf> = entries.filter_map(|e| e.ok().map(|e| e.path())).collect();
        paths.sort();
        for path in paths {
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|e| e == "md") {
                out.push(path);
            }
        }
    }
    let mut files = vec![root.join("README.md")];
    walk(&root.join("docs"), &mut files);
    files
}

/// Every local example of the manual (README.md and docs/), in reading order, each with its
/// page.
pub fn manual_examples() -> Vec<Example> {
    let root = crate::watch::root();
    manual_files(&root)
        .iter()
        .flat_map(|path| {
            let text = std::fs::read_to_string(path)
                .unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
            let name = path
                .strip_prefix(&root)
                .unwrap_or(path)
                .to_string_lossy()
                .into_owned();
            local_examples_in(&name, &text)
        })
        .collect()
}

const COMMAND_WORDS: &[&str] = &["curl", "make", "cargo", ".venv-tools/bin/cargo-lambda"];

fn starts_command(line: &str) -> bool {
    let word = line.split_whitespace().next().unwrap_or("");
    COMMAND_WORDS.contains(&word)
}

/// Whether a command talks to the local `make watch`.
pub fn is_local(command: &str) -> bool {
    command.contains("localhost:9000")
        || command.starts_with("make watch")
        || command.starts_with("make invoke/")
        || (command.contains("cargo-lambda") || command.contains("cargo lambda"))
            && command.contains(" invoke ")
}

/// Scans shell text for the end of a command: returns (quotes balanced and no trailing
/// backslash, the position of an unquoted `#` comment on the last line if any).
fn shell_state(text: &str) -> (bool, Option<usize>) {
    let (mut single, mut double, mut escaped) = (false, false, false);
    let mut comment = None;
    let mut prev = '\n';
    for (i, c) in text.char_indices() {
        if comment.is_some() {
            if c == '\n' {
                comment = None;
            }
            prev = c;
            continue;
        }
        if escaped {
            escaped = false;
        } else if c == '\\' && !single {
            escaped = true;
        } else if c == '\'' && !double {
            single = !single;
        } else if c == '"' && !single {
            double = !double;
        } else if c == '#' && !single && !double && prev.is_whitespace() {
            comment = Some(i);
        }
        prev = c;
    }
    let continued = text.trim_end().ends_with('\\') && comment.is_none();
    (!single && !double && !continued, comment)
}

/// Every command of every local `sh` block of `readme`, with the answers shown, as read
/// from README.md.
pub fn local_examples(readme: &str) -> Vec<Example> {
    local_examples_in("README.md", readme)
}

/// Every command of every local `sh` block of `text`, the page `file`, with the answers shown.
pub fn local_examples_in(file: &str, text: &str) -> Vec<Example> {
    let mut out = Vec::new();
    let mut section = String::new();
    let mut lines = text.lines().enumerate().peekable();
    while let Some((n, line)) = lines.next() {
        if line.starts_with('#') {
            section = line.trim_start_matches('#').trim().to_owned();
            continue;
        }
        if line.trim_start().starts_with("```") && line.trim() != "```sh" {
            // another language's block: its `#` lines are comments, not headings
            for (_, inner) in lines.by_ref() {
                if inner.trim() == "```" {
                    break;
                }
            }
            continue;
        }
        if line.trim() != "```sh" {
            continue;
        }
        let block_line = n + 1;
        let mut block = Vec::new();
        for (m, inner) in lines.by_ref() {
            if inner.trim() == "```" {
                break;
            }
            block.push((m + 1, inner));
        }
        let (examples, orphans) = split_block(&block, file, &section, block_line);
        if examples.iter().any(|e| is_local(&e.command)) {
            if let Some((n, line)) = orphans.first() {
                panic!("{file} line {n}: an answer before any command: {line}");
            }
            out.extend(examples);
        }
    }
    out
}

/// A block's commands, and the lines before its first command that are no comment.
fn split_block(
    block: &[(usize, &str)],
    file: &str,
    section: &str,
    block_line: usize,
) -> (Vec<Example>, Vec<(usize, String)>) {
    let mut out: Vec<Example> = Vec::new();
    let mut orphans = Vec::new();
    let mut i = 0;
    while i < block.len() {
        let (n, line) = block[i];
        let trimmed = line.trim();
        if starts_command(trimmed) {
            let mut command = line.to_owned();
            i += 1;
            loop {
                let (complete, _) = shell_state(&command);
                if complete || i >= block.len() {
                    break;
                }
                command.push('\n');
                command.push_str(block[i].1);
                i += 1;
            }
            let last = command.lines().last().unwrap_or("").to_owned();
            let mut shown = Vec::new();
            if let (_, Some(at)) = shell_state(&last) {
                // `# shell 3: {"claimed":1,…}`: the answer shown in the comment
                let comment = &last[at..];
                if let Some((_, answer)) = comment.split_once(": ")
                    && answer.trim_start().starts_with('{')
                {
                    shown.push(answer.trim().to_owned());
                }
            }
            out.push(Example {
                file: file.to_owned(),
                section: section.to_owned(),
                line: n,
                command,
                shown,
                block: block_line,
            });
        } else if trimmed.is_empty() || trimmed.starts_with('#') {
            i += 1;
        } else {
            match out.last_mut() {
                Some(example) => example.shown.push(line.to_owned()),
                None => orphans.push((n, line.to_owned())),
            }
            i += 1;
        }
    }
    (out, orphans)
}

/// A shown answer, parsed: the status line and headers of `curl -i`, and the JSON body.
#[derive(Debug, Clone, PartialEq)]
pub struct Shown {
    pub status_line: Option<String>,
    pub headers: Vec<(String, String)>,
    pub body: Option<Value>,
}

/// Marks `,…}` (more fields than shown) with a key no real answer has.
pub const MORE: &str = "…";

/// Parses the lines a page shows under a command.
pub fn parse_shown(lines: &[String]) -> Result<Shown, String> {
    let mut rest = lines;
    let mut status_line = None;
    let mut headers = Vec::new();
    if let Some(first) = rest.first().filter(|l| l.starts_with("HTTP/")) {
        status_line = Some(first.trim().to_owned());
        rest = &rest[1..];
        while let Some(line) = rest.first() {
            match line.split_once(": ") {
                Some((name, value))
                    if !name.is_empty()
                        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-') =>
                {
                    headers.push((name.to_ascii_lowercase(), value.trim().to_owned()));
                    rest = &rest[1..];
                }
                _ => break,
            }
        }
    }
    let text = rest.join("\n");
    let body = if text.trim().is_empty() {
        None
    } else {
        let marked = mark_more(&text);
        Some(
            serde_json::from_str(&marked)
                .map_err(|e| format!("the shown answer is not JSON with `…` ({e}): {text}"))?,
        )
    };
    Ok(Shown {
        status_line,
        headers,
        body,
    })
}

/// `,…}` → `,"…":"…"}`, outside strings.
fn mark_more(text: &str) -> String {
    let mut out = String::new();
    let chars: Vec<char> = text.chars().collect();
    let (mut in_string, mut escaped) = (false, false);
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if in_string {
            out.push(c);
            if escaped {
                escaped = false;
            } else if c == '\\' {
                escaped = true;
            } else if c == '"' {
                in_string = false;
            }
        } else if c == '"' {
            in_string = true;
            out.push(c);
        } else if c == '…' {
            out.push_str(&format!("\"{MORE}\":\"{MORE}\""));
        } else {
            out.push(c);
        }
        i += 1;
    }
    out
}

/// Id placeholders bound so far: `5b0f6c0e-…` → the real id.
pub type Bindings = HashMap<String, String>;

fn is_uuid(s: &str) -> bool {
    s.len() == 36 && uuid::Uuid::parse_str(s).is_ok()
}

fn is_placeholder_at(chars: &[char], i: usize) -> bool {
    i + 10 <= chars.len()
        && chars[i..i + 8].iter().all(|c| c.is_ascii_hexdigit())
        && chars[i + 8] == '-'
        && chars[i + 9] == '…'
}

#[derive(Debug, Clone, PartialEq)]
enum Piece {
    Text(String),
    Id(String),
    Any,
}

fn pieces(shown: &str) -> Vec<Piece> {
    let chars: Vec<char> = shown.chars().collect();
    let mut out = Vec::new();
    let mut text = String::new();
    let mut i = 0;
    while i < chars.len() {
        if is_placeholder_at(&chars, i) {
            if !text.is_empty() {
                out.push(Piece::Text(std::mem::take(&mut text)));
            }
            out.push(Piece::Id(chars[i..i + 10].iter().collect()));
            i += 10;
        } else if chars[i] == '…' {
            if !text.is_empty() {
                out.push(Piece::Text(std::mem::take(&mut text)));
            }
            out.push(Piece::Any);
            i += 1;
        } else {
            text.push(chars[i]);
            i += 1;
        }
    }
    if !text.is_empty() {
        out.push(Piece::Text(text));
    }
    out
}

fn match_pieces(pieces: &[Piece], actual: &str, bindings: &mut Bindings) -> bool {
    match pieces.split_first() {
        None => actual.is_empty(),
        Some((Piece::Text(t), rest)) => actual
            .strip_prefix(t.as_str())
            .is_some_and(|a| match_pieces(rest, a, bindings)),
        Some((Piece::Id(name), rest)) => {
            let Some(candidate) = actual.get(..36).filter(|c| is_uuid(c)) else {
                return false;
            };
            if let Some(bound) = bindings.get(name)
                && bound != candidate
            {
                return false;
            }
            let mut trial = bindings.clone();
            trial.insert(name.clone(), candidate.to_owned());
            if match_pieces(rest, &actual[36..], &mut trial) {
                *bindings = trial;
                true
            } else {
                false
            }
        }
        Some((Piece::Any, rest)) => (0..=actual.len())
            .filter(|i| actual.is_char_boundary(*i))
            .any(|i| {
                let mut trial = bindings.clone();
                if match_pieces(rest, &actual[i..], &mut trial) {
                    *bindings = trial;
                    true
                } else {
                    false
                }
            }),
    }
}

/// The keys whose numbers are measurements, different on every run: any number of the same
/// kind matches. Every other number of an answer (a count, a limit) must be as shown.
pub const VARYING_NUMBERS: &[&str] = &["elapsed_ms"];

/// Whether `actual` is what a page shows as `shown` (see the module's rules for `…`).
pub fn matches_text(shown: &str, actual: &str, bindings: &mut Bindings) -> bool {
    if chrono::DateTime::parse_from_rfc3339(shown).is_ok() {
        return chrono::DateTime::parse_from_rfc3339(actual).is_ok();
    }
    match_pieces(&pieces(shown), actual, bindings)
}

/// Compares a real JSON answer with the shown one; `Err` names the first difference's path.
pub fn matches_json(
    shown: &Value,
    actual: &Value,
    bindings: &mut Bindings,
    path: &str,
) -> Result<(), String> {
    match (shown, actual) {
        (Value::Object(s), Value::Object(a)) => {
            for (key, value) in s {
                if key == MORE {
                    continue;
                }
                let got = a
                    .get(key)
                    .ok_or_else(|| format!("{path}.{key}: shown, missing from the answer"))?;
                matches_json(value, got, bindings, &format!("{path}.{key}"))?;
            }
            if !s.contains_key(MORE)
                && let Some(extra) = a.keys().find(|k| !s.contains_key(*k))
            {
                return Err(format!(
                    "{path}.{extra}: in the answer, not shown (and no `,…` says there is more)"
                ));
            }
            Ok(())
        }
        (Value::Array(s), Value::Array(a)) => {
            if s.len() != a.len() {
                return Err(format!(
                    "{path}: {} elements shown, {} in the answer",
                    s.len(),
                    a.len()
                ));
            }
            for (i, (sv, av)) in s.iter().zip(a).enumerate() {
                matches_json(sv, av, bindings, &format!("{path}[{i}]"))?;
            }
            Ok(())
        }
        (Value::String(s), Value::String(a)) => {
            if matches_text(s, a, bindings) {
                Ok(())
            } else {
                Err(format!("{path}: shown {s:?}, answered {a:?}"))
            }
        }
        (Value::Number(s), Value::Number(a)) => {
            let key = path.rsplit('.').next().unwrap_or_default();
            if VARYING_NUMBERS.contains(&key) {
                if s.is_f64() == a.is_f64() {
                    Ok(())
                } else {
                    Err(format!(
                        "{path}: shown {s}, answered {a} (another kind of number)"
                    ))
                }
            } else if s == a {
                Ok(())
            } else {
                Err(format!(
                    "{path}: shown {s}, answered {a} (a count is compared exactly; a \
                     measurement's key belongs in VARYING_NUMBERS)"
                ))
            }
        }
        (s, a) if s == a => Ok(()),
        (s, a) => Err(format!("{path}: shown {s}, answered {a}")),
    }
}

/// `command` with every bound placeholder replaced by its id; `Err` names one not bound.
/// A trailing comment is left as written: the answer it shows may name the id the command
/// is about to make (`# shell 2: {"id":"0190d6a2-…",…}`).
pub fn substitute(command: &str, bindings: &Bindings) -> Result<String, String> {
    let last_start = command.rfind('\n').map_or(0, |i| i + 1);
    let (code, comment) = match shell_state(&command[last_start..]) {
        (_, Some(at)) => command.split_at(last_start + at),
        (_, None) => (command, ""),
    };
    let mut out = code.to_owned();
    for (placeholder, id) in bindings {
        out = out.replace(placeholder.as_str(), id);
    }
    let chars: Vec<char> = out.chars().collect();
    if let Some(i) = (0..chars.len()).find(|i| is_placeholder_at(&chars, *i)) {
        let p: String = chars[i..i + 10].iter().collect();
        return Err(format!(
            "the command uses {p}, which no earlier answer in the manual showed"
        ));
    }
    out.push_str(comment);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const SAMPLE: &str = r#"intro
## Local

```sh
# a comment
curl -i http://localhost:9000/lambda-url/ingest/notifications \
  -H 'X-Organization-Id: 1' \
  -d '{"channel":"email",
       "text":"a # not a comment"}'

HTTP/1.1 202 Accepted
location: /notifications/5b0f6c0e-…
{"id":"5b0f6c0e-…","status":"pending"}
make invoke/worker     # shell 3: {"claimed":1,…}
```

```sh
make deploy
```
"#;

    #[test]
    fn commands_and_answers_are_read_from_local_blocks_only() {
        let examples = local_examples(SAMPLE);
        assert_eq!(examples.len(), 2, "{examples:#?}");
        assert_eq!(examples[0].section, "Local");
        assert_eq!(examples[0].line, 6);
        assert!(
            examples[0]
                .command
                .ends_with(r#""text":"a # not a comment"}'"#)
        );
        assert_eq!(
            examples[0].shown,
            [
                "HTTP/1.1 202 Accepted",
                "location: /notifications/5b0f6c0e-…",
                r#"{"id":"5b0f6c0e-…","status":"pending"}"#
            ]
        );
        assert_eq!(examples[1].shown, [r#"{"claimed":1,…}"#]);
        let shown = parse_shown(&examples[0].shown).unwrap();
        assert_eq!(shown.status_line.as_deref(), Some("HTTP/1.1 202 Accepted"));
        assert_eq!(
            shown.headers,
            [("location".into(), "/notifications/5b0f6c0e-…".into())]
        );
    }

    #[test]
    fn a_comment_in_another_languages_block_is_no_heading() {
        let text = "## Real\n```console\n# not a heading\n$ make deploy\n```\n```sh\nmake invoke/worker\n{}\n```\n";
        let examples = local_examples_in("docs/x.md", text);
        assert_eq!(examples.len(), 1, "{examples:#?}");
        assert_eq!(examples[0].section, "Real");
    }

    #[test]
    fn each_example_names_its_page() {
        let examples = local_examples_in("docs/api.md", SAMPLE);
        assert_eq!(examples.len(), 2);
        assert!(examples.iter().all(|e| e.file == "docs/api.md"));
        assert_eq!(examples[0].place(), "docs/api.md line 6");
        assert_eq!(local_examples(SAMPLE)[1].place(), "README.md line 14");
    }

    #[test]
    fn the_manual_is_the_readme_then_docs() {
        let root = crate::watch::root();
        let files = manual_files(&root);
        assert_eq!(files[0], root.join("README.md"));
        assert!(files.contains(&root.join("docs/api.md")), "{files:?}");
        assert!(
            files
                .iter()
                .skip(1)
                .all(|f| f.starts_with(root.join("docs")))
        );
        let examples = manual_examples();
        assert!(
            examples.iter().any(|e| e.file == "README.md"),
            "README.md has a local example"
        );
        assert!(
            examples.iter().any(|e| e.file == "docs/api.md"),
            "docs/api.md has local examples"
        );
    }

    #[test]
    fn answers_match_only_the_shape_shown() {
        let shown = parse_shown(&[
            r#"{"id":"5b0f6c0e-…","status":"pending","at":"2026-11-30T09:00:00Z","n":3,"elapsed_ms":4,"#.into(),
            r#" "list":[{"a":"…",…}],"none":null}"#.into(),
        ])
        .unwrap()
        .body
        .unwrap();
        let id = "0b9d8c1e-0000-4000-8000-000000000001";
        let good = json!({"id": id, "status": "pending", "at": "2027-01-01T00:00:00.5Z", "n": 3,
                          "elapsed_ms": 91, "list": [{"a": "x", "b": 1}], "none": null});
        let mut bindings = Bindings::new();
        assert_eq!(matches_json(&shown, &good, &mut bindings, ""), Ok(()));
        assert_eq!(bindings.get("5b0f6c0e-…").map(String::as_str), Some(id));
        assert_eq!(
            substitute("curl …/notifications/5b0f6c0e-…/requeue", &bindings).unwrap(),
            format!("curl …/notifications/{id}/requeue")
        );
        assert!(substitute("curl …/notifications/7c41a2d9-…", &bindings).is_err());
        // a comment's answer may show the id the command makes: left as written
        assert_eq!(
            substitute(
                "curl -d '{\"a\":1}' …   # shell 2: {\"id\":\"7c41a2d9-…\"}",
                &bindings
            )
            .unwrap(),
            "curl -d '{\"a\":1}' …   # shell 2: {\"id\":\"7c41a2d9-…\"}"
        );
        assert!(substitute("curl …/7c41a2d9-…   # shell 2: {}", &bindings).is_err());

        // a count is compared exactly, a measurement is not
        let mut other_count = good.clone();
        other_count["n"] = json!(7);
        assert!(
            matches_json(&shown, &other_count, &mut bindings, "")
                .unwrap_err()
                .contains(".n: shown 3, answered 7")
        );

        let mut bad = good.clone();
        bad.as_object_mut().unwrap().remove("n");
        assert!(
            matches_json(&shown, &bad, &mut bindings, "")
                .unwrap_err()
                .contains(".n: shown, missing")
        );
        let mut bad = good.clone();
        bad["extra"] = json!(1);
        assert!(
            matches_json(&shown, &bad, &mut bindings, "")
                .unwrap_err()
                .contains(".extra: in the answer, not shown")
        );
        let mut bad = good.clone();
        bad["status"] = json!("sent");
        assert!(matches_json(&shown, &bad, &mut bindings, "").is_err());
        let mut bad = good.clone();
        bad["id"] = json!("7c41a2d9-0000-4000-8000-000000000002");
        assert!(
            matches_json(&shown, &bad, &mut bindings, "").is_err(),
            "bound to another id"
        );
        let mut bad = good;
        bad["list"] = json!([]);
        assert!(matches_json(&shown, &bad, &mut bindings, "").is_err());
    }

    #[test]
    fn header_values_with_placeholders() {
        let mut bindings = Bindings::new();
        let id = "0b9d8c1e-0000-4000-8000-000000000001";
        assert!(matches_text(
            "/notifications/5b0f6c0e-…",
            &format!("/notifications/{id}"),
            &mut bindings
        ));
        assert!(!matches_text(
            "/notifications/5b0f6c0e-…",
            "/notifications/x",
            &mut bindings
        ));
        assert!(matches_text("…", "anything", &mut bindings));
    }
}
