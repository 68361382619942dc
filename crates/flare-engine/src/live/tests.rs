//! Live diagnosis, window summaries in, findings out.

use super::*;
use flare_model::summary::SUMMARY_VERSION;
use flare_model::{
    Component, FindingKind, HangRecord, IterationSample, OpKind, OpStats, PeerStacks, RankSummary,
    ThreadStack, WindowSummary,
};
use std::collections::{BTreeMap, BTreeSet};

/// One window alone, without the continuity rule.
fn analyze(w: &[WindowSummary]) -> LiveDiagnosis {
    analyze_window(&LiveWindow::from_summaries(w), &[], &LiveConfig::default())
}

const MS: u64 = 1_000_000;

/// A diagnosis's findings above info (warnings here: nothing in these windows hangs).
fn warnings(d: &LiveDiagnosis) -> Vec<&Finding> {
    d.findings
        .iter()
        .filter(|f| f.severity > Severity::Info)
        .collect()
}

fn op(name: &str, kind: OpKind, group: Option<&str>, count: u64, total_ns: u64) -> OpStats {
    OpStats {
        name: name.into(),
        kind,
        group: group.map(str::to_string),
        group_size: group.map(|_| 8),
        count,
        total_ns,
        p50_ns: total_ns / count.max(1),
        p99_ns: total_ns / count.max(1),
        max_ns: total_ns / count.max(1),
        bytes: 0,
        flops: 0,
        bus_gbps: None,
        tflops: None,
        issue_p50_ns: None,
        issue_p99_ns: None,
    }
}

/// Deterministic jitter in [-amp, +amp] from a rank number.
fn jitter(rank: u32, salt: u32, amp: f64) -> f64 {
    let h = (rank.wrapping_mul(2_654_435_761) ^ salt.wrapping_mul(40_503)) % 1000;
    1.0 + amp * (h as f64 / 500.0 - 1.0)
}

/// A synchronous job: every iteration lasts as long as the slowest rank's own work;
/// the others spend the difference waiting in the all-reduce.
/// `compute_x` / `host_extra_ms` per rank scale its work.
pub(crate) fn job(
    n: u32,
    compute_x: impl Fn(u32) -> f64,
    host_extra_ms: impl Fn(u32) -> f64,
) -> Vec<WindowSummary> {
    let its = 10u64;
    let comm_ms = 20.0;
    let own = |r: u32| -> (f64, f64) {
        let c = 100.0 * compute_x(r) * jitter(r, 1, 0.02);
        let h = 10.0 * jitter(r, 2, 0.02) + host_extra_ms(r);
        (c, h)
    };
    let slowest = (0..n).map(|r| own(r).0 + own(r).1).fold(0.0, f64::max);
    let iter_ms = slowest + comm_ms;
    let mut nodes: BTreeMap<u32, WindowSummary> = BTreeMap::new();
    for r in 0..n {
        let (c, h) = own(r);
        let sync = iter_ms - c - h;
        let node = r / 4;
        let s = nodes.entry(node).or_insert_with(|| WindowSummary {
            parallel: None,
            version: SUMMARY_VERSION,
            job_id: "job".into(),
            node: format!("node-{node}"),
            window: 7,
            window_ns: 60_000 * MS,
            start_unix_ns: 0,
            end_unix_ns: 60_000 * MS,
            world_size: n,
            ranks: vec![],
            hangs: vec![],
            peer_stacks: Vec::new(),
            logs: None,
        });
        let ns = |ms: f64| (ms * its as f64 * MS as f64) as u64;
        s.ranks.push(RankSummary {
            iterations: (0..its)
                .map(|i| IterationSample {
                    step: i,
                    start_unix_ns: i * (iter_ms as u64) * MS,
                    duration_ns: (iter_ms * MS as f64) as u64,
                })
                .collect(),
            ops: vec![
                op("gemm", OpKind::Compute, None, its * 40, ns(c * 0.8)),
                op("attn", OpKind::Compute, None, its * 20, ns(c * 0.2)),
                op("gc", OpKind::GarbageCollection, None, its, ns(h)),
                op("allreduce", OpKind::AllReduce, Some("dp"), its, ns(sync)),
            ],
            busy_ns: ns(iter_ms),
            observed_ns: ns(iter_ms),
            events: its * 62,
            ..RankSummary::empty(r, r % 4, 1000 + r)
        });
    }
    nodes.into_values().collect()
}

#[test]
fn an_iteration_across_the_window_edge_does_not_split_peers() {
    // Each op runs once per iteration. An iteration that began in the window before and
    // ends in this one counts here while its op counted there: the ranks whose count is
    // one short of their iterations still run it every iteration. Rank 5, which stalled
    // and ended one iteration fewer, is compared with them and named (CI: a stalled rank
    // left "not compared").
    let mut w = job(8, |_| 1.0, |r| if r == 5 { 40.0 } else { 0.0 });
    for s in &mut w {
        for r in &mut s.ranks {
            for o in &mut r.ops {
                o.count = 10;
            }
            if r.rank != 5 {
                let last = *r.iterations.last().unwrap();
                r.iterations.push(IterationSample {
                    step: last.step + 1,
                    start_unix_ns: last.start_unix_ns + last.duration_ns,
                    duration_ns: last.duration_ns,
                });
            }
        }
    }
    let d = analyze(&w);
    assert!(
        !d.notes.iter().any(|n| n.contains("not compared")),
        "{:?}",
        d.notes
    );
    assert!(
        d.findings
            .iter()
            .any(|f| f.detector == DetectorId::SlowRank && f.culprits[0].rank == Some(5)),
        "{:#?}",
        d.findings
    );
}

#[test]
fn stray_milliseconds_in_a_nearly_idle_window_are_not_a_straggler() {
    // The window after a job ended: every rank is observed for 2 s, none ran an
    // iteration; half did nothing, three ran a short GC pass at exit and one a long
    // one (the peers' median without it is 0, which made a ratio explode).
    let mut s = job(8, |_| 1.0, |_| 0.0).remove(0);
    let mut all = Vec::new();
    for node in 0..2u32 {
        s.node = format!("node-{node}");
        s.ranks = (0..4u32)
            .map(|l| {
                let r = node * 4 + l;
                RankSummary {
                    ops: match r {
                        0..=3 => vec![],
                        7 => vec![op("gc", OpKind::GarbageCollection, None, 1, 40 * MS)],
                        _ => vec![op(
                            "gc",
                            OpKind::GarbageCollection,
                            None,
                            1,
                            MS + 10_000 * r as u64,
                        )],
                    },
                    observed_ns: 2_000 * MS,
                    events: 2,
                    ..RankSummary::empty(r, l, 1000 + r)
                }
            })
            .collect();
        all.push(s.clone());
    }
    let d = analyze(&all);
    let warn: Vec<_> = d
        .findings
        .iter()
        .filter(|f| f.severity != Severity::Info)
        .map(|f| f.summary.clone())
        .collect();
    assert!(warn.is_empty(), "{warn:?}");
}

