//! The names the docs cite exist in the code: the files they point at, the settings, the
//! schema's constraints and indexes, the metric families. A renamed file, a dropped
//! constraint or a removed setting fails here, not in a reader's hands. Two lists hold
//! the other way too: every source file is named in ARCHITECTURE.md's code map, and every
//! setting in deploy/README.md's table.
//!
//! Read on the text of the documents (README.md, ARCHITECTURE.md, deploy/README.md,
//! loadtest/README.md, docs/*.md) and of the code, like `tests/architecture.rs`.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use seckill::vocabulary::Word;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Every document, with its text.
fn documents() -> Vec<(PathBuf, String)> {
    let root = root();
    let mut paths: Vec<PathBuf> = [
        "README.md",
        "ARCHITECTURE.md",
        "deploy/README.md",
        "loadtest/README.md",
    ]
    .iter()
    .map(|p| root.join(p))
    .collect();
    let mut docs: Vec<PathBuf> = std::fs::read_dir(root.join("docs"))
        .expect("docs/")
        .filter_map(|e| Some(e.ok()?.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    docs.sort();
    paths.extend(docs);
    paths.into_iter().map(|p| (p.clone(), read(&p))).collect()
}

/// The text of every file below `dir` (recursively), skipping build output and
/// installed packages.
fn tree_text(dir: &Path) -> String {
    let mut text = String::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return text;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let name = entry.file_name().to_string_lossy().to_string();
        if ["target", "node_modules", ".git", ".local", "test-artifacts"].contains(&name.as_str()) {
            continue;
        }
        if path.is_dir() {
            text.push_str(&tree_text(&path));
        } else if let Ok(file) = std::fs::read_to_string(&path) {
            text.push_str(&file);
            text.push('\n');
        }
    }
    text
}

/// Backticked spans (`like this`) of a document.
fn spans(text: &str) -> Vec<&str> {
    text.split('`').skip(1).step_by(2).collect()
}

/// Local link targets (`](path)`, without an anchor) of a document.
fn links(text: &str) -> Vec<&str> {
    text.split("](")
        .skip(1)
        .filter_map(|rest| rest.split(')').next())
        .map(|target| target.split('#').next().unwrap_or(""))
        .filter(|t| !t.is_empty() && !t.contains("://") && !t.starts_with("mailto:"))
        .collect()
}

const TOP_DIRS: [&str; 10] = [
    "src/",
    "lua/",
    "scripts/",
    "migrations/",
    "static/",
    "docs/",
    "tests/",
    "deploy/",
    "loadtest/",
    "fuzz/",
];

#[test]
fn every_file_the_docs_point_at_exists() {
    let root = root();
    // What the runs write (a fuzz corpus, reports) is git-ignored: cited, never shipped.
    let ignored: Vec<String> = read(&root.join(".gitignore"))
        .lines()
        .filter(|l| l.starts_with('/') && l.ends_with('/'))
        .map(|l| l.trim_matches('/').to_string())
        .collect();
    let mut missing = Vec::new();
    for (doc, text) in documents() {
        let cited = spans(&text)
            .into_iter()
            .filter(|s| TOP_DIRS.iter().any(|d| s.starts_with(d)))
            .filter(|s| !s.contains(['<', '{', '*', '…', '$', ' ', '|']))
            .map(|s| root.join(s.trim_end_matches(['/', ':', ','])));
        let linked = links(&text)
            .into_iter()
            .map(|l| doc.parent().unwrap_or(&root).join(l));
        for path in cited.chain(linked) {
            let output = ignored.iter().any(|dir| path.starts_with(root.join(dir)));
            if !path.exists() && !output {
                missing.push(format!("{} cites {}", doc.display(), path.display()));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "files the docs cite that do not exist: {missing:#?}"
    );
}

/// `pub name:` fields of `struct <name>` in `file`.
fn struct_fields(file: &str, name: &str) -> BTreeSet<String> {
    let start = file
        .find(&format!("pub struct {name} {{"))
        .unwrap_or_else(|| panic!("struct {name}"));
    let body = &file[start..];
    let body = &body[..body.find("\n}\n").unwrap_or(body.len())];
    body.lines()
        .filter_map(|l| l.trim().strip_prefix("pub "))
        .filter_map(|l| l.split_once(':').map(|(field, _)| field.to_string()))
        .collect()
}

/// `SECKILL_…` names in `text`.
fn setting_names(text: &str) -> BTreeSet<String> {
    text.match_indices("SECKILL_")
        .map(|(at, _)| {
            text[at..]
                .chars()
                .take_while(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || *c == '_')
                .collect::<String>()
        })
        .filter(|name| !name.ends_with('_'))
        .collect()
}

#[test]
fn every_setting_the_docs_name_is_one_or_a_script_knob() {
    let root = root();
    let settings = struct_fields(&read(&root.join("src/configuration/mod.rs")), "Settings");
    let limiter = struct_fields(
        &read(&root.join("src/limiter/policy.rs")),
        "LimiterSettings",
    );
    let history = struct_fields(
        &read(&root.join("src/configuration/history_settings.rs")),
        "HistorySettings",
    );
    // Knobs of the scripts and the compose file are SECKILL_ names too.
    let knobs = [
        tree_text(&root.join("scripts")),
        tree_text(&root.join("loadtest")),
        tree_text(&root.join("tests")),
        read(&root.join("docker-compose.yml")),
        read(&root.join("Makefile")),
    ]
    .concat();
    let mut unknown = Vec::new();
    for (doc, text) in documents() {
        for name in setting_names(&text) {
            let field = name["SECKILL_".len()..].to_ascii_lowercase();
            let known = match field.split_once("__") {
                Some(("limiter", rest)) => limiter.contains(rest),
                Some(("history", rest)) => history.contains(rest),
                Some(_) => false,
                None => settings.contains(&field),
            };
            if !known && !setting_names(&knobs).contains(&name) {
                unknown.push(format!("{}: {name}", doc.display()));
            }
        }
    }
    assert!(
        unknown.is_empty(),
        "settings the docs name that nothing reads: {unknown:#?}"
    );
}

/// Constraint and index names the migrations create, and those they drop.
fn schema_names() -> (BTreeSet<String>, BTreeSet<String>) {
    let text = tree_text(&root().join("migrations"));
    let names_after = |keyword: &str| -> BTreeSet<String> {
        text.match_indices(keyword)
            .map(|(at, _)| {
                text[at + keyword.len()..]
                    .trim_start()
                    .trim_start_matches("IF EXISTS ")
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect::<String>()
            })
            .filter(|n| !n.is_empty())
            .collect()
    };
    let mut created = names_after("CONSTRAINT ");
    created.extend(names_after("INDEX "));
    let mut dropped = names_after("DROP CONSTRAINT ");
    dropped.extend(names_after("DROP INDEX "));
    (created, dropped)
}

#[test]
fn every_constraint_or_index_the_docs_name_is_in_the_schema_today() {
    let (created, dropped) = schema_names();
    let mut stale = Vec::new();
    for (doc, text) in documents() {
        for span in spans(&text) {
            if dropped.contains(span) {
                stale.push(format!(
                    "{}: {span} (dropped by a migration)",
                    doc.display()
                ));
            }
        }
    }
    assert!(!created.is_empty(), "no constraint read from migrations/");
    assert!(
        stale.is_empty(),
        "schema names the docs cite that no longer exist: {stale:#?}"
    );
    // The code's own comments cite them too.
    let code = tree_text(&root().join("src"));
    let in_code: Vec<_> = dropped
        .iter()
        .filter(|name| code.contains(name.as_str()))
        .collect();
    assert!(
        in_code.is_empty(),
        "src/ names dropped constraints: {in_code:?}"
    );
}

#[test]
fn every_metric_family_the_docs_name_exists() {
    let root = root();
    let metrics = read(&root.join("src/metrics.rs"));
    let families: BTreeSet<String> = metrics
        .match_indices("family(")
        .filter_map(|(at, _)| {
            let rest = metrics[at..].split('"').nth(1)?;
            Some(format!("seckill_{rest}"))
        })
        .collect();
    assert!(families.contains("seckill_http_requests_total"));
    let elsewhere = [
        tree_text(&root.join("scripts")),
        tree_text(&root.join("loadtest")),
        read(&root.join("docker-compose.yml")),
    ]
    .concat();
    let mut unknown = Vec::new();
    for (doc, text) in documents() {
        for (at, _) in text.match_indices("seckill_") {
            let name: String = text[at..]
                .chars()
                .take_while(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '_')
                .collect();
            let family = ["_bucket", "_sum", "_count"]
                .iter()
                .fold(name.as_str(), |n, suffix| {
                    n.strip_suffix(suffix).unwrap_or(n)
                });
            if name.ends_with('_') || families.contains(family) || elsewhere.contains(&name) {
                continue;
            }
            unknown.push(format!("{}: {name}", doc.display()));
        }
    }
    assert!(
        unknown.is_empty(),
        "metric families the docs name that do not exist: {unknown:#?}"
    );
}

/// The README's error table is `ErrorCode`, both ways: every code is a row's, every
/// row's code is one, and each under its status (`ErrorCode::status`, which every answer
/// with the code carries).
#[test]
fn the_readme_lists_every_error_code_under_its_status_and_no_other() {
    use seckill::vocabulary::ErrorCode;
    let readme = read(&root().join("README.md"));
    // The table's rows: `| status | code(s) | when |`.
    let mut table = BTreeSet::new();
    let mut wrong = Vec::new();
    for line in readme.lines() {
        let mut columns = line.split('|').skip(1);
        let (Some(status), Some(codes)) = (columns.next(), columns.next()) else {
            continue;
        };
        let Ok(status) = status.trim().parse::<u16>() else {
            continue;
        };
        for code in spans(codes) {
            table.insert(code);
            match ErrorCode::from_label(code) {
                Ok(known) if known.status() == status => {}
                Ok(known) => wrong.push(format!(
                    "{code} under {status}, answered {}",
                    known.status()
                )),
                Err(_) => wrong.push(format!("{code}: no such code")),
            }
        }
    }
    let declared: BTreeSet<&str> = ErrorCode::labels().collect();
    let missing: Vec<_> = declared.difference(&table).collect();
    assert!(
        wrong.is_empty() && missing.is_empty(),
        "the README's error table: {wrong:?}; codes it lacks: {missing:?}"
    );
}

/// The OpenAPI document's `Error.code` is `ErrorCode`'s words, and every code a response's
/// description cites (backticked, as `` `SOLD_OUT` ``) is one, an error's under its status.
#[test]
fn the_openapi_document_cites_each_error_code_under_its_status() {
    use seckill::vocabulary::ErrorCode;
    let document =
        serde_json::to_value(seckill::http::openapi::document(true)).expect("serialises");
    let enumerated: Vec<&str> = document["components"]["schemas"]["Error"]["properties"]["code"]
        ["enum"]
        .as_array()
        .expect("Error.code is an enum")
        .iter()
        .filter_map(|code| code.as_str())
        .collect();
    assert_eq!(enumerated, ErrorCode::labels().collect::<Vec<_>>());
    let mut cited = 0;
    let mut wrong = Vec::new();
    for (path, item) in document["paths"].as_object().expect("paths") {
        for (method, operation) in item.as_object().into_iter().flatten() {
            for (status, response) in operation["responses"].as_object().into_iter().flatten() {
                let description = response["description"].as_str().unwrap_or_default();
                let codes = spans(description).into_iter().filter(|span| {
                    span.len() > 2 && span.chars().all(|c| c.is_ascii_uppercase() || c == '_')
                });
                for code in codes {
                    cited += 1;
                    match ErrorCode::from_label(code) {
                        Ok(known) if known.status().to_string() == *status => {}
                        // A success may say what later calls answer (`SALE_ENDED` from then on).
                        Ok(_) if status.starts_with('2') && status != "202" => {}
                        _ => wrong.push(format!("{method} {path} {status}: `{code}`")),
                    }
                }
            }
        }
    }
    assert!(cited > 20, "only {cited} codes read from the descriptions");
    assert!(
        wrong.is_empty(),
        "codes the OpenAPI document cites under another status, or no code: {wrong:#?}"
    );
}

/// A section `export const NAME = ` of a page script, to its closing `});`.
fn script_section<'a>(script: &'a str, name: &str) -> &'a str {
    let start = script
        .find(&format!("export const {name} = "))
        .unwrap_or_else(|| panic!("{name} in the script"));
    let rest = &script[start..];
    &rest[..rest.find("\n});").unwrap_or(rest.len())]
}

/// The spellings of a section's `word('spelling', …)` entries, each with the rest of its
/// entry (its label and facts).
fn words_of(section: &str) -> Vec<(&str, &str)> {
    section
        .split("word('")
        .skip(1)
        .filter_map(|entry| entry.split_once('\''))
        .collect()
}

/// The static pages' scripts, but `words.js`: (path, text).
fn page_scripts() -> Vec<(PathBuf, String)> {
    fn scripts(dir: &Path, into: &mut Vec<(PathBuf, String)>) {
        for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() {
                scripts(&path, into);
            } else if path.extension().is_some_and(|e| e == "js")
                && !path.ends_with("static/words.js")
            {
                into.push((path.clone(), read(&path)));
            }
        }
    }
    let mut found = Vec::new();
    scripts(&root().join("static"), &mut found);
    found
}

