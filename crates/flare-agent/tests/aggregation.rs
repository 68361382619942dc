//! Window aggregation on a synthetic but real ring file: every number in the summary is
//! computed by hand from the events written.

mod common;

use common::*;
use flare_agent::Collector;
use flare_model::OpKind;
use flare_tracer::SpanArgs;

#[test]
fn a_window_summary_has_exact_counts_percentiles_bandwidth_iterations_and_busy_time() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(dir.path(), "agg");
    cfg.max_exact_samples = 256;
    let window_ns = cfg.window.as_nanos() as u64;
    // A window entirely in the past (closed at the first poll), inside the backlog.
    let w = (unix_now() - 25 * SEC) / window_ns;
    let ws = w * window_ns;
    let at = |ms: u64| ws + ms * MS;

    let mut r = Ring::create(dir.path(), "agg", 0, 8, std::process::id());
    // Iterations: steps at 1 s, 3 s, 6 s -> step 1 lasts 2 s, step 2 lasts 3 s.
    r.step(0, 1, at(1000));
    r.step(0, 2, at(3000));
    r.step(0, 3, at(6000));
    // Two forward passes (1 TFLOP each, 1 s each) with an all-reduce nested in each.
    let ar = |r: &mut Ring, issue| r.comm("dp", 8, 1_000_000_000, issue);
    let fwd = SpanArgs {
        amount: 1_000_000_000_000,
        ..SpanArgs::default()
    };
    r.begin(0, "forward", OpKind::Compute, at(1000), fwd);
    let a = ar(&mut r, 10_000);
    r.span(0, "all_reduce", OpKind::AllReduce, at(1200), at(1300), a);
    r.end(0, "forward", OpKind::Compute, at(2000));
    r.begin(0, "forward", OpKind::Compute, at(3000), fwd);
    let a = ar(&mut r, 20_000);
    r.span(0, "all_reduce", OpKind::AllReduce, at(3200), at(3400), a);
    r.end(0, "forward", OpKind::Compute, at(4000));
    // A third all-reduce at top level (busy [5.0, 5.4]).
    let a = ar(&mut r, 30_000);
    r.span(0, "all_reduce", OpKind::AllReduce, at(5000), at(5400), a);
    // An async all-gather on another thread overlapping it: busy [4.5, 5.4] in all.
    let ag = r.comm("tp", 4, 400_000_000, 0);
    r.async_begin(1, 7, "all_gather", OpKind::AllGather, at(4500), ag);
    r.async_end(1, 7, "all_gather", OpKind::AllGather, at(5200));
    // 1000 short async ops inside the first forward (no extra busy time), past the
    // exact-sample cap: durations 1..=1000 us.
    for i in 1..=1000u64 {
        r.async_begin(
            2,
            1000 + i,
            "tiny",
            OpKind::HostOther,
            at(1000),
            SpanArgs::default(),
        );
        r.async_end(2, 1000 + i, "tiny", OpKind::HostOther, at(1000) + i * 1000);
    }
    // A top-level span across the window's end: half its busy time in each window,
    // its stats in the window where it ends.
    r.span(
        0,
        "checkpoint",
        OpKind::Checkpoint,
        at(9500),
        at(10_500),
        SpanArgs {
            amount: 5_000,
            ..SpanArgs::default()
        },
    );

    let mut c = Collector::new(cfg).unwrap();
    let all = c.poll();
    let s = window(&all, w);
    assert_eq!((s.job_id.as_str(), s.node.as_str()), ("agg", "test-node"));
    assert_eq!(
        (s.start_unix_ns, s.end_unix_ns, s.window_ns),
        (ws, ws + window_ns, window_ns)
    );
    assert_eq!(s.world_size, 8);
    assert_eq!(s.ranks.len(), 1);
    let rk = &s.ranks[0];
    assert_eq!((rk.rank, rk.pid), (0, std::process::id()));

    let iters: Vec<(u64, u64, u64)> = rk
        .iterations
        .iter()
        .map(|i| (i.step, i.start_unix_ns, i.duration_ns))
        .collect();
    assert_eq!(iters, vec![(1, at(1000), 2 * SEC), (2, at(3000), 3 * SEC)]);

    let op = |name: &str| {
        rk.ops
            .iter()
            .find(|o| o.name == name)
            .unwrap_or_else(|| panic!("no op {name}"))
    };
    let ar = op("all_reduce");
    assert_eq!(ar.kind, OpKind::AllReduce);
    assert_eq!((ar.group.as_deref(), ar.group_size), (Some("dp"), Some(8)));
    assert_eq!((ar.count, ar.total_ns), (3, 700 * MS));
    assert_eq!(
        (ar.p50_ns, ar.p99_ns, ar.max_ns),
        (200 * MS, 400 * MS, 400 * MS)
    );
    assert_eq!(ar.bytes, 3_000_000_000);
    // Bus bandwidth of the median span: 1 GB x 2(8-1)/8 / 0.2 s = 8.75 GB/s.
    assert_eq!(ar.bus_gbps, Some(8.75));
    assert_eq!(
        (ar.issue_p50_ns, ar.issue_p99_ns),
        (Some(20_000), Some(30_000))
    );

    let fwd = op("forward");
    assert_eq!(
        (fwd.count, fwd.total_ns, fwd.flops, fwd.bytes),
        (2, 2 * SEC, 2_000_000_000_000, 0)
    );
    assert_eq!(fwd.tflops, Some(1.0));
    assert_eq!(fwd.bus_gbps, None);

    let ag = op("all_gather");
    assert_eq!(
        (ag.count, ag.total_ns, ag.bytes),
        (1, 700 * MS, 400_000_000)
    );
    // 0.4 GB x (4-1)/4 / 0.7 s.
    let want = 0.4 * 0.75 / 0.7;
    assert!(
        (ag.bus_gbps.unwrap() - want).abs() < 1e-6,
        "{:?}",
        ag.bus_gbps
    );

    let tiny = op("tiny");
    assert_eq!((tiny.count, tiny.max_ns), (1000, 1_000_000));
    assert_eq!(tiny.total_ns, (1..=1000u64).sum::<u64>() * 1000);
    // Past the cap, percentiles come from the log histogram: within 0.4%.
    for (got, want) in [(tiny.p50_ns, 500_000f64), (tiny.p99_ns, 990_000f64)] {
        assert!((got as f64 - want).abs() / want < 0.004, "{got} vs {want}");
    }
    assert!(rk.ops.iter().all(|o| o.name != "checkpoint"));

    // Busy: [1,2] + [3,4] + [4.5,5.4] + [9.5,10] = 3.4 s; watched from the first
    // event (1 s) to the window's end: 9 s.
    assert_eq!(rk.busy_ns, 3400 * MS);
    // In collectives: [1.2,1.3] + [3.2,3.4] (nested) + [4.5,5.4] (the async all-gather
    // and the third all-reduce overlapping, counted once) = 1.2 s.
    assert_eq!(rk.sync_busy_ns, Some(1200 * MS));
    assert_eq!(rk.observed_ns, 9 * SEC);
    assert!((rk.void_share() - (1.0 - 3.4 / 9.0)).abs() < 1e-12);
    // Its iterations span [1 s, 6 s]: what peers compare, without the second before its
    // first step or the 4 s after its last; in collectives there 1.2 s (all of them).
    assert_eq!(
        rk.stepping,
        Some(flare_model::SteppingTime {
            span_ns: 5 * SEC,
            sync_ns: 1200 * MS
        })
    );
    // 3 steps + 2x2 forward + 3x2 all-reduce + 2 all-gather + 2000 tiny; the checkpoint's
    // begin (9.5 s) too; its end is in the next window.
    assert_eq!(rk.events, 3 + 4 + 6 + 2 + 2000 + 1);
    assert_eq!(rk.dropped_total, 0);
    assert!(s.hangs.is_empty());

    let next = window(&all, w + 1);
    let rk = &next.ranks[0];
    let ck = rk.ops.iter().find(|o| o.name == "checkpoint").unwrap();
    assert_eq!(
        (ck.kind, ck.count, ck.total_ns, ck.bytes),
        (OpKind::Checkpoint, 1, SEC, 5_000)
    );
    assert_eq!(rk.busy_ns, 500 * MS);
    assert_eq!(rk.sync_busy_ns, Some(0));
    assert_eq!(rk.observed_ns, window_ns);
    assert_eq!(rk.stepping, None, "no step in it");
    assert_eq!(rk.events, 1);
    // Ops are listed heaviest first.
    let s = window(&all, w);
    let totals: Vec<u64> = s.ranks[0].ops.iter().map(|o| o.total_ns).collect();
    assert!(totals.windows(2).all(|p| p[0] >= p[1]), "{totals:?}");
}

