//! `flare logs diagnose` end to end: the labelled real failure logs scored against their
//! truth (floors that fail when the diagnosis gets worse), the findings document, gzip,
//! and errors that name the input.

use flare_model::{FailureCategory, FindingsDocument, Verdict};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;

fn flare() -> Command {
    Command::new(env!("CARGO_BIN_EXE_flare"))
}

fn fixtures(dir: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures/logs")
        .join(dir)
}

fn score(dir: &str) -> Value {
    let out = flare()
        .args(["bench", "logs-corpus", "--json", "--dir"])
        .arg(fixtures(dir))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

fn n(v: &Value, k: &str) -> u64 {
    v[k].as_u64().unwrap_or_else(|| panic!("{k} in {v}"))
}

fn misses(v: &Value, what: &str) -> Vec<String> {
    v["per_case"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c[what] == Value::Bool(false))
        .map(|c| c["id"].as_str().unwrap().to_string())
        .collect()
}

/// The development corpus: real failure excerpts from public threads. The floors are
/// today's figures less a margin; an effect line is never the answer.
#[test]
fn corpus_of_real_failure_excerpts() {
    let v = score("corpus");
    let cases = n(&v, "cases");
    assert!(cases >= 45, "{cases} cases");
    assert_eq!(n(&v, "cascade_as_root"), 0, "an effect named as the cause");
    assert!(
        n(&v, "root_line") * 100 >= cases * 95,
        "root line {} of {cases}; missed {:?}",
        n(&v, "root_line"),
        misses(&v, "root_line")
    );
    assert!(
        n(&v, "category") * 100 >= cases * 80,
        "category {} of {cases}",
        n(&v, "category")
    );
    assert!(
        n(&v, "culprit_right") * 100 >= n(&v, "culprit_scored") * 60,
        "culprit {} of {}",
        n(&v, "culprit_right"),
        n(&v, "culprit_scored")
    );
}

/// Real torchrun jobs that failed in known ways: every one right.
#[test]
fn real_failing_jobs() {
    let v = score("real_jobs");
    let cases = n(&v, "cases");
    assert!(cases >= 12, "{cases} cases");
    for k in ["root_line", "category", "stage"] {
        assert_eq!(n(&v, k), cases, "{k}: missed {:?}", misses(&v, k));
    }
    assert_eq!(n(&v, "culprit_right"), n(&v, "culprit_scored"));
    assert_eq!(n(&v, "cascade_as_root"), 0);
}

#[test]
fn the_findings_document_names_the_rank_and_its_lines() {
    let out = flare()
        .args(["logs", "diagnose", "--json"])
        .arg(fixtures("real_jobs/exception"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc = FindingsDocument::from_json(std::str::from_utf8(&out.stdout).unwrap()).unwrap();
    assert_eq!(doc.verdict(), Verdict::Unhealthy);
    assert_eq!(doc.culprit_ranks(), [2]);
    assert_eq!(doc.job.source, "logs");
    let f = &doc.findings()[0];
    let fd = f.failure.as_ref().unwrap();
    assert_eq!(fd.category, FailureCategory::UserCode);
    assert!(fd.lines[0].text.contains("IndexError"));
    assert!(fd.lines[0].file.ends_with("console.log"));
    assert!(!fd.cascade.is_empty(), "the other ranks' ends are effects");
    // text for a person names the same
    let text = flare()
        .args(["logs", "diagnose"])
        .arg(fixtures("real_jobs/exception"))
        .output()
        .unwrap();
    let text = String::from_utf8(text.stdout).unwrap();
    assert!(
        text.contains("rank 2") && text.contains("IndexError"),
        "{text}"
    );
}

#[test]
fn gzip_logs_are_read_and_bad_inputs_are_named() {
    use std::io::Write;
    let dir = std::env::temp_dir().join(format!("flare-logs-diagnose-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    enc.write_all(b"2024-05-01 10:00:00,000 INFO step 3\n[rank1]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 1 has a total capacity of 79.15 GiB of which 1.21 GiB is free.\n")
        .unwrap();
    std::fs::write(dir.join("rank1.log.gz"), enc.finish().unwrap()).unwrap();
    std::fs::write(dir.join("notes.json"), b"{}").unwrap();
    let out = flare()
        .args(["logs", "diagnose", "--json"])
        .arg(&dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc = FindingsDocument::from_json(std::str::from_utf8(&out.stdout).unwrap()).unwrap();
    assert_eq!(doc.culprit_ranks(), [1]);
    assert!(
        doc.notes.iter().any(|n| n.contains("skipped")),
        "{:?}",
        doc.notes
    );

    let missing = flare()
        .args(["logs", "diagnose", "/nonexistent/logs"])
        .output()
        .unwrap();
    assert_eq!(missing.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&missing.stderr).contains("/nonexistent/logs"));

    let empty = dir.join("empty");
    std::fs::create_dir_all(&empty).unwrap();
    let none = flare()
        .args(["logs", "diagnose"])
        .arg(&empty)
        .output()
        .unwrap();
    assert_eq!(none.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&none.stderr).contains("no log files"));
    let _ = std::fs::remove_dir_all(&dir);
}