/// The pages' shared words (`static/words.js`) are the server's: every outcome, order
/// state, queue state and room order it spells is a word of `src/vocabulary.rs`.
/// Its `ErrorCode` is a part of `vocabulary::ErrorCode` (each `NAME: 'NAME'`), but for
/// the codes the pages make up themselves; every `ErrorCode.NAME` a page reads is in
/// it, every one in it is read, and no other page script spells a server code.
#[test]
fn the_pages_spell_the_servers_words() {
    use seckill::vocabulary::ErrorCode;
    let root = root();
    let words = read(&root.join("static/words.js"));
    let vocabulary = read(&root.join("src/vocabulary.rs"));
    // The offenders' labels are history::classify's words.
    let labels = read(&root.join("src/history/classify.rs"));
    let mut unknown = Vec::new();
    for (name, source) in [
        ("Outcome", &vocabulary),
        ("OrderState", &vocabulary),
        ("QueueState", &vocabulary),
        ("RoomOrder", &vocabulary),
        ("OffenderLabel", &labels),
    ] {
        for (spelling, _) in words_of(script_section(&words, name)) {
            if !source.contains(&format!("=> \"{spelling}\",")) {
                unknown.push(format!("{name}: {spelling}"));
            }
        }
    }
    // The codes no answer carries: api.js's for no answer at all.
    let made_up = ["NETWORK"];
    let mut listed = BTreeSet::new();
    for line in script_section(&words, "ErrorCode").lines().skip(1) {
        let Some((name, spelling)) = line.trim().split_once(':') else {
            continue;
        };
        if name.starts_with('/') || name.starts_with('*') {
            continue;
        }
        listed.insert(name.to_string());
        if spelling.trim() != format!("'{name}',") {
            unknown.push(format!("ErrorCode: {name} is spelled {}", spelling.trim()));
        }
        if !made_up.contains(&name) && ErrorCode::from_label(name).is_err() {
            unknown.push(format!("ErrorCode: {name}"));
        }
    }
    assert!(
        listed.len() > 10,
        "ErrorCode read from static/words.js: {listed:?}"
    );
    let mut read_by_pages = BTreeSet::new();
    // words.js reads some itself (an outcome's code).
    let own = words.replace(script_section(&words, "ErrorCode"), "");
    let scripts = page_scripts();
    for (path, script) in scripts
        .iter()
        .chain([(root.join("static/words.js"), own)].iter())
    {
        for (at, _) in script.match_indices("ErrorCode.") {
            let name: String = script[at + "ErrorCode.".len()..]
                .chars()
                .take_while(|c| c.is_ascii_uppercase() || *c == '_')
                .collect();
            if !listed.contains(&name) {
                unknown.push(format!("{}: ErrorCode.{name}", path.display()));
            }
            read_by_pages.insert(name);
        }
    }
    for (path, script) in &scripts {
        for code in ErrorCode::labels() {
            if script.contains(&format!("'{code}'")) || script.contains(&format!("\"{code}\"")) {
                unknown.push(format!("{} spells {code}", path.display()));
            }
        }
    }
    for name in listed.difference(&read_by_pages) {
        unknown.push(format!("ErrorCode.{name} is read by no page"));
    }
    assert!(
        unknown.is_empty(),
        "words the pages spell that the server does not (or elsewhere): {unknown:?}"
    );
}

