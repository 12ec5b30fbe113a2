//! The architecture rule of ARCHITECTURE.md, checked on the source text:
//!
//! 1. dependencies point down the layer list below: a module may name (`crate::x`) only
//!    modules of a lower layer, never one of its own layer or above;
//! 2. only the HTTP layer (`src/http/`, plus `main.rs` and `startup.rs`, which build the
//!    server) mentions actix;
//! 3. no file in `src/` is longer than 350 lines.
//!
//! A text check, not a compiler one: it reads `crate::…` paths in code (comments are
//! skipped), which is how this crate writes every cross-module import.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Top to bottom. Keep in step with ARCHITECTURE.md's map.
const LAYERS: &[&[&str]] = &[
    &["main", "startup", "telemetry"],
    &["http"],
    &["admin", "sale"],
    &["identity"],
    &["configuration"],
    &["limiter"],
    &["store"],
    &["domain", "metrics", "background"],
];

/// May use actix.
const HTTP_LAYER: &[&str] = &["http", "main", "startup"];

const MAX_LINES: usize = 350;

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let entries = std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    for entry in entries {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// `src/sale/redis.rs` → `sale`; `src/lib.rs` → `None` (the root names every module).
fn top_module(src: &Path, file: &Path) -> Option<String> {
    let relative = file.strip_prefix(src).ok()?;
    let first = relative.components().next()?.as_os_str().to_str()?;
    let name = first.trim_end_matches(".rs");
    (name != "lib").then(|| name.to_string())
}

/// The code of a line, without its `//` comment (doc comments included).
fn code(line: &str) -> &str {
    line.split("//").next().unwrap_or("")
}

fn layer_of(module: &str) -> usize {
    LAYERS
        .iter()
        .position(|layer| layer.contains(&module))
        .unwrap_or_else(|| panic!("module `{module}` is in no layer of tests/architecture.rs"))
}

/// Every `crate::name` in `text`.
fn named_modules(text: &str) -> Vec<String> {
    text.match_indices("crate::")
        .map(|(at, _)| {
            text[at + "crate::".len()..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect()
        })
        .collect()
}

struct Source {
    module: String,
    path: PathBuf,
    text: String,
}

fn sources() -> (PathBuf, Vec<Source>) {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    files.sort();
    let sources = files
        .into_iter()
        .filter_map(|path| {
            let module = top_module(&src, &path)?;
            let text = std::fs::read_to_string(&path).expect("a readable source file");
            Some(Source { module, path, text })
        })
        .collect();
    (src, sources)
}

#[test]
fn dependencies_point_down_the_layers() {
    let (src, sources) = sources();
    let mut violations: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for source in &sources {
        let own = layer_of(&source.module);
        for (number, line) in source.text.lines().enumerate() {
            for named in named_modules(code(line)) {
                if named == source.module {
                    continue;
                }
                // `use crate::{a::X, b::Y}` would hide its modules from this check.
                assert!(
                    !named.is_empty(),
                    "{}:{}: write one `use crate::module::…` per module",
                    source.path.display(),
                    number + 1
                );
                if layer_of(&named) <= own {
                    violations
                        .entry(format!("{} → {named}", source.module))
                        .or_default()
                        .push(format!(
                            "{}:{}",
                            source
                                .path
                                .strip_prefix(&src)
                                .unwrap_or(&source.path)
                                .display(),
                            number + 1
                        ));
                }
            }
        }
    }
    assert!(
        violations.is_empty(),
        "dependencies that point up or sideways (see ARCHITECTURE.md): {violations:#?}"
    );
}

#[test]
fn only_the_http_layer_knows_actix() {
    let (_, sources) = sources();
    let offenders: Vec<String> = sources
        .iter()
        .filter(|s| !HTTP_LAYER.contains(&s.module.as_str()))
        .filter(|s| s.text.lines().any(|line| code(line).contains("actix")))
        .map(|s| s.path.display().to_string())
        .collect();
    assert!(
        offenders.is_empty(),
        "actix outside the HTTP layer: {offenders:#?}"
    );
}

#[test]
fn no_source_file_is_longer_than_350_lines() {
    let (_, sources) = sources();
    let long: Vec<String> = sources
        .iter()
        .map(|s| (s.path.display().to_string(), s.text.lines().count()))
        .filter(|(_, lines)| *lines > MAX_LINES)
        .map(|(path, lines)| format!("{path}: {lines}"))
        .collect();
    assert!(long.is_empty(), "files over {MAX_LINES} lines: {long:#?}");
}
