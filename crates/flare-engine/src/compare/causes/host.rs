//! Causes read from time: host phases that grew (GC, the DataLoader) and small compute
//! ops that became slow per call. Each must stand above the run's noise.

use super::{finding, sites_text, time_grew};
use crate::compare::CompareConfig;
use flare_model::host_calls::BACKWARD_FUNCTION;
use flare_model::{
    Comparison, Evidence, EvidenceKey, Finding, OpKind, Severity, TimeClassChange, TimeClassKind,
    Unit,
};

/// The host phase's class, when either run has it.
fn host_class(c: &Comparison, kind: OpKind) -> Option<&TimeClassChange> {
    c.classes
        .iter()
        .find(|r| r.kind == TimeClassKind::Host && r.class == kind.as_str())
}

/// Python's garbage collector pauses longer per step: by more than the noise, or it now
/// runs where the baseline's never did, at a cost of a share of the step (its pauses are
/// rare and long, so their mean is noisy while their appearance is not).
pub fn garbage_collection(c: &Comparison, cfg: &CompareConfig) -> Option<Finding> {
    let r = host_class(c, OpKind::GarbageCollection)?;
    let switched_on = super::enough_steps(c, cfg)
        && r.baseline_count < 0.05 * r.current_count
        && r.delta_ms() >= cfg.min_cause_share * c.baseline.step_ms;
    if r.delta_ms() <= 0.0 || !(switched_on || time_grew(r, c, cfg)) {
        return None;
    }
    let pause = |ms: f64, n: f64| if n > 0.0 { ms / n } else { 0.0 };
    // A pause far longer than the mean is a full collection: say so, as the mean hides it.
    let longest = c
        .current
        .gc_longest_ms
        .filter(|&l| l >= 10.0 * pause(r.current_ms, r.current_count))
        .map_or(String::new(), |l| format!(", the longest {l:.1} ms"));
    let mut evidence = vec![
        Evidence::new(
            EvidenceKey::GcTimeMs,
            r.current_ms,
            Some(r.baseline_ms),
            Unit::Ms,
            format!(
                "time in garbage collection per step of a rank ({:.1}% of the current step)",
                r.current_ms / c.current.step_ms * 100.0
            ),
        )
        .decisive(),
        Evidence::new(
            EvidenceKey::GcPausesPerStep,
            r.current_count,
            Some(r.baseline_count),
            Unit::None,
            format!(
                "pauses per step, {:.2} ms each on average against {:.2}",
                pause(r.current_ms, r.current_count),
                pause(r.baseline_ms, r.baseline_count)
            ),
        )
        .decisive(),
    ];
    if let Some(longest) = c.current.gc_longest_ms {
        evidence[1]
            .detail
            .push_str(&format!("; the longest {longest:.1} ms"));
    }
    let site = if c.current.gc_sites.is_empty() {
        String::new()
    } else {
        evidence[1]
            .detail
            .push_str(&format!("; where: {}", sites_text(&c.current.gc_sites)));
        format!(", most often in {}", c.current.gc_sites[0].0)
    };
    Some(finding(
        Severity::Warning,
        format!(
            "garbage collection: {:.2} -> {:.2} ms per step ({:.1} pauses per step, {:.2} ms each on average{longest}{site})",
            r.baseline_ms,
            r.current_ms,
            r.current_count,
            pause(r.current_ms, r.current_count)
        ),
        0.85,
        evidence,
        "the collector walks every live Python object on its full collections, so their cost grows with the objects the program keeps: keep fewer (no per-step Python lists or dicts of results; tensors, not lists of floats), gc.freeze() after the model and data are set up, or gc.disable() and gc.collect() every N steps at the same step on every rank (Megatron's --manual-gc)".into(),
    ))
}

/// The DataLoader takes longer to hand over a step's batches.
pub fn dataloader(c: &Comparison, cfg: &CompareConfig) -> Option<Finding> {
    let r = host_class(c, OpKind::DataLoader)?;
    if r.delta_ms() <= 0.0 || !time_grew(r, c, cfg) {
        return None;
    }
    Some(finding(
        Severity::Warning,
        format!(
            "the DataLoader is slower: {:.2} -> {:.2} ms per step waiting for batches ({:+.0}%)",
            r.baseline_ms,
            r.current_ms,
            (r.current_ms / r.baseline_ms.max(1e-9) - 1.0) * 100.0
        ),
        0.85,
        vec![Evidence::new(
            EvidenceKey::DataloaderTimeMs,
            r.current_ms,
            Some(r.baseline_ms),
            Unit::Ms,
            format!(
                "time per step of a rank in the DataLoader's next() ({:.1} calls per step), with the work it runs in the training process",
                r.current_count
            ),
        )
        .decisive()],
        "the data pipeline does more per sample than before: move per-sample work out of the training process (num_workers > 0, prefetch_factor, persistent_workers, pin_memory), precompute what does not change (masks, tokenization), and look for work that grows with the sequence length squared (attention masks, padding)".into(),
    ))
}

/// How many times the loop's growth between steps a host phase must grow by for the loop's
/// to be read as that phase's side effect.
const HOST_PHASE_OVER_LOOP: f64 = 5.0;