/// The rows of ARCHITECTURE.md's code map that describe `src/`: the paths of the first
/// cell (`src/x/` folders and `src/x.rs` files) and the backticked names of the row.
fn code_map_rows() -> Vec<(Vec<String>, BTreeSet<String>)> {
    let text = read(&root().join("ARCHITECTURE.md"));
    let start = text
        .find("\n## Code map\n")
        .expect("ARCHITECTURE.md: ## Code map");
    let section = &text[start + 1..];
    let section = &section[..section[3..]
        .find("\n## ")
        .map_or(section.len(), |at| at + 3)];
    section
        .lines()
        .filter_map(|line| {
            let (first, rest) = line.strip_prefix("| ")?.split_once(" | ")?;
            let paths: Vec<String> = spans(first)
                .into_iter()
                .filter(|s| s.starts_with("src/"))
                .map(str::to_string)
                .collect();
            let names = spans(rest).into_iter().map(str::to_string).collect();
            (!paths.is_empty()).then_some((paths, names))
        })
        .collect()
}

/// The `.rs` files below `dir`, recursively, as paths relative to the crate's root.
fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            files.extend(rust_files(&path));
        } else if path.extension().is_some_and(|e| e == "rs") {
            files.push(path.strip_prefix(root()).unwrap_or(&path).to_path_buf());
        }
    }
    files.sort();
    files
}