#[test]
fn a_rank_that_costs_little_of_the_step_needs_three_windows_running() {
    // Rank 2 spends 40 ms more than its peers outside collectives per step: a third more
    // than their own time, but the steps last 600 ms (its peers wait in long collectives),
    // so it costs the job under a tenth of the step, as ranks on shared cores can differ
    // by chance for two windows.
    let mut w = job(4, |_| 1.0, |r| if r == 2 { 40.0 } else { 0.0 });
    for s in &mut w {
        for r in &mut s.ranks {
            let steps = r.iterations.len() as u64;
            let longer = 450 * MS * steps;
            for i in &mut r.iterations {
                i.duration_ns += 450 * MS;
            }
            r.observed_ns += longer;
            r.busy_ns += longer;
            r.sync_busy_ns = Some(
                r.ops
                    .iter()
                    .filter(|o| o.kind.is_sync())
                    .map(|o| o.total_ns)
                    .sum::<u64>()
                    + longer,
            );
        }
    }
    // Its summary says so meanwhile; the third window running makes it a warning.
    let (got, said) = first_warning(&w, 2, 4);
    assert_eq!(got, Some(3), "{said:#?}");
    assert!(
        said[0].starts_with(
            "unconfirmed (first window with it; a warning if the next 2 windows show it too)"
        ),
        "{}",
        said[0]
    );
    assert!(
        said[1].starts_with("unconfirmed (2 windows running; it costs the job 6."),
        "{}",
        said[1]
    );
}

/// The window (1-based) of a run of identical windows in which the slow-rank finding of
/// `rank` first is a warning, with the summaries of the windows before it.
fn first_warning(w: &[WindowSummary], rank: u32, upto: usize) -> (Option<usize>, Vec<String>) {
    let cfg = LiveConfig::default();
    let window = LiveWindow::from_summaries(w);
    let mut previous: Option<Vec<Finding>> = None;
    let mut said = vec![];
    for n in 1..=upto {
        let d = diagnose_window(&window, &[], previous.as_deref(), &cfg);
        let slow = d
            .findings
            .iter()
            .find(|f| f.detector == DetectorId::SlowRank && f.culprits[0].rank == Some(rank));
        if slow.is_some_and(|f| f.severity == Severity::Warning) {
            return (Some(n), said);
        }
        said.push(slow.map_or("nothing".into(), |f| f.summary.clone()));
        previous = Some(d.findings);
    }
    (None, said)
}

#[test]
fn the_windows_a_slow_rank_needs_follow_its_excess_and_its_cost() {
    // Rank 5 of 8 in a job of 130-ms steps whose ranks spend 110 ms of their own: (its
    // compute multiple, its extra host ms per step, the window it is first a warning in).
    let cases: [(&str, f64, f64, usize); 4] = [
        ("strong and costly: at once", 1.3, 0.0, 1),
        ("past the excess bar and a tenth of the step", 1.0, 17.0, 1),
        (
            "a mild excess a tenth of the step: two windows",
            1.0,
            15.5,
            2,
        ),
        (
            "a mild excess costing 6% of the step: three windows",
            1.08,
            0.0,
            3,
        ),
    ];
    for (name, compute, host, expected) in cases {
        let w = job(
            8,
            |r| if r == 5 { compute } else { 1.0 },
            |r| if r == 5 { host } else { 0.0 },
        );
        let (got, said) = first_warning(&w, 5, 4);
        assert_eq!(got, Some(expected), "{name}: {said:#?}");
        for (i, s) in said.iter().enumerate() {
            assert!(
                s.starts_with("unconfirmed"),
                "{name}, window {}: {s}",
                i + 1
            );
        }
        if expected == 3 {
            assert!(
                said[1].contains("(2 windows running; it costs the job"),
                "{name}: {}",
                said[1]
            );
        }
    }
}

#[test]
fn one_stall_needs_the_next_window_and_a_straggler_as_costly_does_not() {
    // Rank 5 stalls once for 600 ms outside any span (descheduled, paging) while its
    // peers wait in their all-reduce: one iteration holds its whole cost. The same cost
    // spread over every iteration is a straggler, a warning at once.
    let cfg = LiveConfig::default();
    let mut once = job(8, |_| 1.0, |_| 0.0);
    let stall = 600 * MS;
    for r in once.iter_mut().flat_map(|s| s.ranks.iter_mut()) {
        r.iterations[3].duration_ns += stall;
        r.observed_ns += stall;
        if r.rank != 5 {
            for o in r.ops.iter_mut().filter(|o| o.kind.is_sync()) {
                o.total_ns += stall;
            }
            r.busy_ns += stall;
        }
    }
    with_stepping(&mut once);
    let spread = job(8, |_| 1.0, |r| if r == 5 { 60.0 } else { 0.0 });
    for (what, w, first_window) in [
        ("one stall", &once, Severity::Info),
        ("spread", &spread, Severity::Warning),
    ] {
        let window = LiveWindow::from_summaries(w);
        let mut first = analyze(w);
        confirm_with_previous(&mut first, &window, None, &cfg);
        let f = first
            .findings
            .iter()
            .find(|f| f.first_rank() == Some(5))
            .unwrap_or_else(|| panic!("{what}: {:#?}", first.findings));
        assert_eq!(f.severity, first_window, "{what}: {}", f.summary);
        assert!(
            (first_window == Severity::Warning)
                || f.summary
                    .starts_with("unconfirmed (one stall (an iteration 600 ms longer"),
            "{what}: {}",
            f.summary
        );
        assert!(warnings(&first)
            .iter()
            .all(|f| f.culprits[0].rank == Some(5)));
        // Seen again in the next window: a warning.
        let mut second = analyze(w);
        confirm_with_previous(&mut second, &window, Some(&first.findings), &cfg);
        assert_eq!(second.findings[0].severity, Severity::Warning, "{what}");
        assert_eq!(second.findings[0].culprits[0].rank, Some(5), "{what}");
    }
}

#[test]
fn finds_a_slow_gpu_among_eight() {
    let w = job(8, |r| if r == 5 { 1.2 } else { 1.0 }, |_| 0.0);
    let d = analyze(&w);
    assert!(d.conclusive);
    assert_eq!(d.ranks, 8);
    let warn = warnings(&d);
    assert_eq!(warn.len(), 1, "{:#?}", d.findings);
    assert_eq!(warn[0].kind, FindingKind::SlowGpu);
    assert_eq!(warn[0].culprits[0].rank, Some(5));
    assert_eq!(warn[0].culprits[0].element.as_deref(), Some("node-1"));
    // Its own time is 130 ms per iteration against its peers' 110 ms: 18% more.
    let excess = warn[0]
        .evidence
        .iter()
        .find(|e| e.metric == EvidenceKey::SelfTimeExcess)
        .unwrap();
    assert!((excess.value - 18.2).abs() < 2.0, "{excess:?}");
    assert!(warn[0].confidence > 0.8, "{}", warn[0].confidence);
}

