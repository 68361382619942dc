//! On a GPU the host pays for every kernel it launches (the Python op, the dispatcher, the
//! launch), while the device time of a small kernel is a few microseconds: a code path
//! that adds hundreds of small kernels per step costs the step the host's time to issue
//! them, which the device's timeline shows as time no op covers. When the GPU waits for
//! the host (its kernels start as soon as they are launched), the kernels the current run
//! added per step are weighed at what their launches can cost.

use super::super::causes::launch::waits_for_host;
use super::CompareConfig;
use flare_model::{Comparison, TimeClassChange, TimeClassKind};

/// The most a kernel launched from Python costs the host, ms: a PyTorch op issued from
/// Python takes 5-30 µs of the host (more under a profiler), so added kernels can explain
/// at most this much each of the time the device waits.
pub const HOST_MS_PER_LAUNCH: f64 = 0.05;

/// The compute classes the current run launches more kernels of per step, with how many
/// more (most first), when its GPU waits for the host; none otherwise (and on CPU runs).
pub fn added<'a>(c: &'a Comparison, cfg: &CompareConfig) -> Vec<(&'a TimeClassChange, f64)> {
    if c.current.cpu_compute || waits_for_host(c, cfg).is_none() {
        return vec![];
    }
    let mut out: Vec<(&'a TimeClassChange, f64)> = c
        .classes
        .iter()
        .filter(|r| r.kind == TimeClassKind::Compute)
        .map(|r| (r, r.current_count - r.baseline_count))
        .filter(|&(_, n)| n >= 1.0)
        .collect();
    out.sort_by(|x, y| y.1.total_cmp(&x.1).then_with(|| x.0.class.cmp(&y.0.class)));
    out
}

/// "elementwise_kernel [add] 0.0 -> 400.0, mul 12.0 -> 412.0": the first three.
pub fn listed(added: &[(&TimeClassChange, f64)]) -> String {
    let mut parts: Vec<String> = added
        .iter()
        .take(3)
        .map(|(r, _)| {
            format!(
                "{} {:.1} -> {:.1}",
                r.short_class(),
                r.baseline_count,
                r.current_count
            )
        })
        .collect();
    if added.len() > 3 {
        parts.push(format!("{} more classes", added.len() - 3));
    }
    parts.join(", ")
}