/// A module's name in a code-map row: its file's stem, or its folder's name for a
/// `mod.rs`; `None` for the `mod.rs` of the row's own folder.
fn module_name(file: &Path, folder: &Path) -> Option<String> {
    let stem = file.file_stem()?.to_string_lossy().to_string();
    if stem != "mod" {
        return Some(stem);
    }
    let parent = file.parent()?;
    if parent == folder {
        return None;
    }
    Some(parent.file_name()?.to_string_lossy().to_string())
}

/// ARCHITECTURE.md's code map holds against `src/`, both ways. Every `.rs` file of `src/`
/// is named by the row of the folder it lies in (the deepest `src/x/` a row's first cell
/// names): by its stem, or its folder's name (`room/`) for a `mod.rs`, backticked; a
/// file at `src/`'s top is a row's path itself. And every path of a first cell exists,
/// and every module-like name a row backticks (`lowercase_words`, or `folder/`) is a
/// file or folder below that row's folders: a renamed, moved or added file fails here.
#[test]
fn the_code_map_names_every_source_file_and_only_files_that_exist() {
    let root = root();
    let rows = code_map_rows();
    assert!(rows.len() > 5, "no code-map rows read from ARCHITECTURE.md");
    let mut wrong = Vec::new();
    for (paths, names) in &rows {
        for path in paths {
            if !root.join(path).exists() {
                wrong.push(format!("the code map names {path}, which does not exist"));
            }
        }
        let folders: Vec<&String> = paths.iter().filter(|p| p.ends_with('/')).collect();
        let below: BTreeSet<String> = folders
            .iter()
            .flat_map(|folder| rust_files(&root.join(folder.as_str())))
            .flat_map(|file| {
                let mut names = vec![file.file_stem().map(|s| s.to_string_lossy().to_string())];
                names.extend(
                    file.ancestors()
                        .map(|a| Some(a.file_name()?.to_string_lossy().to_string())),
                );
                names.into_iter().flatten()
            })
            .collect();
        for name in names {
            let module = name.trim_end_matches('/');
            let module_like = !module.is_empty()
                && module
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
            if module_like && !folders.is_empty() && !below.contains(module) {
                wrong.push(format!(
                    "the row of {paths:?} names `{name}`, no file or folder below it"
                ));
            }
        }
    }
    for file in rust_files(&root.join("src")) {
        let Some(row) = rows
            .iter()
            .flat_map(|(paths, names)| paths.iter().map(move |p| (p, names)))
            .filter(|(p, _)| p.ends_with('/') && file.starts_with(p.as_str()))
            .max_by_key(|(p, _)| p.len())
        else {
            let named = rows
                .iter()
                .any(|(paths, _)| paths.iter().any(|p| Path::new(p) == file));
            if !named {
                wrong.push(format!("{} has no row of its own", file.display()));
            }
            continue;
        };
        let (folder, names) = row;
        let Some(module) = module_name(&file, Path::new(folder.trim_end_matches('/'))) else {
            continue;
        };
        if !names.contains(&module) && !names.contains(&format!("{module}/")) {
            wrong.push(format!(
                "{} is not named by the row of {folder}",
                file.display()
            ));
        }
    }
    assert!(
        wrong.is_empty(),
        "ARCHITECTURE.md's code map and src/ differ: {wrong:#?}"
    );
}

