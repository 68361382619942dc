//! `flare diagnose` reads a native file an iteration at a time (format version 2) and must
//! say exactly what it says of the same trace read at once (a version 1 file, one chunk of
//! every iteration): the same findings, evidence, rank metrics and time breakdowns. Cases:
//! simulated faults, a window of iterations, and a trace from another source whose rank
//! clocks are skewed (aligned from every chunk's collectives before the diagnosis).

use flare_import::native::{write_native_file, write_native_version};
use flare_model::{Op, Trace};
use flare_sim::{fault::FaultKind, simulate, SimConfig};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;

fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("flare-chunked-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// The JSON document and stderr of `flare diagnose --json FILE ARGS`.
fn diagnose(file: &Path, args: &[&str]) -> (Value, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_flare"))
        .arg("diagnose")
        .arg("--json")
        .arg(file)
        .args(args)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(out.status.success(), "{stderr}");
    let mut doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    // The one field that differs run to run.
    doc.as_object_mut().unwrap().remove("diagnosis_ms");
    (doc, stderr)
}

/// Writes `trace` as version 1 and version 2 files and diagnoses both.
fn both(trace: &Trace, name: &str, args: &[&str]) -> (Value, Value, String) {
    let dir = scratch(name);
    let v1 = dir.join("v1.flare");
    let v2 = dir.join("v2.flare");
    write_native_version(
        trace,
        std::io::BufWriter::new(std::fs::File::create(&v1).unwrap()),
        1,
    )
    .unwrap();
    write_native_file(trace, &v2).unwrap();
    let (whole, _) = diagnose(&v1, args);
    let (chunked, stderr) = diagnose(&v2, args);
    let _ = std::fs::remove_dir_all(&dir);
    (whole, chunked, stderr)
}

fn sim(fault: FaultKind, seed: u64) -> Trace {
    let mut cfg = SimConfig::for_scale(64);
    cfg.iterations = 8;
    cfg.seed = seed;
    cfg.fault = fault;
    simulate(&cfg).unwrap().trace
}

#[test]
fn simulated_faults_get_the_same_document() {
    for (fault, seed) in [
        (FaultKind::None, 3),
        (FaultKind::SlowGpu, 5),
        (FaultKind::SlowNic, 7),
        (FaultKind::HostStall, 11),
        (FaultKind::Intermittent, 13),
    ] {
        let trace = sim(fault, seed);
        let (whole, chunked, stderr) = both(&trace, fault.name(), &[]);
        assert!(stderr.contains("an iteration at a time"), "{stderr}");
        assert_eq!(whole, chunked, "{}", fault.name());
        if fault != FaultKind::None {
            assert!(
                !chunked["findings"].as_array().unwrap().is_empty(),
                "{}",
                fault.name()
            );
        }
    }
}

#[test]
fn a_window_gets_the_same_document() {
    let trace = sim(FaultKind::SlowGpu, 17);
    let (whole, chunked, _) = both(&trace, "window", &["--window", "2..5"]);
    assert_eq!(whole, chunked);
    assert_eq!(
        chunked["job"]["iterations"],
        serde_json::json!([2, 3, 4, 5])
    );
}

#[test]
fn skewed_clocks_of_another_source_are_aligned_alike() {
    let mut trace = sim(FaultKind::SlowNic, 19);
    trace.meta.source = "kineto".into();
    // Each node's clock is off by up to +-5 ms.
    for r in &mut trace.ranks {
        let skew = ((r.rank / 8) as i64 * 7_919_113 % 10_000_000) - 5_000_000;
        for o in &mut r.ops {
            o.start_ns += skew;
            if o.end_ns != Op::IN_FLIGHT {
                o.end_ns += skew;
            }
            if o.issue_ns != Op::UNKNOWN {
                o.issue_ns += skew;
            }
        }
        for s in &mut r.iterations {
            s.start_ns += skew;
            if let Some(e) = s.end_ns.as_mut() {
                *e += skew;
            }
        }
    }
    let (whole, chunked, stderr) = both(&trace, "skew", &[]);
    assert!(stderr.contains("aligned rank clocks"), "{stderr}");
    assert_eq!(whole, chunked);
}
