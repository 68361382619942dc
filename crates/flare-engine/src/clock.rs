//! Clock alignment across ranks. Each host stamps its trace with its own clock; ranks on
//! different nodes can be milliseconds apart, which would turn arrival order and transfer
//! times into noise. The members of a collective finish it at (nearly) the same moment, so
//! a rank's offset is the median difference between its end times and the other members'
//! over all the collectives it shares. Offsets propagate through shared communicators
//! (a few Jacobi-style rounds), so ranks that share no collective with a reference are
//! still aligned through intermediaries.

use crate::stats::median;
use flare_model::{Op, RankTrace, Trace};
use std::collections::{BTreeMap, HashMap};

/// What alignment did.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ClockAlignment {
    /// Per rank (trace order): the offset subtracted from its timestamps, ns.
    pub offsets_ns: Vec<(u32, i64)>,
    /// Largest absolute offset applied, ns.
    pub max_abs_offset_ns: i64,
    /// Collective instances the estimate used.
    pub instances_used: usize,
}

/// Estimates per-rank clock offsets from shared collectives' end times and removes them.
/// Ranks with no shared complete collective keep their clock (offset 0).
pub fn align_clocks(trace: &mut Trace) -> ClockAlignment {
    align_ranks(&mut trace.ranks)
}

/// [`align_clocks`] on ranks held without their trace (a chunk of every iteration).
pub fn align_ranks(ranks: &mut [RankTrace]) -> ClockAlignment {
    let mut evidence = ClockEvidence::default();
    evidence.add(ranks);
    let al = evidence.solve(ranks.iter().map(|r| r.rank));
    apply(&al, ranks);
    al
}

/// The collectives' end times that clock offsets are estimated from, gathered chunk by
/// chunk (a trace read an iteration at a time).
#[derive(Default)]
pub struct ClockEvidence {
    /// (comm, seq) -> [(rank index, end)]
    inst: HashMap<(u32, u32), Vec<(usize, i64)>>,
}

impl ClockEvidence {
    /// Adds the complete collectives of `ranks` (a chunk: rank index `i` is the `i`-th
    /// rank of every chunk).
    pub fn add(&mut self, ranks: &[RankTrace]) {
        for (ri, r) in ranks.iter().enumerate() {
            for o in &r.ops {
                if o.kind.is_sync() && o.comm != Op::NO_COMM {
                    if let Some(e) = o.end() {
                        self.inst.entry((o.comm, o.seq)).or_default().push((ri, e));
                    }
                }
            }
        }
    }

    /// The offsets of `ranks` (in chunk order) that fit the evidence best.
    pub fn solve(self, ranks: impl IntoIterator<Item = u32>) -> ClockAlignment {
        let ranks: Vec<u32> = ranks.into_iter().collect();
        let inst = self.inst;
        // Per (communicator, member): its typical end relative to the members' mean end.
        // With constant offsets this is linear in them: offset_r - mean(offsets of members).
        let mut rel: HashMap<(u32, usize), Vec<f64>> = HashMap::new();
        let mut used = 0;
        for (&(comm, _), members) in &inst {
            if members.len() < 2 {
                continue;
            }
            used += 1;
            let mean = members.iter().map(|&(_, e)| e as f64).sum::<f64>() / members.len() as f64;
            for &(ri, e) in members {
                rel.entry((comm, ri)).or_default().push(e as f64 - mean);
            }
        }
        // Ordered, so that the sums below (and the offsets) are the same run to run.
        let mut comms: BTreeMap<u32, Vec<(usize, f64)>> = BTreeMap::new();
        for ((comm, ri), mut v) in rel {
            comms.entry(comm).or_default().push((ri, median(&mut v)));
        }
        for members in comms.values_mut() {
            members.sort_unstable_by_key(|&(ri, _)| ri);
        }
        let n = ranks.len();
        let mut rank_comms: Vec<Vec<u32>> = vec![Vec::new(); n];
        for (&c, members) in &comms {
            for &(ri, _) in members {
                rank_comms[ri].push(c);
            }
        }
        // Jacobi rounds on the small system: offset_r = mean over its comms of
        // (rel_{r,c} + mean offset of c's members).
        let mut offset = vec![0.0f64; n];
        for _round in 0..500 {
            let comm_mean: HashMap<u32, f64> = comms
                .iter()
                .map(|(&c, m)| {
                    (
                        c,
                        m.iter().map(|&(ri, _)| offset[ri]).sum::<f64>() / m.len() as f64,
                    )
                })
                .collect();
            let mut next = offset.clone();
            for (c, members) in &comms {
                for &(ri, r) in members {
                    next[ri] += (r + comm_mean[c] - offset[ri]) / rank_comms[ri].len() as f64;
                }
            }
            let moved = next
                .iter()
                .zip(&offset)
                .map(|(a, b)| (a - b).abs())
                .fold(0.0, f64::max);
            offset = next;
            if moved < 10.0 {
                break;
            }
        }
        // Keep the timeline anchored: the median rank's clock is the reference.
        let mut sorted = offset.clone();
        let anchor = median(&mut sorted);
        let anchor = if anchor.is_finite() { anchor } else { 0.0 };
        let mut out = ClockAlignment {
            instances_used: used,
            ..Default::default()
        };
        for (ri, &rank) in ranks.iter().enumerate() {
            let off = (offset[ri] - anchor).round() as i64;
            out.offsets_ns.push((rank, off));
            out.max_abs_offset_ns = out.max_abs_offset_ns.max(off.abs());
        }
        out
    }
}

