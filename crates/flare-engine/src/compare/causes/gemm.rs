//! GEMM dimensions that miss the tensor-core alignment: cuBLAS runs a GEMM on tensor cores
//! (or on its fastest kernels) when M, N and K are multiples of 16 bytes of the element
//! type: 8 elements for fp16/bf16, 4 for TF32 (fp32), 16 for 8-bit types.

use super::{cpu_caveat, finding};

use crate::compare::CompareConfig;
use flare_model::host_calls::{call_shapes as shapes, gemm_of, Gemm};
use flare_model::{
    Comparison, Evidence, EvidenceKey, Finding, HostCallKind, HostCallRate, RunProfile, Severity,
    TimeClassChange, TimeClassKind, Unit,
};
use std::collections::BTreeSet;

/// Ops that wrap the GEMM the library runs (`aten::linear` calls `aten::addmm`): read only
/// where the run recorded none of the GEMMs themselves, so that a call counts once.
const WRAPPERS: [&str; 2] = ["aten::linear", "aten::matmul"];

/// Elements a dimension must be a multiple of for tensor cores, by element type (`None`
/// for types tensor cores do not run, such as fp64).
pub fn alignment(dtype: Option<&str>) -> Option<u64> {
    match dtype {
        Some("Half" | "BFloat16") | None => Some(8),
        Some("Float") => Some(4),
        Some("Char" | "Byte" | "Float8_e4m3fn" | "Float8_e5m2") => Some(16),
        _ => None,
    }
}

/// How much larger the share of misaligned GEMM calls must be in the current run.
const MIN_SHARE_RISE: f64 = 0.1;

/// One misaligned GEMM shape of a run.
struct Misaligned {
    name: String,
    gemm: Gemm,
    align: u64,
    dtype: Option<String>,
    per_step: f64,
}

/// The run's GEMM calls, each counted once: the GEMMs themselves where recorded, else
/// their wrappers; with the op and its input shapes.
pub(super) fn counted_gemms(run: &RunProfile) -> Vec<(&HostCallRate, &str, Vec<Vec<u64>>)> {
    let mut all: Vec<_> = run
        .host_calls
        .iter()
        .filter(|h| h.kind == HostCallKind::Gemm)
        .filter_map(|h| shapes(&h.name).map(|(op, s)| (h, op, s)))
        .collect();
    if all.iter().any(|(_, op, _)| !WRAPPERS.contains(op)) {
        all.retain(|(_, op, _)| !WRAPPERS.contains(op));
    }
    all
}

/// The run's GEMM calls per step (see [`counted_gemms`]), their time on the host, and
/// those of them that miss the alignment.
fn gemms(run: &RunProfile) -> (f64, f64, Vec<Misaligned>) {
    let (mut per_step, mut ms) = (0.0, 0.0);
    let mut misaligned = Vec::new();
    for (h, op, s) in counted_gemms(run) {
        per_step += h.per_step;
        ms += h.ms_per_step;
        let (Some(g), Some(align)) = (gemm_of(op, &s), alignment(h.dtype.as_deref())) else {
            continue;
        };
        if [g.m, g.n, g.k].iter().any(|d| d % align != 0) {
            misaligned.push(Misaligned {
                name: h.name.clone(),
                gemm: g,
                align,
                dtype: h.dtype.clone(),
                per_step: h.per_step,
            });
        }
    }
    misaligned.sort_by(|a, b| b.per_step.total_cmp(&a.per_step));
    (per_step, ms, misaligned)
}

