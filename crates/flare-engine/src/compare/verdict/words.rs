//! The words of the step's finding: a class's line of evidence and the action its kind
//! calls for.

use flare_model::{ChangedOnRanks, OpKind, TimeClassChange, TimeClassKind};

pub(super) fn class_detail(r: &TimeClassChange, step_delta: f64) -> String {
    let presence = match (r.baseline_count > 0.0, r.current_count > 0.0) {
        (false, true)
            if !matches!(
                r.kind,
                TimeClassKind::Waiting | TimeClassKind::Untraced | TimeClassKind::BetweenSteps
            ) =>
        {
            "; appears: not in the baseline"
        }
        (true, false) => "; disappears: not in the current run",
        _ => "",
    };
    let rate = match (r.baseline_rate, r.current_rate) {
        (Some(b), Some(c)) => format!(
            "; achieved {c:.3} {unit} against {b:.3}",
            unit = if r.kind == TimeClassKind::Compute {
                "TFLOPS"
            } else {
                "bus GB/s"
            }
        ),
        _ => String::new(),
    };
    let ranks = r.changed_on.as_ref().map_or(String::new(), |on| {
        format!(
            "; on {} alone: {:.1} ops per step against {:.1}, {:+.2} ms per step there",
            on.label(),
            on.current_count,
            on.baseline_count,
            on.delta_ms()
        )
    });
    format!(
        "{}: {:+.2} ms per step ({:.0}% of the step's change); ops per step {:.1} against {:.1}{rate}{presence}{ranks}",
        r.label(),
        r.delta_ms(),
        r.delta_ms() / step_delta * 100.0,
        r.current_count,
        r.baseline_count
    )
}

pub(super) fn action(top: &TimeClassChange, slower: bool, more_often: bool, cpu: bool) -> String {
    let class = top.short_class();
    if !slower {
        return format!(
            "nothing to fix: the current run is faster, mostly through {class}; keep what changed"
        );
    }
    match top.kind {
        TimeClassKind::Compute | TimeClassKind::Communication if more_often && top.changed_on.is_some() => {
            let on = top.changed_on.as_ref().map(ChangedOnRanks::label).unwrap_or_default();
            format!(
                "{class} runs {} often per step on {on} alone: a code path only those ranks take (work on one rank such as evaluation, logging or saving; a condition on the rank or on its data); in a synchronous job every other rank waits for it at the next collective, so the whole job pays its time: find what calls it there (torch.profiler with with_stack=True on {on}), then spread that work over the ranks or take it off the step's path",
                if top.current_count > top.baseline_count { "more" } else { "less" }
            )
        }
        TimeClassKind::Compute if more_often => format!(
            "{class} runs more often per step: a new code path or more work per step (extra forward passes, evaluation, metrics or logging, recomputation); find what calls it in the current code (torch.profiler with with_stack=True)"
        ),
        TimeClassKind::Compute if cpu => format!(
            "{class} runs as often but slower, with the same ops: on CPUs an op's time follows the host's load and clocks (other processes, threads per rank: torch.get_num_threads, OMP_NUM_THREADS), which vary from run to run; rerun both on the same idle hosts before looking for a cause in the program, then compare their shapes and the PyTorch builds (oneDNN, MKL)"
        ),
        TimeClassKind::Compute => format!(
            "{class} runs as often but slower: compare its shapes and dtypes between the runs (tensor cores need dimensions that are multiples of 8 for fp16/bf16, 16 for fp8), the libraries (PyTorch, cuBLAS, cuDNN) and the GPU clocks"
        ),
        TimeClassKind::Communication if more_often => format!(
            "{class} runs {} often per step: the collectives are cut into other messages (DDP bucket_cap_mb, FSDP/ZeRO bucket and prefetch sizes, gradient accumulation, tensor/sequence parallel sizes), and messages of another size move at another bandwidth: compare those settings between the runs",
            if top.current_count > top.baseline_count { "more" } else { "less" }
        ),
        TimeClassKind::Communication if cpu => format!(
            "{class} takes longer to move its data, with the same collectives: on CPUs (Gloo over TCP) that is the hosts' network path and load (GLOO_SOCKET_IFNAME, other traffic and processes on the hosts), which vary from run to run; rerun both on the same idle hosts before looking for a cause in the program"
        ),
        TimeClassKind::Communication => format!(
            "{class} takes longer to move its data: compare NCCL's algorithm and protocol between the runs (NCCL_DEBUG=INFO), the message sizes and the network path (NCCL_IB_* settings, topology)"
        ),
        TimeClassKind::Waiting => "ranks wait longer for each other in their collectives: some ranks became slower than the rest; run `flare diagnose` on the current run to name them".to_string(),
        TimeClassKind::Host => host_action(top, more_often),
        TimeClassKind::Untraced => "time no traced op covers grew: CPU work between ops (Python, device synchronizations, data preparation in the main process); profile the host side of both runs (py-spy record) and compare".to_string(),
        TimeClassKind::BetweenSteps => "the host's own time between steps grew (no op runs before the step's first op or after its last): the training loop's per-step work outside the model (logging and metrics, reading values back with .item() or .cpu(), timers that synchronize, checkpoint or evaluation triggers); profile the loop of both runs (py-spy record, torch.profiler with with_stack=True) and compare".to_string(),
    }
}

