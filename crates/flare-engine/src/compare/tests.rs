//! Comparisons of hand-built runs: the classes partition the step, their changes add up
//! to its change, and the verdict names the class that carries it.

use super::*;
use flare_model::{
    ClusterTopology, Communicator, EvidenceKey, FindingKind, GroupKind, JobInfo, Op, OpKind,
    RankTrace, Severity, TimeClassKind, TraceMeta,
};

const MS: i64 = 1_000_000;

/// Four ranks, `its` iterations: per iteration each rank computes `gemm` (name 0) `gemms`
/// times for `gemm_ms` each, then all-reduces; rank 3 pauses `late_ms` (untraced) before
/// it, and the all-reduce ends 10 ms after its arrival; 5 ms later each rank reads its
/// next batch for 2 ms, and 1 ms after that the next iteration begins.
fn run(its: u32, gemms: u32, gemm_ms: i64, late_ms: i64) -> Trace {
    run_with(its, |_| gemms, gemm_ms, late_ms, 10)
}

/// As [`run`], with `gemms_of(rank)` gemms on each rank and the all-reduce ending `move_ms`
/// after its last member's arrival.
fn run_with(
    its: u32,
    gemms_of: impl Fn(u32) -> u32,
    gemm_ms: i64,
    late_ms: i64,
    move_ms: i64,
) -> Trace {
    let ready =
        |r: u32| i64::from(gemms_of(r)) * gemm_ms * MS + if r == 3 { late_ms * MS } else { 0 };
    let last = (0..4).map(ready).max().unwrap_or(0);
    let ranks = (0..4u32)
        .map(|r| {
            let mut ops = Vec::new();
            let mut next = 0;
            for it in 0..its {
                let mut t = next;
                for _ in 0..gemms_of(r) {
                    ops.push(op(
                        OpKind::Compute,
                        0,
                        it,
                        Op::NO_COMM,
                        0,
                        t,
                        t + gemm_ms * MS,
                    ));
                    t += gemm_ms * MS;
                }
                let arrive = next + ready(r);
                let end = next + last + move_ms * MS;
                ops.push(op(OpKind::AllReduce, 1, it, 0, it, arrive, end));
                // A dataloader span after a pause: the pause is untraced time.
                ops.push(op(
                    OpKind::DataLoader,
                    2,
                    it,
                    Op::NO_COMM,
                    0,
                    end + 5 * MS,
                    end + 7 * MS,
                ));
                next = end + 8 * MS;
            }
            RankTrace {
                rank: r,
                ops,
                iterations: vec![],
            }
        })
        .collect();
    Trace {
        meta: TraceMeta::default(),
        job: JobInfo {
            job_id: "t".into(),
            world_size: 4,
            cluster: ClusterTopology::for_world(4, 8, 4),
            parallel: None,
            microbatches: None,
        },
        communicators: vec![Communicator {
            id: 0,
            kind: GroupKind::World,
            members: vec![0, 1, 2, 3],
            label: "world".into(),
        }],
        names: vec!["gemm".into(), "nccl:all_reduce".into(), "dataloader".into()],
        ranks,
    }
}

fn op(kind: OpKind, name: u32, it: u32, comm: u32, seq: u32, start: i64, end: i64) -> Op {
    Op {
        kind,
        name,
        iteration: it,
        comm,
        seq,
        peer: Op::NO_PEER,
        start_ns: start,
        end_ns: end,
        issue_ns: Op::UNKNOWN,
        // 4 MiB per all-reduce; 10 GFLOP per gemm.
        amount: match kind {
            OpKind::AllReduce => 4 << 20,
            OpKind::Compute => 10_000_000_000,
            _ => 0,
        },
    }
}

fn row(c: &Comparison, kind: TimeClassKind) -> &TimeClassChange {
    c.classes.iter().find(|r| r.kind == kind).unwrap()
}