#[test]
fn a_job_whose_agents_saw_no_gpu_gets_cpu_causes_and_no_gpu_advice() {
    let mut w = job(8, |r| if r == 5 { 1.2 } else { 1.0 }, |_| 0.0);
    for s in &mut w {
        for r in &mut s.ranks {
            r.gpu = Some(false);
        }
    }
    let d = analyze(&w);
    let warn = warnings(&d);
    assert_eq!(warn.len(), 1, "{:#?}", d.findings);
    assert_eq!(warn[0].culprits[0].rank, Some(5));
    assert_eq!(warn[0].kind, FindingKind::SlowCpu, "{:#?}", warn[0]);
    // Its place is its host, not a GPU slot.
    assert_eq!(warn[0].culprits[0].local_gpu, None);
    assert!(!warn[0].summary.contains("GPU"), "{}", warn[0].summary);
    for f in &d.findings {
        assert_ne!(f.kind, FindingKind::SlowGpu);
        assert!(
            !f.action.contains("nvidia-smi") && !f.action.contains("Xid"),
            "{}",
            f.action
        );
    }
    // One agent that saw a GPU (the others could not tell) keeps the GPU reading.
    for s in &mut w {
        for r in &mut s.ranks {
            r.gpu = if r.rank == 0 { Some(true) } else { None };
        }
    }
    let d = analyze(&w);
    assert!(
        d.findings.iter().any(|f| f.kind == FindingKind::SlowGpu),
        "{:#?}",
        d.findings
    );
}

#[test]
fn healthy_jittery_ranks_give_no_finding() {
    for n in [3, 8, 64] {
        let w = job(n, |_| 1.0, |_| 0.0);
        let d = analyze(&w);
        assert!(d.conclusive);
        assert!(d.findings.is_empty(), "{n} ranks: {:#?}", d.findings);
        assert!(d.notes.is_empty(), "{:?}", d.notes);
    }
}

#[test]
fn tells_a_host_stall_from_a_slow_gpu() {
    let w = job(8, |_| 1.0, |r| if r == 2 { 25.0 } else { 0.0 });
    let d = analyze(&w);
    assert_eq!(d.findings.len(), 1, "{:#?}", d.findings);
    let f = &d.findings[0];
    assert_eq!(f.kind, FindingKind::HostStall);
    assert_eq!(f.culprits[0].component, Component::Host);
    assert_eq!(f.culprits[0].rank, Some(2));
    assert!(f.summary.contains("garbage-collection"), "{}", f.summary);
}

#[test]
fn pipeline_stages_with_different_kernels_are_not_compared() {
    // Ranks 4-7 run an extra kernel (the loss of the last stage) and take longer:
    // that is their work, not a fault.
    let mut w = job(8, |r| if r >= 4 { 1.3 } else { 1.0 }, |_| 0.0);
    for s in &mut w {
        for r in &mut s.ranks {
            if r.rank >= 4 {
                r.ops.push(op("loss", OpKind::Compute, None, 10, 10 * MS));
            }
        }
    }
    let d = analyze(&w);
    assert!(d.findings.is_empty(), "{:#?}", d.findings);
    assert!(d.conclusive);
}

/// The same pipeline, its layout stated by the ranks (`FLARE_PARALLEL`, a launcher's
/// flags): the live engine compares the stages as the batch engine does, and says why it
/// leaves replicas' per-iteration imbalance to traces.
#[test]
fn a_stated_layout_lets_the_live_engine_compare_pipeline_stages() {
    let mut w = job(8, |r| if r >= 4 { 1.3 } else { 1.0 }, |_| 0.0);
    let layout = flare_model::ParallelConfig::new(1, 1, 1, 4, 2).unwrap();
    for s in &mut w {
        s.parallel = Some(layout.clone());
        for r in &mut s.ranks {
            if r.rank >= 4 {
                r.ops.push(op("loss", OpKind::Compute, None, 10, 10 * MS));
            }
        }
    }
    let d = analyze(&w);
    let stage: Vec<&Finding> = d
        .findings
        .iter()
        .filter(|f| f.kind == FindingKind::StageImbalance)
        .collect();
    assert_eq!(stage.len(), 1, "{:#?}", d.findings);
    assert_eq!(stage[0].culprits[0].stage, Some(1));
    // Stage 1's ranks compute 1.3x (and the loss) against jittered stage-0 ranks.
    let ratio: f64 = stage[0].summary["pipeline stage 1 computes x".len()..][..4]
        .parse()
        .unwrap();
    assert!((1.25..1.4).contains(&ratio), "{}", stage[0].summary);
    let skipped = |id| d.skipped.iter().find(|s| s.detector == id);
    assert!(
        skipped(DetectorId::StageImbalance).is_none(),
        "{:?}",
        d.skipped
    );
    let seq = skipped(DetectorId::SequenceImbalance).expect("skipped live");
    assert!(seq.reason.contains("live window"), "{}", seq.reason);
    // A layout that does not fit the job is not used.
    for s in &mut w {
        s.parallel = Some(flare_model::ParallelConfig::new(1, 1, 1, 2, 2).unwrap());
    }
    let d = analyze(&w);
    assert!(d.findings.is_empty(), "{:#?}", d.findings);
}

#[test]
fn half_the_ranks_slow_are_each_named_by_their_scores() {
    // Four of eight at half speed: the median sits between the two halves, so the
    // self-time test singles out no one, but the relative score (the fastest peer's
    // kernel time over the rank's) names each of them, as it does for files.
    let w = job(8, |r| if r < 4 { 2.0 } else { 1.0 }, |_| 0.0);
    let d = analyze(&w);
    let named: BTreeSet<u32> = d
        .findings
        .iter()
        .filter(|f| f.severity != Severity::Info)
        .flat_map(|f| f.culprits.iter().filter_map(|c| c.rank))
        .collect();
    assert_eq!(named, BTreeSet::from([0, 1, 2, 3]), "{:#?}", d.findings);
    assert!(d
        .findings
        .iter()
        .all(|f| f.kind == FindingKind::SlowGpu && f.detector == DetectorId::Metrics));
}

