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
        assert_eq!(top.first_rank(), want_rank, "{name}: {}", top.summary);
        let category: FailureCategory = serde_json::from_value(truth["category"].clone()).unwrap();
        let fd = top.failure.as_ref().expect("the logs' detail joined");
        assert_eq!(fd.category, category, "{name}: {}", top.summary);
        // the one that knows the cause leads; the other corroborates. In `barrier` the
        // dumps show nothing (Gloo's monitored barrier is no collective Flight Recorder
        // records, and every rank's last one matched): the logs alone name the rank
        if case.ends_with("barrier") {
            assert_eq!(top.detector, DetectorId::Logs, "{name}");
            assert!(
                doc.findings()
                    .iter()
                    .all(|f| f.detector != DetectorId::FlightRecorder || !f.localizes()),
                "{name}: the dumps blamed someone"
            );
        } else {
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
        }
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

/// The issue's own example: a hang in real Flight Recorder dumps (ranks 9 and 14 never
/// reached an all-to-all) and an Xid in the kernel log of rank 9's node are one finding:
/// the GPU fell off the bus, on that node, with the dumps as corroboration. The logs are
/// written here in the real formats (the kernel's Xid line, NCCL's `Init COMPLETE` line
/// that ties the pid to rank 9).
#[test]
fn a_hang_in_the_dumps_and_an_xid_in_that_node_s_kernel_log_are_one_finding() {
    let shared = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../../shared/data/flight-recorder/gpu_error_2nd");
    let dir = tempfile::tempdir().unwrap();
    let fr = dir.path().join("fr");
    std::fs::create_dir_all(&fr).unwrap();
    for e in std::fs::read_dir(&shared).unwrap() {
        let p = e.unwrap().path();
        let name = p.file_name().unwrap().to_string_lossy().to_string();
        if name.starts_with("_dump_") {
            std::fs::copy(&p, fr.join(&name)).unwrap();
        }
    }
    let node = dir.path().join("logs/gpu-node-1");
    std::fs::create_dir_all(&node).unwrap();
    std::fs::write(
        node.join("rank9.log"),
        "gpu-node-1:48213:48213 [1] NCCL INFO comm 0x55d1c7a0 rank 9 nranks 16 cudaDev 1 nvmlDev 1 busId 3b000 commId 0x5e2b1c7d - Init COMPLETE\n\
         [rank9]: iteration      120/  10000 | consumed samples: 61440 | lm loss: 3.2E+00 |\n",
    )
    .unwrap();
    std::fs::write(
        node.join("dmesg.log"),
        "[  912.331842] NVRM: Xid (PCI:0000:3b:00): 79, pid=48213, name=python3, GPU has fallen off the bus.\n",
    )
    .unwrap();
    let doc = document(&[&fr, Path::new("--logs"), &dir.path().join("logs")]);
    let top = &doc.findings()[0];
    assert_eq!(top.kind, FindingKind::JobFailure, "{}", top.summary);
    let fd = top.failure.as_ref().unwrap();
    assert_eq!(fd.category, FailureCategory::GpuHardware);
    assert!(fd.lines[0].text.contains("Xid"), "{:?}", fd.lines[0]);
    let c = &top.culprits[0];
    assert_eq!((c.rank, c.host.as_deref()), (Some(9), Some("gpu-node-1")));
    assert!(top
        .corroborated_by
        .iter()
        .any(|x| x.detector == DetectorId::FlightRecorder && x.kind == FindingKind::Hang));
    // the dumps' other stuck rank stays named, below the one the logs explain
    assert!(top.culprits.iter().any(|c| c.rank == Some(14)));
    assert_eq!(doc.culprit_ranks()[0], 9);
}
