//! A live job's windows (the node agents' summaries, from the server's history or from
//! `flare agent --out`) as a run to compare. A summary keeps per rank and window each op's
//! count and total time, not the ops themselves, so a rank's step is read from its
//! iteration markers and split as far as the totals allow: compute ops by name,
//! collectives by kind and size, host phases by kind, and the rest of the step as time no
//! traced op covers. A collective's time is split into moving the data (what the rank
//! that spent least in it spent: the last to arrive waits for nobody) and waiting for
//! other ranks (each rank's excess over that).

use super::profile::{size_words, ClassTime, Profile, RankClassTime, WAITING};
use flare_model::{CallSums, HostCallKind, HostCallRate, OpKind, TimeClassKind, WindowSummary};
use std::collections::{BTreeMap, BTreeSet};

/// Host spans that are calls making the host wait for the device, as flare's Python hooks
/// name them: `torch.cuda.synchronize` as `cuda.synchronize`; a device tensor's `.item()`
/// or `.tolist()` as `Tensor.item at train.py(57): step`, with the program's line.
const SYNC_SPANS: &[&str] = &["cuda.synchronize", "Tensor.item", "Tensor.tolist"];

/// A sync span's call and, where its name has one, its site.
fn sync_call(name: &str) -> Option<(&str, Option<&str>)> {
    let (call, site) = match name.split_once(" at ") {
        Some((call, site)) => (call, Some(site)),
        None => (name, None),
    };
    SYNC_SPANS.contains(&call).then_some((call, site))
}

/// The windows' host-device synchronizations per step of a rank, as a trace's host calls
/// are read: each sync call's count and time over the steps of the ranks that made them
/// (`rank_iterations`, the profile's), with the program's lines that made them.
pub fn sync_rates(windows: &[&WindowSummary], rank_iterations: u64) -> Vec<HostCallRate> {
    let mut sums: BTreeMap<&str, (CallSums, BTreeMap<&str, u64>)> = BTreeMap::new();
    let ranks = windows
        .iter()
        .flat_map(|w| w.ranks.iter())
        .filter(|r| !r.iterations.is_empty());
    for o in ranks.flat_map(|r| r.ops.iter()) {
        let Some((call, site)) = sync_call(&o.name).filter(|_| o.kind == OpKind::HostOther) else {
            continue;
        };
        let (s, sites) = sums.entry(call).or_default();
        s.add(CallSums {
            count: o.count,
            ns: i64::try_from(o.total_ns).unwrap_or(i64::MAX),
            ..CallSums::default()
        });
        if let Some(site) = site {
            *sites.entry(site).or_default() += o.count;
        }
    }
    sums.into_iter()
        .map(|(name, (s, sites))| {
            let mut sites: Vec<(String, u64)> =
                sites.into_iter().map(|(k, n)| (k.to_string(), n)).collect();
            sites.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
            super::host_call_rate(
                HostCallKind::Synchronize,
                name,
                None,
                s,
                rank_iterations,
                sites,
            )
        })
        .collect()
}

type Key = (TimeClassKind, String);