#[test]
fn a_hang_record_gives_a_critical_hang_naming_the_rank_not_stuck() {
    let mut w = job(8, |_| 1.0, |_| 0.0);
    for s in &mut w {
        let node = s.node.clone();
        for r in &s.ranks {
            if r.rank == 6 {
                continue;
            }
            s.hangs.push(HangRecord {
                rank: r.rank,
                pid: r.pid,
                op: "allreduce".into(),
                kind: OpKind::AllReduce,
                group: Some("dp".into()),
                in_flight_ns: 300_000 * MS,
                detected_unix_ns: 1,
                stacks: vec![ThreadStack {
                    thread: "MainThread".into(),
                    frames: vec![
                        "all_reduce (torch/distributed/distributed_c10d.py:2501)".into(),
                        "train_step (train.py:88)".into(),
                    ],
                }],
                stack_source: format!("py-spy on {node}"),
            });
        }
    }
    let d = analyze(&w);
    assert!(d.conclusive);
    assert_eq!(d.findings.len(), 1, "{:#?}", d.findings);
    let f = &d.findings[0];
    assert_eq!(f.kind, FindingKind::Hang);
    assert_eq!(f.severity, Severity::Critical);
    assert_eq!(f.culprits[0].rank, Some(6));
    assert!(f.summary.contains("0-5, 7"), "{}", f.summary);
    let stack = f
        .evidence
        .iter()
        .find(|e| e.metric == EvidenceKey::Stack)
        .unwrap();
    assert!(stack.detail.contains("train.py:88"), "{}", stack.detail);
    assert!(
        stack.detail.contains("stuck ranks 0-5, 7"),
        "{}",
        stack.detail
    );
    // Without its own stack, the action says how to get it.
    assert!(f.action.contains("py-spy dump --pid 1006"), "{}", f.action);
}

#[test]
fn the_stack_of_the_rank_not_stuck_shows_where_it_is() {
    let mut w = job(4, |_| 1.0, |_| 0.0);
    let stack = |frames: &[&str]| {
        vec![ThreadStack {
            thread: "Thread 7 (idle): \"MainThread\"".into(),
            frames: frames.iter().map(|f| f.to_string()).collect(),
        }]
    };
    for r in [0, 1, 3] {
        w[0].hangs.push(HangRecord {
            rank: r,
            pid: 1000 + r,
            op: "ddp_all_reduce".into(),
            kind: OpKind::AllReduce,
            group: Some("world".into()),
            in_flight_ns: 30_000 * MS,
            detected_unix_ns: 1,
            stacks: stack(&["wait (torch/distributed/...)", "backward (train.py:40)"]),
            stack_source: "py-spy".into(),
        });
    }
    w[0].peer_stacks.push(PeerStacks {
        rank: 2,
        pid: 1002,
        open_op: None,
        captured_unix_ns: 1,
        stacks: stack(&["load_batch (data.py:17)", "<module> (train.py:31)"]),
        stack_source: "py-spy".into(),
    });
    let d = analyze(&w);
    let f = d
        .findings
        .iter()
        .find(|f| f.kind == FindingKind::Hang)
        .unwrap();
    assert_eq!(f.culprits[0].rank, Some(2), "{f:#?}");
    assert!(
        f.action.starts_with("rank 2 is at load_batch (data.py:17)"),
        "{}",
        f.action
    );
    let stacks: Vec<&str> = f
        .evidence
        .iter()
        .filter(|e| e.metric == EvidenceKey::Stack)
        .map(|e| e.detail.as_str())
        .collect();
    // The waiting ranks' common stack once, and the odd rank out's own.
    assert!(
        stacks.iter().any(|s| s.starts_with("stuck ranks 0-1, 3")),
        "{stacks:#?}"
    );
    assert!(
        stacks.iter().any(|s| s.starts_with("rank 2 on")
            && s.contains("not stuck")
            && s.contains("data.py:17")),
        "{stacks:#?}"
    );
}

#[test]
fn ranks_waiting_inside_backward_are_not_blamed_for_it_the_rank_they_wait_for_is() {
    // A DDP hang on a CPU job: ranks 0, 1, 3 wait in their bucket all-reduce inside
    // `forward_backward` (the watchdog reports both spans); rank 2 never reaches it.
    let mut w = job(4, |_| 1.0, |_| 0.0);
    let record = |rank: u32, op: &str, kind: OpKind, group: Option<&str>| HangRecord {
        rank,
        pid: 1000 + rank,
        op: op.into(),
        kind,
        group: group.map(String::from),
        in_flight_ns: 60_000 * MS,
        detected_unix_ns: 1,
        stacks: vec![],
        stack_source: "native".into(),
    };
    for r in [0, 1, 3] {
        w[0].hangs
            .push(record(r, "forward_backward", OpKind::Compute, None));
        w[0].hangs.push(record(
            r,
            "ddp_all_reduce",
            OpKind::AllReduce,
            Some("world"),
        ));
    }
    for s in &mut w {
        for r in &mut s.ranks {
            r.gpu = Some(false);
        }
    }
    let d = analyze(&w);
    let hangs: Vec<&Finding> = d
        .findings
        .iter()
        .filter(|f| f.kind == FindingKind::Hang)
        .collect();
    assert_eq!(hangs.len(), 1, "{:#?}", d.findings);
    assert_eq!(hangs[0].culprits[0].rank, Some(2), "{:#?}", hangs[0]);
    for f in &d.findings {
        assert!(
            !f.action.contains("Xid") && !f.action.contains("nvidia-smi"),
            "{}",
            f.action
        );
        assert!(
            f.culprits.iter().all(|c| c.component != Component::Gpu),
            "{f:#?}"
        );
    }
}

#[test]
fn a_rank_stuck_in_a_kernel_is_its_own_cause() {
    let mut w = job(4, |_| 1.0, |_| 0.0);
    w[0].hangs.push(HangRecord {
        rank: 1,
        pid: 1001,
        op: "gemm".into(),
        kind: OpKind::Compute,
        group: None,
        in_flight_ns: 120_000 * MS,
        detected_unix_ns: 1,
        stacks: vec![],
        stack_source: "none".into(),
    });
    let d = analyze(&w);
    assert_eq!(d.findings.len(), 1);
    assert_eq!(d.findings[0].culprits[0].component, Component::Gpu);
    assert_eq!(d.findings[0].culprits[0].rank, Some(1));
}

#[test]
fn fewer_than_three_ranks_is_inconclusive() {
    let w = job(2, |r| if r == 1 { 2.0 } else { 1.0 }, |_| 0.0);
    let d = analyze(&w);
    assert!(!d.conclusive);
    assert_eq!(d.ranks, 2);
    assert!(d.findings.is_empty());
    assert!(d.notes[0].contains("only 2 ranks"), "{:?}", d.notes);
}

