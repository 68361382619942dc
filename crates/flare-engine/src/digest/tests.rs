//! The digest's tests: a build on a small job, the transfer ratios against any split,
//! and the helpers' edge cases.

use super::peers::{from_total_order_bits, total_order_bits};
use super::transfer::{comm_transfer, PartClasses};
use super::*;
use crate::context::JobContext;
use flare_model::{ClusterTopology, Communicator, GroupKind, JobInfo, TraceMeta};
use flare_model::{IterationSpan, Op, OpKind};

fn op(kind: OpKind, comm: u32, seq: u32, start: i64, end: i64) -> Op {
    Op {
        kind,
        name: 0,
        iteration: 0,
        comm,
        seq,
        peer: Op::NO_PEER,
        start_ns: start,
        end_ns: end,
        issue_ns: Op::UNKNOWN,
        amount: 0,
    }
}

fn ctx(ranks: u32) -> JobContext {
    JobContext::new(
        JobInfo {
            job_id: "t".into(),
            world_size: ranks,
            cluster: ClusterTopology::for_world(ranks, 8, 4),
            parallel: None,
            microbatches: None,
        },
        TraceMeta::default(),
        vec![Communicator {
            id: 0,
            kind: GroupKind::World,
            members: (0..ranks).collect(),
            label: "world".into(),
        }],
        vec!["x".into()],
        (0..ranks).collect(),
    )
}

#[test]
fn instances_arrivals_and_self_excess() {
    // Four ranks compute then all-reduce twice; rank 2 computes 30 longer before the
    // first, and everyone waits for it.
    let c = ctx(4);
    let ops: Vec<Vec<Op>> = (0..4)
        .map(|r| {
            let late = if r == 2 { 30 } else { 0 };
            vec![
                op(OpKind::Compute, Op::NO_COMM, 0, 0, 100 + late),
                op(OpKind::AllReduce, 0, 0, 100 + late, 140),
                op(OpKind::Compute, Op::NO_COMM, 0, 140, 240),
                op(OpKind::AllReduce, 0, 1, 240, 260),
            ]
        })
        .collect();
    let slices: Vec<RankSlice> = ops
        .iter()
        .enumerate()
        .map(|(i, o)| RankSlice {
            rank_index: i,
            ops: o,
            span: Some(IterationSpan {
                iteration: 0,
                start_ns: 0,
                end_ns: Some(260),
            }),
        })
        .collect();
    let mut carry = Carry::new(4);
    let mut m = Members::default();
    let d = build(&c, 0, &slices, &mut carry, 1, &mut m);
    assert_eq!(d.n_instances, 2);
    let i0 = &m.instances[0];
    assert_eq!((i0.present, i0.last_rank, i0.last_arrival), (4, 2, 130));
    assert_eq!(i0.transfer_ns(), Some(10));
    assert_eq!(d.self_time[2].excess_ns, 30.0);
    assert_eq!(d.self_time[0].excess_ns, 0.0);
    assert_eq!(d.ranks[0].wait_ns, 30.0);
    assert_eq!(d.duration_ns, Some(260.0));
    assert_eq!(m.of_instance(1).count(), 4);
    let last = m.last_of_rank(2).unwrap();
    let first = m.prev(last).unwrap();
    assert_eq!(m.prev(first), None);
    assert_eq!(m.instance_of(first), 0);
    assert_eq!(m.get(first).gap3, 130);
    assert_eq!(carry.last_sync_end[3], Some(260));
    // The same with sparse sequence numbers (sort-based grouping).
    let sparse: Vec<Vec<Op>> = ops
        .iter()
        .map(|v| {
            v.iter()
                .map(|o| Op {
                    seq: o.seq * 1_000_000,
                    ..*o
                })
                .collect()
        })
        .collect();
    let slices: Vec<RankSlice> = sparse
        .iter()
        .enumerate()
        .map(|(i, o)| RankSlice {
            rank_index: i,
            ops: o,
            span: None,
        })
        .collect();
    let d2 = build(&c, 0, &slices, &mut Carry::new(4), 1, &mut m);
    assert_eq!(d2.n_instances, 2);
    assert_eq!(m.instances[0].last_rank, 2);
}