#[test]
fn the_classes_partition_the_step_and_their_changes_add_up() {
    // Baseline: 4 gemms of 10 ms, rank 3 arrives 3 ms late. Current: 6 gemms, 8 ms late.
    let c = compare(&run(3, 4, 10, 3), &run(3, 6, 10, 8), ("a", "b"));
    let sum = |f: fn(&TimeClassChange) -> f64| c.classes.iter().map(f).sum::<f64>();
    assert!(
        (sum(|r| r.baseline_ms) - c.baseline.step_ms).abs() < 1e-9,
        "{c:#?}"
    );
    assert!(
        (sum(|r| r.current_ms) - c.current.step_ms).abs() < 1e-9,
        "{c:#?}"
    );
    // Every rank's step: gemms, the lateness (waited for by ranks 0-2, paused by rank 3),
    // 10 ms of transfer, 5 ms untraced, 2 ms reading the batch, 1 ms before the next
    // step's first op.
    assert!(
        (c.baseline.step_ms - (40.0 + 3.0 + 18.0)).abs() < 1e-9,
        "{c:#?}"
    );
    assert!(
        (c.current.step_ms - (60.0 + 8.0 + 18.0)).abs() < 1e-9,
        "{c:#?}"
    );
    // Three iterations make two steps: the last only ends the one before it.
    assert_eq!(c.current.rank_iterations, 8);
    assert!(
        (row(&c, TimeClassKind::BetweenSteps).current_ms - 1.0).abs() < 1e-9,
        "{c:#?}"
    );
    let gemm = row(&c, TimeClassKind::Compute);
    assert_eq!(
        (gemm.class.as_str(), gemm.baseline_count, gemm.current_count),
        ("gemm", 4.0, 6.0)
    );
    assert!((gemm.delta_ms() - 20.0).abs() < 1e-9);
    // Three ranks of four wait for rank 3: 3/4 of its lateness per step of a rank.
    let wait = row(&c, TimeClassKind::Waiting);
    assert!(
        (wait.baseline_ms - 2.25).abs() < 1e-9 && (wait.current_ms - 6.0).abs() < 1e-9,
        "{wait:?}"
    );
    let transfer = row(&c, TimeClassKind::Communication);
    assert_eq!(transfer.class, "all_reduce 4.0 MiB");
    assert!(transfer.delta_ms().abs() < 1e-9);
    // Rank 3's pause is untraced time: a quarter of it per step of a rank, beside the 5 ms.
    assert!(
        (row(&c, TimeClassKind::Untraced).current_ms - 7.0).abs() < 1e-9,
        "{c:#?}"
    );
    assert!((row(&c, TimeClassKind::Host).current_ms - 2.0).abs() < 1e-9);
    // The largest change first.
    assert_eq!(c.classes[0].kind, TimeClassKind::Compute);
    // 10 GFLOP in 10 ms; 4 MiB all-reduced by 4 ranks (bus factor 1.5) in the 10 ms
    // after the last arrival.
    let rate = |r: &TimeClassChange| (r.baseline_rate.unwrap(), r.current_rate.unwrap());
    let (b, now) = rate(gemm);
    assert!(
        (b - 1.0).abs() < 1e-9 && (now - 1.0).abs() < 1e-9,
        "{gemm:?}"
    );
    let (b, now) = rate(transfer);
    assert!(
        (b - 0.6291456).abs() < 1e-9 && (now - b).abs() < 1e-9,
        "{transfer:?}"
    );
    assert_eq!(wait.current_rate, None);
}

#[test]
fn the_verdict_names_the_class_that_carries_the_change() {
    let cfg = CompareConfig::default();
    // More gemms per step: a new code path, not slower kernels.
    let mut c = compare(&run(3, 4, 10, 0), &run(3, 6, 10, 0), ("a", "b"));
    let f = regression_findings(&mut c, &cfg);
    assert_eq!(f.len(), 1, "{f:#?}");
    assert_eq!(
        (f[0].kind, f[0].severity),
        (FindingKind::Regression, Severity::Warning)
    );
    assert!(
        f[0].summary.contains("compute gemm +20.00 ms"),
        "{}",
        f[0].summary
    );
    assert!(
        f[0].summary.contains("run 6.0 times per step against 4.0"),
        "{}",
        f[0].summary
    );
    assert!(f[0].action.contains("runs more often"), "{}", f[0].action);
    // As many gemms, each slower: the kernels, not the code path.
    let mut c = compare(&run(3, 4, 10, 0), &run(3, 4, 13, 0), ("a", "b"));
    let f = regression_findings(&mut c, &cfg);
    assert!(
        f[0].action.contains("as often but slower"),
        "{}",
        f[0].action
    );
    let gemm = &f[0].evidence[1].detail;
    assert!(
        gemm.contains("achieved 0.769 TFLOPS against 1.000"),
        "{gemm}"
    );
    // Rank 3 arriving later at the collective, after a pause no op covers: the others
    // wait, for rank 3, whose untraced time grew.
    let mut c = compare(&run(3, 4, 10, 0), &run(3, 4, 10, 12), ("a", "b"));
    let f = regression_findings(&mut c, &cfg);
    assert!(
        f[0].summary.ends_with("the most of it: waiting for other ranks +9.00 ms (75% of the change): the other ranks wait +12.00 ms per step longer for rank 3, where untraced time grew +12.00 ms per step"),
        "{}",
        f[0].summary
    );
    assert!(
        f[0].action.starts_with("the other ranks wait for rank 3 at their collectives, where untraced time grew +12.00 ms per step: time no traced op covers grew"),
        "{}",
        f[0].action
    );
    // Without each rank's time the wait sends to `flare diagnose`.
    c.waited_for = None;
    let f = regression_findings(&mut c, &cfg);
    assert!(f[0].action.contains("flare diagnose"), "{}", f[0].action);
    // Faster: an info. The same: nothing.
    let mut c = compare(&run(3, 6, 10, 0), &run(3, 4, 10, 0), ("a", "b"));
    assert_eq!(
        regression_findings(&mut c, &cfg)[0].severity,
        Severity::Info
    );
    let mut c = compare(&run(3, 4, 10, 0), &run(3, 4, 10, 0), ("a", "b"));
    assert!(regression_findings(&mut c, &cfg).is_empty());
}