/// deploy/README.md's table holds every setting the configuration reads: each field of
/// `Settings` as `SECKILL_<FIELD>`, each of `LimiterSettings` as
/// `SECKILL_LIMITER__<FIELD>` and `SECKILL_HISTORY__<FIELD>`. The policies (`limiter.policies`) are a table of tables,
/// documented in prose there and in docs/limiter.md, not a variable.
#[test]
fn deploy_readme_names_every_setting() {
    let root = root();
    let deploy = read(&root.join("deploy/README.md"));
    let documented = setting_names(&deploy);
    let settings = struct_fields(&read(&root.join("src/configuration/mod.rs")), "Settings");
    let limiter = struct_fields(
        &read(&root.join("src/limiter/policy.rs")),
        "LimiterSettings",
    );
    let history = struct_fields(
        &read(&root.join("src/configuration/history_settings.rs")),
        "HistorySettings",
    );
    assert!(settings.contains("port") && limiter.contains("timeout_ms"));
    assert!(history.contains("sample_every"));
    let names = settings
        .iter()
        .filter(|field| !["limiter", "history"].contains(&field.as_str()))
        .map(|field| format!("SECKILL_{}", field.to_ascii_uppercase()))
        .chain(
            limiter
                .iter()
                .filter(|field| *field != "policies")
                .map(|field| format!("SECKILL_LIMITER__{}", field.to_ascii_uppercase())),
        )
        .chain(
            history
                .iter()
                .map(|field| format!("SECKILL_HISTORY__{}", field.to_ascii_uppercase())),
        );
    let missing: Vec<String> = names.filter(|name| !documented.contains(name)).collect();
    assert!(
        missing.is_empty(),
        "settings deploy/README.md does not name: {missing:?}"
    );
}

