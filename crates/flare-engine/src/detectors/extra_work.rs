//! Extra work: ranks that run, iteration after iteration, compute ops beyond those of
//! ranks that otherwise run the same ops (a code path only they take: extra forward
//! passes, evaluation, metrics, logging). Counted, not timed: how many ops a rank runs
//! does not vary with scheduling, so this holds on shared CPUs and noisy machines where a
//! comparison of times cannot tell a few percent of extra work from noise.
//!
//! Which ranks are compared: ranks of the same pipeline stage where a stage has several;
//! on a pipeline of one rank per stage, the stages between the first and the last (which
//! carry the embedding, the loss and the output layer by design); every rank without a
//! pipeline.

use crate::pipeline::Stages;
use crate::stats::{confidence, median};
use crate::{Analysis, Detector, EngineConfig, Outcome};
use flare_model::{
    Component, DetectorId, Evidence, EvidenceKey, Finding, FindingKind, Severity, Unit,
};
use std::collections::HashMap;

#[derive(Clone, Debug)]
pub struct ExtraWorkConfig {
    /// The extra ops' time, at the rank's own speed, over the median iteration: a
    /// warning from this share, an `info` from a fifth of it, nothing below.
    pub min_share: f64,
}

impl Default for ExtraWorkConfig {
    fn default() -> Self {
        ExtraWorkConfig { min_share: 0.02 }
    }
}

/// More distinct op mixes than this and the ranks do not run one program (or the names
/// carry per-rank ids): nothing to compare.
const MAX_MIXES: usize = 256;

/// Culprits listed per finding.
const MAX_CULPRITS: usize = 8;

pub struct ExtraWorkDetector;

impl Detector for ExtraWorkDetector {
    fn id(&self) -> DetectorId {
        DetectorId::ExtraWork
    }
    fn summary(&self) -> &'static str {
        "ranks that run compute ops, every iteration, beyond ranks that otherwise run the same ops"
    }
    fn needs(&self) -> &'static str {
        "compute ops by name on 2 or more ranks, and iteration times"
    }

    fn detect(&self, a: &Analysis, cfg: &EngineConfig) -> Outcome {
        // A live window counts a rank's ops over the window, not per iteration: a rank
        // that finished one more step in it would read as extra work. The live CPU split
        // (`slow_cpu`: more work or the same work slower) covers it there.
        if a.live.is_some() {
            return Outcome::NotApplicable;
        }
        let mixes: Vec<Option<Mix>> = (0..a.n_ranks()).map(|ri| Mix::of(a, ri)).collect();
        if mixes.iter().flatten().count() < 2 {
            return Outcome::NotEnoughData("compute ops on fewer than 2 ranks".into());
        }
        let mut its: Vec<f64> = a
            .iteration_ns
            .iter()
            .flatten()
            .copied()
            .filter(|t| *t > 0.0)
            .collect();
        if its.is_empty() {
            return Outcome::NotEnoughData("no iteration times".into());
        }
        let iteration_ns = median(&mut its);
        // Ranks that may be compared, grouped by what they run.
        let stages = a.ctx.stages.as_ref().map(|s| (s, s.sizes()));
        let mut by_mix: HashMap<(Peers, &[OpCount]), Vec<usize>> = HashMap::new();
        for (ri, m) in mixes.iter().enumerate() {
            if let Some(m) = m {
                let peers = Peers::of(stages.as_ref().map(|(s, n)| (*s, n.as_slice())), ri);
                if peers != Peers::Alone {
                    by_mix.entry((peers, &m.counts)).or_default().push(ri);
                }
            }
        }
        if by_mix.len() > MAX_MIXES {
            return Outcome::NotEnoughData(format!(
                "ranks run {} different mixes of compute ops",
                by_mix.len()
            ));
        }
        let mut groups: Vec<Group> = by_mix
            .into_iter()
            .map(|((peers, counts), ranks)| Group {
                peers,
                ops: counts.iter().map(|c| c.1).sum(),
                counts,
                ranks,
            })
            .collect();
        groups.sort_by(|x, y| x.ranks.cmp(&y.ranks));
        let mut findings = Vec::new();
        for (i, g) in groups.iter().enumerate() {
            // The baseline: the largest group of comparable ranks that outnumber them,
            // whose ops these ranks all run, that is most of their work.
            let base = groups
                .iter()
                .enumerate()
                .filter(|&(j, b)| {
                    j != i
                        && b.peers == g.peers
                        && outnumbered(g.peers, g.ranks.len(), b.ranks.len())
                        && 2 * b.ops >= g.ops
                        && strict_superset(g.counts, b.counts)
                })
                .max_by_key(|(_, b)| (b.ranks.len(), b.ops))
                .map(|(_, b)| b);
            if let Some(f) = base.and_then(|b| finding(a, cfg, &mixes, g, b, iteration_ns)) {
                findings.push(f);
            }
        }
        Outcome::Findings(findings)
    }
}

