//! `flare diagnose` on real failed jobs with Flight Recorder dumps and logs: one finding
//! per failure from both (the dumps say which rank stopped, the logs why), logs alone when
//! a directory holds nothing else, and `--no-logs`.

use flare_model::{DetectorId, FailureCategory, FindingKind, FindingsDocument};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;

fn flare() -> Command {
    Command::new(env!("CARGO_BIN_EXE_flare"))
}

fn real_jobs() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/logs/real_jobs")
}

fn document(args: &[&Path]) -> FindingsDocument {
    let out = flare()
        .arg("diagnose")
        .args(args)
        .arg("--json")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    FindingsDocument::from_json(&String::from_utf8_lossy(&out.stdout)).unwrap()
}

/// Every real failed job whose ranks wrote Flight Recorder dumps: the top finding names
/// the injected rank and the logs' category, and holds both sources.
#[test]
fn dumps_and_logs_of_real_failed_jobs_are_one_finding() {
    let mut seen = 0;
    for case in std::fs::read_dir(real_jobs()).unwrap() {
        let case = case.unwrap().path();
        let fr = case.join("fr");
        if !fr.is_dir() {
            continue;
        }
        seen += 1;
        let truth: Value =
            serde_json::from_str(&std::fs::read_to_string(case.join("truth.json")).unwrap())
                .unwrap();
        let doc = document(&[&fr, Path::new("--logs"), &case]);
        let top = &doc.findings()[0];
        let name = case.display();
        let want_rank = truth["culprit"]["rank"].as_u64().map(|r| r as u32);
        assert_eq!(
            top.culprits.first().and_then(|c| c.rank),
            want_rank,
            "{name}: {}",
            top.summary
        );
        let category: FailureCategory = serde_json::from_value(truth["category"].clone()).unwrap();
        let fd = top.failure.as_ref().expect("the logs' detail joined");
        assert_eq!(fd.category, category, "{name}: {}", top.summary);
        // the one that knows the cause leads; the other corroborates
        let (lead, other) = if category == FailureCategory::Unknown {
            (DetectorId::FlightRecorder, DetectorId::Logs)
        } else {
            (DetectorId::Logs, DetectorId::FlightRecorder)
        };
        assert_eq!(top.detector, lead, "{name}");
        assert!(
            top.corroborated_by.iter().any(|c| c.detector == other),
            "{name}: {:?}",
            top.corroborated_by
        );
        // nothing else blames another rank at warning or worse
        for f in &doc.findings()[1..] {
            assert!(
                !f.localizes() || f.culprits.iter().any(|c| c.rank == want_rank),
                "{name}: another culprit: {}",
                f.summary
            );
        }
    }
    assert!(seen >= 5, "{seen} cases with dumps");
}

#[test]
fn without_logs_the_dumps_alone_and_a_folder_of_logs_alone() {
    let hang = real_jobs().join("hang");
    let fr = hang.join("fr");
    let alone = document(&[&fr, Path::new("--no-logs")]);
    assert_eq!(alone.findings()[0].kind, FindingKind::Hang);
    assert!(alone.findings()[0].failure.is_none());
    assert!(alone.notes.iter().all(|n| !n.starts_with("logs:")));

    // torchrun's --log-dir: no trace or dump, so the logs are the diagnosis
    let logs = document(&[&hang.join("logs")]);
    assert_eq!(logs.job.source, "logs");
    assert_eq!(logs.findings()[0].detector, DetectorId::Logs);
    assert_eq!(logs.findings()[0].culprits[0].rank, Some(1));
    assert!(logs.notes.iter().any(|n| n.contains("logs alone")));
}

#[test]
fn logs_given_that_hold_no_log_are_an_error() {
    let fr = real_jobs().join("hang/fr");
    let out = flare()
        .arg("diagnose")
        .arg(&fr)
        .arg("--logs")
        .arg(&fr)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--logs: no log files under"), "{err}");
}
