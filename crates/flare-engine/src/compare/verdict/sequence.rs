//! The `info` on a change of the op sequence, whatever it cost.

use super::CompareConfig;
use flare_model::{
    short_symbol, ChangedOnRanks, Comparison, Evidence, EvidenceKey, Finding, Severity,
    TimeClassChange, TimeClassKind, Unit,
};

/// The `info` saying the order of ops changed (ops appear, disappear, or run in another
/// order), whatever it cost: a new code path, noticed while it is still cheap. Where the
/// step did not change (`quiet`), also the code paths only some ranks take
/// (`changed_on`), which a mean over every rank hides.
pub(super) fn sequence_finding(
    c: &Comparison,
    cfg: &CompareConfig,
    quiet: bool,
) -> Option<Finding> {
    let on_some: Vec<(&TimeClassChange, &ChangedOnRanks)> = c
        .classes
        .iter()
        .filter(|_| quiet)
        .filter(|r| {
            matches!(
                r.kind,
                TimeClassKind::Compute | TimeClassKind::Communication
            )
        })
        .filter_map(|r| r.changed_on.as_ref().map(|on| (r, on)))
        .take(3)
        .collect();
    let Some(s) = c.sequence.as_ref() else {
        return (!on_some.is_empty()).then(|| ranks_finding(&on_some));
    };
    let renamed = !s.appeared.is_empty() || !s.disappeared.is_empty();
    if !renamed && s.divergence_bits < cfg.min_divergence_bits {
        return (!on_some.is_empty()).then(|| ranks_finding(&on_some));
    }
    // Classes are named with their shapes, the sequence's ops without.
    let cost = |names: &[String]| -> f64 {
        c.classes
            .iter()
            .filter(|r| {
                names
                    .iter()
                    .any(|n| r.class == *n || r.class.starts_with(&format!("{n} [")))
            })
            .map(|r| r.current_ms.max(r.baseline_ms))
            .sum()
    };
    let list = |names: &[String]| -> String {
        let mut shown: Vec<_> = names.iter().take(6).map(|n| short_symbol(n)).collect();
        if names.len() > 6 {
            shown.push("...".into());
        }
        shown.join(", ")
    };
    let mut parts = Vec::new();
    if !s.appeared.is_empty() {
        parts.push(format!(
            "{} op{} appear ({}; {:.2} ms per step)",
            s.appeared.len(),
            if s.appeared.len() == 1 { "" } else { "s" },
            list(&s.appeared),
            cost(&s.appeared)
        ));
    }
    if !s.disappeared.is_empty() {
        parts.push(format!(
            "{} disappear ({})",
            s.disappeared.len(),
            list(&s.disappeared)
        ));
    }
    if parts.is_empty() {
        parts.push("the same ops run in another order".into());
    }
    parts.extend(on_some.iter().map(|&(r, on)| super::words::on_ranks(r, on)));
    let mut evidence = vec![Evidence::new(
        EvidenceKey::SequenceDivergenceBits,
        s.divergence_bits,
        Some(0.0),
        Unit::Bits,
        format!(
            "Jensen-Shannon divergence of the runs' consecutive op pairs (entropy {:.2} bits against {:.2})",
            s.current_entropy_bits, s.baseline_entropy_bits
        ),
    )
    .decisive()];
    if !s.appeared.is_empty() {
        evidence.push(Evidence::new(
            EvidenceKey::OpsAppeared,
            s.appeared.len() as f64,
            Some(0.0),
            Unit::None,
            format!("ops the baseline never ran: {}", list(&s.appeared)),
        ));
    }
    if !s.disappeared.is_empty() {
        evidence.push(Evidence::new(
            EvidenceKey::OpsDisappeared,
            s.disappeared.len() as f64,
            Some(0.0),
            Unit::None,
            format!(
                "ops the current run no longer runs: {}",
                list(&s.disappeared)
            ),
        ));
    }
    Some(crate::compare::causes::finding(
        Severity::Info,
        format!(
            "the op sequence changed ({:.2} bits): {}",
            s.divergence_bits,
            parts.join("; ")
        ),
        s.divergence_bits.max(if renamed { 0.9 } else { 0.0 }).min(0.99),
        evidence,
        "a code path changed between the runs: find what calls the new ops (torch.profiler with with_stack=True, or the diff of the code and its flags); cheap now, it is where a regression that grows starts".into(),
    ))
}

/// The `info` on code paths only some ranks take, while the step did not change.
fn ranks_finding(on_some: &[(&TimeClassChange, &ChangedOnRanks)]) -> Finding {
    let parts: Vec<String> = on_some
        .iter()
        .map(|&(r, on)| super::words::on_ranks(r, on))
        .collect();
    let evidence = on_some
        .iter()
        .enumerate()
        .map(|(i, (r, on))| {
            Evidence::new(
                EvidenceKey::ClassTimeMs,
                on.current_ms,
                Some(on.baseline_ms),
                Unit::Ms,
                format!(
                    "{} per step on {} alone: {:.1} ops against {:.1}; over all ranks {:.1} against {:.1}",
                    r.label(),
                    on.label(),
                    on.current_count,
                    on.baseline_count,
                    r.current_count,
                    r.baseline_count
                ),
            )
            .decisive_if(i == 0)
        })
        .collect();
    crate::compare::causes::finding(
        Severity::Info,
        format!(
            "a code path some ranks alone take: {}; the step did not change beyond the noise",
            parts.join("; ")
        ),
        0.9,
        evidence,
        "those ranks run work the others do not (evaluation, logging or saving on one rank; a condition on the rank or its data): in a synchronous job the others wait for it at the next collective once it outgrows their slack; find what calls it there (torch.profiler with with_stack=True on those ranks)".into(),
    )
}
