//! Each cause, table-driven: the evidence that names it, and evidence that must not.

use super::named_causes;
use crate::compare::CompareConfig;
use flare_model::{
    Comparison, HostCallKind, HostCallRate, RegressionCause as Cause, RunProfile, TimeClassChange,
    TimeClassKind,
};

pub(in crate::compare) fn run(step_ms: f64, calls: Vec<HostCallRate>) -> RunProfile {
    RunProfile {
        source: "run".into(),
        ranks: 2,
        rank_iterations: 20,
        step_ms,
        step_sd_ms: 0.5,
        step_median_ms: step_ms,
        step_robust_sd_ms: 0.5,
        cpu_compute: false,
        host_calls: calls,
        gc_sites: vec![],
        gc_longest_ms: None,
        issue_latency: None,
    }
}

fn call(kind: HostCallKind, name: &str, dtype: Option<&str>, per_step: f64) -> HostCallRate {
    HostCallRate {
        kind,
        name: name.into(),
        dtype: dtype.map(str::to_string),
        per_step,
        ms_per_step: per_step * 0.1,
        device_ms_per_step: None,
        tflops: None,
        sites: vec![],
    }
}

/// The all-reduce's NCCL algorithm in each run.
fn algorithms(c: &mut Comparison, baseline: &str, current: &str) {
    let r = c
        .classes
        .iter_mut()
        .find(|r| r.class == "all_reduce 16.0 MiB")
        .unwrap();
    r.baseline_algorithms = vec![baseline.into()];
    r.current_algorithms = vec![current.into()];
}

/// An issue-latency distribution around a median, over 5,000 kernels.
fn latency(p50_us: f64) -> flare_model::LatencyQuantiles {
    flare_model::LatencyQuantiles {
        count: 5000,
        p10_us: p50_us / 3.0,
        p50_us,
        p90_us: p50_us * 3.0,
        p99_us: p50_us * 6.0,
        cdf_us: vec![],
    }
}

/// Synchronizing calls named `name`, `per_step` a step.
pub(in crate::compare) fn sync(name: &str, per_step: f64) -> HostCallRate {
    call(HostCallKind::Synchronize, name, None, per_step)
}

/// `loss.item()` once per step at train.py line 88.
fn item_sync() -> HostCallRate {
    let mut item = sync("aten::_local_scalar_dense", 1.0);
    item.sites = vec![("train.py(88): step".into(), 20)];
    item
}

pub(in crate::compare) fn class(
    kind: TimeClassKind,
    name: &str,
    b: (f64, f64),
    c: (f64, f64),
) -> TimeClassChange {
    TimeClassChange {
        kind,
        class: name.into(),
        baseline_ms: b.0,
        current_ms: c.0,
        baseline_sd_ms: 0.1,
        current_sd_ms: 0.1,
        baseline_algorithms: vec![],
        current_algorithms: vec![],
        baseline_count: b.1,
        current_count: c.1,
        baseline_rate: None,
        current_rate: None,
        changed_on: None,
        reruns: None,
    }
}

/// A 40-ms step of a steady job, as the baseline and as the current run.
fn steady() -> Comparison {
    let gemm = |n| call(HostCallKind::Gemm, n, Some("BFloat16"), 8.0);
    let calls = vec![
        gemm("aten::addmm [[1024],[64,1024],[1024,1024]]"),
        gemm("aten::mm [[64,1024],[1024,1024]]"),
    ];
    let classes = vec![
        class(TimeClassKind::Compute, "gemm", (30.0, 8.0), (30.0, 8.0)),
        class(TimeClassKind::Compute, "layer_norm", (0.8, 4.0), (0.8, 4.0)),
        class(
            TimeClassKind::Communication,
            "all_reduce 16.0 MiB",
            (6.0, 1.0),
            (6.0, 1.0),
        ),
        class(TimeClassKind::Host, "gc", (0.2, 0.1), (0.2, 0.1)),
        class(TimeClassKind::Host, "dataloader", (1.0, 1.0), (1.0, 1.0)),
        class(
            TimeClassKind::BetweenSteps,
            "host time between steps",
            (2.0, 0.0),
            (2.0, 0.0),
        ),
    ];
    Comparison {
        baseline: run(40.0, calls.clone()),
        current: run(40.0, calls),
        classes,
        sequence: None,
        causes: vec![],
        waited_for: None,
        reruns: None,
    }
}

fn set(c: &mut Comparison, name: &str, b: (f64, f64), cur: (f64, f64)) {
    let kind = c.classes.iter().find(|r| r.class == name).unwrap().kind;
    c.classes.retain(|r| r.class != name);
    c.classes.push(class(kind, name, b, cur));
}