#[test]
fn ranks_that_traced_only_collectives_are_compared_by_their_time_outside_them() {
    // plain flare.init(): the collectives are traced, the work between them is not.
    let untraced = |host_extra: f64| {
        let mut w = job(4, |_| 1.0, |r| if r == 2 { host_extra } else { 0.0 });
        for s in &mut w {
            for r in &mut s.ranks {
                r.busy_ns = 0;
                r.ops.retain(|o| o.kind.is_sync());
            }
        }
        analyze(&w)
    };
    let d = untraced(0.0);
    assert!(d.conclusive, "{:?}", d.notes);
    assert!(
        d.findings.iter().all(|f| f.severity == Severity::Info),
        "{:#?}",
        d.findings
    );
    // Rank 2 stalls 30 ms per step outside anything traced: its peers wait for it in
    // their collectives. It is named, and nothing claims to know which part is slow.
    let d = untraced(30.0);
    let warn = warnings(&d);
    assert_eq!(warn.len(), 1, "{:#?}", d.findings);
    assert_eq!(warn[0].culprits[0].rank, Some(2));
    assert_eq!(warn[0].kind, FindingKind::SlowRank, "{:#?}", warn[0]);
}

#[test]
fn a_cpu_jobs_cpu_time_tells_extra_compute_from_a_stall_when_nothing_else_does() {
    // As above, on CPUs, with each process's CPU time: 600 ms of CPU per peer per window;
    // rank 2 is 30 ms per step slower, with `rank2_cpu_ms` more CPU per step than them.
    // Each rank's main thread waits `base_wait_ms` per step for a CPU, rank 2 that much
    // more; returns the window's findings about rank 2.
    let findings = |gpu: Option<bool>, rank2_cpu_ms: u64, base_wait_ms: u64, rank2_wait_ms: u64| {
        let mut w = job(4, |_| 1.0, |r| if r == 2 { 30.0 } else { 0.0 });
        for s in &mut w {
            for r in &mut s.ranks {
                r.busy_ns = 0;
                r.ops.retain(|o| o.kind.is_sync());
                r.gpu = gpu;
                let steps = r.iterations.len() as u64;
                r.cpu_ns = Some(
                    600 * MS
                        + if r.rank == 2 {
                            rank2_cpu_ms * MS * steps
                        } else {
                            0
                        },
                );
                let extra_wait = if r.rank == 2 { rank2_wait_ms } else { 0 };
                r.runqueue_ns = Some((base_wait_ms + extra_wait) * MS * steps);
            }
        }
        analyze(&w).findings
    };
    let run_waiting = |gpu: Option<bool>, rank2_cpu_ms: u64, rank2_wait_ms: u64| {
        let all = findings(gpu, rank2_cpu_ms, 5, rank2_wait_ms);
        let warn: Vec<&Finding> = all.iter().filter(|f| f.severity > Severity::Info).collect();
        assert_eq!(warn.len(), 1, "{all:#?}");
        assert_eq!(warn[0].culprits[0].rank, Some(2));
        warn[0].clone()
    };
    let run = |gpu: Option<bool>, rank2_cpu_ms: u64| run_waiting(gpu, rank2_cpu_ms, 0);
    // Slept or blocked: its CPU time matches its peers'.
    let f = run(Some(false), 0);
    assert_eq!(f.kind, FindingKind::HostStall, "{f:#?}");
    assert_eq!(f.culprits[0].component, Component::Host);
    let cpu = f
        .evidence
        .iter()
        .find(|e| e.metric == EvidenceKey::CpuTimePerIterationMs)
        .unwrap();
    assert!(cpu.decisive && cpu.detail.contains("off it"), "{cpu:#?}");
    assert!(!f.action.contains("drain"), "{}", f.action);
    // Its extra time was CPU work.
    let f = run(Some(false), 28);
    assert_eq!(f.kind, FindingKind::SlowCpu, "{f:#?}");
    assert_eq!(f.culprits[0].component, Component::Process);
    // In between, it does not decide: no cause is claimed.
    assert_eq!(run(Some(false), 12).kind, FindingKind::SlowRank);
    // Off the CPU, but runnable: other processes held its cores. Its node, not its code.
    let f = run_waiting(Some(false), 0, 27);
    assert_eq!(f.kind, FindingKind::SlowCpu, "{f:#?}");
    assert_eq!(f.culprits[0].component, Component::Host);
    assert!(f.summary.contains("waiting for a CPU"), "{}", f.summary);
    // On a node whose every rank waits for a CPU about as long (more busy threads than
    // cores), the one that waited most this time is the scheduler's draw: an info on the
    // oversubscribed node, no warning about the rank.
    let all = findings(Some(false), 0, 20, 27);
    assert!(all.iter().all(|f| f.severity == Severity::Info), "{all:#?}");
    let f = all
        .iter()
        .find(|f| f.kind == FindingKind::SlowCpu)
        .expect("an info");
    assert!(f.summary.contains("oversubscribed"), "{}", f.summary);
    // Off its CPU, not waiting for one, while every peer waits for a CPU longer than it
    // was late: its own helper threads may have waited for one; an info on the node.
    let all = findings(Some(false), 0, 40, 0);
    assert!(all.iter().all(|f| f.severity == Severity::Info), "{all:#?}");
    let f = all
        .iter()
        .find(|f| f.kind == FindingKind::SlowCpu)
        .expect("an info");
    assert!(
        f.summary.contains("off its CPU on an oversubscribed node"),
        "{}",
        f.summary
    );
    // The same pause with peers waiting for a CPU for less than it: its own.
    let f = run_waiting(Some(false), 0, 0);
    assert_eq!(f.kind, FindingKind::HostStall, "{f:#?}");
    let all = findings(Some(false), 0, 20, 0);
    assert!(
        all.iter()
            .any(|f| f.kind == FindingKind::HostStall && f.severity == Severity::Warning),
        "{all:#?}"
    );
    // A GPU job's (or an unknown one's) CPU time says nothing about its kernels.
    assert_eq!(run(Some(true), 0).kind, FindingKind::SlowRank);
    assert_eq!(run(None, 0).kind, FindingKind::SlowRank);
}