/// The windows' profile (see the module); windows of several nodes may be mixed.
pub fn profile_windows(windows: &[&WindowSummary]) -> Profile {
    let mut out = Profile::default();
    let mut ranks: BTreeSet<u32> = BTreeSet::new();
    // One window at a time: its collectives' least time over ranks is their data movement.
    let mut by_window: BTreeMap<u64, Vec<&WindowSummary>> = BTreeMap::new();
    for w in windows {
        by_window.entry(w.window).or_default().push(w);
    }
    let waiting: Key = (TimeClassKind::Waiting, WAITING.into());
    // Each class's ops and time on each rank, over its windows.
    let mut by_rank: BTreeMap<Key, BTreeMap<u32, RankClassTime>> = BTreeMap::new();
    let untraced: Key = (TimeClassKind::Untraced, "untraced time".into());
    for nodes in by_window.values() {
        let rank_summaries: Vec<_> = nodes.iter().flat_map(|w| w.ranks.iter()).collect();
        let mut least: BTreeMap<Key, u64> = BTreeMap::new();
        for r in &rank_summaries {
            for o in r.ops.iter().filter(|o| o.kind.is_sync()) {
                let e = least.entry(key(o)).or_insert(u64::MAX);
                *e = (*e).min(o.total_ns);
            }
        }
        for r in &rank_summaries {
            let its = r.iterations.len() as u64;
            if its == 0 {
                continue;
            }
            ranks.insert(r.rank);
            *out.rank_steps.entry(r.rank).or_default() += its;
            *out.rank_counted_iterations.entry(r.rank).or_default() += its;
            let span: f64 = r.iterations.iter().map(|i| i.duration_ns as f64).sum();
            out.rank_iterations += its;
            out.spans_ns
                .extend(r.iterations.iter().map(|i| i.duration_ns as f64));
            // The window's time per class, put on its iterations.
            let mut times: BTreeMap<Key, (f64, u64, f64, f64)> = BTreeMap::new();
            for o in &r.ops {
                let k = key(o);
                if o.kind.is_sync() {
                    let moving = least.get(&k).copied().unwrap_or(o.total_ns).min(o.total_ns);
                    let e = times.entry(k).or_default();
                    e.0 += moving as f64;
                    e.1 = e.1.saturating_add(o.count);
                    if o.bytes > 0 && moving > 0 {
                        let n = o.group_size.unwrap_or(2);
                        e.2 += o.bytes as f64 * o.kind.bus_factor(n);
                        e.3 += moving as f64;
                    }
                    times.entry(waiting.clone()).or_default().0 += (o.total_ns - moving) as f64;
                } else {
                    let e = times.entry(k).or_default();
                    e.0 += o.total_ns as f64;
                    e.1 = e.1.saturating_add(o.count);
                    if o.flops > 0 {
                        e.2 += o.flops as f64;
                        e.3 += o.total_ns as f64;
                    }
                }
            }
            let traced: f64 = times.values().map(|t| t.0).sum();
            times.entry(untraced.clone()).or_default().0 += (span - traced).max(0.0);
            for (k, (ns, count, amount, amount_ns)) in times {
                let on = by_rank
                    .entry(k.clone())
                    .or_default()
                    .entry(r.rank)
                    .or_insert(RankClassTime {
                        rank: r.rank,
                        count: 0,
                        ns: 0.0,
                    });
                on.count = on.count.saturating_add(count);
                on.ns += ns;
                let t = out.classes.entry(k).or_insert_with(ClassTime::default);
                // Each of the window's iterations carries the window's mean.
                let per_it = ns / its as f64;
                t.ns += ns;
                t.sq_ns += per_it * per_it * its as f64;
                t.count = t.count.saturating_add(count);
                t.amount += amount;
                t.amount_ns += amount_ns;
            }
        }
    }
    out.ranks = ranks.len() as u32;
    out.by_rank = by_rank
        .into_iter()
        .map(|(k, on)| (k, on.into_values().collect()))
        .collect();
    out
}

/// An op's class: compute by name, a collective by kind and mean size, a host phase by
/// kind.
fn key(o: &flare_model::OpStats) -> Key {
    if o.kind.is_sync() {
        let size = o.bytes.checked_div(o.count).unwrap_or(0);
        (
            TimeClassKind::Communication,
            format!("{} {}", o.kind.as_str(), size_words(size)),
        )
    } else if o.kind.is_host() {
        (TimeClassKind::Host, o.kind.as_str().to_string())
    } else {
        (TimeClassKind::Compute, o.name.clone())
    }
}