#[test]
fn each_cause_is_named_from_its_own_evidence() {
    type Change = fn(&mut Comparison);
    let cases: Vec<(&str, Change, Vec<Cause>)> = vec![
        ("the same job", |_| {}, vec![]),
        (
            "a layer width of 1022 in bf16",
            |c| {
                c.current.host_calls[0].name = "aten::addmm [[1022],[64,1024],[1024,1022]]".into();
            },
            vec![Cause::TensorCoreMisalignment],
        ),
        (
            "misaligned in both runs: not a change",
            |c| {
                let bad = "aten::mm [[64,1022],[1022,1024]]";
                c.baseline.host_calls[1].name = bad.into();
                c.current.host_calls[1].name = bad.into();
            },
            vec![],
        ),
        (
            "fp32 needs multiples of 4 only (TF32)",
            |c| {
                for r in [&mut c.baseline, &mut c.current] {
                    r.host_calls
                        .iter_mut()
                        .for_each(|h| h.dtype = Some("Float".into()));
                }
                c.current.host_calls[0].name = "aten::addmm [[1020],[64,1024],[1024,1020]]".into();
            },
            vec![],
        ),
        (
            "autocast lost: the same GEMMs in fp32, slower",
            |c| {
                for h in &mut c.current.host_calls {
                    h.dtype = Some("Float".into());
                    h.ms_per_step *= 3.0;
                }
                c.current.step_ms = 44.0;
            },
            vec![Cause::PrecisionChange],
        ),
        (
            "a DataLoader's fp32 matmuls beside the bf16 model: not the model's precision",
            |c| {
                let mask = call(HostCallKind::Gemm, "aten::matmul [[384,384],[384,384]]", Some("Float"), 64.0);
                c.current.host_calls.push(mask);
            },
            vec![],
        ),
        (
            "loss.item() every step",
            |c| {
                c.current.host_calls.push(item_sync());
                // The runtime's sync under it is the same sync.
                c.current.host_calls.push(sync("cudaStreamSynchronize", 1.0));
                c.baseline.host_calls.push(sync("cudaStreamSynchronize", 0.1));
            },
            vec![Cause::DeviceSynchronization],
        ),
        (
            "other token counts, as misaligned as before: data, not a change",
            |c| {
                for (r, m) in [(&mut c.baseline, 61), (&mut c.current, 57)] {
                    r.host_calls[1].name = format!("aten::mm [[{m},1024],[1024,1024]]");
                }
            },
            vec![],
        ),
        (
            "a data-dependent sync a little more often: 1.5 -> 2.0 per step",
            |c| {
                for (r, n) in [(&mut c.baseline, 1.5), (&mut c.current, 2.0)] {
                    r.host_calls.push(sync("aten::_local_scalar_dense", n));
                }
            },
            vec![],
        ),
        (
            "a small op three times slower, but two steps each: no noise to judge by",
            |c| {
                set(c, "layer_norm", (0.8, 4.0), (2.4, 4.0));
                c.baseline.rank_iterations = 2;
                c.current.rank_iterations = 2;
            },
            vec![],
        ),
        (
            "loss.item() beside the framework's own syncs (DDP's first-iterations statistics: 7.2 event syncs per step in both runs, as on a real H100 job)",
            |c| {
                for r in [&mut c.baseline, &mut c.current] {
                    r.host_calls.push(sync("cudaEventSynchronize", 7.2));
                }
                c.current.host_calls.push(item_sync());
                c.current.host_calls.push(sync("cudaStreamSynchronize", 1.0));
            },
            vec![Cause::DeviceSynchronization],
        ),
        (
            "the framework's own syncs vary (7.2 -> 8.0 event syncs per step): not a new sync",
            |c| {
                for (r, n) in [(&mut c.baseline, 7.2), (&mut c.current, 8.0)] {
                    r.host_calls.push(sync("cudaEventSynchronize", n));
                }
            },
            vec![],
        ),
        (
            "a sync every twenty steps: below one per two steps",
            |c| {
                c.current.host_calls.push(sync("aten::nonzero", 0.05))
            },
            vec![],
        ),
        (
            "cudaMalloc and cudaFree every step",
            |c| {
                c.current
                    .host_calls
                    .push(call(HostCallKind::Memory, "cudaMalloc", None, 3.0));
                c.current
                    .host_calls
                    .push(call(HostCallKind::Memory, "cudaFree", None, 3.0));
            },
            vec![Cause::MemoryChurn],
        ),
        (
            "DDP buckets cut: four smaller all-reduces",
            |c| {
                set(c, "all_reduce 16.0 MiB", (6.0, 1.0), (0.0, 0.0));
                c.classes.push(class(
                    TimeClassKind::Communication,
                    "all_reduce 4.0 MiB",
                    (0.0, 0.0),
                    (7.0, 4.0),
                ));
            },
            vec![Cause::CollectiveChange],
        ),
        (
            "NCCL picked another algorithm for the same all-reduce",
            |c| algorithms(c, "RING/LL128", "TREE/LL"),
            vec![Cause::CollectiveChange],
        ),
        (
            "the same algorithm: nothing",
            |c| algorithms(c, "RING/LL128", "RING/LL128"),
            vec![],
        ),
        (
            "kernels start right after launch and the step is slower: launch-bound",
            |c| {
                c.baseline.issue_latency = Some(latency(400.0));
                c.current.issue_latency = Some(latency(8.0));
                c.current.step_ms = 46.0;
            },
            vec![Cause::LaunchBound],
        ),
        (
            "a shorter queue but the step no slower: nothing",
            |c| {
                c.baseline.issue_latency = Some(latency(400.0));
                c.current.issue_latency = Some(latency(8.0));
            },
            vec![],
        ),
        (
            "GC pauses grew with the objects kept",
            |c| set(c, "gc", (0.2, 0.1), (3.0, 0.6)),
            vec![Cause::GarbageCollection],
        ),
        (
            "GC switched on: rare long pauses, noisy on average",
            |c| {
                set(c, "gc", (0.0, 0.0), (6.0, 20.0));
                c.classes
                    .iter_mut()
                    .find(|r| r.class == "gc")
                    .unwrap()
                    .current_sd_ms = 25.0;
            },
            vec![Cause::GarbageCollection],
        ),
        (
            "rare long pauses in both runs: noise",
            |c| {
                set(c, "gc", (4.0, 20.0), (6.0, 20.0));
                let r = c.classes.iter_mut().find(|r| r.class == "gc").unwrap();
                (r.baseline_sd_ms, r.current_sd_ms) = (20.0, 25.0);
            },
            vec![],
        ),
        (
            "GC noise: 0.2 -> 0.3 ms",
            |c| set(c, "gc", (0.2, 0.1), (0.3, 0.15)),
            vec![],
        ),
        (
            "a heavier DataLoader",
            |c| set(c, "dataloader", (1.0, 1.0), (6.0, 1.0)),
            vec![Cause::Dataloader],
        ),
        (
            "the loop formats its metrics in Python every step: 2 -> 10 ms between steps",
            |c| set(c, "host time between steps", (2.0, 0.0), (10.0, 0.0)),
            vec![Cause::HostBetweenSteps],
        ),
        (
            "a DataLoader 20 ms slower, the loop around it 1.4 ms (the host thread's caches): the DataLoader alone",
            |c| {
                set(c, "dataloader", (1.0, 1.0), (21.0, 1.0));
                set(c, "host time between steps", (2.0, 0.0), (3.4, 0.0));
            },
            vec![Cause::Dataloader],
        ),
        (
            "a DataLoader 2 ms slower and the loop 8 ms: both",
            |c| {
                set(c, "dataloader", (1.0, 1.0), (3.0, 1.0));
                set(c, "host time between steps", (2.0, 0.0), (10.0, 0.0));
            },
            vec![Cause::Dataloader, Cause::HostBetweenSteps],
        ),
        (
            "between-steps noise: 2.0 -> 2.3 ms",
            |c| set(c, "host time between steps", (2.0, 0.0), (2.3, 0.0)),
            vec![],
        ),
        (
            "less time between steps: nothing to name",
            |c| set(c, "host time between steps", (2.0, 0.0), (0.5, 0.0)),
            vec![],
        ),
        (
            "a small op three times slower per call",
            |c| {
                set(c, "layer_norm", (0.8, 4.0), (2.4, 4.0));
                c.current.step_ms = 41.6;
            },
            vec![Cause::MinorityKernel],
        ),
        (
            "a small op three times slower per call, in a step no slower (others waited less): an info",
            |c| {
                set(c, "layer_norm", (0.8, 4.0), (2.4, 4.0));
                set(c, "all_reduce 16.0 MiB", (6.0, 1.0), (4.4, 1.0));
            },
            vec![Cause::MinorityKernel],
        ),
        (
            "a small op x1.6 per call but 1.25% of the step: below a change worth reporting (a copy slowed by evicted caches)",
            |c| {
                set(c, "layer_norm", (0.8, 4.0), (1.3, 4.0));
                c.current.step_ms = 41.0;
            },
            vec![],
        ),
        (
            "a small op run twice as often: a code path, not a slow kernel",
            |c| set(c, "layer_norm", (0.8, 4.0), (1.6, 8.0)),
            vec![],
        ),
        (
            "the big op slower: not a minority",
            |c| set(c, "gemm", (30.0, 8.0), (36.0, 8.0)),
            vec![],
        ),
    ];
    for (what, change, want) in cases {
        let mut c = steady();
        change(&mut c);
        let got: Vec<Cause> = named_causes(&c, &CompareConfig::default())
            .into_iter()
            .map(|(cause, _)| cause)
            .collect();
        assert_eq!(got, want, "{what}");
    }
}

