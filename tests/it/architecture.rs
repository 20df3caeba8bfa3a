//! The layout the crates promise: no import cycle between the modules of a crate, only the
//! worker links the SDKs that send (SNS, SES v2), and every function's build gives the
//! dependencies the functions share the same features.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The library crates under shared/, by folder.
const CRATES: [&str; 4] = ["core", "postgres", "delivery", "api"];

fn rust_files(dir: &Path, found: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, found);
        } else if path.extension().is_some_and(|ext| ext == "rs") {
            found.push(path);
        }
    }
}

/// `text` without its comments: `//` at a line's start or after a space opens one (so
/// `https://` in a string stays).
fn code(text: &str) -> String {
    text.lines()
        .map(|line| {
            let cut = line
                .match_indices("//")
                .find(|(i, _)| *i == 0 || line[..*i].ends_with(char::is_whitespace))
                .map_or(line.len(), |(i, _)| i);
            &line[..cut]
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The top-level modules a file's code names through `crate::`, grouped imports included
/// (`use crate::{a::X, b};` names a and b).
fn crate_references(code: &str) -> BTreeSet<String> {
    let ident = |s: &str| -> String {
        s.trim_start()
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect()
    };
    let mut found = BTreeSet::new();
    for (i, _) in code.match_indices("crate::") {
        let rest = &code[i + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            let mut depth = 1;
            let mut item = String::new();
            for c in group.chars() {
                match c {
                    '{' => depth += 1,
                    '}' => depth -= 1,
                    _ => {}
                }
                if depth == 0 || (depth == 1 && c == ',') {
                    found.insert(ident(&item));
                    item.clear();
                    if depth == 0 {
                        break;
                    }
                } else {
                    item.push(c);
                }
            }
        } else {
            found.insert(ident(rest));
        }
    }
    found.retain(|name| !name.is_empty() && name != "self");
    found
}

/// Each top-level module of a crate and the top-level modules it names.
fn module_graph(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for file in files {
        let relative = file.strip_prefix(src).unwrap();
        let first = relative.components().next().unwrap().as_os_str();
        let module = first.to_string_lossy().trim_end_matches(".rs").to_owned();
        if ["lib", "main", "bin"].contains(&module.as_str()) {
            continue; // the crate root declares and re-exports its modules
        }
        let text = std::fs::read_to_string(&file).unwrap();
        let mut names = crate_references(&code(&text));
        names.remove(&module);
        graph.entry(module).or_default().extend(names);
    }
    graph
}

/// A cycle of the graph, as the modules along it, if there is one.
fn cycle(graph: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        node: &str,
        graph: &BTreeMap<String, BTreeSet<String>>,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(at) = path.iter().position(|n| n == node) {
            let mut found = path[at..].to_vec();
            found.push(node.to_owned());
            return Some(found);
        }
        if done.contains(node) {
            return None;
        }
        path.push(node.to_owned());
        for next in graph.get(node).into_iter().flatten() {
            if let Some(found) = visit(next, graph, path, done) {
                return Some(found);
            }
        }
        path.pop();
        done.insert(node.to_owned());
        None
    }
    let mut done = BTreeSet::new();
    graph
        .keys()
        .find_map(|node| visit(node, graph, &mut Vec::new(), &mut done))
}

#[test]
fn no_crate_has_an_import_cycle_between_its_modules() {
    for krate in CRATES {
        let src = workspace().join("shared").join(krate).join("src");
        let graph = module_graph(&src);
        assert!(graph.len() > 1, "shared/{krate}: no modules found");
        if let Some(found) = cycle(&graph) {
            panic!(
                "shared/{krate}: an import cycle: {}\n{graph:#?}",
                found.join(" → ")
            );
        }
    }
}

#[test]
fn the_cycle_finder_finds_one() {
    let graph = module_graph_of(&[
        ("store.rs", "use crate::feedback::FeedbackEvent;"),
        ("feedback.rs", "use crate::{domain::Channel, store::Store};"),
        (
            "domain.rs",
            "// crate::store in a comment is not an import\n",
        ),
    ]);
    assert_eq!(
        cycle(&graph),
        Some(vec!["feedback".into(), "store".into(), "feedback".into()])
    );
    assert_eq!(graph["domain"], BTreeSet::new());
}

fn module_graph_of(files: &[(&str, &str)]) -> BTreeMap<String, BTreeSet<String>> {
    let dir = std::env::temp_dir().join(format!("notif-graph-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for (name, text) in files {
        std::fs::write(dir.join(name), text).unwrap();
    }
    let graph = module_graph(&dir);
    std::fs::remove_dir_all(&dir).unwrap();
    graph
}

/// The packages a manifest depends on (normal dependencies only).
fn dependencies(manifest: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(manifest).unwrap();
    let mut deps = Vec::new();
    let mut in_deps = false;
    for line in text.lines() {
        let line = line.trim();
        if line.starts_with('[') {
            in_deps = line == "[dependencies]"
                || (line.starts_with("[target.") && line.ends_with(".dependencies]"));
        } else if in_deps
            && !line.starts_with('#')
            && let Some((name, _)) = line.split_once(['=', '.'])
        {
            deps.push(name.trim().to_owned());
        }
    }
    deps
}

/// What a package links, following the workspace's own crates.
fn links(manifest: &Path) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    for dep in dependencies(manifest) {
        if let Some(krate) = dep.strip_prefix("notify-") {
            let inner = workspace().join("shared").join(krate).join("Cargo.toml");
            found.extend(links(&inner));
        }
        found.insert(dep);
    }
    found
}

/// The Lambda functions, by folder under functions/.
const FUNCTIONS: [&str; 6] = [
    "ingest", "worker", "sweeper", "feedback", "migrate", "token",
];

#[test]
fn only_the_worker_links_the_sdks_that_send() {
    for function in FUNCTIONS {
        let manifest = workspace()
            .join("functions")
            .join(function)
            .join("Cargo.toml");
        let links = links(&manifest);
        assert!(links.contains("notify-core"), "{function}: {links:?}");
        for sdk in ["aws-sdk-sns", "aws-sdk-sesv2", "notify-delivery"] {
            assert_eq!(
                links.contains(sdk),
                function == "worker",
                "{function} and {sdk}: only the worker links it"
            );
        }
    }
}

/// Each package of a function's build for Lambda (its normal and build dependencies, as
/// `sam build` resolves them: `cargo lambda build --bin NAME` in the function's folder, for
/// arm64) with the features it is built with: `name version` → `features`.
fn resolved_features(function: &str) -> BTreeMap<String, String> {
    let out = std::process::Command::new(env!("CARGO"))
        .args([
            "tree",
            "-e",
            "normal,build",
            "--prefix",
            "none",
            "-f",
            "{p} [{f}]",
        ])
        .args(["--target", "aarch64-unknown-linux-gnu"])
        .current_dir(workspace().join("functions").join(function))
        .output()
        .expect("run cargo tree");
    assert!(
        out.status.success(),
        "cargo tree for {function}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .expect("cargo tree's output is UTF-8")
        .lines()
        .filter_map(|line| {
            let (package, features) = line.trim_end_matches(" (*)").rsplit_once(" [")?;
            let mut words = package.split_whitespace();
            let id = format!("{} {}", words.next()?, words.next()?);
            Some((id, features.trim_end_matches(']').to_owned()))
        })
        .collect()
}

/// `sam build` builds each function on its own, so a dependency two functions build with
/// different features compiles twice, and everything built on it too (once the SDK stack
/// compiled three times over). shared/workspace-hack asks for the union; this names what
/// still differs.
#[test]
fn the_functions_build_shared_dependencies_with_the_same_features() {
    // package → its features → the functions that build it so
    let mut seen: BTreeMap<String, BTreeMap<String, Vec<&str>>> = BTreeMap::new();
    for function in FUNCTIONS {
        for (package, features) in resolved_features(function) {
            seen.entry(package)
                .or_default()
                .entry(features)
                .or_default()
                .push(function);
        }
    }
    // the output was read: every function builds on tokio
    assert!(seen.keys().any(|package| package.starts_with("tokio v")));
    let differ: Vec<String> = seen
        .iter()
        // the hack itself has no code and nothing builds on it: the token trigger leaves out
        // its `aws-sdk` feature, so its tree holds no SDK
        .filter(|(package, _)| !package.starts_with("workspace-hack "))
        .filter(|(_, variants)| variants.len() > 1)
        .map(|(package, variants)| format!("{package}: {variants:?}"))
        .collect();
    assert!(
        differ.is_empty(),
        "dependencies the functions build with different features (add the union to \
         shared/workspace-hack/Cargo.toml):\n{}",
        differ.join("\n")
    );
}