#[test]
fn a_code_path_of_one_rank_leads_over_the_wait_it_causes() {
    let cfg = CompareConfig::default();
    let base = run_with(6, |_| 4, 10, 0, 10);
    // Rank 3 runs two more gemms per step; the others wait for it at the all-reduce.
    let mut c = compare(
        &base,
        &run_with(6, |r| if r == 3 { 6 } else { 4 }, 10, 0, 10),
        ("a", "b"),
    );
    let gemm = c.classes.iter().find(|r| r.class == "gemm").unwrap();
    let on = gemm.changed_on.as_ref().expect("changed on some ranks");
    assert_eq!(
        (on.ranks.as_slice(), on.changed, on.compared),
        ([3].as_slice(), 1, 4)
    );
    assert_eq!((on.baseline_count, on.current_count), (4.0, 6.0));
    assert!((on.delta_ms() - 20.0).abs() < 1e-9, "{on:?}");
    // Averaged over the ranks the wait is larger than the gemms' time...
    assert!(row(&c, TimeClassKind::Waiting).delta_ms() > gemm.delta_ms());
    let f = regression_findings(&mut c, &cfg);
    // ...but the code path is what changed, and what every rank pays.
    assert!(
        f[0].summary.contains("compute gemm runs 6.0 times per step on rank 3 against 4.0 (+20.00 ms per step there), which every rank waits for at its collectives (it shows most as waiting for other ranks +15.00 ms)"),
        "{}",
        f[0].summary
    );
    assert!(f[0].action.contains("on rank 3 alone"), "{}", f[0].action);
    // A collective that takes 30 ms longer on every rank, beside one more gemm on rank 3
    // (10 ms, less than the collective's change): the collective leads.
    let mut c = compare(
        &base,
        &run_with(6, |r| if r == 3 { 5 } else { 4 }, 10, 0, 40),
        ("a", "b"),
    );
    let f = regression_findings(&mut c, &cfg);
    assert!(
        f[0].summary
            .contains("the most of it: communication all_reduce 4.0 MiB"),
        "{}",
        f[0].summary
    );
    // Every rank runs the two more gemms: no subset; the gemms lead as before.
    let mut c = compare(&base, &run_with(6, |_| 6, 10, 0, 10), ("a", "b"));
    assert!(c.classes.iter().all(|r| r.changed_on.is_none()));
    let f = regression_findings(&mut c, &cfg);
    assert!(
        f[0].summary
            .contains("the most of it: compute gemm +20.00 ms"),
        "{}",
        f[0].summary
    );
}