/// A compute op name's id and how many times a rank runs it per iteration.
type OpCount = (u32, u32);

/// Ranks that may be compared and run the same ops as many times.
struct Group<'m> {
    peers: Peers,
    counts: &'m [OpCount],
    /// Compute ops per iteration.
    ops: u32,
    ranks: Vec<usize>,
}

/// Which ranks a rank may be compared with.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum Peers {
    /// Every rank (no pipeline).
    All,
    /// The ranks of its pipeline stage.
    Stage(u32),
    /// The other single-rank stages between the first and the last.
    Interior,
    /// None: a single-rank first or last stage.
    Alone,
}

impl Peers {
    /// `stages` with their sizes ([`Stages::sizes`]), when the job is a pipeline.
    fn of(stages: Option<(&Stages, &[usize])>, ri: usize) -> Peers {
        match stages {
            None => Peers::All,
            Some((s, sizes)) if sizes[s.of[ri] as usize] >= 2 => Peers::Stage(s.of[ri]),
            Some((s, _)) if s.at_end(ri) => Peers::Alone,
            Some(_) => Peers::Interior,
        }
    }
}

/// What a rank runs per iteration: the median count of each compute op name (by name
/// id, ascending), and its mean time per op, ns.
struct Mix {
    counts: Vec<OpCount>,
    mean_ns: Vec<f64>,
    /// Per name (as `counts`), its count in each iteration the rank ran compute ops in.
    per_iteration: Vec<u32>,
    iterations: usize,
}

impl Mix {
    fn of(a: &Analysis, ri: usize) -> Option<Mix> {
        let its: Vec<usize> = (0..a.n_its())
            .filter(|&i| a.rank(ri, i).compute_ops > 0)
            .collect();
        let n = its.len();
        // Names in order of first appearance (a rank's iterations list them alike), with
        // their counts per iteration name by name: flat, since a job has many ranks.
        let mut names: Vec<(u32, f64, u64)> = Vec::new();
        let mut per_it: Vec<u32> = Vec::new();
        for (k, &i) in its.iter().enumerate() {
            for st in a.digests[i].names_of(ri) {
                let j = match names.iter().position(|x| x.0 == st.name) {
                    Some(j) => j,
                    None => {
                        names.push((st.name, 0.0, 0));
                        per_it.resize(per_it.len() + n, 0);
                        names.len() - 1
                    }
                };
                per_it[j * n + k] += st.count;
                names[j].1 += st.sum_ns;
                names[j].2 += st.count as u64;
            }
        }
        let mut order: Vec<usize> = (0..names.len()).collect();
        order.sort_unstable_by_key(|&j| names[j].0);
        let mut m = Mix {
            counts: Vec::with_capacity(names.len()),
            mean_ns: Vec::with_capacity(names.len()),
            per_iteration: Vec::with_capacity(per_it.len()),
            iterations: n,
        };
        let mut scratch = Vec::with_capacity(n);
        for j in order {
            let row = &per_it[j * n..(j + 1) * n];
            scratch.clear();
            scratch.extend(row.iter().map(|&c| c as f64));
            let count = median(&mut scratch).round() as u32;
            if count == 0 {
                continue;
            }
            let (name, sum_ns, total) = names[j];
            m.counts.push((name, count));
            m.mean_ns.push(sum_ns / total.max(1) as f64);
            m.per_iteration.extend_from_slice(row);
        }
        (!m.counts.is_empty()).then_some(m)
    }

    /// In how many of its iterations it ran more than `base_of` says the baseline runs.
    fn iterations_above(&self, base_of: impl Fn(u32) -> u32) -> usize {
        let n = self.iterations;
        (0..n)
            .filter(|&k| {
                self.counts
                    .iter()
                    .enumerate()
                    .any(|(j, &(name, _))| self.per_iteration[j * n + k] > base_of(name))
            })
            .count()
    }
}

/// Whether `n` ranks running more than `base` others are the odd ones out: fewer than
/// them (where half the ranks run more, that is their role: a pipeline's last stage
/// without a layout to say so), or one interior stage against another.
fn outnumbered(peers: Peers, n: usize, base: usize) -> bool {
    n < base || (peers == Peers::Interior && n == base)
}

