//! The domains' YAML files (`rls_config_dir`): read once at start, to seed the domains
//! Postgres does not hold yet ([`super::domain_store::DomainStore::seed`]).
//!
//! Every `*.yaml` and `*.yml` file directly in the folder is one domain, as
//! envoyproxy/ratelimit reads its files (subfolders are not read). A file that does not
//! parse, or two files of one domain, fail the start naming the file and the field: an
//! operator's typo must not silently drop a limit.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use anyhow::Context;

use super::domain_document::{DomainDocument, MAX_DOCUMENT_BYTES};

/// Most domain files read from the folder (also the most domains a folder seeds).
pub const MAX_FILES: usize = 1_000;

/// One file's domain.
#[derive(Debug)]
pub struct DomainFile {
    /// The file it was read from, for the messages that name it.
    pub path: PathBuf,
    /// Its document, parsed and checked.
    pub document: DomainDocument,
}

/// The domains of every YAML file in `dir`, in the files' name order. Blocking file I/O:
/// called at start, off the runtime's threads.
pub fn read(dir: &Path) -> anyhow::Result<Vec<DomainFile>> {
    let mut paths = Vec::new();
    let entries = std::fs::read_dir(dir)
        .with_context(|| format!("rls_config_dir {}: cannot list it", dir.display()))?;
    for entry in entries {
        let path = entry
            .with_context(|| format!("rls_config_dir {}: cannot list it", dir.display()))?
            .path();
        let yaml = path
            .extension()
            .is_some_and(|ext| ext == "yaml" || ext == "yml");
        if yaml && path.is_file() {
            paths.push(path);
        }
        anyhow::ensure!(
            paths.len() <= MAX_FILES,
            "rls_config_dir {}: more than {MAX_FILES} domain files",
            dir.display()
        );
    }
    paths.sort();
    let mut files: Vec<DomainFile> = Vec::with_capacity(paths.len());
    let mut seen: HashMap<String, usize> = HashMap::new();
    for path in paths {
        let document = read_one(&path)?;
        if let Some(&other) = seen.get(&document.domain) {
            anyhow::bail!(
                "{}: domain {:?} is also the domain of {}",
                path.display(),
                document.domain,
                files[other].path.display()
            );
        }
        seen.insert(document.domain.clone(), files.len());
        files.push(DomainFile { path, document });
    }
    Ok(files)
}

fn read_one(path: &Path) -> anyhow::Result<DomainDocument> {
    let size = std::fs::metadata(path)
        .with_context(|| format!("{}: cannot read it", path.display()))?
        .len();
    anyhow::ensure!(
        size <= MAX_DOCUMENT_BYTES as u64,
        "{}: longer than {MAX_DOCUMENT_BYTES} bytes",
        path.display()
    );
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("{}: cannot read it", path.display()))?;
    DomainDocument::from_yaml(&text).map_err(|e| {
        if e.field.is_empty() {
            anyhow::anyhow!("{}: {}", path.display(), e.reason)
        } else {
            anyhow::anyhow!("{}: field {}: {}", path.display(), e.field, e.reason)
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, name: &str, text: &str) {
        std::fs::write(dir.join(name), text).expect("a file written");
    }

    #[test]
    fn every_yaml_file_is_one_domain_and_other_files_are_not_read() {
        let dir = tempfile::tempdir().expect("a folder");
        write(dir.path(), "b.yml", "domain: beta\n");
        write(dir.path(), "a.yaml", "domain: alpha\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n");
        write(dir.path(), "notes.txt", "not yaml: [");
        let files = read(dir.path()).expect("two domains");
        let domains: Vec<&str> = files.iter().map(|f| f.document.domain.as_str()).collect();
        assert_eq!(domains, ["alpha", "beta"]);
    }

    #[test]
    fn a_bad_file_is_refused_with_its_name_and_field() {
        let dir = tempfile::tempdir().expect("a folder");
        write(dir.path(), "ok.yaml", "domain: fine\n");
        write(
            dir.path(),
            "typo.yaml",
            "domain: api\ndescriptors:\n  - key: k\n    rate_limit: {unit: second}\n",
        );
        let error = format!("{:#}", read(dir.path()).expect_err("refused"));
        assert!(error.contains("typo.yaml"), "{error}");
        assert!(error.contains("descriptors[0].rate_limit"), "{error}");
    }

    #[test]
    fn two_files_of_one_domain_are_refused_naming_both() {
        let dir = tempfile::tempdir().expect("a folder");
        write(dir.path(), "one.yaml", "domain: same\n");
        write(dir.path(), "two.yml", "domain: same\n");
        let error = format!("{:#}", read(dir.path()).expect_err("refused"));
        assert!(
            error.contains("one.yaml") && error.contains("two.yml"),
            "{error}"
        );
    }
}
