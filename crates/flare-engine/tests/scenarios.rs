//! Scenario tests as data: a simulator fault and scale, and the culprit the engine must
//! put first. Seeds here are below 1000; the accuracy benchmark uses seeds from 1,000,000.

use flare_engine::{diagnose, EngineConfig};
use flare_sim::{fault::FaultKind, simulate, SimConfig};

fn top1(kind: FaultKind, world: u32, seed: u64) -> (bool, String) {
    let mut cfg = SimConfig::for_scale(world);
    cfg.iterations = 10;
    cfg.seed = seed;
    cfg.fault = kind;
    let out = simulate(&cfg).unwrap();
    let d = diagnose(&out.trace, &EngineConfig::default());
    let first = d.localized().next();
    let ok = match (kind, first) {
        (FaultKind::None, f) => f.is_none(),
        (_, Some(f)) => out.truth.matches(f.kind, &f.culprits[0]),
        (_, None) => false,
    };
    let got = first
        .map(|f| format!("{}: {}", f.kind.as_str(), f.summary))
        .unwrap_or_else(|| "no localized finding".into());
    (
        ok,
        format!(
            "{} | truth: {} | got: {}",
            kind.name(),
            out.truth.description,
            got
        ),
    )
}

#[test]
fn every_fault_kind_is_localized_at_64_ranks() {
    let mut failures = Vec::new();
    for kind in FaultKind::ALL {
        for seed in [11, 12, 13] {
            let (ok, line) = top1(kind, 64, seed);
            eprintln!("{} {line}", if ok { "ok  " } else { "FAIL" });
            if !ok {
                failures.push(line);
            }
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

#[test]
fn every_fault_kind_is_localized_at_512_ranks() {
    let mut failures = Vec::new();
    for kind in FaultKind::ALL {
        let (ok, line) = top1(kind, 512, 21);
        eprintln!("{} {line}", if ok { "ok  " } else { "FAIL" });
        if !ok {
            failures.push(line);
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

#[test]
fn four_d_parallel_job_with_context_and_experts() {
    // TP2 x CP2 x PP2 x DP8 with EP4: the slow GPU is still found.
    for seed in [31, 32] {
        let mut cfg = SimConfig::megatron(2, 2, 8);
        cfg.parallel = flare_model::ParallelConfig::new(2, 2, 4, 8, 2).unwrap();
        cfg.iterations = 8;
        cfg.seed = seed;
        cfg.fault = FaultKind::SlowGpu;
        let out = simulate(&cfg).unwrap();
        let d = diagnose(&out.trace, &EngineConfig::default());
        let f = d.localized().next().expect("a finding");
        assert!(
            out.truth.matches(f.kind, &f.culprits[0]),
            "{}: {}",
            out.truth.description,
            f.summary
        );
    }
}

#[test]
fn cluster_wide_spikes_are_not_blamed_on_anyone() {
    for seed in [41, 42, 43, 44] {
        let mut cfg = SimConfig::for_scale(64);
        cfg.iterations = 10;
        cfg.seed = seed;
        cfg.spike_probability = 0.4;
        let out = simulate(&cfg).unwrap();
        assert!(!out.truth.spike_iterations.is_empty());
        let d = diagnose(&out.trace, &EngineConfig::default());
        assert!(
            d.localized().next().is_none(),
            "seed {seed}: {:?}",
            d.localized().next()
        );
        assert!(d.findings.iter().all(|f| f.culprits.is_empty()));
    }
}

#[test]
fn sampled_traces_still_localize_among_the_ranks_present() {
    // Profilers often keep a subset of ranks: compare those that are there.
    let mut cfg = SimConfig::for_scale(512);
    cfg.iterations = 6;
    cfg.seed = 51;
    cfg.fault = FaultKind::SlowGpu;
    let mut out = simulate(&cfg).unwrap();
    let culprit = out.truth.culprits[0].rank.unwrap();
    let (kept, dropped): (Vec<_>, Vec<_>) = std::mem::take(&mut out.trace.ranks)
        .into_iter()
        .partition(|r| r.rank == culprit || r.rank % 3 != 0);
    out.trace.meta.missing_ranks = dropped.iter().map(|r| r.rank).collect();
    out.trace.ranks = kept;
    let d = diagnose(&out.trace, &EngineConfig::default());
    let f = d.localized().next().expect("a finding");
    assert_eq!(f.culprits[0].rank, Some(culprit), "{}", f.summary);
}

/// Holmes' method alone at scale: the graph detector names a slow GPU of a 2,048-rank job
/// whose victims' waiting is well under 0.5% of the job's time (the share threshold that
/// suffices at 64 ranks) on cross-iteration evidence, and a slow NIC; and names nothing on
/// the fault-free twin.
#[test]
fn graph_search_alone_localizes_at_2048_ranks() {
    for kind in [FaultKind::SlowGpu, FaultKind::SlowNic, FaultKind::None] {
        let mut cfg = SimConfig::for_scale(2048);
        cfg.iterations = 10;
        cfg.seed = 33;
        cfg.fault = kind;
        let out = simulate(&cfg).unwrap();
        let d = diagnose(&out.trace, &EngineConfig::default());
        let graph = d.localized_by(flare_model::DetectorId::Graph);
        match graph.first() {
            None => assert_eq!(kind, FaultKind::None, "{}: nothing", out.truth.description),
            Some(f) => {
                assert!(
                    kind != FaultKind::None && out.truth.matches(f.kind, &f.culprits[0]),
                    "{}: got {}",
                    out.truth.description,
                    f.summary
                );
                if kind == FaultKind::SlowGpu {
                    let share = f
                        .evidence
                        .iter()
                        .find(|e| e.metric == flare_model::EvidenceKey::BlameShare);
                    assert!(share.is_some_and(|e| e.value < 0.5), "{}", f.summary);
                }
            }
        }
    }
}

/// Threads take parts of the digest as they finish others, in no fixed order: the
/// diagnosis must not depend on how many there were or who took what.
#[test]
fn the_diagnosis_does_not_depend_on_threads() {
    let mut cfg = SimConfig::for_scale(512);
    cfg.iterations = 6;
    cfg.seed = 31;
    cfg.fault = FaultKind::SlowNic;
    let out = simulate(&cfg).unwrap();
    let run = |threads: usize| {
        let d = diagnose(
            &out.trace,
            &EngineConfig {
                threads,
                ..EngineConfig::default()
            },
        );
        format!("{d:?}")
    };
    let one = run(1);
    assert!(one.contains("culprits"), "a finding to compare: {one}");
    for threads in [2, 3, 2, 4] {
        assert!(run(threads) == one, "{threads} threads differ from one");
    }
}
