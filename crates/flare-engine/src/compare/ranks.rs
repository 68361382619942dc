//! Where a class changed: the ranks whose ops per step of it differ from the same rank's
//! in the baseline. A code path that only some ranks take (work on rank 0 alone, a
//! condition on the rank or its data) is averaged away over all ranks, while in a
//! synchronous job each of its steps delays every rank at the next collective; so the
//! change on those ranks is what the comparison weighs, not its mean.

use super::profile::{Profile, RankClassTime};
use flare_model::{ChangedOnRanks, TimeClassKind};
use std::collections::BTreeMap;

/// Ops per step a rank's count must move by to count as changed: half an op, so a code
/// path taken every other step counts and a step boundary that moves one op of a run's
/// ends does not.
const MIN_OPS_PER_STEP: f64 = 0.5;

/// The ranks where `key`'s ops per step changed, when some but not all of the ranks both
/// runs have did.
pub fn changed_on(
    baseline: &Profile,
    current: &Profile,
    key: &(TimeClassKind, String),
) -> Option<ChangedOnRanks> {
    let per_rank = |p: &Profile| -> BTreeMap<u32, RankClassTime> {
        p.by_rank
            .get(key)
            .into_iter()
            .flatten()
            .map(|t| (t.rank, *t))
            .collect()
    };
    let (b, c) = (per_rank(baseline), per_rank(current));
    // (ops per step, ms per step) of a rank in a run; zero where it ran none.
    let on = |times: &BTreeMap<u32, RankClassTime>, rank: u32, steps: u64| {
        let steps = steps.max(1) as f64;
        times
            .get(&rank)
            .map_or((0.0, 0.0), |t| (t.count as f64 / steps, t.ns / steps / 1e6))
    };
    let mut out = ChangedOnRanks {
        ranks: vec![],
        changed: 0,
        compared: 0,
        baseline_count: 0.0,
        current_count: 0.0,
        baseline_ms: 0.0,
        current_ms: 0.0,
    };
    for (&rank, &current_steps) in &current.rank_steps {
        let Some(&baseline_steps) = baseline.rank_steps.get(&rank) else {
            continue;
        };
        if baseline_steps == 0 || current_steps == 0 {
            continue;
        }
        out.compared += 1;
        let (bn, bms) = on(&b, rank, baseline_steps);
        let (cn, cms) = on(&c, rank, current_steps);
        if (cn - bn).abs() < MIN_OPS_PER_STEP {
            continue;
        }
        out.changed += 1;
        if out.ranks.len() < ChangedOnRanks::LISTED {
            out.ranks.push(rank);
        }
        out.baseline_count += bn;
        out.current_count += cn;
        out.baseline_ms += bms;
        out.current_ms += cms;
    }
    if out.changed == 0 || out.changed == out.compared {
        return None;
    }
    let n = f64::from(out.changed);
    out.baseline_count /= n;
    out.current_count /= n;
    out.baseline_ms /= n;
    out.current_ms /= n;
    Some(out)
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
        let cases: [(&str, Profile, Option<(Vec<u32>, f64, f64)>); 4] = [
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