/// The serde spelling of a fieldless value, or of the one field of a newtype variant.
fn spelling<T: serde::Serialize>(value: T) -> String {
    match serde_json::to_value(value).expect("serialises") {
        serde_json::Value::String(word) => word,
        serde_json::Value::Object(map) => map.keys().next().cloned().unwrap_or_default(),
        other => panic!("not a word: {other}"),
    }
}

/// The limiter's words the fail mode can be, written as a match so that a new variant
/// does not compile until it is named here (and so checked against the docs and pages).
fn fail_modes() -> BTreeSet<String> {
    use seckill::limiter::policy::FailMode;
    let fail_mode = |mode: FailMode| match mode {
        FailMode::Open | FailMode::Closed | FailMode::Local => spelling(mode),
    };
    [FailMode::Open, FailMode::Closed, FailMode::Local]
        .into_iter()
        .map(fail_mode)
        .collect()
}

/// The policy editor's words (`static/words.js`, which `static/admin/policy.js` reads)
/// are the limiter's: every algorithm, fail mode, scope and key source listed is the
/// server's and every one of the server's is listed (both ways), the shaper is the
/// algorithm that shapes, and its rule cap, longest delay, rule-name and literal-key
/// patterns and the policies with fixed rules are the server's.
#[test]
fn the_policy_editor_spells_the_limiters_words_both_ways() {
    use seckill::configuration::policies::{check_rule_set_change, defaults};
    use seckill::limiter::policy::{KeySource, MAX_DELAY_MS, MAX_RULES};
    use seckill::limiter::{Algorithm, Scope};
    let root = root();
    let script = read(&root.join("static/words.js"));
    // Each list is written as a match, so a new variant does not compile until it is
    // named here (and so checked against the page).
    let scope = |scope: Scope| match scope {
        Scope::Global | Scope::PerItem => spelling(scope),
    };
    let key_source = |source: KeySource| match source {
        KeySource::User
        | KeySource::Ip
        | KeySource::Network
        | KeySource::ClientId
        | KeySource::Route
        | KeySource::Literal(_) => spelling(source),
    };
    let server: [(&str, BTreeSet<String>); 4] = [
        (
            "Algorithm",
            Algorithm::ALL
                .iter()
                .map(|a| a.as_str().to_string())
                .collect(),
        ),
        ("FailMode", fail_modes()),
        (
            "Scope",
            [Scope::Global, Scope::PerItem]
                .into_iter()
                .map(scope)
                .collect(),
        ),
        (
            "KeySource",
            [
                KeySource::User,
                KeySource::Ip,
                KeySource::Network,
                KeySource::ClientId,
                KeySource::Route,
                KeySource::Literal("x".into()),
            ]
            .into_iter()
            .map(key_source)
            .collect(),
        ),
    ];
    for (name, words) in server {
        let listed: BTreeSet<String> = words_of(script_section(&script, name))
            .into_iter()
            .map(|(spelling, _)| spelling.to_string())
            .collect();
        assert_eq!(listed, words, "{name}");
    }
    let shapers: BTreeSet<&str> = words_of(script_section(&script, "Algorithm"))
        .into_iter()
        .filter(|(_, entry)| entry.contains("shapes: true"))
        .map(|(spelling, _)| spelling)
        .collect();
    let shaping: BTreeSet<&str> = Algorithm::ALL
        .iter()
        .filter(|a| a.shapes())
        .map(|a| a.as_str())
        .collect();
    assert_eq!(shapers, shaping, "the algorithms with `shapes: true`");
    assert!(
        script.contains(&format!("export const MAX_RULES = {MAX_RULES};")),
        "MAX_RULES is not {MAX_RULES}"
    );
    let delay = MAX_DELAY_MS.to_string();
    let delay = format!(
        "{}_{}",
        &delay[..delay.len() - 3],
        &delay[delay.len() - 3..]
    );
    assert!(script.contains(&format!("export const MAX_DELAY_MS = {delay};")));
    let edit = read(&root.join("src/rules/edit.rs"));
    let pattern = edit
        .split("#[schema(pattern = \"")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .expect("RuleEdit.name's pattern in src/rules/edit.rs");
    assert!(
        script.contains(&format!("export const RULE_NAME = /{pattern}/;")),
        "RULE_NAME is not {pattern}"
    );
    // A literal key is checked as a client id is: `X-Client-Id`'s pattern.
    let limited = read(&root.join("src/http/routes/limited.rs"));
    let pattern = limited
        .split("pattern = r\"")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .expect("X-Client-Id's pattern in src/http/routes/limited.rs");
    assert!(
        script.contains(&format!("export const LITERAL_KEY = /{pattern}/;")),
        "LITERAL_KEY is not {pattern}"
    );
    let fixed: BTreeSet<String> = defaults()
        .into_keys()
        .filter(|policy| check_rule_set_change(policy).is_err())
        .collect();
    let listed: Vec<String> = fixed.iter().map(|p| format!("'{p}'")).collect();
    assert!(
        script.contains(&format!(
            "export const FIXED_RULES = Object.freeze(new Set([{}]));",
            listed.join(", ")
        )),
        "FIXED_RULES is not {fixed:?}"
    );
}

