//! The architecture rule of ARCHITECTURE.md, checked on the source text:
//!
//! 1. dependencies point down the layer list below: a module may name (`crate::x`) only
//!    modules of a lower layer, never one of its own layer or above;
//! 2. only the HTTP layer (`src/http/`, plus `main.rs` and `src/startup/`, which build
//!    the server) mentions actix;
//! 3. a type's inherent `impl` lives in one file (split a type by job into types, never
//!    its `impl` across files to make them shorter);
//! 4. one module name per concept across the tree (the route files, named after their
//!    URL area, aside), and no module named after a crate it would shadow;
//! 5. no import cycle between files, in this crate or in the load tools' (their shared
//!    core and each tool's crate): no file depends, directly or through others, on a
//!    file that depends on it (a `mod.rs` and its children included).
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
    &["http", "grpc"],
    &["history"],
    &["rules", "stats", "sale", "edge"],
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

/// Where a `Caller` may be built: the limiter's own file, the one builder every route
/// goes through (`http::rate_limit::caller`, which takes the route from the router), and
/// the limiter's unit tests. A route that spells its own would spell its route again and
/// could leave out a key source its policy's row promises.
const CALLER_BUILDERS: &[&str] = &[
    "limiter/keys.rs",
    "http/rate_limit.rs",
    "configuration/tests.rs",
];

