//! The step's change told as the machine's speed (see `compare::scale`).

use super::{step_evidence, CompareConfig};
use flare_model::{Comparison, Evidence, EvidenceKey, Finding, Severity, Unit};

/// The step's change when it is the whole step scaled (see `compare::scale`): no class
/// is named as its cause. Between two runs it is an `info`, since one run of each cannot
/// tell the machines' speed from the program's; within one run, the machine slowing
/// down mid-job is a warning.
pub(super) fn machine_finding(
    c: &Comparison,
    cfg: &CompareConfig,
    scale: &crate::compare::MachineScale,
    se: f64,
) -> Finding {
    let (before, after) = (c.baseline.step_ms, c.current.step_ms);
    let slower = after > before;
    let mut evidence = step_evidence(c, cfg, se);
    for &(part, b, cur) in &scale.parts {
        evidence.push(
            Evidence::new(
                EvidenceKey::PartTimeMs,
                cur,
                Some(b),
                Unit::Ms,
                format!(
                    "all {} time per step of a rank: {:+.0}% against the step's {:+.0}%",
                    part.as_str(),
                    (cur / b - 1.0) * 100.0,
                    (scale.factor - 1.0) * 100.0
                ),
            )
            .decisive(),
        );
    }
    evidence.push(Evidence::new(
        EvidenceKey::ConcentratedShare,
        scale.concentrated,
        Some(0.5),
        Unit::None,
        "the share of the change that classes of time carry beyond their share of a uniform change (1: all of it in classes that grew alone)".into(),
    ));
    // The program changed too (a new sync per step, other shapes or messages): every op
    // slowing alike is then as likely a setting that adds work to each op as the machine.
    let program: Vec<&str> = c
        .causes
        .iter()
        .filter(|k| k.is_structural())
        .map(|k| k.as_str())
        .collect();
    // Reruns measured the drift between runs of the same code, and the step is past it.
    let rerun = c
        .reruns
        .as_ref()
        .is_some_and(|r| r.step_told(after - before));
    let (severity, action) = match (cfg.within_one_run, slower) {
        (false, true) if rerun => (
            Severity::Warning,
            "every part of the step slowed alike, past the drift between runs of the same code that the reruns measured: the current runs' machines are slower (other loads on their CPUs, CPU or GPU clocks and power limits, other nodes or network) or a setting adds work to every op (autograd anomaly detection, hooks on every module, a profiler, sanitizer or debug build, CUDA_LAUNCH_BLOCKING=1); compare the machines each side ran on (nvidia-smi -q -d PERFORMANCE, lscpu, the nodes' names) before the code".to_string(),
        ),
        (false, true) if !program.is_empty() => (
            Severity::Warning,
            "every part of the step slowed alike, as on a slower machine, but the program changed too (its other findings): a setting that adds work to every op slows the whole step at once (autograd anomaly detection, hooks on every module, a profiler, sanitizer or debug build, CUDA_LAUNCH_BLOCKING=1); look for one among the changes between the runs, and rerun both on the same idle machine to tell the machine's share".to_string(),
        ),
        (true, true) => (
            Severity::Warning,
            "the whole job slowed at once, every part of its step alike: look at its machines at that moment (other processes on the nodes: top, pidstat; CPU and GPU clocks and throttling: nvidia-smi -q -d PERFORMANCE; thermal or power events: dmesg); `flare diagnose` names a rank or node that slowed alone".to_string(),
        ),
        (false, true) => (
            Severity::Info,
            "no part of the program stands out: a change of every part of the step alike is the machine's speed (another load on its CPUs, CPU or GPU clocks and power limits, another node or network) more than the program's, and one run of each cannot tell them apart; run both on the same idle machines, or each several times, before looking for a cause in the code".to_string(),
        ),
        (_, false) => (
            Severity::Info,
            "nothing to fix: every part of the step is faster alike, which is the machine's speed more than the program's".to_string(),
        ),
    };
    crate::compare::causes::finding(
        severity,
        format!(
            "steps {} by {:.1}% ({before:.2} -> {after:.2} ms per step of a rank), every part of the step alike ({}): {}",
            if slower { "slower" } else { "faster" },
            ((after - before) / before).abs() * 100.0,
            scale.parts_text(),
            if program.is_empty() {
                "the machine's speed, not one part of the program".to_string()
            } else {
                format!(
                    "the machine's speed or a change to every op, since the program changed too ({})",
                    program.join(", ")
                )
            }
        ),
        // That the step changed is sure; where the program changed too, that is what
        // this finding tells, ahead of the causes.
        if program.is_empty() {
            (1.0 - scale.concentrated).clamp(0.0, 0.99)
        } else {
            0.95
        },
        evidence,
        action,
    )
}