#[test]
fn two_ranks_of_a_job_share_one_summary_and_other_jobs_are_ignored() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), "jobA");
    let window_ns = cfg.window.as_nanos() as u64;
    let w = (unix_now() - 25 * SEC) / window_ns;
    let ws = w * window_ns;
    let me = std::process::id();
    let mut r0 = Ring::create(dir.path(), "jobA", 0, 2, me);
    let mut r1 = Ring::create(dir.path(), "jobA", 1, 2, me);
    let mut other = Ring::create(dir.path(), "jobB", 0, 1, me);
    for (i, r) in [&mut r0, &mut r1, &mut other].into_iter().enumerate() {
        r.span(
            0,
            "fwd",
            OpKind::Compute,
            ws + SEC,
            ws + SEC + (i as u64 + 1) * 100 * MS,
            SpanArgs::default(),
        );
    }
    let mut c = Collector::new(cfg).unwrap();
    let all = c.poll();
    assert!(all.iter().all(|s| s.job_id == "jobA"));
    let s = window(&all, w);
    let ranks: Vec<(u32, u64)> = s
        .ranks
        .iter()
        .map(|r| (r.rank, r.ops[0].total_ns))
        .collect();
    assert_eq!(ranks, vec![(0, 100 * MS), (1, 200 * MS)]);
    assert_eq!(c.stats().files_open, 2);
}