/// The action for a host phase that takes longer (`top`), by its kind.
fn host_action(top: &TimeClassChange, more_often: bool) -> String {
    match OpKind::from_name(&top.class) {
        Some(OpKind::Checkpoint) if more_often => format!(
            "checkpoints are saved {:.1} times per step against {:.1}, on the step's path: save every N steps (the time between saves against the work a failure would lose), asynchronously (torch.distributed.checkpoint.async_save), and once per data-parallel replica rather than from every rank",
            top.current_count, top.baseline_count
        ),
        Some(OpKind::Checkpoint) => "each checkpoint takes longer to save: its size (what the state holds), the storage it is written to (bandwidth, other writers) and saving asynchronously (torch.distributed.checkpoint.async_save)".to_string(),
        Some(OpKind::Optimizer) => "the optimizer's step takes longer: how it updates (torch.optim's foreach=True or fused=True update every parameter in a few kernels, a per-parameter loop issues several per tensor), how many parameters it updates and in which dtype, and what was added to it (gradient clipping, a scheduler, EMA weights); profile it (torch.profiler, py-spy)".to_string(),
        Some(OpKind::GarbageCollection) => "Python's garbage collector pauses longer: call gc.freeze() after setup so the long-lived objects are not scanned again, make fewer Python objects per step, or gc.disable() and gc.collect() every N steps at a point every rank reaches together".to_string(),
        Some(OpKind::DataLoader) => "the DataLoader hands over batches slower: move per-sample work out of the training process (num_workers > 0, prefetch_factor, persistent_workers, pin_memory) and precompute what does not change; profile the Dataset's __getitem__ (py-spy)".to_string(),
        _ => format!(
            "the host phase {} takes longer: profile it (py-spy record) in both runs and compare",
            top.short_class()
        ),
    }
}

/// The action for the same ops run slower on some ranks alone (`ranks`, as labelled).
pub(super) fn slower_on_some(ranks: &str, cpu: bool) -> String {
    if cpu {
        format!(
            "the same ops run slower on {ranks} alone, so not the code or the libraries, which every rank shares: their CPUs (other processes on their cores, CPU frequency, thread pinning and OMP_NUM_THREADS; more ranks than cores on a node); `flare diagnose` on the current run weighs the evidence rank by rank"
        )
    } else {
        format!(
            "the same kernels run slower on {ranks} alone, so not the code or the libraries, which every rank shares: their GPUs (clocks and thermal or power throttling in nvidia-smi, ECC errors and retired pages, the PCIe link) or the CPUs that feed them; `flare diagnose` on the current run weighs the evidence rank by rank"
        )
    }
}

/// "compute X runs 20.0 times per step on rank 2 against 4.0 (+8.17 ms per step there)".
pub(super) fn on_ranks(r: &TimeClassChange, on: &ChangedOnRanks) -> String {
    format!(
        "{} runs {:.1} times per step on {} against {:.1} ({:+.2} ms per step there)",
        r.label(),
        on.current_count,
        on.label(),
        on.baseline_count,
        on.delta_ms()
    )
}