/// The windows' median iteration time, window by window (with the ranks' median count of
/// iterations in it): the series a persistent change of a live job is found in.
pub fn window_steps(windows: &[&WindowSummary]) -> Vec<(u64, f64, u64)> {
    let mut per: BTreeMap<u64, Vec<(f64, f64)>> = BTreeMap::new();
    for w in windows {
        for r in &w.ranks {
            if !r.iterations.is_empty() {
                let n = r.iterations.len() as f64;
                let mean = r
                    .iterations
                    .iter()
                    .map(|i| i.duration_ns as f64)
                    .sum::<f64>()
                    / n;
                per.entry(w.window).or_default().push((mean, n));
            }
        }
    }
    per.into_iter()
        .map(|(w, v)| {
            let (mut means, mut counts): (Vec<f64>, Vec<f64>) = v.into_iter().unzip();
            let m = crate::stats::median(&mut means);
            (w, m, crate::stats::median(&mut counts) as u64)
        })
        .filter(|(_, m, _)| m.is_finite() && *m > 0.0)
        .collect()
}

#[cfg(test)]
mod tests {
    use crate::compare::{compare_windows, regression_findings, window_onset, CompareConfig};
    use crate::live::tests::job;
    use flare_model::{RegressionCause, TimeClassKind, WindowSummary};

    fn refs(w: &[WindowSummary]) -> Vec<&WindowSummary> {
        w.iter().collect()
    }

    #[test]
    fn a_live_jobs_rank_the_others_wait_for_is_named_with_what_grew_on_it() {
        let base = job(8, |_| 1.0, |_| 0.0);
        // Rank 5 pauses 30 ms more per step in GC; the other seven wait in the all-reduce.
        let slow = job(8, |_| 1.0, |r| if r == 5 { 30.0 } else { 0.0 });
        let mut c = compare_windows(&refs(&base), &refs(&slow), ("a", "b"));
        let w = c.waited_for.clone().expect("a rank waited for");
        assert_eq!((w.ranks.as_slice(), w.compared), ([5].as_slice(), 8));
        assert_eq!(w.grew[0].class, "gc");
        assert!((w.grew[0].delta_ms - 30.0).abs() < 0.5, "{w:?}");
        let f = regression_findings(&mut c, &CompareConfig::default());
        assert!(
            f[0].summary
                .contains("longer for rank 5, where host gc grew +30.0"),
            "{}",
            f[0].summary
        );
    }

    #[test]
    fn a_live_job_against_another_splits_the_step_and_names_the_cause() {
        let base = job(8, |_| 1.0, |_| 0.0);
        // Every rank spends 8 ms more per step in GC.
        let gc = job(8, |_| 1.0, |_| 8.0);
        let mut c = compare_windows(&refs(&base), &refs(&gc), ("a", "b"));
        let sum =
            |f: fn(&flare_model::TimeClassChange) -> f64| c.classes.iter().map(f).sum::<f64>();
        assert!(
            (sum(|r| r.baseline_ms) - c.baseline.step_ms).abs() < 1e-6,
            "{c:#?}"
        );
        assert!(
            (sum(|r| r.current_ms) - c.current.step_ms).abs() < 1e-6,
            "{c:#?}"
        );
        assert_eq!(c.classes[0].class, "gc");
        assert!(
            (c.classes[0].delta_ms() - 8.0).abs() < 0.5,
            "{:?}",
            c.classes[0]
        );
        let f = regression_findings(&mut c, &CompareConfig::default());
        assert!(f[0].summary.contains("steps slower"), "{f:#?}");
        assert_eq!(c.causes, [RegressionCause::GarbageCollection]);

        // One rank computes 30% more: the others wait for it in the all-reduce.
        let slow = job(8, |r| if r == 5 { 1.3 } else { 1.0 }, |_| 0.0);
        let c = compare_windows(&refs(&base), &refs(&slow), ("a", "b"));
        let waiting = c
            .classes
            .iter()
            .find(|r| r.kind == TimeClassKind::Waiting)
            .unwrap();
        assert!(waiting.delta_ms() > 20.0, "{c:#?}");
        // The job against itself: nothing.
        let mut same = compare_windows(&refs(&base), &refs(&base), ("a", "a"));
        assert!(regression_findings(&mut same, &CompareConfig::default()).is_empty());
    }