#[test]
fn a_slow_minor_op_warns_only_where_the_step_is_slower() {
    let severity = |step_ms: f64| {
        let mut c = steady();
        set(&mut c, "layer_norm", (0.8, 4.0), (2.4, 4.0));
        c.current.step_ms = step_ms;
        let f = named_causes(&c, &CompareConfig::default());
        assert_eq!(f.len(), 1, "{f:#?}");
        (
            f[0].1.severity,
            f[0].1.summary.contains("the step is not slower"),
        )
    };
    assert_eq!(severity(41.6), (flare_model::Severity::Warning, false));
    assert_eq!(severity(40.2), (flare_model::Severity::Info, true));
}

#[test]
fn the_findings_say_where_and_what() {
    let mut c = steady();
    c.current.host_calls[0].name = "aten::addmm [[1022],[64,1024],[1024,1022]]".into();
    c.current.host_calls.push(item_sync());
    let f = named_causes(&c, &CompareConfig::default());
    let text = |i: usize| {
        format!(
            "{} | {} | {}",
            f[i].1.summary, f[i].1.evidence[0].detail, f[i].1.action
        )
    };
    assert!(text(0).contains("N=1022"), "{}", text(0));
    assert!(text(0).contains("not a multiple of 8"), "{}", text(0));
    assert!(text(1).contains("from train.py(88): step"), "{}", text(1));
    assert!(text(1).contains("at train.py(88): step"), "{}", text(1));
}