/// Whether `big` runs every op of `small` at least as often, and more ops in all.
fn strict_superset(big: &[OpCount], small: &[OpCount]) -> bool {
    let total = |c: &[(u32, u32)]| c.iter().map(|x| x.1 as u64).sum::<u64>();
    total(big) > total(small)
        && small.iter().all(|&(name, n)| {
            big.binary_search_by_key(&name, |x| x.0)
                .is_ok_and(|k| big[k].1 >= n)
        })
}

/// The finding for the ranks of `g` running more than those of `base`, when the extra
/// ops cost enough of an iteration.
fn finding(
    a: &Analysis,
    cfg: &EngineConfig,
    mixes: &[Option<Mix>],
    g: &Group,
    base: &Group,
    iteration_ns: f64,
) -> Option<Finding> {
    let (ranks, base_counts, base_ranks, peers) = (&g.ranks, base.counts, &base.ranks, g.peers);
    let base_of = |name: u32| {
        base_counts
            .binary_search_by_key(&name, |x| x.0)
            .map_or(0, |k| base_counts[k].1)
    };
    // Each rank's extra time per iteration at its own speed, and in how many of its
    // iterations it ran more than the baseline.
    let mut extra_ns = Vec::with_capacity(ranks.len());
    let mut consistent = Vec::with_capacity(ranks.len());
    for &ri in ranks.iter() {
        let m = mixes[ri].as_ref()?;
        let ns: f64 = m
            .counts
            .iter()
            .zip(&m.mean_ns)
            .map(|(&(name, n), t)| (n - base_of(name)) as f64 * t)
            .sum();
        extra_ns.push(ns);
        let more = m.iterations_above(base_of);
        consistent.push(more as f64 / m.iterations.max(1) as f64);
    }
    let ns = median(&mut extra_ns);
    let share = ns / iteration_ns;
    // Counts are exact, so a smaller excess is still real: worth knowing, not a warning.
    if share < cfg.extra_work.min_share / 5.0 {
        return None;
    }
    let severity = if share >= cfg.extra_work.min_share {
        Severity::Warning
    } else {
        Severity::Info
    };
    let consistency = median(&mut consistent);
    let first = mixes[ranks[0]].as_ref()?;
    let mut extra: Vec<(u32, u32)> = first
        .counts
        .iter()
        .map(|&(name, n)| (name, n - base_of(name)))
        .filter(|x| x.1 > 0)
        .collect();
    let extra_ops: u32 = extra.iter().map(|x| x.1).sum();
    let base_ops = base.ops;
    extra.sort_by(|x, y| y.1.cmp(&x.1).then(x.0.cmp(&y.0)));
    let listed: Vec<String> = extra
        .iter()
        .take(4)
        .map(|&(name, n)| format!("{} +{n}", a.ctx.name(name)))
        .collect();
    let ids: Vec<u32> = ranks.iter().map(|&ri| a.rank_id(ri)).collect();
    let base_ids: Vec<u32> = base_ranks.iter().map(|&ri| a.rank_id(ri)).collect();
    let who = rank_words(&ids);
    let whom = rank_words(&base_ids);
    let stage_note = match (peers, a.ctx.stages.as_ref()) {
        (Peers::Interior, Some(s)) => format!(
            " (pipeline stage {} against stage {}; more layers on its stage would look the same)",
            s.of[ranks[0]], s.of[base_ranks[0]]
        ),
        _ => String::new(),
    };
    let action = if peers == Peers::Interior {
        format!("find what {who} computes that {whom} does not (the extra ops are in the evidence): a code path only it takes (extra forward passes, evaluation, metrics or logging on one rank), or, if its stage holds more layers by design, rebalance the pipeline; the hardware is not at fault")
    } else {
        format!("find what {who} computes that {whom} do not (the extra ops are in the evidence): a code path only it takes (extra forward passes, evaluation, metrics or logging on one rank) or more data; the hardware is not at fault")
    };
    Some(Finding {
        kind: FindingKind::ExtraWork,
        severity,
        summary: format!(
            "{who} {} {extra_ops} more compute op{} per iteration than {whom}, whose ops {} too: {:.1} ms per iteration at its own speed ({:.0}% of an iteration){stage_note}",
            if ids.len() == 1 { "runs" } else { "run" },
            if extra_ops == 1 { "" } else { "s" },
            if ids.len() == 1 { "it runs" } else { "they run" },
            ns / 1e6,
            share * 100.0,
        ),
        confidence: consistency * confidence(share, cfg.extra_work.min_share / 2.0),
        culprits: ids
            .iter()
            .take(MAX_CULPRITS)
            .map(|&r| a.ctx.rank_culprit(Component::Process, r))
            .collect(),
        evidence: vec![
            Evidence::new(
                EvidenceKey::ExtraOpsPerIteration,
                extra_ops as f64,
                Some(base_ops as f64),
                Unit::None,
                format!(
                    "compute ops per iteration beyond the {base_ops} of {whom} (median over iterations; more in {:.0}% of them): {}",
                    consistency * 100.0,
                    listed.join(", ")
                ),
            )
            .decisive(),
            Evidence::new(
                EvidenceKey::ExtraWorkMs,
                ns / 1e6,
                None,
                Unit::MsPerIteration,
                format!(
                    "the extra ops' time at its own mean time per op: {:.0}% of the median iteration ({:.1} ms)",
                    share * 100.0,
                    iteration_ns / 1e6
                ),
            )
            .decisive(),
        ],
        action,
        iterations: vec![],
        detector: DetectorId::ExtraWork,
        corroborated_by: vec![],
        failure: None,
    })
}