/// The first figure `<threshold> / <window> <unit>` in `text` (`10 000 / 60 s`,
/// `10 / 5 min`): the threshold and the window in milliseconds.
fn first_limit(text: &str) -> Option<(u64, u64)> {
    let number = |digits: &str| digits.replace(' ', "").parse::<u64>().ok();
    for (at, _) in text.match_indices('/') {
        let before = text[..at].trim_end();
        let start = before
            .rfind(|c: char| !(c.is_ascii_digit() || c == ' '))
            .map_or(0, |i| i + 1);
        let boundary = before[..start]
            .chars()
            .last()
            .is_none_or(|c| !c.is_alphanumeric());
        let Some(threshold) = number(before[start..].trim()).filter(|_| boundary) else {
            continue;
        };
        let after = text[at + 1..].trim_start();
        let digits: String = after.chars().take_while(char::is_ascii_digit).collect();
        let Some(window) = number(&digits) else {
            continue;
        };
        let unit: String = after[digits.len()..]
            .trim_start()
            .chars()
            .take_while(char::is_ascii_alphabetic)
            .collect();
        let scale = match unit.as_str() {
            "ms" => 1,
            "s" => 1_000,
            "min" => 60_000,
            _ => continue,
        };
        return Some((threshold, window * scale));
    }
    None
}