#[test]
fn a_persistent_change_within_one_run_is_found_and_split_there() {
    // 8 iterations of 4 gemms, then 8 of 6 (a new code path from iteration 8 on).
    let mut t = run(16, 4, 10, 0);
    let more = run(16, 6, 10, 0);
    for (r, m) in t.ranks.iter_mut().zip(&more.ranks) {
        // the new ops from where iteration 8 began in the first run, as a run's would
        let first_of = |ops: &[Op]| ops.iter().find(|o| o.iteration == 8).map(|o| o.start_ns);
        let shift = first_of(&r.ops).unwrap() - first_of(&m.ops).unwrap();
        r.ops.retain(|o| o.iteration < 8);
        r.ops
            .extend(m.ops.iter().filter(|o| o.iteration >= 8).map(|o| Op {
                start_ns: o.start_ns + shift,
                end_ns: o.end_ns + shift,
                ..*o
            }));
    }
    let c = onset(&t).expect("the change");
    // the last iteration, which no mark ends, is no step of its own
    assert_eq!((c.before, c.after), ((0, 7), (8, 14)), "{c:?}");
    assert!(c.change.ratio() > 1.2, "{c:?}");
    let w = |a, b| flare_model::Window {
        first_iteration: a,
        last_iteration: b,
    };
    let c = compare(&t.window(w(0, 7)), &t.window(w(8, 15)), ("before", "after"));
    assert_eq!(c.classes[0].class, "gemm");
    assert!((c.classes[0].delta_ms() - 20.0).abs() < 1e-9, "{c:#?}");
    // A steady run has none.
    assert!(onset(&run(16, 4, 10, 0)).is_none());
}