#[test]
fn routes_build_their_caller_through_the_one_builder() {
    let (src, sources) = sources();
    let offenders: Vec<String> = sources
        .iter()
        .filter(|s| !CALLER_BUILDERS.contains(&relative(&src, &s.path).as_str()))
        .filter(|s| s.text.lines().any(|line| code(line).contains("Caller {")))
        .map(|s| s.path.display().to_string())
        .collect();
    assert!(
        offenders.is_empty(),
        "a Caller built outside http::rate_limit::caller: {offenders:#?}"
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

/// The crates whose files must not import each other in a circle, by their `src/`
/// folder under this manifest's: the server's library, and the load tools' (other
/// crates of the workspace, read as text too, so this one test holds them all; a tool
/// crate without its folder here fails `every_load_tool_crate_is_checked_for_cycles`).
const CYCLE_FREE_CRATES: &[&str] = &[
    "src",
    "loadtest/core/src",
    "loadtest/loadgen/src",
    "loadtest/queue-bench/src",
    "loadtest/slowloris/src",
    "loadtest/trace/src",
];

#[test]
fn no_two_files_import_each_other_even_through_others() {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut found = Vec::new();
    for root in CYCLE_FREE_CRATES {
        for cycle in import_cycles(&manifest.join(root)) {
            found.push(format!("{root}: {}", cycle.join(" ⇄ ")));
        }
    }
    assert!(
        found.is_empty(),
        "files that import each other, directly or through others (move what both \
         need to a file of its own, below both): {found:#?}"
    );
}

/// Every load tool's crate of the workspace (a member under `loadtest/` of more than one
/// file: one file cannot import itself) is in `CYCLE_FREE_CRATES`, so a tool split off
/// later is checked too.
#[test]
fn every_load_tool_crate_is_checked_for_cycles() {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    let unchecked: Vec<String> = load_tool_crates(
        &std::fs::read_to_string(manifest.join("Cargo.toml")).expect("the root manifest"),
    )
    .into_iter()
    .map(|member| format!("{member}/src"))
    .filter(|src| {
        let mut files = Vec::new();
        rust_files(&manifest.join(src), &mut files);
        files.len() > 1 && !CYCLE_FREE_CRATES.contains(&src.as_str())
    })
    .collect();
    assert!(
        unchecked.is_empty(),
        "load tool crates missing from CYCLE_FREE_CRATES: {unchecked:?}"
    );
}

/// The workspace members under `loadtest/`, from the root manifest's `members` list.
fn load_tool_crates(manifest: &str) -> Vec<String> {
    let members = manifest
        .split_once("members = [")
        .and_then(|(_, rest)| rest.split_once(']'))
        .map_or("", |(list, _)| list);
    members
        .split('"')
        .skip(1)
        .step_by(2)
        .filter(|member| member.starts_with("loadtest/"))
        .map(str::to_string)
        .collect()
}

/// The import cycles between the library files under `root` (a crate's `src/`): each
/// strongly connected component of more than one file, as sorted relative paths.
///
/// A file depends on the file that defines what it names through `crate::`, `super::`,
/// `self::` or a child module's name, in a `use` or in code. A `pub use` re-export is
/// see-through: `super::ApiError` leads to `api_error.rs`, not to the `mod.rs` that
/// re-exports it, and the re-export itself is no dependency of the `mod.rs` (else every
/// facade would close a loop with its children). `main.rs` and `bin/` are crates of their
/// own and are left out.
fn import_cycles(root: &Path) -> Vec<Vec<String>> {
    let mut paths = Vec::new();
    rust_files(root, &mut paths);
    paths.sort();
    let files: Vec<ParsedFile> = paths
        .iter()
        .filter_map(|path| {
            let relative = path.strip_prefix(root).ok()?;
            let module = module_path(relative)?;
            let text = std::fs::read_to_string(path).expect("a readable source file");
            Some(ParsedFile {
                name: relative.display().to_string(),
                module,
                paths: paths_named(&tokens(&blank_comments_and_literals(&text))),
            })
        })
        .collect();
    let graph = ModuleGraph::new(&files);
    let edges: Vec<Vec<usize>> = (0..files.len())
        .map(|from| {
            let mut to: Vec<usize> = graph
                .dependencies(from)
                .into_iter()
                .filter(|&to| to != from)
                .collect();
            to.sort_unstable();
            to.dedup();
            to
        })
        .collect();
    strongly_connected(&edges)
        .into_iter()
        .filter(|component| component.len() > 1)
        .map(|component| {
            let mut names: Vec<String> = component.iter().map(|&i| files[i].name.clone()).collect();
            names.sort();
            names
        })
        .collect()
}

/// `http/rate_limit.rs` → `["http", "rate_limit"]`, `http/mod.rs` → `["http"]`,
/// `lib.rs` → `[]`; `None` for the roots of other crates (`main.rs`, `bin/`).
fn module_path(relative: &Path) -> Option<Vec<String>> {
    let mut parts: Vec<String> = relative
        .components()
        .map(|c| {
            c.as_os_str()
                .to_str()
                .map(|s| s.trim_end_matches(".rs").to_string())
        })
        .collect::<Option<_>>()?;
    if parts == ["main"] || parts.first().is_some_and(|p| p == "bin") {
        return None;
    }
    if parts.last().is_some_and(|p| p == "mod" || p == "lib") {
        parts.pop();
    }
    Some(parts)
}

struct ParsedFile {
    name: String,
    module: Vec<String>,
    paths: Vec<NamedPath>,
}

/// One path a file writes, with what the reader needs to resolve it.
struct NamedPath {
    segments: Vec<String>,
    /// Inside how many inline `mod x { … }` (a `super::` there counts from the inline module).
    inline_depth: usize,
    /// Part of a `pub use` (or `pub(…) use`) at the file's top: a re-export.
    reexport: bool,
    /// The name it is known by here (its `as` alias, or its last segment).
    alias: String,
}

/// `text` with comments, strings and character literals turned to spaces, so that a
/// path, a brace or a `mod` in them is not read as code.
fn blank_comments_and_literals(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    let blank = |out: &mut String, c: char| out.push(if c == '\n' { '\n' } else { ' ' });
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        if c == '/' && next == Some('/') {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            let mut depth = 0;
            while i < chars.len() {
                if chars[i] == '/' && chars.get(i + 1) == Some(&'*') {
                    depth += 1;
                    i += 2;
                } else if chars[i] == '*' && chars.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    blank(&mut out, chars[i]);
                    i += 1;
                }
            }
        } else if c == 'r'
            && (next == Some('"') || next == Some('#'))
            && !ident_char(chars.get(i.wrapping_sub(1)).copied())
        {
            let hashes = chars[i + 1..].iter().take_while(|&&h| h == '#').count();
            if chars.get(i + 1 + hashes) != Some(&'"') {
                out.push(c);
                i += 1;
                continue;
            }
            i += 2 + hashes;
            while i < chars.len() {
                if chars[i] == '"'
                    && chars[i + 1..]
                        .iter()
                        .take(hashes)
                        .filter(|&&h| h == '#')
                        .count()
                        == hashes
                {
                    i += 1 + hashes;
                    break;
                }
                blank(&mut out, chars[i]);
                i += 1;
            }
        } else if c == '"' {
            i += 1;
            while i < chars.len() && chars[i] != '"' {
                if chars[i] == '\\' {
                    i += 1;
                }
                if let Some(&skipped) = chars.get(i) {
                    blank(&mut out, skipped);
                }
                i += 1;
            }
            i += 1;
        } else if c == '\'' && (chars.get(i + 2) == Some(&'\'') || next == Some('\\')) {
            // A character literal ('{', '\n', '\u{7b}'), not a lifetime.
            i += 1;
            while i < chars.len() && chars[i] != '\'' {
                if chars[i] == '\\' {
                    i += 1;
                }
                i += 1;
            }
            i += 1;
        } else {
            out.push(c);
            i += 1;
        }
    }
    out
}

fn ident_char(c: Option<char>) -> bool {
    c.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_')
}

#[derive(Clone, PartialEq)]
enum Token {
    Word(String),
    PathSep,
    Punct(char),
}