/// The default policies' tables in the README and docs/limiter.md are
/// `configuration::policies::defaults()`, both ways: a row per default policy and no
/// other, each row's rules (a backticked name, then `threshold / window`) exactly the
/// policy's, with their figures, its fail mode the one the row names and, where the row
/// names an algorithm, the policy's. And every rule message and `RateLimit-Policy` quota
/// a document quotes is a default rule's.
#[test]
fn the_docs_tables_of_default_limits_are_the_defaults() {
    use seckill::configuration::policies::defaults;
    use seckill::limiter::Algorithm;
    let defaults = defaults();
    let modes = fail_modes();
    let words = |text: &str| -> BTreeSet<String> {
        text.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .map(str::to_ascii_lowercase)
            .collect()
    };
    let mut wrong = Vec::new();
    for doc in ["README.md", "docs/limiter.md"] {
        let text = read(&root().join(doc));
        let mut tables = 0;
        let mut rows = BTreeSet::new();
        let mut header: Option<Vec<String>> = None;
        for line in text.lines().map(str::trim) {
            let Some(line) = line.strip_prefix('|') else {
                header = None;
                continue;
            };
            let cells: Vec<&str> = line
                .trim_end_matches('|')
                .split('|')
                .map(str::trim)
                .collect();
            let Some(columns) = &header else {
                header = Some(cells.iter().map(|c| c.to_string()).collect());
                let is_limits = cells.first() == Some(&"policy")
                    && cells.iter().any(|c| c.starts_with("rules"));
                tables += usize::from(is_limits);
                if !is_limits {
                    header = Some(Vec::new());
                }
                continue;
            };
            if columns.is_empty() || cells.iter().all(|c| c.starts_with("--")) {
                continue;
            }
            let column = |name: &str| {
                columns
                    .iter()
                    .position(|c| c.contains(name))
                    .and_then(|i| cells.get(i))
                    .copied()
            };
            let Some(name) = spans(cells[0]).first().copied() else {
                wrong.push(format!("{doc}: a row names no policy: {line}"));
                continue;
            };
            rows.insert(name.to_string());
            let Some(policy) = defaults.get(name) else {
                wrong.push(format!("{doc}: {name} is no default policy"));
                continue;
            };
            let rules_cell = column("rules").unwrap_or_default();
            let stated: BTreeSet<(String, u64, u64)> = rules_cell
                .split('`')
                .skip(1)
                .collect::<Vec<_>>()
                .chunks(2)
                .filter_map(|pair| {
                    let (threshold, window) = first_limit(pair.get(1)?)?;
                    Some((pair[0].to_string(), threshold, window))
                })
                .collect();
            let default: BTreeSet<(String, u64, u64)> = policy
                .rules
                .iter()
                .map(|r| (r.name.clone(), r.threshold, r.window_ms))
                .collect();
            if stated != default {
                wrong.push(format!(
                    "{doc}: {name}'s rules are {default:?}, the row says {stated:?}"
                ));
            }
            let named: BTreeSet<String> = words(column("Redis").unwrap_or_default())
                .intersection(&modes)
                .cloned()
                .collect();
            let mode = spelling(policy.fail_mode);
            if named != BTreeSet::from([mode.clone()]) {
                wrong.push(format!(
                    "{doc}: {name} fails {mode}, the row names {named:?}"
                ));
            }
            if let Some(cell) = column("algorithm") {
                let cell = cell.to_ascii_lowercase();
                let phrases: Vec<String> = Algorithm::ALL
                    .iter()
                    .map(|a| a.as_str().replace('_', " "))
                    .filter(|phrase| cell.contains(phrase.as_str()))
                    .collect();
                let named: Vec<&String> = phrases
                    .iter()
                    .filter(|p| !phrases.iter().any(|q| q != *p && q.contains(p.as_str())))
                    .collect();
                let algorithm = policy.algorithm.as_str().replace('_', " ");
                if named.iter().any(|p| **p != algorithm) {
                    wrong.push(format!(
                        "{doc}: {name} is {algorithm}, the row says {named:?}"
                    ));
                }
            }
        }
        if tables != 1 {
            wrong.push(format!(
                "{doc}: {tables} tables of the default limits, not one"
            ));
        }
        let policies: BTreeSet<String> = defaults.keys().cloned().collect();
        if rows != policies {
            wrong.push(format!(
                "{doc}: its table lists {rows:?}, the defaults are {policies:?}"
            ));
        }
    }
    let rules: Vec<_> = defaults.values().flat_map(|p| &p.rules).collect();
    for (doc, text) in documents() {
        for quoted in text.split("\"dimension\":\"").skip(1) {
            let Some((dimension, rest)) = quoted.split_once('"') else {
                continue;
            };
            let Some(message) = rest
                .strip_prefix(",\"message\":\"")
                .and_then(|m| m.split('"').next())
            else {
                continue;
            };
            if !rules
                .iter()
                .any(|r| r.name == dimension && r.message == message)
            {
                wrong.push(format!(
                    "{}: no default rule {dimension} says {message:?}",
                    doc.display()
                ));
            }
        }
        for span in spans(&text).into_iter().filter(|s| s.contains(";q=")) {
            let quotas: Vec<(String, u64, u64)> = span
                .split(", ")
                .filter_map(|quota| {
                    let mut parts = quota.split(';');
                    let name = parts.next()?.trim_matches('"').to_string();
                    let q = parts.next()?.strip_prefix("q=")?.parse().ok()?;
                    let w: u64 = parts.next()?.strip_prefix("w=")?.parse().ok()?;
                    Some((name, q, w * 1_000))
                })
                .collect();
            let one_policy = defaults.values().any(|p| {
                quotas.iter().all(|(name, q, w)| {
                    p.rules
                        .iter()
                        .any(|r| &r.name == name && r.threshold == *q && r.window_ms == *w)
                })
            });
            if quotas.is_empty() || !one_policy {
                wrong.push(format!(
                    "{}: `{span}` is no default policy's quotas",
                    doc.display()
                ));
            }
        }
    }
    assert!(wrong.is_empty(), "the docs' default limits: {wrong:#?}");
}
