//! The GPU waits for the CPU: in a healthy GPU job the host launches kernels ahead of the
//! device, so a kernel waits in the queue between its launch and its start; when the host
//! falls behind (a sync per step, Python overhead, GC, data work in the training process)
//! kernels start as soon as they are launched and the issue-latency distribution shifts
//! towards zero, as in Flare's "bad sync" and "bad gc" CDFs against "best".

use super::finding;
use crate::compare::CompareConfig;
use flare_model::{Comparison, Evidence, EvidenceKey, Finding, LatencyQuantiles, Severity, Unit};

/// Kernels each run needs for its distribution to be read.
const MIN_KERNELS: u64 = 100;

/// The runs' issue latencies when the GPU waits for the CPU in the current run: its median
/// issue latency fell to a quarter or less, below 50 µs, while the step got slower by
/// `cfg.min_change`.
pub(crate) fn waits_for_host<'a>(
    c: &'a Comparison,
    cfg: &CompareConfig,
) -> Option<(&'a LatencyQuantiles, &'a LatencyQuantiles)> {
    let (b, cur) = (
        c.baseline.issue_latency.as_ref()?,
        c.current.issue_latency.as_ref()?,
    );
    let slower = c.current.step_ms > c.baseline.step_ms * (1.0 + cfg.min_change);
    (b.count >= MIN_KERNELS
        && cur.count >= MIN_KERNELS
        && slower
        && cur.p50_us <= b.p50_us / 4.0
        && cur.p50_us <= 50.0)
        .then_some((b, cur))
}

/// The GPU waits for the CPU (see [`waits_for_host`]).
pub fn launch_bound(c: &Comparison, cfg: &CompareConfig) -> Option<Finding> {
    let (b, cur) = waits_for_host(c, cfg)?;
    let (b_sync, c_sync) = (
        super::sync::syncs_per_step(&c.baseline),
        super::sync::syncs_per_step(&c.current),
    );
    let mut evidence = vec![Evidence::new(
        EvidenceKey::IssueLatencyP50Us,
        cur.p50_us,
        Some(b.p50_us),
        Unit::Us,
        format!(
            "GPU kernels' start minus their launch, median over {} kernels against {}: p10/p90/p99 {:.0}/{:.0}/{:.0} us against {:.0}/{:.0}/{:.0}",
            cur.count, b.count, cur.p10_us, cur.p90_us, cur.p99_us, b.p10_us, b.p90_us, b.p99_us
        ),
    )
    .decisive()];
    if c_sync > 0.0 || b_sync > 0.0 {
        evidence.push(Evidence::new(
            EvidenceKey::SyncsPerStep,
            c_sync,
            Some(b_sync),
            Unit::None,
            "host-device synchronization calls per step of a rank (each drains the queue)".into(),
        ));
    }
    Some(finding(
        Severity::Warning,
        format!(
            "the GPU waits for the CPU: kernels start {:.0} us after their launch at the median, against {:.0} us (the host no longer runs ahead); steps {:.2} -> {:.2} ms",
            cur.p50_us, b.p50_us, c.baseline.step_ms, c.current.step_ms
        ),
        0.8,
        evidence,
        "find what the host does between launches in the current run: a device sync per step (.item(), .cpu(), nonzero), Python overhead per kernel (fuse small ops, torch.compile, CUDA graphs), GC pauses, data work in the training process; profile the host side (py-spy, torch.profiler with_stack=True)".into(),
    ))
}
