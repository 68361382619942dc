//! Causes read from what the runs do per step rather than how long it takes:
//! memory-management calls, the collectives' sizes (syncs: `sync`).

use super::finding;
use crate::compare::CompareConfig;
use flare_model::{
    Comparison, Evidence, EvidenceKey, Finding, HostCallKind, HostCallRate, RunProfile, Severity,
    TimeClassKind, Unit,
};
use std::collections::BTreeMap;

/// Calls of a kind per step, and the calls themselves.
pub(super) fn calls(run: &RunProfile, kind: HostCallKind) -> Vec<&HostCallRate> {
    run.host_calls.iter().filter(|h| h.kind == kind).collect()
}

/// The calls of `kind` that run more often per step in the current run, most grown first,
/// with their per-step counts in both runs.
pub(super) fn grown(c: &Comparison, kind: HostCallKind) -> Vec<(&HostCallRate, f64)> {
    let baseline = calls(&c.baseline, kind);
    let mut out: Vec<(&HostCallRate, f64)> = calls(&c.current, kind)
        .into_iter()
        .map(|h| {
            let before = baseline
                .iter()
                .filter(|b| b.name == h.name)
                .fold(0.0, |a, b| a + b.per_step);
            (h, before)
        })
        .filter(|(h, before)| h.per_step > *before)
        .collect();
    out.sort_by(|a, b| (b.0.per_step - b.1).total_cmp(&(a.0.per_step - a.1)));
    out
}

/// "name 0.0 -> 1.0" for the first `n` grown calls.
pub(super) fn grown_words(grown: &[(&HostCallRate, f64)], n: usize) -> Vec<String> {
    grown
        .iter()
        .take(n)
        .map(|(h, b)| format!("{} {:.1} -> {:.1}", h.name, b, h.per_step))
        .collect()
}

/// More memory allocated and freed per step outside the caching allocator's pool.
pub fn memory_churn(c: &Comparison, _cfg: &CompareConfig) -> Option<Finding> {
    let per_step = |r: &RunProfile| -> (f64, f64) {
        calls(r, HostCallKind::Memory)
            .iter()
            .fold((0.0, 0.0), |(n, ms), h| {
                (n + h.per_step, ms + h.ms_per_step)
            })
    };
    let ((before, b_ms), (after, c_ms)) = (per_step(&c.baseline), per_step(&c.current));
    if after - before < 1.0 || after < 2.0 * before {
        return None;
    }
    let grown = grown(c, HostCallKind::Memory);
    let names = grown_words(&grown, 4);
    Some(finding(
        Severity::Warning,
        format!(
            "memory-management churn: {after:.1} device allocation calls per step against {before:.1} ({:.2} -> {:.2} ms per step in them)",
            b_ms, c_ms
        ),
        0.85,
        vec![Evidence::new(
            EvidenceKey::MemoryCallsPerStep,
            after,
            Some(before),
            Unit::None,
            format!("per step of a rank: {}", names.join(", ")),
        )
        .decisive()],
        "the caching allocator goes back to the driver every step: no torch.cuda.empty_cache() in the loop, PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True against fragmentation, tensors of steady shapes (pad variable lengths to buckets), and headroom under the memory limit (torch.cuda.memory_stats: num_alloc_retries)".into(),
    ))
}

/// "all_reduce 16.0 MiB" -> "all_reduce".
pub(in crate::compare) fn collective_of(class: &str) -> &str {
    class.split(' ').next().unwrap_or(class)
}

/// A communication class per step: (baseline count, current count, baseline ms, current ms).
type PerStep = (f64, f64, f64, f64);