#[test]
fn anomaly_detections_checks_are_named_as_such_and_explain_the_slower_backward() {
    // Anomaly detection: 45 NaN checks per step inside the backward functions, whose
    // per-call time grew by them; a minor forward op slower per call is still told.
    let backward = "autograd::engine::evaluate_function: NativeBatchNormBackward0";
    let mut c = steady();
    c.classes.push(class(
        TimeClassKind::Compute,
        backward,
        (0.8, 4.0),
        (2.4, 4.0),
    ));
    set(&mut c, "layer_norm", (0.8, 4.0), (2.4, 4.0));
    c.current.step_ms = 43.2;
    let mut checks = sync(flare_model::host_calls::AUTOGRAD_ANOMALY_CHECK, 45.0);
    checks.sites = vec![(
        "train.py(88): step -> torch/_tensor.py(5): backward".into(),
        540,
    )];
    c.current.host_calls.push(checks);
    let f = named_causes(&c, &CompareConfig::default());
    let causes: Vec<Cause> = f.iter().map(|(k, _)| *k).collect();
    assert_eq!(
        causes,
        [Cause::DeviceSynchronization, Cause::MinorityKernel],
        "{f:#?}"
    );
    let sync = &f[0].1;
    assert!(
        sync.summary
            .starts_with("autograd anomaly detection is on: 45.0 NaN checks per step"),
        "{}",
        sync.summary
    );
    assert!(
        sync.action.contains("set_detect_anomaly(False)"),
        "{}",
        sync.action
    );
    let minor = &f[1].1;
    assert!(
        minor.summary.contains("layer_norm") && !minor.summary.contains(backward),
        "{}",
        minor.summary
    );
    // The program's own .item() is still an accidental synchronization, with its line.
    let mut c = steady();
    c.current.host_calls.push(item_sync());
    let f = named_causes(&c, &CompareConfig::default());
    assert!(
        f[0].1.summary.starts_with("accidental synchronization"),
        "{}",
        f[0].1.summary
    );
}

#[test]
fn ddps_search_for_unused_parameters_is_named_as_the_syncs_source() {
    // DDP(find_unused_parameters=True): its reducer's graph search appears, and a read-back
    // per parameter (19) every step.
    let mut c = steady();
    c.current
        .host_calls
        .push(sync("aten::_local_scalar_dense", 19.0));
    c.sequence = Some(flare_model::SequenceChange {
        divergence_bits: 0.3,
        baseline_entropy_bits: 5.1,
        current_entropy_bits: 5.2,
        appeared: vec![
            "_DDPSink".into(),
            "torch.distributed.ddp.reducer::search_unused_parameters".into(),
        ],
        disappeared: vec![],
    });
    let f = named_causes(&c, &CompareConfig::default());
    assert_eq!(f[0].0, Cause::DeviceSynchronization);
    assert!(
        f[0].1
            .summary
            .starts_with("DDP searches for unused parameters every step: 19.0 host syncs per step"),
        "{}",
        f[0].1.summary
    );
    assert!(
        f[0].1.action.contains("find_unused_parameters=False"),
        "{}",
        f[0].1.action
    );
}