/// "rank 2", "ranks 0, 1, 3", "ranks 0, 1, 2, 3 and 12 more".
fn rank_words(ids: &[u32]) -> String {
    let shown: Vec<String> = ids.iter().take(4).map(|r| r.to_string()).collect();
    let more = ids.len().saturating_sub(4);
    match (ids.len(), more) {
        (1, _) => format!("rank {}", ids[0]),
        (_, 0) => format!("ranks {}", shown.join(", ")),
        _ => format!("ranks {} and {more} more", shown.join(", ")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn supersets_need_every_op_at_least_as_often_and_more_in_all() {
        let cases: &[(&str, &[OpCount], &[OpCount], bool)] = &[
            (
                "more of one op",
                &[(1, 16), (2, 8)],
                &[(1, 8), (2, 8)],
                true,
            ),
            ("an op the other lacks", &[(1, 8), (3, 4)], &[(1, 8)], true),
            ("the same", &[(1, 8)], &[(1, 8)], false),
            (
                "fewer of one op",
                &[(1, 16), (2, 4)],
                &[(1, 8), (2, 8)],
                false,
            ),
            ("lacks an op", &[(1, 16)], &[(1, 8), (2, 1)], false),
            ("empty baseline", &[(1, 1)], &[], true),
        ];
        for (name, big, small, want) in cases {
            assert_eq!(strict_superset(big, small), *want, "{name}");
        }
    }

    #[test]
    fn who_is_compared_with_whom() {
        let stages = |of: &[u32], depth| Stages {
            of: of.to_vec(),
            depth,
            inferred: true,
        };
        let one_per_stage = stages(&[0, 1, 2, 3], 4);
        let two_per_stage = stages(&[0, 0, 1, 1], 2);
        let cases: &[(&str, Option<&Stages>, usize, Peers)] = &[
            ("no pipeline", None, 3, Peers::All),
            (
                "first of 4 single-rank stages",
                Some(&one_per_stage),
                0,
                Peers::Alone,
            ),
            (
                "last of 4 single-rank stages",
                Some(&one_per_stage),
                3,
                Peers::Alone,
            ),
            (
                "interior single-rank stage",
                Some(&one_per_stage),
                2,
                Peers::Interior,
            ),
            (
                "a stage of 2 ranks",
                Some(&two_per_stage),
                1,
                Peers::Stage(0),
            ),
            (
                "the last stage of 2 ranks",
                Some(&two_per_stage),
                3,
                Peers::Stage(1),
            ),
        ];
        for (name, s, ri, want) in cases {
            let sizes = s.map(Stages::sizes);
            let stages = s.zip(sizes.as_deref());
            assert_eq!(Peers::of(stages, *ri), *want, "{name}");
        }
    }

    #[test]
    fn the_ranks_running_more_are_the_odd_ones_out() {
        let cases: &[(&str, Peers, usize, usize, bool)] = &[
            ("one of four", Peers::All, 1, 3, true),
            ("half the ranks", Peers::All, 4, 4, false),
            ("one of two", Peers::All, 1, 1, false),
            ("one of a stage's replicas", Peers::Stage(1), 1, 7, true),
            (
                "one interior stage against another",
                Peers::Interior,
                1,
                1,
                true,
            ),
            (
                "two interior stages against one",
                Peers::Interior,
                2,
                1,
                false,
            ),
        ];
        for (name, peers, n, base, want) in cases {
            assert_eq!(outnumbered(*peers, *n, *base), *want, "{name}");
        }
    }

    #[test]
    fn rank_lists_read_as_words() {
        let cases: &[(&[u32], &str)] = &[
            (&[2], "rank 2"),
            (&[0, 1, 3], "ranks 0, 1, 3"),
            (&[0, 1, 2, 3, 4, 5], "ranks 0, 1, 2, 3 and 2 more"),
        ];
        for (ids, want) in cases {
            assert_eq!(rank_words(ids), *want);
        }
    }
}