/// Collectives of a kind that run with other sizes or counts per step.
pub fn collective_change(c: &Comparison, cfg: &CompareConfig) -> Option<Finding> {
    let mut kinds: BTreeMap<&str, BTreeMap<&str, PerStep>> = BTreeMap::new();
    for r in c
        .classes
        .iter()
        .filter(|r| r.kind == TimeClassKind::Communication)
    {
        let e = kinds
            .entry(collective_of(&r.class))
            .or_default()
            .entry(r.class.as_str())
            .or_default();
        *e = (
            r.baseline_count,
            r.current_count,
            r.baseline_ms,
            r.current_ms,
        );
    }
    // Classes whose kernels ran with other algorithms or protocols, by kind.
    let mut algorithms: BTreeMap<&str, Vec<String>> = BTreeMap::new();
    for r in c.classes.iter().filter(|r| {
        r.kind == TimeClassKind::Communication
            && r.baseline_count >= 0.5
            && r.current_count >= 0.5
            && !r.baseline_algorithms.is_empty()
            && !r.current_algorithms.is_empty()
            && r.baseline_algorithms != r.current_algorithms
    }) {
        algorithms
            .entry(collective_of(&r.class))
            .or_default()
            .push(format!(
                "{} {} -> {}",
                r.class,
                r.baseline_algorithms.join("+"),
                r.current_algorithms.join("+")
            ));
    }
    let mut changed: Vec<(&str, String, [f64; 4])> = Vec::new();
    for (kind, classes) in &kinds {
        let resized = classes
            .values()
            .any(|&(b, cur, _, _)| (b >= 0.5 && cur < 0.05 * b) || (cur >= 0.5 && b < 0.05 * cur));
        let algorithm = algorithms.get(kind);
        if !resized && algorithm.is_none() {
            continue;
        }
        let side = |pick: fn(&PerStep) -> f64| -> String {
            let parts: Vec<String> = classes
                .iter()
                .filter(|(_, v)| pick(v) >= 0.05)
                .map(|(class, v)| {
                    format!("{:.1} x {}", pick(v), class.trim_start_matches(kind).trim())
                })
                .collect();
            if parts.is_empty() {
                "none".into()
            } else {
                parts.join(" + ")
            }
        };
        let sum = |pick: fn(&PerStep) -> f64| classes.values().map(pick).sum::<f64>();
        let mut text = if resized {
            format!("{kind}: {} -> {}", side(|v| v.0), side(|v| v.1))
        } else {
            format!("{kind}:")
        };
        if let Some(a) = algorithm {
            text.push_str(&format!(
                "{}algorithm/protocol {}",
                if resized { "; " } else { " " },
                a.join(", ")
            ));
        }
        changed.push((
            kind,
            text,
            [sum(|v| v.0), sum(|v| v.1), sum(|v| v.2), sum(|v| v.3)],
        ));
    }
    let (kind, text, [b_n, c_n, b_ms, c_ms]) = changed.first().cloned()?;
    // Moving the data takes longer, by a share of the step, and the step is longer.
    let slower = c_ms - b_ms >= cfg.min_cause_share * c.baseline.step_ms
        && c_ms >= 1.25 * b_ms
        && c.current.step_ms > c.baseline.step_ms;
    let others: Vec<&str> = changed.iter().skip(1).map(|x| x.1.as_str()).collect();
    Some(finding(
        super::severity(slower),
        format!(
            "collectives changed: {text} per step ({b_ms:.2} -> {c_ms:.2} ms per step moving data){}",
            if others.is_empty() {
                String::new()
            } else {
                format!("; also {}", others.join("; "))
            }
        ),
        0.9,
        vec![
            Evidence::new(
                EvidenceKey::CollectivesPerStep,
                c_n,
                Some(b_n),
                Unit::None,
                format!("{kind} per step of a rank, by message size and NCCL algorithm: {text}"),
            )
            .decisive(),
            Evidence::new(
                EvidenceKey::CollectiveTimeMs,
                c_ms,
                Some(b_ms),
                Unit::Ms,
                format!("time per step in {kind}, from the last member's arrival (waiting excluded)"),
            )
            .decisive(),
        ],
        format!(
            "the {kind} messages changed size, number or algorithm between the runs: check the settings that cut them (DDP bucket_cap_mb, FSDP/ZeRO bucket and prefetch sizes, gradient accumulation, tensor/sequence parallel sizes) and NCCL's choice for the new sizes (NCCL_DEBUG=INFO, NCCL_ALGO/NCCL_PROTO): small messages run far below the link's bandwidth{}",
            if slower { "" } else { "; this run does not pay for it yet" }
        ),
    ))
}
