//! The held-out set (`tests/fixtures/logs/heldout`) measures diagnosis on logs the rules
//! were not written from. A rule, or a test of one, that cites a held-out case's thread
//! makes that case no longer held out: this fails when any code under `crates/` does.

use std::path::{Path, PathBuf};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn heldout_sources() -> Vec<(String, String)> {
    let dir = repo().join("tests/fixtures/logs/heldout");
    let mut sources = Vec::new();
    for entry in std::fs::read_dir(&dir).expect("the held-out set") {
        let truth = entry.unwrap().path().join("truth.json");
        if !truth.exists() {
            continue;
        }
        let text = std::fs::read_to_string(&truth).unwrap();
        let value: serde_json::Value =
            serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", truth.display()));
        let source = value["source"]
            .as_str()
            .unwrap_or_else(|| panic!("{}: no source", truth.display()));
        sources.push((truth.display().to_string(), source.to_string()));
    }
    sources
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// Whether `text` cites `url` itself (not a longer URL it begins: issue 23 is not 230).
fn cites(text: &str, url: &str) -> bool {
    text.match_indices(url).any(|(at, _)| {
        text[at + url.len()..]
            .chars()
            .next()
            .is_none_or(|c| !c.is_ascii_alphanumeric())
    })
}

#[test]
fn no_code_cites_a_held_out_thread() {
    let sources = heldout_sources();
    assert!(sources.len() >= 20, "the held-out set is read");
    let mut files = Vec::new();
    rust_files(&repo().join("crates"), &mut files);
    assert!(files.len() > 50, "the crates are read");
    for file in &files {
        let text = std::fs::read_to_string(file).unwrap();
        for (truth, url) in &sources {
            assert!(
                !cites(&text, url),
                "{} cites {url}, a held-out case's thread ({truth}): move that case to the development corpus",
                file.display()
            );
        }
    }
}

#[test]
fn a_longer_url_is_not_a_citation() {
    let url = "https://github.com/NVIDIA/nccl/issues/23";
    assert!(cites("see https://github.com/NVIDIA/nccl/issues/23.", url));
    assert!(cites("\"https://github.com/NVIDIA/nccl/issues/23\"", url));
    assert!(!cites("https://github.com/NVIDIA/nccl/issues/230", url));
}
