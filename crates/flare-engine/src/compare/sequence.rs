//! How the order of ops changed between two runs, whatever their time (after DistAD's
//! runtime entropy): each run's distribution of consecutive op pairs on a rank (by op
//! name, in start order), their Jensen-Shannon divergence, and the ops one run runs and
//! the other never does. A new code path shows here even when its ops are cheap. Ops are
//! named without their input shapes.

use flare_model::{SequenceChange, Trace};
use std::collections::{BTreeMap, BTreeSet};

/// An op's name without the input shapes some sources append (`aten::mm [[64,512],...]`):
/// the code path, not the batch's shape (a job with variable sequence lengths changes
/// shapes every step; the classes of time say what shapes cost).
fn code_name(name: &str) -> &str {
    match name.find(" [") {
        Some(i) if name.ends_with(']') => &name[..i],
        _ => name,
    }
}

/// Consecutive op pairs of every rank, by name, and how often.
fn pairs(t: &Trace) -> (BTreeMap<(String, String), u64>, BTreeSet<String>) {
    let mut out: BTreeMap<(String, String), u64> = BTreeMap::new();
    let mut names = BTreeSet::new();
    for r in &t.ranks {
        // A GC pause comes where allocations happen to cross a threshold: not a code path.
        let mut ops: Vec<(i64, u32)> = r
            .ops
            .iter()
            .filter(|o| o.kind != flare_model::OpKind::GarbageCollection)
            .map(|o| (o.start_ns, o.name))
            .collect();
        ops.sort_unstable();
        for w in ops.windows(2) {
            let key = (
                code_name(t.name(w[0].1)).to_string(),
                code_name(t.name(w[1].1)).to_string(),
            );
            *out.entry(key).or_default() += 1;
        }
        names.extend(ops.iter().map(|o| code_name(t.name(o.1)).to_string()));
    }
    (out, names)
}

fn entropy(p: &[f64]) -> f64 {
    p.iter().filter(|&&x| x > 0.0).map(|&x| -x * x.log2()).sum()
}

/// The sequence change of `current` against `baseline`; `None` when either run has fewer
/// than two ops on every rank.
pub fn sequence_change(baseline: &Trace, current: &Trace) -> Option<SequenceChange> {
    let (b, b_names) = pairs(baseline);
    let (c, c_names) = pairs(current);
    let (nb, nc) = (b.values().sum::<u64>(), c.values().sum::<u64>());
    if nb == 0 || nc == 0 {
        return None;
    }
    let keys: BTreeSet<&(String, String)> = b.keys().chain(c.keys()).collect();
    let (mut pb, mut pc, mut pm) = (Vec::new(), Vec::new(), Vec::new());
    for k in keys {
        let x = b.get(k).copied().unwrap_or(0) as f64 / nb as f64;
        let y = c.get(k).copied().unwrap_or(0) as f64 / nc as f64;
        pb.push(x);
        pc.push(y);
        pm.push((x + y) / 2.0);
    }
    // JS(P, Q) = H(M) - (H(P) + H(Q)) / 2, in [0, 1] bits.
    let (hb, hc) = (entropy(&pb), entropy(&pc));
    let divergence = (entropy(&pm) - (hb + hc) / 2.0).clamp(0.0, 1.0);
    Some(SequenceChange {
        divergence_bits: divergence,
        baseline_entropy_bits: hb,
        current_entropy_bits: hc,
        appeared: c_names.difference(&b_names).cloned().collect(),
        disappeared: b_names.difference(&c_names).cloned().collect(),
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn shapes_are_not_part_of_the_code_path() {
        assert_eq!(
            super::code_name("aten::mm [[64,512],[512,512]]"),
            "aten::mm"
        );
        assert_eq!(super::code_name("gemm"), "gemm");
        assert_eq!(super::code_name("nccl:all_reduce [x"), "nccl:all_reduce [x");
    }
}