fn tokens(code: &str) -> Vec<Token> {
    let chars: Vec<char> = code.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c.is_ascii_alphanumeric() || c == '_' {
            let start = i;
            while ident_char(chars.get(i).copied()) {
                i += 1;
            }
            out.push(Token::Word(chars[start..i].iter().collect()));
        } else if c == ':' && chars.get(i + 1) == Some(&':') {
            out.push(Token::PathSep);
            i += 2;
        } else {
            if !c.is_whitespace() {
                out.push(Token::Punct(c));
            }
            i += 1;
        }
    }
    out
}

fn word(tokens: &[Token], at: usize) -> Option<&str> {
    match tokens.get(at) {
        Some(Token::Word(w)) => Some(w),
        _ => None,
    }
}

/// Every path of two segments or more (`a::b`, `a::{b, c::d}`), expanded.
fn paths_named(tokens: &[Token]) -> Vec<NamedPath> {
    let mut out = Vec::new();
    let mut depth = 0usize;
    let mut inline_mods: Vec<usize> = Vec::new();
    let mut reexport = false;
    let mut i = 0;
    while i < tokens.len() {
        match &tokens[i] {
            Token::Punct('{') => depth += 1,
            Token::Punct('}') => {
                depth = depth.saturating_sub(1);
                if inline_mods.last() == Some(&depth) {
                    inline_mods.pop();
                }
            }
            Token::Punct(';') => reexport = false,
            Token::Word(w) if w == "mod" && tokens.get(i + 2) == Some(&Token::Punct('{')) => {
                inline_mods.push(depth);
            }
            Token::Word(w) if w == "use" => {
                let before = i.checked_sub(1).map(|b| &tokens[b]);
                reexport = inline_mods.is_empty()
                    && (before == Some(&Token::Word("pub".into()))
                        || before == Some(&Token::Punct(')')));
            }
            Token::Word(_)
                if tokens.get(i + 1) == Some(&Token::PathSep)
                    && (i == 0 || tokens[i - 1] != Token::PathSep) =>
            {
                let mut found = Vec::new();
                i = path_tree(tokens, i, Vec::new(), &mut found);
                for (segments, alias) in found {
                    out.push(NamedPath {
                        segments,
                        inline_depth: inline_mods.len(),
                        reexport,
                        alias,
                    });
                }
                continue;
            }
            _ => {}
        }
        i += 1;
    }
    out
}

/// Reads the path (tree) starting at `at` after `prefix`; returns the index after it.
fn path_tree(
    tokens: &[Token],
    mut at: usize,
    mut prefix: Vec<String>,
    found: &mut Vec<(Vec<String>, String)>,
) -> usize {
    loop {
        match tokens.get(at) {
            Some(Token::Word(w)) => {
                prefix.push(w.clone());
                at += 1;
            }
            Some(Token::Punct('*')) => {
                at += 1;
                break;
            }
            Some(Token::Punct('{')) => {
                at += 1;
                while let Some(token) = tokens.get(at) {
                    match token {
                        Token::Punct('}') => {
                            at += 1;
                            break;
                        }
                        Token::Punct(',') => at += 1,
                        _ => at = path_tree(tokens, at, prefix.clone(), found),
                    }
                }
                return at;
            }
            _ => break,
        }
        if tokens.get(at) != Some(&Token::PathSep) {
            break;
        }
        at += 1;
    }
    if prefix.last().is_some_and(|s| s == "self") {
        prefix.pop();
    }
    let mut alias = prefix.last().cloned().unwrap_or_default();
    if word(tokens, at) == Some("as") {
        if let Some(name) = word(tokens, at + 1) {
            alias = name.to_string();
            at += 2;
        }
    }
    if !prefix.is_empty() {
        found.push((prefix, alias));
    }
    at
}

struct ModuleGraph<'a> {
    files: &'a [ParsedFile],
    by_module: BTreeMap<Vec<String>, usize>,
}

impl<'a> ModuleGraph<'a> {
    fn new(files: &'a [ParsedFile]) -> Self {
        let by_module = files
            .iter()
            .enumerate()
            .map(|(i, f)| (f.module.clone(), i))
            .collect();
        Self { files, by_module }
    }

    /// The files `from` depends on (re-exports aside, see `import_cycles`).
    fn dependencies(&self, from: usize) -> Vec<usize> {
        self.files[from]
            .paths
            .iter()
            .filter(|p| !p.reexport)
            .filter_map(|p| self.absolute(from, p))
            .filter_map(|absolute| self.defining_file(&absolute, 0))
            .collect()
    }