#[test]
fn a_rank_named_in_the_previous_window_stays_named_while_it_is_still_clearly_the_slowest() {
    // Four ranks with widely spread peers (as a small CPU job's are), rank 2 slower by
    // `extra` ms per step; nothing traced but the collectives.
    let window = |extra: f64| {
        let mut w = job(4, |_| 1.0, |r| [0.0, 12.0, extra, 6.0][r as usize]);
        for s in &mut w {
            for r in &mut s.ranks {
                r.busy_ns = 0;
                r.ops.retain(|o| o.kind.is_sync());
            }
        }
        LiveWindow::from_summaries(&w)
    };
    let cfg = LiveConfig::default();
    let named = |d: &LiveDiagnosis| -> Vec<u32> {
        d.findings
            .iter()
            .filter(|f| f.severity > Severity::Info)
            .filter_map(|f| f.culprits[0].rank)
            .collect()
    };
    let clear = diagnose_window(&window(150.0), &[], None, &cfg);
    assert_eq!(named(&clear), vec![2], "{:#?}", clear.findings);
    // Half as far out: past half the bar, not past the bar.
    let weaker = window(64.0);
    let alone = diagnose_window(&weaker, &[], None, &cfg);
    assert!(named(&alone).is_empty(), "{:#?}", alone.findings);
    let held = diagnose_window(&weaker, &[], Some(&clear.findings), &cfg);
    assert_eq!(named(&held), vec![2], "{:#?}", held.findings);
    let f = held
        .findings
        .iter()
        .find(|f| f.severity > Severity::Info)
        .unwrap();
    assert!(
        f.summary.starts_with("still (named in the previous window"),
        "{}",
        f.summary
    );
    assert_eq!(
        held.findings
            .iter()
            .filter(|f| f.first_rank() == Some(2))
            .count(),
        1,
        "one finding for the rank: {:#?}",
        held.findings
    );
    // Back among its peers: not held.
    let healed = diagnose_window(&window(3.0), &[], Some(&clear.findings), &cfg);
    assert!(named(&healed).is_empty(), "{:#?}", healed.findings);
    // A verdict of another rank is not carried over to this one.
    let mut other = clear.findings.clone();
    other[0].culprits[0].rank = Some(1);
    assert!(named(&diagnose_window(&weaker, &[], Some(&other), &cfg)).is_empty());
    // Past half the bar in two windows running, by a third of the step: named in the
    // second, though neither window alone names it.
    let mut before = window(64.0);
    before.window = weaker.window - 1;
    let first = diagnose_window(&before, &[], None, &cfg);
    assert!(named(&first).is_empty(), "{:#?}", first.findings);
    let second = diagnose_window(&weaker, &[&before], Some(&first.findings), &cfg);
    assert_eq!(named(&second), vec![2], "{:#?}", second.findings);
    let f = second
        .findings
        .iter()
        .find(|f| f.severity > Severity::Info)
        .unwrap();
    assert!(
        f.summary.starts_with("in two windows running"),
        "{}",
        f.summary
    );
    // A window that is not the one just before does not count.
    before.window = weaker.window - 2;
    let gap = diagnose_window(&weaker, &[&before], None, &cfg);
    assert!(named(&gap).is_empty(), "{:#?}", gap.findings);
}

#[test]
fn a_stall_outside_any_span_is_named_though_the_rank_traces_its_compute() {
    // Rank 5 stalls 30 ms per step outside every span: its traced work is its peers',
    // its busy time shorter, and its peers wait for it in their all-reduce.
    let mut w = job(8, |_| 1.0, |r| if r == 5 { 30.0 } else { 0.0 });
    for s in &mut w {
        for r in s.ranks.iter_mut().filter(|r| r.rank == 5) {
            let stall = 30 * MS * r.iterations.len() as u64;
            for o in &mut r.ops {
                if o.kind == OpKind::GarbageCollection {
                    o.total_ns -= stall;
                }
            }
            r.busy_ns -= stall;
        }
    }
    let d = analyze(&w);
    let warn = warnings(&d);
    assert_eq!(warn.len(), 1, "{:#?}", d.findings);
    assert_eq!(warn[0].culprits[0].rank, Some(5));
    // Not its GPU, not a traced host phase: outside what it traced.
    assert_eq!(warn[0].kind, FindingKind::SlowRank, "{:#?}", warn[0]);
}

/// Each rank's stepping span as an agent reports it: its iterations (all inside the
/// window here) and its time in collectives.
fn with_stepping(w: &mut [WindowSummary]) {
    for r in w.iter_mut().flat_map(|s| s.ranks.iter_mut()) {
        let sync = r.sync_busy_ns.unwrap_or_else(|| {
            r.ops
                .iter()
                .filter(|o| o.kind.is_sync())
                .map(|o| o.total_ns)
                .sum()
        });
        r.stepping = Some(flare_model::SteppingTime {
            span_ns: r.iterations.iter().map(|i| i.duration_ns).sum(),
            sync_ns: sync,
        });
    }
}

#[test]
fn start_up_before_the_first_step_is_not_an_iterations_work() {
    // The window where a job starts: every rank was watched from its `flare.init()`,
    // ranks 5 and 6 for 1.5 s longer than the others (they started first and waited,
    // untraced, for the rest to connect), then all ran the same iterations. From the
    // stepping span, healthy; from the observed time alone, as agents without the span
    // report it, rank 5 or 6 "delays its peers" by about 150%.
    let mut w = job(8, |_| 1.0, |_| 0.0);
    for r in w.iter_mut().flat_map(|s| s.ranks.iter_mut()) {
        r.gpu = Some(false);
        if r.rank == 5 || r.rank == 6 {
            r.observed_ns += 1_500 * MS;
        }
    }
    let old = analyze(&w);
    let named: BTreeSet<_> = warnings(&old)
        .iter()
        .filter_map(|f| f.culprits[0].rank)
        .collect();
    assert!(
        !named.is_empty() && named.is_subset(&BTreeSet::from([5, 6])),
        "{:#?}",
        old.findings
    );
    with_stepping(&mut w);
    let d = analyze(&w);
    assert!(warnings(&d).is_empty(), "{:#?}", d.findings);
}

#[test]
fn a_stall_inside_the_iterations_is_named_from_the_stepping_span() {
    // Rank 3 stalls 30 ms per step outside every span, inside its iterations.
    let mut w = job(8, |_| 1.0, |r| if r == 3 { 30.0 } else { 0.0 });
    for r in w.iter_mut().flat_map(|s| s.ranks.iter_mut()) {
        if r.rank == 3 {
            let stall = 30 * MS * r.iterations.len() as u64;
            for o in r
                .ops
                .iter_mut()
                .filter(|o| o.kind == OpKind::GarbageCollection)
            {
                o.total_ns -= stall;
            }
            r.busy_ns -= stall;
        }
        // Every rank also watched 0.8 s before its first step.
        r.observed_ns += 800 * MS;
    }
    with_stepping(&mut w);
    let d = analyze(&w);
    let warn = warnings(&d);
    assert_eq!(warn.len(), 1, "{:#?}", d.findings);
    assert_eq!(warn[0].culprits[0].rank, Some(3));
    assert_eq!(warn[0].kind, FindingKind::SlowRank, "{:#?}", warn[0]);
}

