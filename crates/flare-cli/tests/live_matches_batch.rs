//! The live path gives the batch engine's answer on the same job: a simulated job is
//! diagnosed from its trace (`flare diagnose`) and from the window summaries its agents
//! would have posted (its ops replayed through the agent's own aggregation, then the
//! server's live diagnosis, window by window, with the earlier windows). The culprit
//! rank and the cause must agree wherever a window's totals can show them.

use flare_agent::replay::summaries_of_trace;
use flare_engine::live::{diagnose_window, LiveConfig, LiveDiagnosis, LiveWindow};
use flare_engine::{diagnose, EngineConfig};
use flare_model::{Finding, FindingKind, Severity};
use flare_sim::{fault::FaultKind, simulate, SimConfig};

/// The batch answer: the most important localized finding, as (rank, kind).
fn batch_answer(findings: &[Finding]) -> Option<(Option<u32>, FindingKind)> {
    findings
        .iter()
        .find(|f| f.localizes() && f.severity > Severity::Info)
        .map(|f| (f.culprits[0].rank, f.kind))
}

/// Every window of the job diagnosed live, in order, each with the earlier ones and the
/// previous window's findings (as the server does).
fn live_answers(trace: &flare_model::Trace, window_ns: u64) -> Vec<LiveDiagnosis> {
    let cfg = LiveConfig::default();
    let windows: Vec<LiveWindow> = summaries_of_trace(trace, "job", window_ns)
        .iter()
        .map(|w| LiveWindow::from_summaries(w))
        .collect();
    let mut out: Vec<LiveDiagnosis> = Vec::new();
    for (i, w) in windows.iter().enumerate() {
        let earlier: Vec<&LiveWindow> = windows[..i].iter().collect();
        let previous = out.last().map(|d| d.findings.as_slice());
        out.push(diagnose_window(w, &earlier, previous, &cfg));
    }
    out
}

fn case(fault: FaultKind, seed: u64) -> (Option<(Option<u32>, FindingKind)>, Vec<LiveDiagnosis>) {
    let mut cfg = SimConfig::for_scale(64);
    cfg.iterations = 12;
    cfg.seed = seed;
    cfg.fault = fault;
    let out = simulate(&cfg).expect("a valid simulation");
    let batch = diagnose(&out.trace, &EngineConfig::default());
    let its: Vec<f64> = batch.iteration_ns.iter().flatten().copied().collect();
    // Windows of about four iterations, as a live job's few seconds hold.
    let window_ns = (4.0 * its.iter().sum::<f64>() / its.len() as f64) as u64;
    (
        batch_answer(&batch.findings),
        live_answers(&out.trace, window_ns),
    )
}

const SEEDS: [u64; 4] = [3, 11, 19, 27];

/// Each window's most important warning, as (rank, kind).
fn warnings(live: &[LiveDiagnosis]) -> Vec<(Option<u32>, FindingKind)> {
    live.iter()
        .filter_map(|d| {
            d.findings
                .iter()
                .find(|f| f.severity > Severity::Info)
                .map(|f| (f.first_rank(), f.kind))
        })
        .collect()
}

#[test]
fn a_faulty_rank_gets_the_same_culprit_and_cause_live_as_from_its_trace() {
    for fault in [
        FaultKind::SlowGpu,
        FaultKind::HostStall,
        FaultKind::LaunchBound,
    ] {
        for seed in SEEDS {
            let (batch, live) = case(fault, seed);
            let (rank, kind) =
                batch.unwrap_or_else(|| panic!("{fault:?} {seed}: batch found nothing"));
            let said = warnings(&live);
            // Every window that warns names the batch engine's rank...
            assert!(
                !said.is_empty() && said.iter().all(|w| w.0 == rank),
                "{fault:?} seed {seed}: batch {rank:?} {kind:?}, live {said:?}"
            );
            // ...and most of them its cause.
            let agree = said.iter().filter(|w| w.1 == kind).count();
            assert!(
                2 * agree > said.len(),
                "{fault:?} seed {seed}: batch {kind:?}, live {said:?}"
            );
        }
    }
}

#[test]
fn a_healthy_job_gets_no_warning_live_either() {
    for seed in SEEDS {
        let (batch, live) = case(FaultKind::None, seed);
        assert_eq!(batch, None, "seed {seed}");
        assert_eq!(warnings(&live), vec![], "seed {seed}");
    }
}

#[test]
fn a_slow_nic_is_never_called_a_slow_gpu_live() {
    // Summaries carry no transfer times, so live diagnosis cannot name the link the
    // batch engine names; the ranks behind it spend longer outside their collectives
    // with kernels at their peers' speed, and must not be sent to "replace the GPU".
    for seed in SEEDS {
        let (batch, live) = case(FaultKind::SlowNic, seed);
        let (rank, _) = batch.expect("the batch engine names the link");
        for (r, kind) in warnings(&live) {
            assert_eq!(kind, FindingKind::SlowRank, "seed {seed}: rank {r:?}");
        }
        for d in &live {
            let warned: Vec<&Finding> = d
                .findings
                .iter()
                .filter(|f| f.severity > Severity::Info)
                .collect();
            for f in &warned {
                assert!(f.action.contains("GPU is not slower"), "{}", f.action);
            }
            // When ranks are named, the one behind the slow NIC is among them.
            assert!(
                warned.is_empty()
                    || warned
                        .iter()
                        .any(|f| f.culprits.iter().any(|c| c.rank == rank)),
                "seed {seed}: {rank:?} not named: {:?}",
                warned
                    .iter()
                    .map(|f| (
                        f.kind,
                        f.culprits.iter().map(|c| c.rank).collect::<Vec<_>>(),
                        f.summary.clone()
                    ))
                    .collect::<Vec<_>>()
            );
        }
    }
}

/// The stage of the most important stage-imbalance finding.
fn stage_named(findings: &[Finding]) -> Option<u32> {
    findings
        .iter()
        .find(|f| f.kind == FindingKind::StageImbalance && f.severity > Severity::Info)
        .and_then(|f| f.culprits[0].stage)
}

#[test]
fn a_heavy_pipeline_stage_is_named_live_from_the_layout_the_ranks_state() {
    for seed in SEEDS {
        let mut cfg = SimConfig::for_scale(64);
        cfg.iterations = 12;
        cfg.seed = seed;
        cfg.fault = FaultKind::StageImbalance;
        let out = simulate(&cfg).expect("a valid simulation");
        let batch = diagnose(&out.trace, &EngineConfig::default());
        let stage = stage_named(&batch.findings).expect("the batch engine names a stage");
        let its: Vec<f64> = batch.iteration_ns.iter().flatten().copied().collect();
        let window_ns = (4.0 * its.iter().sum::<f64>() / its.len() as f64) as u64;
        let live = live_answers(&out.trace, window_ns);
        // Each window names the batch engine's stage, or says why it could not compare
        // stages (the job's last window: only the last stages' work drains in it).
        let named: Vec<Option<u32>> = live.iter().map(|d| stage_named(&d.findings)).collect();
        let could_not = |d: &LiveDiagnosis| {
            d.skipped
                .iter()
                .any(|s| s.detector == flare_model::DetectorId::StageImbalance)
        };
        assert!(
            live.iter()
                .zip(&named)
                .all(|(d, s)| *s == Some(stage) || (s.is_none() && could_not(d))),
            "seed {seed}: batch stage {stage}, live {named:?}"
        );
        assert!(
            named.iter().filter(|s| s.is_some()).count() >= 2,
            "seed {seed}: {named:?}"
        );
    }
}