    /// The path from the crate's root, or `None` for another crate's (`std::…`).
    fn absolute(&self, from: usize, path: &NamedPath) -> Option<Vec<String>> {
        let own = &self.files[from].module;
        let first = path.segments.first()?.as_str();
        let (base, rest): (Vec<String>, &[String]) = match first {
            "crate" => (Vec::new(), &path.segments[1..]),
            "super" => {
                let ups = path.segments.iter().take_while(|s| *s == "super").count();
                // Inside an inline module the first `super`s stay in this file.
                let ups = ups.checked_sub(path.inline_depth).filter(|&u| u > 0)?;
                (
                    own[..own.len().checked_sub(ups)?].to_vec(),
                    &path.segments[ups + path.inline_depth..],
                )
            }
            "self" if path.inline_depth == 0 => (own.clone(), &path.segments[1..]),
            child if path.inline_depth == 0 => {
                let mut module = own.clone();
                module.push(child.to_string());
                self.by_module
                    .contains_key(&module)
                    .then_some((own.clone(), &path.segments[..]))?
            }
            _ => return None,
        };
        Some(base.into_iter().chain(rest.iter().cloned()).collect())
    }

    /// The file whose module is the longest prefix of `path`, seen through its re-exports.
    fn defining_file(&self, path: &[String], hops: usize) -> Option<usize> {
        let (file, rest) = (0..=path.len()).rev().find_map(|n| {
            self.by_module
                .get(&path[..n])
                .map(|&file| (file, &path[n..]))
        })?;
        let Some(name) = rest.first() else {
            return Some(file);
        };
        let reexported = self.files[file]
            .paths
            .iter()
            .filter(|p| p.reexport && &p.alias == name)
            .find_map(|p| self.absolute(file, p));
        match reexported {
            Some(target) if hops < 8 => {
                let onward: Vec<String> = target
                    .into_iter()
                    .chain(rest[1..].iter().cloned())
                    .collect();
                self.defining_file(&onward, hops + 1)
            }
            _ => Some(file),
        }
    }
}

/// Tarjan's algorithm: the strongly connected components of the graph `edges`.
fn strongly_connected(edges: &[Vec<usize>]) -> Vec<Vec<usize>> {
    struct State<'e> {
        edges: &'e [Vec<usize>],
        index: Vec<Option<usize>>,
        low: Vec<usize>,
        on_stack: Vec<bool>,
        stack: Vec<usize>,
        next: usize,
        components: Vec<Vec<usize>>,
    }
    fn visit(s: &mut State, v: usize) {
        s.index[v] = Some(s.next);
        s.low[v] = s.next;
        s.next += 1;
        s.stack.push(v);
        s.on_stack[v] = true;
        for &w in &s.edges[v] {
            match s.index[w] {
                None => {
                    visit(s, w);
                    s.low[v] = s.low[v].min(s.low[w]);
                }
                Some(index) if s.on_stack[w] => s.low[v] = s.low[v].min(index),
                Some(_) => {}
            }
        }
        if Some(s.low[v]) == s.index[v] {
            let mut component = Vec::new();
            while let Some(w) = s.stack.pop() {
                s.on_stack[w] = false;
                component.push(w);
                if w == v {
                    break;
                }
            }
            s.components.push(component);
        }
    }
    let n = edges.len();
    let mut state = State {
        edges,
        index: vec![None; n],
        low: vec![0; n],
        on_stack: vec![false; n],
        stack: Vec::new(),
        next: 0,
        components: Vec::new(),
    };
    for v in 0..n {
        if state.index[v].is_none() {
            visit(&mut state, v);
        }
    }
    state.components
}

/// The reader of `import_cycles` on a small crate: a `mod.rs` re-exporting its children
/// is no cycle, nor a `super::` inside an inline test module (it stays in its file), nor
/// a path in a comment; a child importing from the `mod.rs` that uses it is one.
#[test]
fn import_cycles_sees_through_reexports_and_inline_modules() {
    let root = Path::new(env!("CARGO_TARGET_TMPDIR")).join("import-cycles");
    let _ = std::fs::remove_dir_all(&root);
    let write = |file: &str, text: &str| {
        let path = root.join(file);
        std::fs::create_dir_all(path.parent().expect("a parent")).expect("a folder");
        std::fs::write(path, text).expect("a written file");
    };
    write("lib.rs", "pub mod a;\npub mod b;\n");
    write(
        "a/mod.rs",
        "mod inner;\npub use inner::Inner;\npub struct Face;\nfn f() { inner::g(); }\n",
    );
    write(
        "a/inner.rs",
        "pub struct Inner;\npub fn g() {}\n// super::Face\nmod tests {\n    use super::Inner;\n}\n",
    );
    write("b.rs", "use crate::a::Inner;\nuse crate::a::Face;\n");
    assert_eq!(import_cycles(&root), Vec::<Vec<String>>::new());
    write(
        "a/inner.rs",
        "use super::Face;\npub struct Inner;\npub fn g() {}\n",
    );
    assert_eq!(
        import_cycles(&root),
        vec![vec!["a/inner.rs".to_string(), "a/mod.rs".to_string()]]
    );
}