/// Transfer ratios come out the same whether the instances are classified in one
/// part or in several cut anywhere (classes merged in order of first appearance),
/// and whatever the threads of the ratio pass, on a job with a slow NIC.
#[test]
fn transfer_ratios_do_not_depend_on_the_split() {
    let mut cfg = flare_sim::SimConfig::for_scale(512);
    cfg.iterations = 2;
    cfg.seed = 5;
    cfg.fault = flare_sim::fault::FaultKind::SlowNic;
    let out = flare_sim::simulate(&cfg).unwrap();
    let c = JobContext::from_trace(&out.trace);
    let mut engine = crate::Engine::new(c.clone(), crate::EngineConfig::default(), 2);
    engine.push(&out.trace).unwrap();
    let instances = engine.members.instances.clone();
    assert!(instances.len() > 1000);
    // Classified in `parts` parts cut anywhere (inside a communicator's instances
    // too, as the instance pass cuts them), the ratios computed on `threads`.
    let run = |parts: usize, threads: usize| {
        let mut classes: Vec<PartClasses> = (0..parts).map(|_| PartClasses::default()).collect();
        for (k, inst) in instances.iter().enumerate() {
            classes[k * parts / instances.len()].add(&c, inst);
        }
        let parts: Vec<&PartClasses> = classes.iter().collect();
        let (mut per_instance, mut medians) = (Vec::new(), Vec::new());
        let by_comm = comm_transfer(&parts, &mut per_instance, &mut medians, threads);
        (by_comm, per_instance, medians)
    };
    let one = run(1, 1);
    assert!(one.0.iter().any(|&(_, r)| r > 1.5), "the slow NIC's groups");
    for (parts, threads) in [(2, 1), (3, 2), (7, 3), (1, 7), (5, 5)] {
        assert!(
            one == run(parts, threads),
            "{parts} parts, {threads} threads"
        );
    }
}

/// A rank's ops for each iteration: from the first op tagged with it to the last, a
/// straggler tagged with an earlier iteration in between included; one iteration
/// whose ends carry it spans the whole slice.
#[test]
fn iteration_ranges_span_first_to_last_tagged_op() {
    let tagged = |its: &[u32]| -> Vec<Op> {
        its.iter()
            .map(|&it| Op {
                iteration: it,
                ..op(OpKind::Compute, Op::NO_COMM, 0, 0, 1)
            })
            .collect()
    };
    let ops = tagged(&[3, 3, 4, 3, 4, 4, 6]);
    assert_eq!(
        iteration_ranges(&ops, &[3, 4, 5, 6]),
        vec![(0, 4), (2, 6), (0, 0), (6, 7)]
    );
    assert_eq!(iteration_ranges(&ops, &[4]), vec![(2, 6)]);
    let ops = tagged(&[7, 8, 7]);
    assert_eq!(iteration_ranges(&ops, &[7]), vec![(0, 3)]);
    assert_eq!(iteration_ranges(&ops, &[8]), vec![(1, 2)]);
    assert_eq!(iteration_ranges(&[], &[8]), vec![(0, 0)]);
}

#[test]
fn total_order_bits_sort_as_total_cmp() {
    let mut v = vec![
        3.5,
        -0.0,
        0.0,
        -2.25,
        1e-300,
        -1e300,
        f64::INFINITY,
        f64::NEG_INFINITY,
        42.0,
        -42.0,
        5e-324,
    ];
    for x in &v {
        assert_eq!(
            from_total_order_bits(total_order_bits(*x)).to_bits(),
            x.to_bits()
        );
    }
    let mut by_bits = v.clone();
    by_bits.sort_by_key(|&x| total_order_bits(x));
    v.sort_by(|a, b| a.total_cmp(b));
    let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    assert_eq!(bits(&by_bits), bits(&v));
}

#[test]
fn issue_bins_are_monotone() {
    let mut prev = 0;
    for ns in [0.0, 500.0, 1e3, 2e3, 1e4, 1e5, 1e6, 1e9, 1e12] {
        let b = issue_bin(ns);
        assert!(b >= prev && b < ISSUE_BINS, "{ns}");
        assert!(issue_bin_floor(b) <= ns.max(0.0) + 1e-9, "{ns}");
        prev = b;
    }
}
