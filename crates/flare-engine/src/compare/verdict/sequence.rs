//! The `info` on a change of the op sequence, whatever it cost.

use super::CompareConfig;
use flare_model::{short_symbol, Comparison, Evidence, EvidenceKey, Finding, Severity, Unit};

/// The `info` saying the order of ops changed (ops appear, disappear, or run in another
/// order), whatever it cost: a new code path, noticed while it is still cheap.
pub(super) fn sequence_finding(c: &Comparison, cfg: &CompareConfig) -> Option<Finding> {
    let s = c.sequence.as_ref()?;
    let renamed = !s.appeared.is_empty() || !s.disappeared.is_empty();
    if !renamed && s.divergence_bits < cfg.min_divergence_bits {
        return None;
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