/// A larger share of the current run's GEMM calls misses the alignment (by
/// `MIN_SHARE_RISE` of them), with shapes the baseline did not run: named whatever this
/// run's step shows (see the module of causes). A share, not a set of shapes: real jobs
/// run data-dependent shapes (tokens per batch, ragged embeddings), so new misaligned
/// shapes appear between any two runs while the share stays.
pub fn misalignment(c: &Comparison, _cfg: &CompareConfig) -> Option<Finding> {
    let (b_calls, b_ms, b_bad) = gemms(&c.baseline);
    let (c_calls, c_ms, c_bad) = gemms(&c.current);
    let misaligned = |v: &[Misaligned]| v.iter().fold(0.0, |a, m| a + m.per_step);
    let (b_n, c_n) = (misaligned(&b_bad), misaligned(&c_bad));
    let share = |n: f64, calls: f64| if calls > 0.0 { n / calls } else { 0.0 };
    let (b_share, c_share) = (share(b_n, b_calls), share(c_n, c_calls));
    if c_share - b_share < MIN_SHARE_RISE {
        return None;
    }
    let before: BTreeSet<&str> = b_bad.iter().map(|m| m.name.as_str()).collect();
    let new: Vec<&Misaligned> = c_bad
        .iter()
        .filter(|m| !before.contains(m.name.as_str()))
        .collect();
    let first = new.first()?;
    let dims = |m: &Misaligned| {
        let g = m.gemm;
        let off: Vec<String> = [("M", g.m), ("N", g.n), ("K", g.k)]
            .iter()
            .filter(|(_, d)| d % m.align != 0)
            .map(|(l, d)| format!("{l}={d}"))
            .collect();
        format!(
            "{} (M={} N={} K={}, {}: {} not a multiple of {}), {:.1} per step",
            m.name,
            g.m,
            g.n,
            g.k,
            m.dtype.as_deref().unwrap_or("type not recorded"),
            off.join(", "),
            m.align,
            m.per_step
        )
    };
    let shown: Vec<String> = new.iter().take(3).map(|m| dims(m)).collect();
    let mut evidence = vec![
        Evidence::new(
            EvidenceKey::MisalignedGemmsPerStep,
            c_n,
            Some(b_n),
            Unit::None,
            format!(
                "GEMMs per step off the tensor-core alignment ({:.0}% of the GEMM calls against {:.0}%); new shapes: {}",
                c_share * 100.0,
                b_share * 100.0,
                shown.join("; ")
            ),
        )
        .decisive(),
        Evidence::new(
            EvidenceKey::GemmTimeMs,
            c_ms,
            Some(b_ms),
            Unit::Ms,
            format!(
                "time in GEMM calls per step on the host ({c_calls:.1} calls against {b_calls:.1}){}",
                cpu_caveat(c)
            ),
        )
        .decisive(),
    ];
    let achieved = gemm_kernel_tflops(c);
    if let (Some(b), Some(now)) = achieved {
        evidence.push(
            Evidence::new(
                EvidenceKey::GemmTflops,
                now,
                Some(b),
                Unit::Tflops,
                "what the GEMM kernels achieved: the FLOPs of the GEMM ops that launched them (2·M·N·K from their shapes) over the kernels' time".into(),
            )
            .decisive(),
        );
    }
    let slower = c_ms > b_ms * 1.05;
    Some(finding(
        Severity::Warning,
        format!(
            "tensor-core misalignment: {} GEMM shape{} of the current run miss{} the alignment (first: {}){}",
            new.len(),
            if new.len() == 1 { "" } else { "s" },
            if new.len() == 1 { "es" } else { "" },
            dims(first),
            match achieved {
                (Some(b), Some(now)) => format!("; GEMM kernels {b:.0} -> {now:.0} TFLOPS"),
                _ if slower => format!("; GEMM time {:.2} -> {:.2} ms per step", b_ms, c_ms),
                _ => String::new(),
            }
        ),
        0.9,
        evidence,
        format!(
            "pad the dimensions that changed to multiples of {} (64 is safe for every type): layer widths, FFN size, vocabulary (Megatron's --make-vocab-size-divisible-by), heads x head size, and the tokens per microbatch; misaligned GEMMs fall off tensor cores or onto slower kernels{}",
            first.align,
            cpu_caveat(c)
        ),
    ))
}

/// The TFLOPS the compute classes that carry FLOPs achieved, in the baseline and the
/// current run, weighted by their time (on a GPU trace: the GEMM kernels, whose FLOPs come
/// from the GEMM ops that launched them).
fn gemm_kernel_tflops(c: &Comparison) -> (Option<f64>, Option<f64>) {
    let weighted = |rate: fn(&TimeClassChange) -> Option<f64>, ms: fn(&TimeClassChange) -> f64| {
        let (flops, time) = c
            .classes
            .iter()
            .filter(|r| r.kind == TimeClassKind::Compute)
            .filter_map(|r| rate(r).map(|x| (x * ms(r), ms(r))))
            .fold((0.0, 0.0), |(f, t), (x, m)| (f + x, t + m));
        (time > 0.0).then(|| flops / time)
    };
    (
        weighted(|r| r.baseline_rate, |r| r.baseline_ms),
        weighted(|r| r.current_rate, |r| r.current_ms),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn alignment_follows_the_element_type() {
        assert_eq!(alignment(Some("BFloat16")), Some(8));
        assert_eq!(alignment(Some("Float")), Some(4));
        assert_eq!(alignment(Some("Char")), Some(16));
        assert_eq!(alignment(Some("Double")), None);
        assert_eq!(alignment(None), Some(8));
    }
}
