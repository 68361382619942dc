//! Where a class changed: the ranks whose ops per iteration of it differ from the same
//! rank's in the baseline, and the ranks the others wait for. A code path that only some
//! ranks take (work on rank 0 alone, a condition on the rank or its data) is averaged away
//! over all ranks, while in a synchronous job each of its steps delays every rank at the
//! next collective; so the change on those ranks is what the comparison weighs, not its
//! mean.

use super::profile::{Profile, RankClassTime, WAITING};
use flare_model::{ChangedOnRanks, RankClassGrowth, TimeClassKind, WaitedFor};
use std::collections::{BTreeMap, BTreeSet};

/// Ops per iteration a rank's count must move by to count as changed: half an op, so a
/// code path taken every other iteration counts.
const MIN_OPS_PER_STEP: f64 = 0.5;

/// A class on one rank in one run: ops per counted iteration, time per step.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
struct OnRank {
    ops: f64,
    ms: f64,
}

/// A class on one rank that both runs have steps on.
#[derive(Clone, Copy, Debug, PartialEq)]
struct RankPair {
    rank: u32,
    baseline: OnRank,
    current: OnRank,
}

impl RankPair {
    fn delta_ms(&self) -> f64 {
        self.current.ms - self.baseline.ms
    }
}

/// Each rank's ops per counted iteration and time per step of `key` in a run, for the
/// ranks it has steps and counted iterations on; zero where a rank ran none.
fn per_rank(p: &Profile, key: &(TimeClassKind, String)) -> BTreeMap<u32, OnRank> {
    let times: BTreeMap<u32, RankClassTime> = p
        .by_rank
        .get(key)
        .into_iter()
        .flatten()
        .map(|t| (t.rank, *t))
        .collect();
    p.rank_steps
        .iter()
        .filter_map(|(&rank, &steps)| {
            let its = p.rank_counted_iterations.get(&rank).copied().unwrap_or(0);
            (steps > 0 && its > 0).then_some((rank, steps as f64, its as f64))
        })
        .map(|(rank, steps, its)| {
            let on = times.get(&rank).map_or(OnRank::default(), |t| OnRank {
                ops: t.count as f64 / its,
                ms: t.ns / steps / 1e6,
            });
            (rank, on)
        })
        .collect()
}

/// Each rank both runs have steps on, with `key` on it in each run.
fn both(baseline: &Profile, current: &Profile, key: &(TimeClassKind, String)) -> Vec<RankPair> {
    let b = per_rank(baseline, key);
    per_rank(current, key)
        .into_iter()
        .filter_map(|(rank, current)| {
            b.get(&rank).map(|&baseline| RankPair {
                rank,
                baseline,
                current,
            })
        })
        .collect()
}

/// The ranks where `key`'s ops per iteration changed, when some but not all of the ranks both
/// runs have did.
pub fn changed_on(
    baseline: &Profile,
    current: &Profile,
    key: &(TimeClassKind, String),
) -> Option<ChangedOnRanks> {
    let ranks = both(baseline, current, key);
    let changed: Vec<&RankPair> = ranks
        .iter()
        .filter(|r| (r.current.ops - r.baseline.ops).abs() >= MIN_OPS_PER_STEP)
        .collect();
    if changed.is_empty() || changed.len() == ranks.len() {
        return None;
    }
    let n = changed.len() as f64;
    let mean = |f: fn(&RankPair) -> f64| changed.iter().map(|r| f(r)).sum::<f64>() / n;
    Some(ChangedOnRanks {
        ranks: changed
            .iter()
            .take(ChangedOnRanks::LISTED)
            .map(|r| r.rank)
            .collect(),
        changed: changed.len() as u32,
        compared: ranks.len() as u32,
        baseline_count: mean(|r| r.baseline.ops),
        current_count: mean(|r| r.current.ops),
        baseline_ms: mean(|r| r.baseline.ms),
        current_ms: mean(|r| r.current.ms),
    })
}

/// A rank is waited for when its own wait grew by at most this share of the most any
/// rank's did: the others arrive and wait for it, while it arrives last.
const WAITED_FOR_SHARE: f64 = 0.25;

