//! The extra-work detector alone: ranks that run compute ops beyond ranks that otherwise
//! run the same ops. The simulator injects no such fault, so its jobs must stay silent
//! (every fault of a device, a path or a stage runs the same ops); the hand-edited jobs
//! give one rank more ops.

#[macro_use]
mod common;

use common::{Case, Expect::*, Shape::*};
use flare_engine::{diagnose, pipeline::Stages, EngineConfig, JobContext};
use flare_model::{DetectorId, FindingKind, Op, OpKind, Severity, Trace};
use flare_sim::fault::FaultKind::*;

detector_cases! { DetectorId::ExtraWork;
    healthy_64: Case::new(None, Scale(64), 61, Silent),
    healthy_128: Case::new(None, Scale(128), 62, Silent),
    silent_on_slow_gpu: Case::new(SlowGpu, Scale(64), 61, Silent),
    silent_on_slow_nic: Case::new(SlowNic, Scale(64), 61, Silent),
    silent_on_host_stall: Case::new(HostStall, Scale(64), 61, Silent),
    silent_on_launch_bound: Case::new(LaunchBound, Scale(64), 61, Silent),
    silent_on_untraced_stall: Case::new(UntracedStall, Scale(64), 61, Silent),
    silent_on_sequence_imbalance: Case::new(SequenceImbalance, Scale(128), 61, Silent),
    // A stage with more work is the stage-imbalance detector's, with or without the
    // layout (then read from the transfers).
    silent_on_stage_imbalance: Case::new(StageImbalance, Scale(128), 61, Silent),
    silent_on_stage_imbalance_without_layout: Case::new(StageImbalance, Scale(128), 61, Silent)
        .edit(common::without_layout),
    silent_on_one_rank_per_stage: Case::new(StageImbalance, Megatron { tp: 1, pp: 4, dp: 1 }, 61, Silent)
        .edit(common::without_layout),
    no_compute_not_enough_data: Case::new(None, Scale(64), 61, NotEnoughData("compute ops on fewer than 2 ranks"))
        .edit(common::collectives_without_bytes),
}

/// Rank `rank` runs each of its first `n` compute ops of every iteration twice (the copy
/// right after the original, `scale` times as long).
fn extra_ops(t: &mut Trace, rank: u32, n: usize, scale: f64) {
    let r = t.ranks.iter_mut().find(|r| r.rank == rank).unwrap();
    let mut out: Vec<Op> = Vec::with_capacity(r.ops.len() + n * 32);
    let mut seen: Option<(u32, usize)> = Option::None;
    for op in r.ops.drain(..) {
        out.push(op);
        if op.kind != OpKind::Compute || op.end().is_none() {
            continue;
        }
        let k = match seen {
            Some((it, k)) if it == op.iteration => k + 1,
            _ => 1,
        };
        seen = Some((op.iteration, k));
        if k <= n {
            let len = ((op.end_ns - op.start_ns) as f64 * scale) as i64;
            let mut copy = op;
            copy.start_ns = op.end_ns;
            copy.end_ns = op.end_ns + len;
            copy.issue_ns = op.end_ns;
            out.push(copy);
        }
    }
    r.ops = out;
}

fn named(t: &Trace) -> Vec<(u32, Severity, String)> {
    diagnose(t, &EngineConfig::default())
        .by_detector
        .iter()
        .filter(|f| f.detector == DetectorId::ExtraWork && f.kind == FindingKind::ExtraWork)
        .map(|f| (f.culprits[0].rank.unwrap(), f.severity, f.summary.clone()))
        .collect()
}

#[test]
fn a_rank_running_more_ops_than_its_stage_is_named() {
    // Layout stated, and read from the transfers: rank 21 against its stage's replicas.
    for drop_layout in [false, true] {
        let mut out = common::simulated(&Case::new(None, Scale(64), 63, Silent));
        extra_ops(&mut out.trace, 21, 4, 1.0);
        if drop_layout {
            common::without_layout(&mut out.trace);
        }
        let said = named(&out.trace);
        assert_eq!(said.len(), 1, "layout dropped: {drop_layout}: {said:#?}");
        assert_eq!(said[0].0, 21, "{said:#?}");
        assert_eq!(said[0].1, Severity::Warning, "{said:#?}");
        assert!(said[0].2.contains("runs 4 more compute ops"), "{said:#?}");
    }
}

#[test]
fn one_extra_op_is_an_info() {
    // One op of the rank's iteration run again at half its length: about 1% of an
    // iteration (a warning from 2%).
    let mut out = common::simulated(&Case::new(None, Scale(64), 64, Silent));
    extra_ops(&mut out.trace, 9, 1, 0.5);
    let said = named(&out.trace);
    assert_eq!(said.len(), 1, "{said:#?}");
    assert_eq!((said[0].0, said[0].1), (9, Severity::Info), "{said:#?}");
    assert!(
        said[0].2.contains("runs 1 more compute op per"),
        "{said:#?}"
    );
}

#[test]
fn the_pipeline_read_from_the_transfers_is_the_layout() {
    for shape in [
        Megatron {
            tp: 1,
            pp: 4,
            dp: 1,
        },
        Megatron {
            tp: 2,
            pp: 4,
            dp: 2,
        },
        Megatron {
            tp: 8,
            pp: 2,
            dp: 4,
        },
    ] {
        let out = common::simulated(&Case::new(None, shape, 65, Silent));
        let par = out.trace.job.parallel.clone().unwrap();
        let ctx = JobContext::from_trace(&out.trace);
        let stated = Stages::from_layout(&par, &ctx.ranks).unwrap();
        let mut t = out.trace;
        common::without_layout(&mut t);
        let inferred = JobContext::from_trace(&t)
            .stages
            .unwrap_or_else(|| panic!("{shape:?}: no stages read"));
        assert_eq!(
            (inferred.of, inferred.depth),
            (stated.of, stated.depth),
            "{shape:?}"
        );
    }
}
