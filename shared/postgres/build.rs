//! The build of notify-postgres:
//! - embeds `migrations/*.sql`, in file-name order;
//! - composes `sql/`: every `-- @include` copy is rewritten from its source (see
//!   `src/compose.rs`), so the committed files are the statements PostgreSQL runs. A file it
//!   rewrites shows as a diff, which CI refuses: commit what the build wrote.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::path::Path;

#[path = "src/compose.rs"]
#[allow(dead_code)]
mod compose;

fn sql_files(dir: &Path) -> Vec<std::path::PathBuf> {
    println!("cargo:rerun-if-changed={}", dir.display());
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", dir.display()))
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .filter(|path| path.extension().is_some_and(|ext| ext == "sql"))
        .collect();
    files.sort();
    for path in &files {
        println!("cargo:rerun-if-changed={}", path.display());
    }
    files
}

fn embed_migrations(root: &Path) {
    let mut out = String::from("&[\n");
    for path in sql_files(&root.join("../../migrations")) {
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let full = path.canonicalize().unwrap();
        writeln!(out, "    ({name:?}, include_str!({:?})),", full.display()).unwrap();
    }
    out.push(']');
    let target = Path::new(&std::env::var("OUT_DIR").unwrap()).join("migrations.rs");
    std::fs::write(target, out).unwrap();
}

fn compose_statements(root: &Path) {
    let dir = root.join("sql");
    let sources: BTreeMap<String, String> = sql_files(&dir)
        .into_iter()
        .map(|path| {
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            let text = std::fs::read_to_string(&path).unwrap();
            (name, text)
        })
        .collect();
    let stale = compose::refresh(&sources).unwrap_or_else(|err| panic!("{err}"));
    for (name, text) in stale {
        // only a file whose copy changed is written, so the next build finds nothing to do
        std::fs::write(dir.join(&name), text).unwrap();
        println!("cargo:warning=sql/{name} recomposed from its sources: commit it");
    }
}

fn main() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    embed_migrations(root);
    compose_statements(root);
}