    /// The tracer's `cuda.synchronize` spans, one per step more in every rank: the live
    /// comparison names the synchronization as a trace's would.
    #[test]
    fn a_sync_added_to_every_step_of_a_live_job_is_named() {
        let with_sync = |mut nodes: Vec<WindowSummary>, ms: u64| {
            for r in nodes.iter_mut().flat_map(|w| w.ranks.iter_mut()) {
                let mut sync = r.ops[2].clone();
                sync.name = "cuda.synchronize".into();
                sync.kind = flare_model::OpKind::HostOther;
                sync.count = r.iterations.len() as u64;
                sync.total_ns = sync.count * ms * 1_000_000;
                r.ops.push(sync);
            }
            nodes
        };
        let base = job(8, |_| 1.0, |_| 0.0);
        // the step waits for the device 6 ms longer: compute no longer overlaps the host
        let synced = with_sync(job(8, |_| 1.06, |_| 0.0), 6);
        let mut c = compare_windows(&refs(&base), &refs(&synced), ("a", "b"));
        regression_findings(&mut c, &CompareConfig::default());
        assert!(
            c.causes.contains(&RegressionCause::DeviceSynchronization),
            "{:?}",
            c.causes
        );
        // the same syncs in both: not a change
        let mut same = compare_windows(
            &refs(&with_sync(base.clone(), 6)),
            &refs(&synced),
            ("a", "b"),
        );
        regression_findings(&mut same, &CompareConfig::default());
        assert!(
            !same
                .causes
                .contains(&RegressionCause::DeviceSynchronization),
            "{:?}",
            same.causes
        );
    }

    /// A device tensor's `.item()` in every step, as the tracer names it (with the
    /// program's line): the synchronization, and where.
    #[test]
    fn a_read_back_added_to_every_step_of_a_live_job_is_named_with_its_line() {
        let base = job(8, |_| 1.0, |_| 0.0);
        let mut synced = job(8, |_| 1.06, |_| 0.0);
        for r in synced.iter_mut().flat_map(|w| w.ranks.iter_mut()) {
            let mut item = r.ops[2].clone();
            item.name = "Tensor.item at train.py(57): step".into();
            item.kind = flare_model::OpKind::HostOther;
            item.count = r.iterations.len() as u64;
            item.total_ns = item.count * 6_000_000;
            r.ops.push(item);
        }
        let mut c = compare_windows(&refs(&base), &refs(&synced), ("a", "b"));
        let f = regression_findings(&mut c, &CompareConfig::default());
        assert!(
            c.causes.contains(&RegressionCause::DeviceSynchronization),
            "{:?}",
            c.causes
        );
        let rate = &c.current.host_calls[0];
        assert_eq!(rate.name, "Tensor.item");
        assert_eq!(rate.sites[0].0, "train.py(57): step");
        assert!(
            f.iter()
                .any(|f| f.summary.contains("Tensor.item") && f.summary.contains("train.py(57)")),
            "{f:#?}"
        );
    }

    #[test]
    fn the_window_a_live_job_slowed_down_in_is_found() {
        // 16 windows of a job whose compute is 20% slower from window `from` on
        let slowed_from = |from: u64| -> Vec<WindowSummary> {
            let mut windows = Vec::new();
            for w in 0..16u64 {
                let mut nodes = job(8, |_| if w >= from { 1.2 } else { 1.0 }, |_| 0.0);
                for n in &mut nodes {
                    n.window = w;
                }
                windows.extend(nodes);
            }
            windows
        };
        let windows = slowed_from(9);
        let c = window_onset(&refs(&windows)).expect("the change");
        assert_eq!((c.before, c.after), ((0, 8), (9, 15)), "{c:?}");
        let steady: Vec<WindowSummary> = windows.iter().filter(|w| w.window < 9).cloned().collect();
        assert!(window_onset(&refs(&steady)).is_none());
        // The last three windows of a longer job: 30 steps at the new level, enough to judge
        // (three iterations of a trace would not be).
        let c = window_onset(&refs(&slowed_from(13))).expect("the late change");
        assert_eq!((c.before, c.after), ((0, 12), (13, 15)), "{c:?}");
    }
}
