//! GEMMs that run in another element type than the baseline's: autocast lost or added, a
//! model cast to another dtype, a mixed-precision setting changed. On a GPU, fp32 GEMMs
//! without TF32 run far below bf16's tensor-core rate; on CPUs without bf16 units, bf16
//! runs slower than fp32.

use super::{finding, gemm::counted_gemms};
use crate::compare::CompareConfig;
use flare_model::{Comparison, Evidence, EvidenceKey, Finding, RunProfile, Unit};
use std::collections::BTreeMap;

/// The least share of the GEMM calls both runs make that must have changed type.
const MIN_SHARE: f64 = 0.5;

/// The run's GEMM calls (see [`counted_gemms`]) with a recorded element type, by name
/// (the op with its input shapes): (type, calls per step, ms per step).
fn typed(run: &RunProfile) -> BTreeMap<&str, (&str, f64, f64)> {
    counted_gemms(run)
        .into_iter()
        .filter_map(|(h, _, _)| {
            h.dtype
                .as_deref()
                .map(|d| (h.name.as_str(), (d, h.per_step, h.ms_per_step)))
        })
        .collect()
}

/// The GEMMs of one shape in both runs whose element type changed, by far the most of
/// the calls both runs share (`MIN_SHARE` of them): named whatever the step shows (a
/// structural change, as a new shape is), a warning where their time grew with the
/// step. By shape, not over all GEMMs: new work in other types (a DataLoader that builds
/// masks with fp32 matmuls) is not a change of the model's precision.
pub fn precision_change(c: &Comparison, _cfg: &CompareConfig) -> Option<Finding> {
    let (b, cur) = (typed(&c.baseline), typed(&c.current));
    // (baseline type, current type) -> (shapes, calls per step, ms before, ms now)
    let mut changed: BTreeMap<(&str, &str), (usize, f64, f64, f64)> = BTreeMap::new();
    let mut shared_calls = 0.0;
    for (name, &(c_type, c_calls, c_ms)) in &cur {
        let Some(&(b_type, _, b_ms)) = b.get(name) else {
            continue;
        };
        shared_calls += c_calls;
        if b_type != c_type {
            let e = changed.entry((b_type, c_type)).or_default();
            *e = (e.0 + 1, e.1 + c_calls, e.2 + b_ms, e.3 + c_ms);
        }
    }
    let (&(b_type, c_type), &(shapes, calls, b_ms, c_ms)) =
        changed.iter().max_by(|x, y| x.1 .1.total_cmp(&y.1 .1))?;
    if shared_calls <= 0.0 || calls < MIN_SHARE * shared_calls {
        return None;
    }
    let slower = c_ms > 1.05 * b_ms && c.current.step_ms > c.baseline.step_ms;
    Some(finding(
        super::severity(slower),
        format!(
            "precision changed: {shapes} GEMM shape{} run in {c_type} where {} ran in {b_type} ({:.0}% of the GEMM calls both runs make); their time {b_ms:.2} -> {c_ms:.2} ms per step",
            if shapes == 1 { "" } else { "s" },
            if shapes == 1 { "it" } else { "they" },
            calls / shared_calls * 100.0
        ),
        0.9,
        vec![Evidence::new(
            EvidenceKey::GemmTimeMs,
            c_ms,
            Some(b_ms),
            Unit::Ms,
            format!(
                "time per step on the host in the GEMM calls of the shapes both runs make that changed type, {b_type} -> {c_type} ({calls:.1} calls per step)"
            ),
        )
        .decisive()],
        format!(
            "the GEMMs' element type changed ({b_type} -> {c_type}): check autocast (torch.autocast's dtype and the code it wraps), the model's dtype (model.to(...), .half(), .bfloat16()) and the mixed-precision settings (FSDP's MixedPrecisionPolicy, DeepSpeed's bf16/fp16 sections, Lightning's precision); on GPUs fp32 GEMMs run far below bf16's tensor-core rate unless TF32 is allowed (torch.backends.cuda.matmul.allow_tf32), and CPUs without bf16 units run bf16 slower than fp32{}",
            if slower { "" } else { "; this run does not pay for it" }
        ),
    ))
}