/// The host's own time between steps grew: after each step's last op nothing runs for
/// longer, by more than the noise (the loop's logging, metrics or timers; a sync's wait
/// shows there too, and is named on its own by its calls).
pub fn between_steps(c: &Comparison, cfg: &CompareConfig) -> Option<Finding> {
    let r = c
        .classes
        .iter()
        .find(|r| r.kind == TimeClassKind::BetweenSteps)?;
    if r.delta_ms() <= 0.0 || !time_grew(r, c, cfg) {
        return None;
    }
    // The loop's own code runs on the thread that runs the DataLoader's work and the
    // collector: when one of those grew many times more, the same code around it can run
    // slower by a fraction of that (evicted caches, the allocator, the clocks) with the
    // loop doing nothing more, and the times cannot tell the two apart: that phase's
    // finding is the cause (seen on an H200: a DataLoader +21.7 ms, the loop +1.4 ms).
    let phase_growth = [OpKind::DataLoader, OpKind::GarbageCollection]
        .into_iter()
        .filter_map(|k| host_class(c, k))
        .map(TimeClassChange::delta_ms)
        .fold(0.0, f64::max);
    if phase_growth >= HOST_PHASE_OVER_LOOP * r.delta_ms() {
        return None;
    }
    Some(finding(
        Severity::Warning,
        format!(
            "the host's own time between steps grew: {:.2} -> {:.2} ms per step with no op running after the step's last ({:.1}% of the current step)",
            r.baseline_ms,
            r.current_ms,
            r.current_ms / c.current.step_ms.max(1e-9) * 100.0
        ),
        0.75,
        vec![Evidence::new(
            EvidenceKey::BetweenStepsMs,
            r.current_ms,
            Some(r.baseline_ms),
            Unit::Ms,
            "time per step of a rank from the step's last op to the next step's first, with no op running (the device idles while the host runs the loop)".into(),
        )
        .decisive()],
        "the training loop does more outside the model each step: logging and metrics computed in Python, values read back from the device, timers that synchronize, checkpoint or evaluation triggers; profile the loop of both runs (py-spy record, torch.profiler with with_stack=True), and log or compute metrics every N steps".into(),
    ))
}

/// Time per call, ms.
fn per_call(ms: f64, calls: f64) -> f64 {
    ms / calls.max(1e-9)
}

/// Compute ops that are a small share of the step (under 5% of it in the baseline), run
/// as often, and got slower per call: the "minority kernels" a profile by total time hides.
/// Each must add a change of the step worth reporting by itself (`cfg.min_change`): a
/// small memory-bound op runs a little slower whenever something else evicts the caches
/// (a garbage collector walking the heap), which is not a change of the op.
pub fn minority_kernel(c: &Comparison, cfg: &CompareConfig) -> Option<Finding> {
    let step = c.baseline.step_ms;
    // An op slower per call in a step that is not slower may be time shared out
    // differently (on shared CPUs a copy competes with the other ranks' threads while
    // their waits shrink: two healthy FSDP runs, aten::clone x4.9 and the step +1.1%), or
    // a real change the run's noise hid (`aten::pow` x10, the step +1.3%): told, as an info.
    let step_slower = c.current.step_ms - step >= cfg.min_change * step;
    let scale = crate::compare::machine_scale(c);
    // the same ops over a multiple of the elements per call take that multiple longer
    let inputs = crate::compare::verdict::work::input_scale(c).map_or(1.0, |w| w.multiple);
    // Backward functions that now hold anomaly detection's checks are slower by them.
    let checked = super::sync::anomaly_checks_added(c);
    let mut slow: Vec<(&TimeClassChange, f64)> = c
        .classes
        .iter()
        .filter(|r| r.kind == TimeClassKind::Compute)
        .filter(|r| !(checked && r.class.starts_with(BACKWARD_FUNCTION)))
        .filter(|r| r.baseline_count > 0.0 && r.baseline_ms < 0.05 * step)
        .filter(|r| {
            (r.current_count - r.baseline_count).abs()
                <= cfg.count_change * r.baseline_count.max(r.current_count)
        })
        .filter_map(|r| {
            let ratio = per_call(r.current_ms, r.current_count)
                / per_call(r.baseline_ms, r.baseline_count).max(1e-12);
            let own = crate::compare::scale::own_delta_ms(r, scale.as_ref());
            (ratio / inputs >= 1.5 && own >= cfg.min_change * step && time_grew(r, c, cfg))
                .then_some((r, ratio))
        })
        .collect();
    slow.sort_by(|a, b| b.0.delta_ms().total_cmp(&a.0.delta_ms()));
    let (top, ratio) = *slow.first()?;
    let evidence: Vec<Evidence> = slow
        .iter()
        .take(3)
        .enumerate()
        .map(|(i, (r, ratio))| {
            Evidence::new(
                EvidenceKey::OpTimePerCallMs,
                per_call(r.current_ms, r.current_count),
                Some(per_call(r.baseline_ms, r.baseline_count)),
                Unit::Ms,
                format!(
                    "{}: x{ratio:.2} per call, {:.1} calls per step in both, {:+.2} ms per step",
                    r.short_class(),
                    r.current_count,
                    r.delta_ms()
                ),
            )
            .decisive_if(i == 0)
        })
        .collect();
    Some(finding(
        if step_slower {
            Severity::Warning
        } else {
            Severity::Info
        },
        format!(
            "a minor op became slow: {} x{ratio:.2} per call ({:+.2} ms per step; {:.1}% of the baseline's step before){}{}",
            top.short_class(),
            top.delta_ms(),
            top.baseline_ms / step * 100.0,
            if slow.len() > 1 {
                format!(", and {} more", slow.len() - 1)
            } else {
                String::new()
            },
            if step_slower {
                ""
            } else {
                "; the step is not slower: other classes took less (on shared CPUs a run's ops stretch where its waits shrink), so this may be no regression"
            }
        ),
        0.8,
        evidence,
        format!(
            "{} runs as often but slower per call: compare its input shapes, dtype and memory layout (contiguity) between the runs, and the library versions (PyTorch, cuDNN, Triton kernels, compiled graphs) that pick its kernel",
            top.short_class()
        ),
    ))
}
