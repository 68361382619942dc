//! Activation recomputation: checkpointed blocks whose forward runs again in the backward,
//! counted from the Python frames that recompute them (`torch.utils.checkpoint`,
//! Megatron's and DeepSpeed's), so the time it adds, which shows inside the backward
//! functions, is told by its cause.

use super::structure::calls;
use super::{finding, severity, sites_text};
use crate::compare::CompareConfig;
use flare_model::{
    Comparison, Evidence, EvidenceKey, Finding, HostCallKind, HostCallRate, RunProfile, Unit,
};

/// Recomputes per step, and their time on the host per step (ms).
fn recomputes(run: &RunProfile) -> (f64, f64) {
    calls(run, HostCallKind::Recompute)
        .iter()
        .fold((0.0, 0.0), |(n, ms), h| {
            (n + h.per_step, ms + h.ms_per_step)
        })
}

/// A change of at least one recompute every two steps: checkpointing turned on, off, or
/// over more or fewer blocks.
pub(super) fn activation_recompute(c: &Comparison, _cfg: &CompareConfig) -> Option<Finding> {
    let (before, after) = (recomputes(&c.baseline), recomputes(&c.current));
    if (after.0 - before.0).abs() < 0.5 {
        return None;
    }
    let more = after.0 > before.0;
    let sites: Vec<(String, u64)> = calls(
        if more { &c.current } else { &c.baseline },
        HostCallKind::Recompute,
    )
    .iter()
    .flat_map(|h: &&HostCallRate| h.sites.iter().cloned())
    .collect();
    let from = if sites.is_empty() {
        String::new()
    } else {
        format!(", from {}", sites_text(&sites))
    };
    let evidence = vec![
        Evidence::new(
            EvidenceKey::RecomputesPerStep,
            after.0,
            Some(before.0),
            Unit::None,
            format!(
                "checkpointed blocks run again in the backward per step of a rank, {:.2} -> {:.2} ms per step in them (their forward's ops, which show inside the backward functions' time){from}",
                before.1, after.1
            ),
        )
        .decisive(),
    ];
    Some(finding(
        severity(more),
        format!(
            "activation recomputation: {:.1} checkpointed blocks run their forward again in the backward per step against {:.1} ({:+.2} ms per step in them)",
            after.0,
            before.0,
            after.1 - before.1
        ),
        0.9,
        evidence,
        if more {
            "activation checkpointing is on for more blocks (torch.utils.checkpoint, Megatron's --recompute-granularity, DeepSpeed's activation checkpointing): each checkpointed block's forward runs again in the backward, trading compute for activation memory; where memory allows, checkpoint fewer blocks, or only the attention's core (selective recomputation), and keep it where the memory is needed".to_string()
        } else {
            "activation checkpointing covers fewer blocks: less compute per step, more activation memory; watch the memory's peak".to_string()
        },
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compare::causes::tests::run;

    fn recompute(per_step: f64) -> HostCallRate {
        HostCallRate {
            kind: HostCallKind::Recompute,
            name: "torch/utils/checkpoint.py(1988): recompute_fn".into(),
            dtype: None,
            per_step,
            ms_per_step: per_step * 12.0,
            device_ms_per_step: None,
            tflops: None,
            sites: vec![("train.py(40): step -> Tensor.backward".into(), 48)],
        }
    }

    #[test]
    fn checkpointed_blocks_recomputed_are_counted() {
        // (what, recomputes per step in each run, the finding's severity)
        let cases = [
            ("checkpointing turned on for 4 blocks", 0.0, 4.0, Some(true)),
            ("checkpointing turned off", 4.0, 0.0, Some(false)),
            ("the same blocks checkpointed", 4.0, 4.0, None),
            (
                "one more every four steps: noise of the window",
                4.0,
                4.25,
                None,
            ),
        ];
        for (what, b, cur, slower) in cases {
            let calls = |n: f64| if n > 0.0 { vec![recompute(n)] } else { vec![] };
            let c = Comparison {
                baseline: run(100.0, calls(b)),
                current: run(100.0, calls(cur)),
                classes: vec![],
                sequence: None,
                causes: vec![],
                waited_for: None,
                reruns: None,
            };
            let f = activation_recompute(&c, &CompareConfig::default());
            assert_eq!(
                f.as_ref()
                    .map(|f| f.severity == flare_model::Severity::Warning),
                slower,
                "{what}: {f:?}"
            );
            if let Some(f) = f.filter(|_| slower == Some(true)) {
                assert!(
                    f.summary
                        .starts_with("activation recomputation: 4.0 checkpointed blocks"),
                    "{}",
                    f.summary
                );
                assert!(f.evidence[0].detail.contains("train.py(40)"), "{what}");
            }
        }
    }
}