/// Removes the offsets of `al` from `ranks` (in the order the offsets were solved for).
pub fn apply(al: &ClockAlignment, ranks: &mut [RankTrace]) {
    for (r, &(rank, off)) in ranks.iter_mut().zip(&al.offsets_ns) {
        debug_assert_eq!(r.rank, rank);
        if off == 0 {
            continue;
        }
        for o in r.ops.iter_mut() {
            o.start_ns -= off;
            if o.end_ns != Op::IN_FLIGHT {
                o.end_ns -= off;
            }
            if o.issue_ns != Op::UNKNOWN {
                o.issue_ns -= off;
            }
        }
        for s in r.iterations.iter_mut() {
            s.start_ns -= off;
            if let Some(e) = s.end_ns.as_mut() {
                *e -= off;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{diagnose, EngineConfig};
    use flare_sim::{fault::FaultKind, simulate, SimConfig};

    #[test]
    fn recovers_injected_skew_and_keeps_the_diagnosis() {
        let mut cfg = SimConfig::for_scale(64);
        cfg.iterations = 6;
        cfg.seed = 61;
        cfg.fault = FaultKind::SlowNic;
        let out = simulate(&cfg).unwrap();
        let mut skewed = out.trace.clone();
        // Each node's clock is off by up to +-5 ms.
        let skew = |rank: u32| ((rank / 8) as i64 * 7_919_113 % 10_000_000) - 5_000_000;
        for r in skewed.ranks.iter_mut() {
            let s = skew(r.rank);
            for o in r.ops.iter_mut() {
                o.start_ns += s;
                if o.end_ns != Op::IN_FLIGHT {
                    o.end_ns += s;
                }
                if o.issue_ns != Op::UNKNOWN {
                    o.issue_ns += s;
                }
            }
            for it in r.iterations.iter_mut() {
                it.start_ns += s;
                it.end_ns = it.end_ns.map(|e| e + s);
            }
        }
        let a = align_clocks(&mut skewed);
        assert!(a.max_abs_offset_ns > 1_000_000);
        // Relative offsets are recovered to within 10 microseconds.
        let base = a.offsets_ns[0].1 - skew(0);
        for &(rank, off) in &a.offsets_ns {
            assert!(
                (off - skew(rank) - base).abs() < 10_000,
                "rank {rank}: {off} vs {}",
                skew(rank)
            );
        }
        let d = diagnose(&skewed, &EngineConfig::default());
        let f = d.localized().next().expect("a finding");
        assert!(out.truth.matches(f.kind, &f.culprits[0]), "{}", f.summary);
    }
}