#[test]
fn overlapping_collectives_count_once_in_a_ranks_time_outside_them() {
    // DDP: each bucket's all-reduce is an async span, several in flight at once and
    // overlapping the backward pass, so their durations add up to more than the window.
    // The agent's union of them (sync_busy_ns) is what the rank spent in collectives.
    let mut w = job(4, |_| 1.0, |r| if r == 1 { 30.0 } else { 0.0 });
    for s in &mut w {
        for r in &mut s.ranks {
            r.busy_ns = 0;
            let sync: u64 = r
                .ops
                .iter()
                .filter(|o| o.kind.is_sync())
                .map(|o| o.total_ns)
                .sum();
            r.sync_busy_ns = Some(sync);
            r.ops.retain(|o| o.kind.is_sync());
            // Four buckets, each the whole reduction long: more than the window in all.
            for o in &mut r.ops {
                o.total_ns *= 4;
                o.count *= 4;
            }
            r.gpu = Some(false);
        }
    }
    let d = analyze(&w);
    let warn = warnings(&d);
    assert_eq!(warn.len(), 1, "{:#?} {:?}", d.findings, d.notes);
    assert_eq!(warn[0].culprits[0].rank, Some(1));
    // No GPU seen: the advice names none.
    assert!(!warn[0].action.contains("GPU"), "{}", warn[0].action);
}

#[test]
fn dropped_events_are_noted() {
    let mut w = job(4, |_| 1.0, |_| 0.0);
    w[0].ranks[3].dropped_total = 1234;
    let d = analyze(&w);
    assert!(d.findings.is_empty());
    assert!(
        d.notes.iter().any(|n| n.contains("rank 3 on node-0: 1234")),
        "{:?}",
        d.notes
    );
}

#[test]
fn unequal_iteration_counts_compare_per_second() {
    // One rank's last step ended just after the window: one iteration fewer, same work.
    let mut w = job(8, |_| 1.0, |_| 0.0);
    w[0].ranks[0].iterations.pop();
    let d = analyze(&w);
    assert!(d.findings.is_empty(), "{:#?}", d.findings);
}

#[test]
fn rank_lists_are_compact() {
    assert_eq!(rank_list(&[0, 1, 2, 3, 5, 7, 8], 8), "0-3, 5, 7-8");
    assert_eq!(rank_list(&[0, 2, 4], 2), "0, 2, ... (3 ranks in all)");
}

/// `job` as window `index`.
fn at(index: u64, mut w: Vec<WindowSummary>) -> LiveWindow {
    for s in &mut w {
        s.window = index;
    }
    LiveWindow::from_summaries(&w)
}

#[test]
fn the_detectors_that_need_per_op_timing_say_why_they_were_skipped() {
    let d = analyze(&job(8, |_| 1.0, |_| 0.0));
    for id in [
        DetectorId::Graph,
        DetectorId::Topology,
        DetectorId::SlowPath,
    ] {
        assert!(
            d.skipped.iter().any(|s| s.detector == id),
            "{id:?}: {:?}",
            d.skipped
        );
    }
    // One window is not a series: the iteration detector waits for more.
    assert!(d
        .skipped
        .iter()
        .any(|s| s.detector == DetectorId::Iteration));
    assert!(!d.skipped.iter().any(|s| s.detector == DetectorId::SlowRank));
}

#[test]
fn earlier_windows_give_the_iteration_detector_its_series() {
    // Six windows at the job's usual pace, then every rank 40% slower for three: a
    // fail-slow onset of the whole job that no single window shows.
    let cfg = LiveConfig::default();
    let windows: Vec<LiveWindow> = (0..9)
        .map(|i| at(100 + i, job(8, |_| if i >= 6 { 1.4 } else { 1.0 }, |_| 0.0)))
        .collect();
    let (current, earlier) = windows.split_last().unwrap();
    let earlier: Vec<&LiveWindow> = earlier.iter().collect();
    let d = analyze_window(current, &earlier, &cfg);
    assert!(
        !d.skipped
            .iter()
            .any(|s| s.detector == DetectorId::Iteration),
        "{:?}",
        d.skipped
    );
    let onset = d
        .findings
        .iter()
        .find(|f| f.detector == DetectorId::Iteration)
        .unwrap_or_else(|| panic!("{:#?}", d.findings));
    assert_eq!(onset.kind, FindingKind::IterationSlowdown, "{onset:#?}");
    assert!(
        onset.culprits.is_empty(),
        "a job-wide slowdown blames no rank"
    );
    // Without the earlier windows there is no series.
    let alone = analyze_window(current, &[], &cfg);
    assert!(alone
        .findings
        .iter()
        .all(|f| f.detector != DetectorId::Iteration));
}

