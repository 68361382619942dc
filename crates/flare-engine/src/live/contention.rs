//! A slowdown of the whole job that its ranks' wait for a CPU explains.
//!
//! The iteration detector sees that every rank got slower from some window on, and says
//! no more: nothing in the job's own ops tells why. The agents also report how long each
//! rank's main thread sat in the kernel's run queue. When that wait grew by at least half
//! of the slowdown, the job's code and devices did not get slower: other work on its
//! hosts took their CPUs (co-located jobs, preprocessing, a runaway process), and the
//! finding says so, with an action about the hosts rather than the job.

use super::LiveWindow;
use crate::stats::median;
use flare_model::{Evidence, EvidenceKey, Finding, FindingKind, Severity, Unit};

/// Share of the slowdown the added CPU wait must cover.
const EXPLAINED: f64 = 0.5;

/// Names CPU contention as the cause of the job-wide slowdowns among `findings` that the
/// ranks' run-queue time explains. `windows`: the series the iteration detector read, in
/// window order.
pub(super) fn explain_slowdowns(findings: &mut [Finding], windows: &[&LiveWindow]) {
    for f in findings
        .iter_mut()
        .filter(|f| f.kind == FindingKind::IterationSlowdown && f.severity >= Severity::Warning)
    {
        let Some(&onset) = f.iterations.first() else {
            continue;
        };
        let (before, after): (Vec<&LiveWindow>, Vec<&LiveWindow>) =
            windows.iter().partition(|w| w.window < u64::from(onset));
        let level = |ws: &[&LiveWindow], of: fn(&LiveWindow) -> Option<f64>| {
            let mut v: Vec<f64> = ws.iter().map(|w| of(w)).collect::<Option<_>>()?;
            (!v.is_empty()).then(|| median(&mut v))
        };
        let (Some(it0), Some(it1), Some(rq0), Some(rq1)) = (
            level(&before, LiveWindow::typical_iteration_ns),
            level(&after, LiveWindow::typical_iteration_ns),
            level(&before, runqueue_per_iteration_ns),
            level(&after, runqueue_per_iteration_ns),
        ) else {
            continue;
        };
        let (slower, waited) = (it1 - it0, rq1 - rq0);
        if slower <= 0.0 || waited < EXPLAINED * slower {
            continue;
        }
        f.summary = format!(
            "{}; its ranks waited for a CPU {:.1} ms more per iteration ({:.0}% of the {:.1} ms slowdown): other work on the job's hosts took their CPUs",
            f.summary,
            waited / 1e6,
            (100.0 * waited / slower).min(100.0),
            slower / 1e6
        );
        f.action = "find what else runs on the job's hosts since the onset (co-located jobs, data preprocessing, a runaway process: top, pidstat -u 5) and move it or pin the job's CPUs; the job's own code and devices are not what got slower".into();
        f.evidence.insert(
            0,
            Evidence::new(
                EvidenceKey::RunqueueMsPerIteration,
                rq1 / 1e6,
                Some(rq0 / 1e6),
                Unit::MsPerIteration,
                "time the ranks' main threads waited in the run queue per iteration (median rank) since the onset; reference: before it".into(),
            ),
        );
    }
}

/// The median rank's run-queue wait per iteration; `None` where no agent reported it.
fn runqueue_per_iteration_ns(w: &LiveWindow) -> Option<f64> {
    let mut v: Vec<f64> = w
        .ranks
        .iter()
        .filter(|r| r.iterations > 0 && r.runqueue_ns.is_finite())
        .map(|r| r.runqueue_ns / f64::from(r.iterations))
        .collect();
    (!v.is_empty()).then(|| median(&mut v))
}