/// A collective of rank 0's main thread on its 4-rank `dp` communicator over
/// `[start, end)` (unix ns).
fn dp_collective(r: &mut Ring, name: &str, kind: OpKind, start: u64, end: u64) {
    let a = r.comm("dp", 4, 1_000_000, 0);
    r.span(0, name, kind, start, end, a);
}

#[test]
fn the_stepping_span_leaves_out_start_up_and_shutdown_collectives_included() {
    // A rank's init barrier before its first step and a last all-reduce after its last
    // step are not an iteration's: its peers compare what lies between its steps.
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), "st");
    let window_ns = cfg.window.as_nanos() as u64;
    let w = (unix_now() - 25 * SEC) / window_ns;
    let at = |ms: u64| w * window_ns + ms * MS;
    let mut r = Ring::create(dir.path(), "st", 0, 4, std::process::id());
    dp_collective(&mut r, "barrier", OpKind::Barrier, at(200), at(500));
    r.step(0, 1, at(1000));
    dp_collective(&mut r, "all_reduce", OpKind::AllReduce, at(1500), at(1800));
    r.step(0, 2, at(2000));
    dp_collective(&mut r, "all_reduce", OpKind::AllReduce, at(2500), at(2900));
    r.step(0, 3, at(3000));
    dp_collective(&mut r, "all_reduce", OpKind::AllReduce, at(3200), at(3300));
    let mut c = Collector::new(cfg).unwrap();
    let all = c.poll();
    let rk = &window(&all, w).ranks[0];
    assert_eq!(rk.sync_busy_ns, Some(1100 * MS));
    assert_eq!(
        rk.stepping,
        Some(flare_model::SteppingTime {
            span_ns: 2 * SEC,
            sync_ns: 700 * MS
        })
    );
}

#[test]
fn an_iteration_across_a_window_edge_is_counted_whole_where_it_ends() {
    // Steps at 1 s and 3 s of window w, the next at 0.5 s of w + 1: the iteration from
    // 3 s to 10.5 s belongs to w + 1, with its all-reduce across the edge (0.3 s before
    // it, 0.2 s after).
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), "edge");
    let window_ns = cfg.window.as_nanos() as u64;
    assert_eq!(window_ns, 10 * SEC);
    let w = (unix_now() - 35 * SEC) / window_ns;
    let at = |ms: u64| w * window_ns + ms * MS;
    let mut r = Ring::create(dir.path(), "edge", 0, 4, std::process::id());
    r.step(0, 1, at(1000));
    dp_collective(&mut r, "all_reduce", OpKind::AllReduce, at(2000), at(2400));
    r.step(0, 2, at(3000));
    dp_collective(
        &mut r,
        "all_reduce",
        OpKind::AllReduce,
        at(9700),
        at(10_200),
    );
    r.step(0, 3, at(10_500));
    let mut c = Collector::new(cfg).unwrap();
    let all = c.poll();
    let stepping = |w| window(&all, w).ranks[0].stepping;
    assert_eq!(
        stepping(w),
        Some(flare_model::SteppingTime {
            span_ns: 2 * SEC,
            sync_ns: 400 * MS
        })
    );
    assert_eq!(
        stepping(w + 1),
        Some(flare_model::SteppingTime {
            span_ns: 7500 * MS,
            sync_ns: 500 * MS
        })
    );
}