#[test]
fn the_change_to_explain_is_the_largest_slowdown_against_the_level_before_it() {
    // Levels of (ms, steps), each step jittered by up to 1%.
    let series = |levels: &[(f64, usize)]| -> Vec<f64> {
        levels
            .iter()
            .flat_map(|&(ms, n)| std::iter::repeat_n(ms, n))
            .enumerate()
            .map(|(i, ms)| ms * (1.0 + 0.005 * ((i * 7 % 5) as f64 - 2.0)))
            .collect()
    };
    // (what, levels, the ranges of the level before and of the new level)
    type Ranges = Option<((usize, usize), (usize, usize))>;
    type Case = (&'static str, Vec<(f64, usize)>, Ranges);
    let cases: [Case; 8] = [
        ("steady", vec![(100.0, 30)], None),
        (
            "warm-up, then a slowdown: judged against the level after the warm-up",
            vec![(300.0, 3), (100.0, 12), (130.0, 15)],
            Some(((3, 14), (15, 29))),
        ),
        (
            "a blip of two steps: the level after it is the level before it",
            vec![(100.0, 15), (400.0, 2), (100.0, 13)],
            None,
        ),
        (
            "a blip, then a slowdown: judged against the level since the blip",
            vec![(100.0, 10), (400.0, 2), (100.0, 6), (150.0, 12)],
            Some(((12, 17), (18, 29))),
        ),
        (
            "three odd steps right before the onset are not its baseline",
            vec![(100.0, 20), (65.0, 3), (140.0, 12)],
            Some(((0, 19), (23, 34))),
        ),
        (
            "a blip, after which the level is lower: faster than before the blip",
            vec![(100.0, 15), (400.0, 2), (88.0, 15)],
            Some(((0, 14), (17, 31))),
        ),
        (
            "only faster",
            vec![(100.0, 15), (70.0, 15)],
            Some(((0, 14), (15, 29))),
        ),
        (
            "slower, then much faster: the slowdown is explained",
            vec![(100.0, 10), (150.0, 10), (60.0, 10)],
            Some(((0, 9), (10, 19))),
        ),
    ];
    for (case, levels, want) in cases {
        let got = change_in(&series(&levels), |_| 1);
        assert_eq!(
            got.as_ref().map(|c| (c.before, c.after)),
            want,
            "{case}: {got:?}"
        );
    }
}

#[test]
fn a_pause_the_loop_adds_between_steps_is_a_change_within_one_run() {
    // From iteration 8 on the loop pauses 20 ms after each step's last op (a checkpoint, a
    // sleep, logging): no op's span grows, each step's does, to the next one's first op.
    let mut t = run(16, 4, 10, 0);
    for r in t.ranks.iter_mut() {
        for o in r.ops.iter_mut().filter(|o| o.iteration > 8) {
            let shift = 20 * MS * i64::from(o.iteration - 8);
            o.start_ns += shift;
            o.end_ns += shift;
        }
    }
    let c = onset(&t).expect("the change");
    assert_eq!((c.before, c.after), ((0, 7), (8, 14)), "{c:?}");
    let w = |a, b| flare_model::Window {
        first_iteration: a,
        last_iteration: b,
    };
    let c = compare(&t.window(w(0, 7)), &t.window(w(8, 15)), ("before", "after"));
    assert_eq!(c.classes[0].kind, TimeClassKind::BetweenSteps, "{c:#?}");
    assert!((c.classes[0].delta_ms() - 20.0).abs() < 1e-9, "{c:#?}");
}

#[test]
fn a_new_cheap_code_path_is_named_though_the_step_did_not_change() {
    let base = run(6, 4, 10, 0);
    // The same run, but each rank logs metrics (0.05 ms) after its dataloader span.
    let mut cur = run(6, 4, 10, 0);
    cur.names.push("log_metrics".into());
    for r in cur.ranks.iter_mut() {
        let extra: Vec<Op> = r
            .ops
            .iter()
            .filter(|o| o.name == 2)
            .map(|o| {
                op(
                    OpKind::HostOther,
                    3,
                    o.iteration,
                    Op::NO_COMM,
                    0,
                    o.end_ns,
                    o.end_ns + 50_000,
                )
            })
            .collect();
        r.ops.extend(extra);
        r.ops.sort_by_key(|o| o.start_ns);
    }
    let mut same = compare(&base, &run(6, 4, 10, 0), ("a", "b"));
    let s = same.sequence.as_ref().unwrap();
    assert_eq!((s.divergence_bits, s.appeared.len()), (0.0, 0));
    assert!(regression_findings(&mut same, &CompareConfig::default()).is_empty());

    let mut c = compare(&base, &cur, ("a", "b"));
    let s = c.sequence.as_ref().unwrap();
    assert_eq!(s.appeared, ["log_metrics"]);
    assert!(s.disappeared.is_empty());
    assert!(s.divergence_bits > 0.05 && s.divergence_bits < 1.0, "{s:?}");
    let f = regression_findings(&mut c, &CompareConfig::default());
    // The step barely moved: the only finding is the sequence's, an info.
    assert_eq!(f.len(), 1, "{f:#?}");
    assert_eq!(
        (f[0].kind, f[0].severity),
        (FindingKind::Regression, Severity::Info)
    );
    assert!(
        f[0].summary.contains("1 op appear (log_metrics"),
        "{}",
        f[0].summary
    );

    // And the other way round: it disappears.
    let back = compare(&cur, &base, ("b", "a"));
    assert_eq!(back.sequence.as_ref().unwrap().disappeared, ["log_metrics"]);
}

#[test]
fn noise_is_judged_per_iteration_and_more_ops_are_told_whatever_it() {
    use super::scale::tests::job_from;
    let cfg = CompareConfig::default();
    let base = [11.0, 6.6, 12.3, 0.7, 0.7, 1.6];
    // The all-reduce 5 ms slower, steps varying by 4 ms (sd), 2 ranks x 10 iterations:
    // 2.8 standard errors over the 10 iterations (4.0 had the 20 pairs been independent
    // samples; the ranks of a synchronous job are not).
    let noisy = || {
        let mut c = job_from(base, [11.0, 6.6, 17.3, 0.7, 0.7, 1.6]);
        // steps that vary normally: their robust spread is their standard deviation
        for r in [&mut c.baseline, &mut c.current] {
            (r.step_sd_ms, r.step_robust_sd_ms) = (4.0, 4.0);
        }
        c
    };
    assert!(regression_findings(&mut noisy(), &cfg).is_empty());
    // With DDP's forward run twice per step as well: what the program runs changed.
    let mut c = noisy();
    c.classes[1].current_ms += 1.0;
    c.classes[1].current_count = 2.0;
    c.current.step_ms += 1.0;
    let f = regression_findings(&mut c, &cfg);
    assert_eq!(f.len(), 1, "{f:#?}");
    assert_eq!(f[0].severity, Severity::Warning);
    assert!(
        f[0].evidence
            .iter()
            .any(|e| e.detail.contains("DistributedDataParallel.forward")
                && e.detail.contains("ops per step 2.0 against 1.0")),
        "{:#?}",
        f[0].evidence
    );
}

#[test]
fn a_few_long_steps_do_not_hide_a_change_that_slowed_every_step() {
    use super::scale::tests::job_from;
    let cfg = CompareConfig::default();
    let base = [11.0, 6.6, 12.3, 0.7, 0.7, 1.6];
    // The host's time between steps grows 20 ms per step on average; steps vary by 60 ms
    // (sd) in the current run, where two of ten iterations take far longer (a full
    // garbage collection): 1.05 standard errors of the means, so the means alone say
    // nothing. (median current, what it says, whether the tail's words come)
    let cases = [
        ("every step 8 ms slower, two far longer", 40.9, true),
        ("the same median: only two long steps", 33.2, false),
    ];
    for (what, median, told) in cases {
        let mut c = job_from(base, [11.0, 6.6, 12.3, 0.7, 0.7, 21.6]);
        c.baseline.step_sd_ms = 2.0;
        c.current.step_sd_ms = 60.0;
        c.baseline.step_median_ms = 32.9;
        c.baseline.step_robust_sd_ms = 2.0;
        c.current.step_median_ms = median;
        c.current.step_robust_sd_ms = 2.0;
        // the step's finding (causes read from a class's time are judged on their own)
        let f: Vec<_> = regression_findings(&mut c, &cfg)
            .into_iter()
            .filter(|f| f.summary.starts_with("steps "))
            .collect();
        assert_eq!(!f.is_empty(), told, "{what}: {f:#?}");
        if !told {
            continue;
        }
        assert_eq!(f[0].severity, Severity::Warning, "{what}");
        assert!(
            f[0].evidence
                .iter()
                .any(|e| e.metric == EvidenceKey::StepMedianChangeSe
                    && e.detail.contains("32.90 -> 40.90 ms")),
            "{what}: {:#?}",
            f[0].evidence
        );
        assert!(
            f[0].action.contains("a few long steps")
                && f[0].action.contains("record_python_gc_info"),
            "{what}: {}",
            f[0].action
        );
    }
}

#[test]
fn ops_the_baseline_never_ran_lead_together_as_a_new_code_path() {
    use super::scale::tests::job_from;
    let cfg = CompareConfig::default();
    let mut c = job_from(
        [11.0, 6.6, 12.3, 0.7, 0.7, 1.6],
        [11.0, 6.6, 12.3, 0.7, 0.7, 1.6],
    );
    // An evaluation pass: three ops no step of the baseline ran, none the largest change
    // alone (4 + 3 + 3 ms of +10).
    for (name, ms) in [
        ("aten::linear [[16,64,128]]", 4.0),
        ("aten::gelu", 3.0),
        ("aten::layer_norm", 3.0),
    ] {
        let mut r = c.classes[0].clone();
        r.class = name.into();
        (r.baseline_ms, r.baseline_count) = (0.0, 0.0);
        (r.current_ms, r.current_count) = (ms, 2.0);
        c.classes.push(r);
        c.current.step_ms += ms;
    }
    c.classes
        .sort_by(|x, y| y.delta_ms().abs().total_cmp(&x.delta_ms().abs()));
    let f = regression_findings(&mut c, &cfg);
    assert_eq!(f[0].severity, Severity::Warning);
    assert!(
        f[0].summary
            .contains("3 op classes the baseline never ran (a new code path), +10.00 ms per step (100% of the change), the largest compute aten::linear [[16,64,128]] +4.00 ms"),
        "{}",
        f[0].summary
    );
    assert!(f[0].confidence > 0.9, "{}", f[0].confidence);
    assert!(!f[0].summary.contains("in place of"), "{}", f[0].summary);
    // The path it took before, gone: what the new one replaced, and the net.
    let forward = c
        .classes
        .iter_mut()
        .find(|r| r.class == "DistributedDataParallel.forward")
        .unwrap();
    (forward.current_ms, forward.current_count) = (0.0, 0.0);
    c.current.step_ms -= 6.6;
    let f = regression_findings(&mut c, &cfg);
    assert!(
        f[0].summary.ends_with(
            "in place of 1 op class it no longer runs (-6.60 ms): a net +3.40 ms per step"
        ),
        "{}",
        f[0].summary
    );
}

#[test]
fn a_collective_cut_into_other_sizes_is_told_with_its_net_change() {
    use super::scale::tests::job_from;
    let cfg = CompareConfig::default();
    let mut c = job_from(
        [11.0, 6.6, 12.3, 0.7, 0.7, 1.6],
        [11.0, 6.6, 0.0, 0.7, 0.7, 1.6],
    );
    // DDP's buckets made smaller: the 16 MiB all-reduce gone, eight of 2 MiB instead.
    c.classes[2].current_count = 0.0;
    let mut small = c.classes[2].clone();
    small.class = "all_reduce 2.0 MiB".into();
    (small.baseline_ms, small.baseline_count) = (0.0, 0.0);
    (small.current_ms, small.current_count) = (20.0, 8.0);
    c.classes.insert(0, small);
    c.current.step_ms += 20.0;
    let f = regression_findings(&mut c, &cfg);
    let step = f
        .iter()
        .find(|f| f.summary.starts_with("steps slower"))
        .unwrap();
    assert!(
        step.summary.contains("all_reduce 2.0 MiB +20.00 ms")
            && step.summary.contains(
                "all_reduce's messages are cut into other sizes, a net +7.70 ms per step over them"
            ),
        "{}",
        step.summary
    );
    assert!(step.action.contains("bucket_cap_mb"), "{}", step.action);
}

#[test]
fn a_host_phase_that_leads_takes_its_own_action() {
    use super::scale::tests::job_from;
    use flare_model::SequenceChange;
    let cfg = CompareConfig::default();
    // (host phase, the multi-tensor ops gone from the sequence, what the action says)
    let cases: [(&str, &[&str], &str); 5] = [
        (
            "optimizer",
            &["aten::_foreach_add_", "aten::_foreach_mul_"],
            "no longer runs its multi-tensor ops (aten::_foreach_add_, aten::_foreach_mul_)",
        ),
        ("optimizer", &[], "foreach=True or fused=True"),
        ("gc", &[], "gc.freeze()"),
        ("dataloader", &[], "num_workers > 0"),
        ("checkpoint", &[], "asynchronously"),
    ];
    for (phase, gone, says) in cases {
        let mut c = job_from(
            [11.0, 6.6, 12.3, 0.7, 0.7, 1.6],
            [11.0, 6.6, 12.3, 0.7, 10.7, 1.6],
        );
        c.classes[4].class = phase.into();
        c.sequence = Some(SequenceChange {
            divergence_bits: 0.4,
            baseline_entropy_bits: 4.0,
            current_entropy_bits: 4.2,
            appeared: vec![],
            disappeared: gone.iter().map(|s| s.to_string()).collect(),
        });
        let f = regression_findings(&mut c, &cfg);
        let step = f
            .iter()
            .find(|f| f.summary.starts_with("steps slower"))
            .unwrap();
        assert!(
            step.summary.contains(&format!("host {phase} +10.00 ms")),
            "{}",
            step.summary
        );
        assert!(step.action.contains(says), "{phase}: {}", step.action);
    }
}

#[test]
fn the_step_finding_leads_the_causes_that_explain_part_of_it() {
    use super::scale::tests::job_from;
    let cfg = CompareConfig::default();
    // A checkpoint every step (+10 ms, under half of the +22 ms change beside the wait and
    // the loop's own time it brings): the headline is the step's change, and a cause that
    // explains a fifth of it comes after, whatever share the lead carries.
    let mut c = job_from(
        [11.0, 6.6, 12.3, 0.7, 0.0, 0.5],
        [11.0, 6.6, 12.3, 7.7, 10.0, 5.5],
    );
    c.classes[4].class = "checkpoint".into();
    c.classes[4].baseline_count = 0.0;
    c.classes
        .sort_by(|x, y| y.delta_ms().abs().total_cmp(&x.delta_ms().abs()));
    let mut f = regression_findings(&mut c, &cfg);
    f.sort_by(flare_model::Finding::by_importance);
    assert!(
        f.len() >= 2
            && f.iter().any(|f| f
                .summary
                .starts_with("the host's own time between steps grew")),
        "{f:#?}"
    );
    assert!(
        f[0].summary.starts_with("steps slower")
            && f[0]
                .summary
                .contains("host checkpoint +10.00 ms (45% of the change)"),
        "{f:#?}"
    );
    assert!(f[0].confidence > 0.9, "{}", f[0].confidence);
    // A lead that only took longer, as often, is measured against each run's own noise,
    // not the machines': a cause the program's calls show comes first (the loop's
    // read-backs, with time no op covers leading the step's change).
    let mut c = job_from(
        [11.0, 6.6, 12.3, 0.7, 0.7, 0.5],
        [11.0, 6.6, 12.3, 0.7, 0.7, 9.5],
    );
    c.current.host_calls.push(super::causes::tests::sync(
        "aten::_local_scalar_dense",
        20.0,
    ));
    let mut f = regression_findings(&mut c, &cfg);
    f.sort_by(flare_model::Finding::by_importance);
    assert!(
        f[0].summary.starts_with("accidental synchronization"),
        "{f:#?}"
    );
    assert!(
        f[1].summary.starts_with("steps slower") && f[1].confidence < 0.9,
        "{f:#?}"
    );
}

#[test]
fn every_part_slower_alike_is_not_the_machine_where_the_program_changed_too() {
    use super::scale::tests::job_from;
    let cfg = CompareConfig::default();
    let base = [11.0, 6.6, 12.3, 0.7, 0.7, 1.6];
    // Every part 15% slower: another load on the machine, or a setting that slows each op.
    let slower = [12.65, 7.6, 14.15, 0.8, 0.8, 1.85];
    let f = regression_findings(&mut job_from(base, slower), &cfg);
    assert_eq!(f.len(), 1, "{f:#?}");
    assert_eq!(f[0].severity, Severity::Info);
    assert!(
        f[0].summary
            .ends_with("the machine's speed, not one part of the program"),
        "{}",
        f[0].summary
    );
    // With 45 syncs per step more, the program changed too: not the machine alone.
    let mut c = job_from(base, slower);
    c.current.host_calls.push(super::causes::tests::sync(
        "aten::_local_scalar_dense",
        45.0,
    ));
    let mut f = regression_findings(&mut c, &cfg);
    f.sort_by(flare_model::Finding::by_importance);
    assert_eq!(f.len(), 2, "{f:#?}");
    assert_eq!(f[0].severity, Severity::Warning);
    assert!(
        f[0].summary.ends_with("the machine's speed or a change to every op, since the program changed too (device_synchronization)"),
        "{}",
        f[0].summary
    );
    assert!(f[0].action.contains("anomaly detection"), "{}", f[0].action);
    assert!(
        f[1].summary.starts_with("accidental synchronization"),
        "{}",
        f[1].summary
    );
}

#[test]
fn an_op_whose_shapes_changed_is_told_with_the_shapes_that_took_its_place() {
    use super::scale::tests::job_from;
    use crate::compare::causes::tests::class;
    let cfg = CompareConfig::default();
    let wide = "aten::linear [[64,1024],[1024,1024],[1024]]";
    // (what took its place: class, baseline (ms, count), current (ms, count); told)
    type Case = (&'static str, (f64, f64), (f64, f64), bool);
    let cases: [Case; 4] = [
        // a layer 1022 wide: the same op, as often, on other shapes
        (
            "aten::linear [[64,1022],[1022,1022],[1022]]",
            (0.0, 0.0),
            (2.0, 4.0),
            true,
        ),
        // another op in its place is not its shapes
        ("aten::conv2d [[64,3,32,32]]", (0.0, 0.0), (2.0, 4.0), false),
        // the same op on other shapes, but once where it ran four times: not a reshape
        (
            "aten::linear [[64,512],[512,512],[512]]",
            (0.0, 0.0),
            (2.0, 1.0),
            false,
        ),
        // on shapes the baseline ran too: not what took its place
        (
            "aten::linear [[64,1022],[1022,1022],[1022]]",
            (1.0, 4.0),
            (3.0, 8.0),
            false,
        ),
    ];
    for (other, b, cur, told) in cases {
        let mut c = job_from(
            [11.0, 6.6, 12.3, 0.7, 0.7, 1.6],
            [11.0, 6.6, 12.3, 0.7, 0.7, 1.6],
        );
        c.classes
            .push(class(TimeClassKind::Compute, wide, (18.0, 4.0), (0.0, 0.0)));
        c.classes.push(class(TimeClassKind::Compute, other, b, cur));
        c.baseline.step_ms += 18.0 + b.0;
        c.current.step_ms += cur.0;
        c.classes
            .sort_by(|x, y| y.delta_ms().abs().total_cmp(&x.delta_ms().abs()));
        let f = regression_findings(&mut c, &cfg);
        let step = f
            .iter()
            .find(|f| f.summary.starts_with("steps faster"))
            .unwrap_or_else(|| panic!("{other}: {f:#?}"));
        assert!(
            step.summary.contains(&format!("compute {wide} -18.00 ms")),
            "{other}: {}",
            step.summary
        );
        assert_eq!(
            step.summary
                .contains(&format!(": its shapes changed ({other} runs ")),
            told,
            "{other}: {}",
            step.summary
        );
    }
}
