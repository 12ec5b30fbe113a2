//! The architecture rule of ARCHITECTURE.md, checked on the source text:
//!
//! 1. dependencies point down the layer list below: a module may name (`crate::x`) only
//!    modules of a lower layer, never one of its own layer or above;
//! 2. only the HTTP layer (`src/http/`, plus `main.rs` and `src/startup/`, which build
//!    the server) mentions actix;
//! 3. a type's inherent `impl` lives in one file (split a type by job into types, never
//!    its `impl` across files to make them shorter);
//! 4. one module name per concept across the tree (the route files, named after their
//!    URL area, aside), and no module named after a crate it would shadow.
//!
//! "One job per file" cannot be checked on the text; a file's size is only reported (a
//! warning in the test's output, never a failure): a long file is a reason to look for
//! a second job in it, not to cut a type apart.
//!
//! A text check, not a compiler one: it reads `crate::…` paths in code (comments are
//! skipped), which is how this crate writes every cross-module import.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Top to bottom. Keep in step with ARCHITECTURE.md's map.
const LAYERS: &[&[&str]] = &[
    &["main", "startup", "telemetry"],
    &["http"],
    &["rules", "stats", "sale"],
    &["identity"],
    &["configuration"],
    &["limiter"],
    &["store"],
    &["domain", "metrics", "background"],
    &["tally"],
    &["vocabulary"],
];

/// May use actix.
const HTTP_LAYER: &[&str] = &["http", "main", "startup"];

/// Above this a file is reported (not refused): see the module docs.
const LONG_FILE: usize = 400;

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
fn a_type_keeps_its_inherent_impl_in_one_file() {
    let (src, sources) = sources();
    let mut files_of: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for source in &sources {
        for line in source.text.lines() {
            if let Some(name) = inherent_impl(code(line)) {
                let file = relative(&src, &source.path);
                let files = files_of.entry(name).or_default();
                if !files.contains(&file) {
                    files.push(file);
                }
            }
        }
    }
    let spread: BTreeMap<_, _> = files_of
        .into_iter()
        .filter(|(_, files)| files.len() > 1)
        .collect();
    assert!(
        spread.is_empty(),
        "types whose inherent impl is spread over files (split the type by job instead): {spread:#?}"
    );
}

/// `impl Foo {` or `impl<T> Foo<T> {` at the start of a line: the type's name. Trait
/// impls (`impl X for Foo`) are not inherent and may live beside the trait.
fn inherent_impl(line: &str) -> Option<String> {
    let rest = line.strip_prefix("impl")?;
    let rest = match rest.strip_prefix('<') {
        Some(generics) => &generics[generics.find('>')? + 1..],
        None => rest,
    };
    let rest = rest.strip_prefix(' ')?;
    if !line.trim_end().ends_with('{') || rest.contains(" for ") {
        return None;
    }
    let name: String = rest
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
        .collect();
    name.starts_with(|c: char| c.is_ascii_uppercase())
        .then_some(name)
}

fn relative(src: &Path, path: &Path) -> String {
    path.strip_prefix(src).unwrap_or(path).display().to_string()
}

/// A module's name: its file's stem, or its folder's for a `mod.rs`.
fn module_name(src: &Path, path: &Path) -> Option<String> {
    let relative = path.strip_prefix(src).ok()?;
    let stem = relative.file_stem()?.to_str()?;
    match stem {
        "lib" | "main" if relative.parent() == Some(Path::new("")) => None,
        "mod" => Some(relative.parent()?.file_name()?.to_str()?.to_string()),
        _ => Some(stem.to_string()),
    }
}

#[test]
fn each_module_name_names_one_concept_and_shadows_no_crate() {
    let (src, sources) = sources();
    let routes = src.join("http").join("routes");
    let mut places: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for source in &sources {
        let Some(name) = module_name(&src, &source.path) else {
            continue;
        };
        // Route files are named after their URL area (`/admin/api` → `admin`), which
        // may be a concept's name too: the folder says they are its HTTP side.
        if source.path.starts_with(&routes) && source.path != routes.join("mod.rs") {
            continue;
        }
        places
            .entry(name)
            .or_default()
            .push(relative(&src, &source.path));
    }
    let repeated: BTreeMap<_, _> = places.iter().filter(|(_, files)| files.len() > 1).collect();
    assert!(
        repeated.is_empty(),
        "module names used for more than one module: {repeated:#?}"
    );
    let manifest =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("Cargo.toml"))
            .expect("Cargo.toml");
    let dependencies: Vec<String> = manifest
        .split("[dependencies]")
        .nth(1)
        .and_then(|rest| rest.split("\n[").next())
        .unwrap_or_default()
        .lines()
        .filter_map(|line| line.split_once('=').map(|(name, _)| name.trim()))
        .filter(|name| !name.is_empty() && !name.starts_with('#'))
        .map(|name| name.replace('-', "_"))
        .collect();
    let shadowing: Vec<_> = places
        .keys()
        .filter(|name| dependencies.contains(name))
        .collect();
    assert!(
        shadowing.is_empty(),
        "modules named after a crate they would shadow: {shadowing:?}"
    );
}

#[test]
fn long_files_are_reported_not_refused() {
    let (src, sources) = sources();
    for source in &sources {
        let lines = source.text.lines().count();
        if lines > LONG_FILE {
            eprintln!(
                "warning: {} has {lines} lines: does it hold more than one job?",
                relative(&src, &source.path)
            );
        }
    }
}
