//! Real PyTorch jobs, traced by the real torch.profiler (not a generator of ours): small
//! multi-process jobs on Gloo (DDP, hand-written data parallelism with explicit
//! all-reduces, FSDP2, and a 4-stage pipeline of `torch.distributed.pipelining`), CPU
//! only, each healthy or with one fault on one rank, made by `scripts/real_jobs/jobs.py`
//! (which writes the truth beside the traces). Flare reads their collectives and
//! transfers from the CPU side (`gloo:*` work on Gloo's threads, or a send or receive on
//! the thread that posted it) and must name the faulty rank with the cause the evidence
//! shows, and nothing on a healthy job.
//! The fixtures are kept small (gzip, a few steps); the script regenerates them.

use flare_engine::{diagnose, EngineConfig};
use flare_import::{open, OpenOptions, Opened};
use flare_model::{FindingKind, Severity};
use std::path::{Path, PathBuf};

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/real_jobs")
}

struct Truth {
    rank: Option<u32>,
    kind: Option<FindingKind>,
}

fn truth(dir: &Path) -> Truth {
    let t: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("truth.json")).unwrap()).unwrap();
    Truth {
        rank: t["rank"].as_u64().map(|r| r as u32),
        kind: t["expected_kind"]
            .as_str()
            .map(|k| FindingKind::parse(k).unwrap_or_else(|| panic!("unknown kind {k}"))),
    }
}

#[test]
fn every_real_job_gets_its_culprit_and_cause_and_healthy_ones_nothing() {
    let mut jobs: Vec<PathBuf> = std::fs::read_dir(fixtures())
        .expect("tests/fixtures/real_jobs")
        .map(|e| e.unwrap().path())
        .filter(|p| p.join("truth.json").exists())
        .collect();
    jobs.sort();
    assert!(jobs.len() >= 4, "{jobs:?}");
    for job in jobs {
        let t = truth(&job);
        let Opened::Trace(trace) =
            open(&[job.join("traces")], &OpenOptions::default()).expect("the traces open")
        else {
            panic!("{job:?}: not a timeline");
        };
        assert!(trace.meta.cpu_compute, "{job:?}: a CPU-only job");
        let d = diagnose(&trace, &EngineConfig::default());
        assert!(d.conclusive(), "{job:?}: {:?}", d.skipped);
        let warnings: Vec<_> = d
            .findings
            .iter()
            .filter(|f| f.severity > Severity::Info)
            .collect();
        let said: Vec<String> = warnings
            .iter()
            .map(|f| format!("{}: {}", f.kind.as_str(), f.summary))
            .collect();
        match (t.rank, t.kind) {
            (Some(rank), Some(kind)) => {
                let first = warnings
                    .first()
                    .unwrap_or_else(|| panic!("{job:?}: nothing found"));
                assert_eq!(first.culprits[0].rank, Some(rank), "{job:?}: {said:#?}");
                assert_eq!(first.kind, kind, "{job:?}: {said:#?}");
                // Never the GPU on a job without one.
                assert!(
                    d.findings.iter().all(|f| f.kind != FindingKind::SlowGpu
                        && !f.action.contains("nvidia-smi")),
                    "{job:?}: {said:#?}"
                );
            }
            _ => assert!(warnings.is_empty(), "{job:?}: {said:#?}"),
        }
    }
}

/// A real GPU run (`tests/fixtures/real_gpu/h200_run3/gc`: the collector on, one rank on an
/// H200): its ninth profiled step holds one full collection (238 ms against 13.5), its
/// tenth is back at the level. A spike (info), not a fail-slow onset: the median of those
/// two steps (126 ms) is no level the job ran at.
#[test]
fn one_long_gc_pause_at_a_runs_end_is_a_spike_not_an_onset() {
    let dir = fixtures().join("../real_gpu/h200_run3/gc");
    let Opened::Trace(trace) = open(&[dir], &OpenOptions::default()).expect("the trace opens")
    else {
        panic!("not a timeline");
    };
    let d = diagnose(&trace, &EngineConfig::default());
    let kinds: Vec<(FindingKind, Severity)> =
        d.findings.iter().map(|f| (f.kind, f.severity)).collect();
    assert_eq!(
        kinds,
        [(FindingKind::IterationSpike, Severity::Info)],
        "{:#?}",
        d.findings
    );
}