#[test]
fn a_job_wide_slowdown_that_cpu_wait_explains_is_put_on_the_hosts() {
    // Every rank 40% slower from window 6 on; in one case their main threads waited for
    // a CPU 35 ms more per iteration from then (other work on the hosts), in the other
    // their wait did not change (the job itself got slower).
    let cfg = LiveConfig::default();
    let series = |extra_wait_ms: f64| -> Vec<LiveWindow> {
        (0..9)
            .map(|i| {
                let mut w = job(8, |_| if i >= 6 { 1.4 } else { 1.0 }, |_| 0.0);
                let wait_ms = 1.0 + if i >= 6 { extra_wait_ms } else { 0.0 };
                for s in &mut w {
                    for r in &mut s.ranks {
                        r.runqueue_ns = Some((wait_ms * 10.0 * MS as f64) as u64);
                    }
                }
                at(100 + i, w)
            })
            .collect()
    };
    type Case = (&'static str, f64, bool);
    let cases: &[Case] = &[
        ("the CPU wait covers the slowdown", 35.0, true),
        ("the CPU wait covers a tenth of it", 4.0, false),
        ("the CPU wait did not change", 0.0, false),
    ];
    for &(name, extra, contended) in cases {
        let windows = series(extra);
        let (current, earlier) = windows.split_last().unwrap();
        let earlier: Vec<&LiveWindow> = earlier.iter().collect();
        let d = analyze_window(current, &earlier, &cfg);
        let onset = d
            .findings
            .iter()
            .find(|f| f.kind == FindingKind::IterationSlowdown)
            .unwrap_or_else(|| panic!("{name}: {:#?}", d.findings));
        assert_eq!(onset.severity, Severity::Warning, "{name}");
        let named = onset.summary.contains("waited for a CPU");
        assert_eq!(named, contended, "{name}: {}", onset.summary);
        assert_eq!(
            onset.evidence[0].metric == EvidenceKey::RunqueueMsPerIteration,
            contended,
            "{name}"
        );
        if contended {
            assert!(onset.action.contains("what else runs on the job's hosts"));
            assert!(
                (onset.evidence[0].value - 36.0).abs() < 0.5,
                "{:?}",
                onset.evidence[0]
            );
        }
    }
}

#[test]
fn a_rank_slow_only_in_an_earlier_window_is_not_reported_again() {
    let cfg = LiveConfig::default();
    let slow = at(10, job(8, |r| if r == 3 { 1.5 } else { 1.0 }, |_| 0.0));
    let w: Vec<LiveWindow> = (11..16).map(|i| at(i, job(8, |_| 1.0, |_| 0.0))).collect();
    let (current, rest) = w.split_last().unwrap();
    let mut earlier: Vec<&LiveWindow> = rest.iter().collect();
    earlier.push(&slow);
    let d = analyze_window(current, &earlier, &cfg);
    let warned = warnings(&d);
    assert!(warned.is_empty(), "{warned:#?}");
    // Reported in its own window.
    let then = analyze_window(&slow, &[], &cfg);
    assert_eq!(then.findings[0].culprits[0].rank, Some(3));
}

#[test]
fn a_rank_late_with_kernels_at_its_peers_speed_is_not_called_a_slow_gpu() {
    // Rank 5 spends 15 ms more per iteration outside collectives in work it did not
    // trace (its compute and host ops match its peers'): the GPU is not the cause, and
    // "replace the GPU" would be the wrong action.
    let mut w = job(8, |_| 1.0, |_| 0.0);
    for s in &mut w {
        for r in &mut s.ranks {
            if r.rank == 5 {
                for o in r.ops.iter_mut().filter(|o| o.kind.is_sync()) {
                    o.total_ns -= 10 * 15 * MS;
                }
            }
        }
    }
    let d = analyze(&w);
    let f = &d.findings[0];
    assert_eq!(f.culprits[0].rank, Some(5), "{:#?}", d.findings);
    assert_eq!(
        (f.kind, f.culprits[0].component),
        (FindingKind::SlowRank, Component::Process),
        "{f:#?}"
    );
    assert!(f.action.contains("GPU is not slower"), "{}", f.action);
}

#[test]
fn extra_cpu_work_the_traced_time_does_not_show_leaves_the_window_unjudged() {
    // A CPU job whose collectives are traced only in part: rank 2 works `rank2_cpu_ms`
    // more per step on its CPU (600 ms of CPU per peer per window) and `rank2_own_ms`
    // more outside the traced collectives (a step is about 130 ms).
    let summaries = |rank2_cpu_ms: u64, rank2_own_ms: f64| {
        let mut w = job(4, |_| 1.0, |r| if r == 2 { rank2_own_ms } else { 0.0 });
        for s in &mut w {
            for r in &mut s.ranks {
                r.busy_ns = 0;
                r.ops.retain(|o| o.kind.is_sync());
                r.gpu = Some(false);
                let steps = r.iterations.len() as u64;
                let extra = if r.rank == 2 { rank2_cpu_ms } else { 0 };
                r.cpu_ns = Some(600 * MS + extra * MS * steps);
                r.runqueue_ns = Some(0);
            }
        }
        w
    };
    let window =
        |rank2_cpu_ms: u64, rank2_own_ms: f64| analyze(&summaries(rank2_cpu_ms, rank2_own_ms));
    let untraced = |d: &LiveDiagnosis| {
        d.findings
            .iter()
            .filter(|f| f.summary.contains("where Flare traces nothing"))
            .count()
    };
    // 30 ms more CPU per step, its time outside collectives like its peers': they waited
    // for it in nothing traced. Said, and the window not called healthy.
    let d = window(30, 0.0);
    assert!(!d.conclusive, "{:#?}", d.findings);
    assert!(warnings(&d).is_empty(), "{:#?}", d.findings);
    assert_eq!(untraced(&d), 1, "{:#?}", d.findings);
    let f = d
        .findings
        .iter()
        .find(|f| f.summary.contains("where Flare traces nothing"))
        .expect("an info naming rank 2");
    assert_eq!(
        (f.kind, f.culprits[0].rank),
        (FindingKind::SlowCpu, Some(2))
    );
    assert!(
        d.notes.iter().any(|n| n.contains("not judged")),
        "{:?}",
        d.notes
    );
    // The same extra CPU work, seen outside the collectives: named the usual way.
    let d = window(30, 30.0);
    assert!(d.conclusive);
    let warn = warnings(&d);
    assert_eq!(warn.len(), 1, "{:#?}", d.findings);
    assert_eq!(
        (warn[0].kind, warn[0].culprits[0].rank),
        (FindingKind::SlowCpu, Some(2))
    );
    assert_eq!(untraced(&d), 0);
    // CPU times alike: judged, and nothing to say.
    let d = window(3, 0.0);
    assert!(d.conclusive);
    assert_eq!(untraced(&d), 0, "{:#?}", d.findings);
    // Ranks 0, 2 and 3 stuck in a collective that rank 1 never joined: the window is the
    // hang's, whatever their CPU times (they measure the hang).
    let mut w = summaries(30, 0.0);
    for s in &mut w {
        let node = s.node.clone();
        let stuck: Vec<(u32, u32)> = s
            .ranks
            .iter()
            .filter(|r| r.rank != 1)
            .map(|r| (r.rank, r.pid))
            .collect();
        for (rank, pid) in stuck {
            s.hangs.push(HangRecord {
                rank,
                pid,
                op: "allreduce".into(),
                kind: OpKind::AllReduce,
                group: Some("dp".into()),
                in_flight_ns: 300_000 * MS,
                detected_unix_ns: 1,
                stacks: vec![],
                stack_source: format!("py-spy on {node}"),
            });
        }
    }
    let d = analyze(&w);
    assert!(d.conclusive, "{:?}", d.notes);
    assert_eq!(untraced(&d), 0, "{:#?}", d.findings);
    assert!(
        d.findings.iter().any(|f| f.kind == FindingKind::Hang),
        "{:#?}",
        d.findings
    );
}

#[test]
fn replayed_summaries_give_one_document_with_each_finding_once() {
    // Three windows of a job whose rank 5 is 20% slower, summaries in no order.
    let mut all: Vec<WindowSummary> = Vec::new();
    for w in [9u64, 7, 8] {
        for mut s in job(8, |r| if r == 5 { 1.2 } else { 1.0 }, |_| 0.0) {
            s.window = w;
            all.push(s);
        }
    }
    let windows = replay::replay(&all, &LiveConfig::default());
    assert_eq!(
        windows.iter().map(|w| w.window).collect::<Vec<_>>(),
        [7, 8, 9]
    );
    let doc = replay::document("job", &all, &windows);
    let slow: Vec<&Finding> = doc
        .findings()
        .iter()
        .filter(|f| f.severity > Severity::Info)
        .collect();
    assert_eq!(slow.len(), 1, "{:#?}", doc.findings());
    assert_eq!(slow[0].culprits[0].rank, Some(5));
    assert_eq!(slow[0].iterations, [7, 8, 9]);
    assert_eq!(doc.history.len(), 3);
    assert_eq!(
        (doc.job.world_size, doc.job.ranks_with_data, doc.job.nodes),
        (8, 8, Some(2))
    );
    assert_eq!(doc.job.windows_analysed, Some(3));
}