/// Classes listed as what grew on the ranks waited for.
const GREW_LISTED: usize = 3;

/// The ranks the others wait for longer than in the baseline, and what grew on them (see
/// [`WaitedFor`]): none when no rank's wait grew, or every rank's did alike.
pub fn waited_for(baseline: &Profile, current: &Profile) -> Option<WaitedFor> {
    let key = (TimeClassKind::Waiting, WAITING.to_string());
    let waits = both(baseline, current, &key);
    let most = waits.iter().map(RankPair::delta_ms).fold(0.0, f64::max);
    if most <= 0.0 {
        return None;
    }
    let (late, others): (Vec<&RankPair>, Vec<&RankPair>) = waits
        .iter()
        .partition(|w| w.delta_ms() <= WAITED_FOR_SHARE * most);
    if late.is_empty() || others.is_empty() {
        return None;
    }
    let mean = |v: &[&RankPair]| v.iter().map(|w| w.delta_ms()).sum::<f64>() / v.len() as f64;
    let late_ranks: BTreeSet<u32> = late.iter().map(|w| w.rank).collect();
    let mut grew: Vec<RankClassGrowth> = baseline
        .by_rank
        .keys()
        .chain(current.by_rank.keys())
        .filter(|k| k.0 != TimeClassKind::Waiting)
        .collect::<BTreeSet<_>>()
        .into_iter()
        .map(|k| {
            let on_late: Vec<f64> = both(baseline, current, k)
                .into_iter()
                .filter(|r| late_ranks.contains(&r.rank))
                .map(|r| r.delta_ms())
                .collect();
            RankClassGrowth {
                kind: k.0,
                class: k.1.clone(),
                delta_ms: on_late.iter().sum::<f64>() / on_late.len().max(1) as f64,
            }
        })
        .filter(|g| g.delta_ms > 0.0)
        .collect();
    grew.sort_by(|x, y| y.delta_ms.total_cmp(&x.delta_ms));
    grew.truncate(GREW_LISTED);
    Some(WaitedFor {
        ranks: late_ranks
            .iter()
            .copied()
            .take(ChangedOnRanks::LISTED)
            .collect(),
        count: late.len() as u32,
        compared: waits.len() as u32,
        others_wait_ms: mean(&others),
        own_wait_ms: mean(&late),
        grew,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A profile of `steps` steps on each of `ranks` ranks, one class with `ops[r]` ops
    /// and `ms[r]` ms per step on rank r.
    fn profile(steps: u64, ops: &[u64], ms: &[f64]) -> Profile {
        let key = (TimeClassKind::Compute, "forward".to_string());
        let mut p = Profile::default();
        let mut times = vec![];
        for (r, (&n, &t)) in ops.iter().zip(ms).enumerate() {
            p.rank_steps.insert(r as u32, steps);
            p.rank_counted_iterations.insert(r as u32, steps);
            if n > 0 {
                times.push(RankClassTime {
                    rank: r as u32,
                    count: n * steps,
                    ns: t * 1e6 * steps as f64,
                });
            }
        }
        p.by_rank.insert(key, times);
        p
    }

    #[test]
    fn the_ranks_a_class_changed_on() {
        let key = (TimeClassKind::Compute, "forward".to_string());
        let base = profile(10, &[1, 1, 1, 1], &[0.8, 0.8, 0.8, 0.8]);
        // (case, current run, the ranks with their ops and ms per step there)
        type Case = (&'static str, Profile, Option<(Vec<u32>, f64, f64)>);
        let cases: [Case; 4] = [
            (
                "one rank runs four more forwards",
                profile(10, &[1, 1, 5, 1], &[0.8, 0.8, 3.2, 0.8]),
                Some((vec![2], 5.0, 3.2)),
            ),
            (
                "every rank runs one more: not a subset",
                profile(10, &[2, 2, 2, 2], &[1.6, 1.6, 1.6, 1.6]),
                None,
            ),
            (
                "slower on one rank, as often: no change of ops",
                profile(10, &[1, 1, 1, 1], &[0.8, 0.8, 4.0, 0.8]),
                None,
            ),
            (
                "two ranks stop running it",
                profile(10, &[0, 1, 1, 0], &[0.0, 0.8, 0.8, 0.0]),
                Some((vec![0, 3], 0.0, 0.0)),
            ),
        ];
        for (name, current, want) in cases {
            let got = changed_on(&base, &current, &key);
            let got = got.map(|g| {
                assert_eq!(g.compared, 4, "{name}");
                assert_eq!(g.baseline_count, 1.0, "{name}");
                (g.ranks, g.current_count, (g.current_ms * 1e3).round() / 1e3)
            });
            assert_eq!(got, want, "{name}");
        }
    }

    /// `profile`, with each rank's wait and dataloader time per step.
    fn waits(wait_ms: &[f64], loader_ms: &[f64]) -> Profile {
        let mut p = profile(10, &vec![1; wait_ms.len()], &vec![1.0; wait_ms.len()]);
        for (name, kind, ms) in [
            (WAITING, TimeClassKind::Waiting, wait_ms),
            ("dataloader", TimeClassKind::Host, loader_ms),
        ] {
            let times = ms
                .iter()
                .enumerate()
                .map(|(r, &t)| RankClassTime {
                    rank: r as u32,
                    count: 0,
                    ns: t * 1e6 * 10.0,
                })
                .collect();
            p.by_rank.insert((kind, name.to_string()), times);
        }
        p
    }

    #[test]
    fn the_ranks_the_others_wait_for_and_what_grew_on_them() {
        let base = waits(&[2.0, 2.0, 2.0, 2.0], &[1.0, 1.0, 1.0, 1.0]);
        // (case, current run, the ranks waited for, the others' wait, what grew most there)
        type Case = (&'static str, Profile, Option<(Vec<u32>, f64, &'static str)>);
        let cases: [Case; 4] = [
            (
                "rank 2's DataLoader 30 ms slower: the others wait for it",
                waits(&[31.0, 30.0, 1.0, 32.0], &[1.0, 1.0, 31.0, 1.0]),
                Some((vec![2], 29.0, "dataloader")),
            ),
            (
                "every rank waits longer alike: no one rank to name",
                waits(&[12.0, 12.0, 11.0, 12.0], &[1.0, 1.0, 1.0, 1.0]),
                None,
            ),
            (
                "nobody waits longer",
                waits(&[2.0, 1.0, 2.0, 2.0], &[5.0, 5.0, 5.0, 5.0]),
                None,
            ),
            (
                "two ranks the others wait for",
                waits(&[22.0, 2.0, 22.0, 3.0], &[1.0, 21.0, 1.0, 21.0]),
                Some((vec![1, 3], 20.0, "dataloader")),
            ),
        ];
        for (name, current, want) in cases {
            let got = waited_for(&base, &current).map(|w| {
                assert_eq!(w.compared, 4, "{name}");
                (
                    w.ranks,
                    w.others_wait_ms,
                    w.grew.first().map_or("", |g| g.class.as_str()).to_string(),
                )
            });
            let want = want.map(|(r, ms, class)| (r, ms, class.to_string()));
            assert_eq!(got, want, "{name}");
        }
    }

    #[test]
    fn ranks_only_one_run_has_are_not_compared() {
        let key = (TimeClassKind::Compute, "forward".to_string());
        let base = profile(10, &[1, 1], &[0.8, 0.8]);
        let current = profile(10, &[1, 1, 5, 5], &[0.8, 0.8, 3.2, 3.2]);
        assert_eq!(changed_on(&base, &current, &key), None);
    }

    #[test]
    fn the_label_names_few_ranks_and_counts_many() {
        let mut c = ChangedOnRanks {
            ranks: vec![2],
            changed: 1,
            compared: 4,
            baseline_count: 1.0,
            current_count: 5.0,
            baseline_ms: 0.8,
            current_ms: 3.2,
        };
        assert_eq!(c.label(), "rank 2");
        c.ranks = vec![0, 4, 9];
        c.changed = 3;
        assert_eq!(c.label(), "ranks 0, 4 and 9");
        c.changed = 40;
        c.compared = 64;
        assert_eq!(c.label(), "40 of 64 ranks (0, 4, 9, ...)");
    }
}
