//! Two runs of a job compared (`flare compare`): each rank's steps split into classes of
//! time that partition them (compute by op name, communication by kind and size, waiting
//! for other ranks, host phases, time no traced op covers), averaged per step of a rank,
//! so that the classes' changes add up to the change of the step; then what the largest
//! changes say and the causes their evidence names, as findings of kind `regression`.
//! Traces are read op by op (`profile`); a live job's window summaries by their totals
//! (`windows`).

mod causes;
mod profile;
mod ranks;
mod reruns;
mod scale;
mod sequence;
mod verdict;
mod windows;

pub use profile::profile;
pub use reruns::{add_reruns, trace_point, windows_point, RunPoint};
pub use scale::{machine_scale, MachineScale};
pub use sequence::sequence_change;
pub use verdict::{regression_findings, CompareConfig};

use flare_model::{
    CallSums, Comparison, HostCallKind, HostCallRate, LatencyQuantiles, OpKind, RunProfile,
    TimeClassChange, Trace, WindowSummary,
};
use std::collections::BTreeMap;

/// `current` against `baseline`, classes most changed first. `sources` name the inputs.
pub fn compare(baseline: &Trace, current: &Trace, sources: (&str, &str)) -> Comparison {
    let (b, c) = (profile(baseline), profile(current));
    let run = |p: &profile::Profile, t: &Trace, source: &str| RunProfile {
        cpu_compute: t.meta.cpu_compute,
        host_calls: host_call_rates(t, p.iterations_with_ops),
        gc_sites: gc_sites(t),
        gc_longest_ms: longest_gc_ms(t.ranks.iter().flat_map(|r| r.ops.iter()).filter_map(|o| {
            o.end()
                .filter(|_| o.kind == OpKind::GarbageCollection)
                .map(|e| e - o.start_ns)
        })),
        issue_latency: (p.issue_latency.count() > 0).then(|| LatencyQuantiles {
            count: p.issue_latency.count(),
            p10_us: p.issue_latency.quantile_us(0.1),
            p50_us: p.issue_latency.quantile_us(0.5),
            p90_us: p.issue_latency.quantile_us(0.9),
            p99_us: p.issue_latency.quantile_us(0.99),
            cdf_us: LatencyQuantiles::cdf_probabilities()
                .into_iter()
                .map(|q| p.issue_latency.quantile_us(q))
                .collect(),
        }),
        ..run_of(p, source)
    };
    let runs = (run(&b, baseline, sources.0), run(&c, current, sources.1));
    let mut out = compare_profiles(&b, &c, runs);
    out.sequence = sequence_change(baseline, current);
    out
}

/// What a run's profile says of its steps, with nothing read from elsewhere.
fn run_of(p: &profile::Profile, source: &str) -> RunProfile {
    let (median, robust_sd) = p.span_median_and_robust_sd_ns();
    RunProfile {
        source: source.to_string(),
        ranks: p.ranks,
        rank_iterations: p.rank_iterations,
        step_ms: p.span_ns() / p.rank_iterations.max(1) as f64 / 1e6,
        step_sd_ms: p.span_sd_ns() / 1e6,
        step_median_ms: median / 1e6,
        step_robust_sd_ms: robust_sd / 1e6,
        cpu_compute: false,
        host_calls: vec![],
        gc_sites: vec![],
        gc_longest_ms: None,
        issue_latency: None,
    }
}

/// The longest of GC pauses' durations (ns), ms; `None` without any.
fn longest_gc_ms(pauses: impl Iterator<Item = i64>) -> Option<f64> {
    pauses.max().filter(|&ns| ns > 0).map(|ns| ns as f64 / 1e6)
}

/// Two profiles' classes side by side, most changed first.
fn compare_profiles(
    b: &profile::Profile,
    c: &profile::Profile,
    runs: (RunProfile, RunProfile),
) -> Comparison {
    let mut rows: BTreeMap<(flare_model::TimeClassKind, String), TimeClassChange> = BTreeMap::new();
    for (p, is_current) in [(b, false), (c, true)] {
        for (key, t) in &p.classes {
            let row = rows.entry(key.clone()).or_insert_with(|| TimeClassChange {
                kind: key.0,
                class: key.1.clone(),
                baseline_ms: 0.0,
                current_ms: 0.0,
                baseline_sd_ms: 0.0,
                current_sd_ms: 0.0,
                baseline_algorithms: vec![],
                current_algorithms: vec![],
                baseline_count: 0.0,
                current_count: 0.0,
                baseline_rate: None,
                current_rate: None,
                changed_on: None,
                reruns: None,
            });
            let per_step = |x: f64| x / p.rank_iterations.max(1) as f64;
            let side = (
                per_step_ms(p, t.ns),
                t.sd_ns(p.rank_iterations) / 1e6,
                p.algorithms
                    .get(key)
                    .into_iter()
                    .flatten()
                    .cloned()
                    .collect(),
                per_step(t.count as f64),
                t.rate(key.0),
            );
            if is_current {
                (
                    row.current_ms,
                    row.current_sd_ms,
                    row.current_algorithms,
                    row.current_count,
                    row.current_rate,
                ) = side;
            } else {
                (
                    row.baseline_ms,
                    row.baseline_sd_ms,
                    row.baseline_algorithms,
                    row.baseline_count,
                    row.baseline_rate,
                ) = side;
            }
        }
    }
    for (key, row) in rows.iter_mut() {
        row.changed_on = ranks::changed_on(b, c, key);
    }
    let mut classes: Vec<TimeClassChange> = rows.into_values().collect();
    classes.sort_by(|x, y| {
        y.delta_ms()
            .abs()
            .total_cmp(&x.delta_ms().abs())
            .then_with(|| x.class.cmp(&y.class))
    });
    Comparison {
        baseline: runs.0,
        current: runs.1,
        classes,
        sequence: None,
        causes: vec![],
        waited_for: ranks::waited_for(b, c),
        reruns: None,
    }
}

/// A class's time over a profile's steps, ms per step of a rank.
fn per_step_ms(p: &profile::Profile, ns: f64) -> f64 {
    ns / p.rank_iterations.max(1) as f64 / 1e6
}

/// The trace's host calls per iteration of a rank (`iterations`: the (rank, iteration)
/// pairs they were counted over), by kind, name and type.
fn host_call_rates(t: &Trace, iterations: u64) -> Vec<HostCallRate> {
    let mut sums: BTreeMap<(HostCallKind, &str, Option<&str>), CallSums> = BTreeMap::new();
    for c in &t.meta.host_calls.counts {
        sums.entry((c.kind, c.name.as_str(), c.dtype.as_deref()))
            .or_default()
            .add(c.sums());
    }
    sums.into_iter()
        .map(|((kind, name, dtype), s)| {
            let sites = t.meta.host_calls.sites_of(name).to_vec();
            host_call_rate(kind, name, dtype, s, iterations, sites)
        })
        .collect()
}

/// Calls of one name per step of a rank, from their sums over `iterations` steps.
fn host_call_rate(
    kind: HostCallKind,
    name: &str,
    dtype: Option<&str>,
    s: CallSums,
    iterations: u64,
    sites: Vec<(String, u64)>,
) -> HostCallRate {
    let n = iterations.max(1) as f64;
    let on_device = s.device_ns > 0;
    HostCallRate {
        kind,
        name: name.to_string(),
        dtype: dtype.map(str::to_string),
        per_step: s.count as f64 / n,
        ms_per_step: s.ns as f64 / 1e6 / n,
        device_ms_per_step: on_device.then(|| s.device_ns as f64 / 1e6 / n),
        tflops: (on_device && s.flops > 0)
            .then(|| s.flops as f64 / (s.device_ns as f64 / 1e9) / 1e12),
        sites,
    }
}

/// Where the trace's GC pauses happened (the sites of its GC ops' names), most first.
fn gc_sites(t: &Trace) -> Vec<(String, u64)> {
    let mut names: Vec<u32> = t
        .ranks
        .iter()
        .flat_map(|r| r.ops.iter())
        .filter(|o| o.kind == OpKind::GarbageCollection)
        .map(|o| o.name)
        .collect();
    names.sort_unstable();
    names.dedup();
    let mut sites: BTreeMap<&str, u64> = BTreeMap::new();
    for n in names {
        for (site, k) in t.meta.host_calls.sites_of(t.name(n)) {
            *sites.entry(site.as_str()).or_default() += k;
        }
    }
    let mut out: Vec<(String, u64)> = sites.into_iter().map(|(s, k)| (s.to_string(), k)).collect();
    out.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    out
}

/// A persistent change of a series of steps: the first and last points of the level
/// before it and of the new level, and the change point (its `before`, the old level's
/// median).
#[derive(Clone, Debug, PartialEq)]
pub struct LevelChange<T> {
    pub before: (T, T),
    pub after: (T, T),
    pub change: crate::changepoint::ChangePoint,
}

impl LevelChange<usize> {
    /// The same change, its points named by `f` (iterations, windows).
    fn map<U>(self, f: impl Fn(usize) -> U) -> LevelChange<U> {
        LevelChange {
            before: (f(self.before.0), f(self.before.1)),
            after: (f(self.after.0), f(self.after.1)),
            change: self.change,
        }
    }
}

/// Where a persistent change of the step began within one run, and the level before it
/// (the engine's Bayesian detector on the series of steps, each the median over ranks of
/// their step, cut as a comparison cuts it); see [`change_in`] for which change.
pub fn onset(trace: &Trace) -> Option<LevelChange<u32>> {
    let mut spans: BTreeMap<u32, Vec<f64>> = BTreeMap::new();
    for steps in profile::rank_steps(trace) {
        for (it, start, end) in steps {
            spans.entry(it).or_default().push((end - start) as f64);
        }
    }
    let (its, series): (Vec<u32>, Vec<f64>) = spans
        .into_iter()
        .map(|(it, mut v)| (it, crate::stats::median(&mut v)))
        .filter(|(_, m)| m.is_finite() && *m > 0.0)
        .unzip();
    change_in(&series, |_| 1).map(|c| c.map(|i| its[i]))
}

/// The persistent change of a series to explain: the largest slowdown, else the largest
/// speed-up (a user asks why a job got slower; a faster level is told only when nothing
/// got slower). A level holds at least as many steps as a comparison needs to judge a
/// run (`CompareConfig::min_steps`; `steps(i)` the steps point `i` holds: one, or a live
/// job's window's) over the points the detector needs; a spike or a shorter stretch is an
/// excursion, left out of both sides: a change is judged against the level before it, so
/// a level back where it was after a blip is no change, and a few odd steps before an
/// onset are not its baseline.
fn change_in(series: &[f64], steps: impl Fn(usize) -> u64) -> Option<LevelChange<usize>> {
    let cfg = crate::changepoint::ChangeConfig::default();
    let level_holds = |from: usize, to: usize| {
        to - from >= cfg.min_before
            && (from..to).map(&steps).sum::<u64>() >= CompareConfig::default().min_steps
    };
    let points = crate::changepoint::change_points_within_levels(series, &cfg);
    let mut changes: Vec<LevelChange<usize>> = Vec::new();
    // where the level in force began, and where it ended (the next change or excursion)
    let mut level = (0usize, series.len());
    for c in &points {
        level.1 = level.1.min(c.index);
        if c.spike || !level_holds(c.index, c.index + c.len) {
            continue;
        }
        let last = (c.index + c.len - 1).min(series.len() - 1);
        let before = &series[level.0..level.1];
        let old = crate::stats::median(&mut before.to_vec());
        let change = crate::changepoint::ChangePoint {
            before: old,
            ..c.clone()
        };
        let moved = (change.ratio() - 1.0).abs() >= cfg.min_shift;
        if moved && level_holds(level.0, level.1) {
            changes.push(LevelChange {
                before: (level.0, level.1 - 1),
                after: (c.index, last),
                change,
            });
        }
        // it ends where the next point begins (set as that point is read)
        level = (c.index, series.len());
    }
    let slower = |c: &&LevelChange<usize>| c.change.ratio() > 1.0;
    let largest = |x: &&LevelChange<usize>, y: &&LevelChange<usize>| {
        (x.change.ratio() - 1.0)
            .abs()
            .total_cmp(&(y.change.ratio() - 1.0).abs())
    };
    changes
        .iter()
        .filter(slower)
        .max_by(largest)
        .or_else(|| changes.iter().max_by(largest))
        .cloned()
}

/// A live job's windows against another's (or its own earlier ones), as [`compare`] does
/// for traces (see [`windows`] for what summaries allow).
pub fn compare_windows(
    baseline: &[&WindowSummary],
    current: &[&WindowSummary],
    sources: (&str, &str),
) -> Comparison {
    let (b, c) = (
        windows::profile_windows(baseline),
        windows::profile_windows(current),
    );
    // the summaries keep the tracer's sync spans: the host calls a live job has
    let run = |p: &profile::Profile, w: &[&WindowSummary], source: &str| RunProfile {
        host_calls: windows::sync_rates(w, p.rank_iterations),
        gc_longest_ms: longest_gc_ms(
            w.iter()
                .flat_map(|w| w.ranks.iter())
                .flat_map(|r| r.ops.iter())
                .filter(|o| o.kind == OpKind::GarbageCollection)
                .map(|o| i64::try_from(o.max_ns).unwrap_or(i64::MAX)),
        ),
        ..run_of(p, source)
    };
    let runs = (run(&b, baseline, sources.0), run(&c, current, sources.1));
    compare_profiles(&b, &c, runs)
}

/// Where a persistent change of a live job's step began, and the level before it, as
/// [`onset`] finds it over each window's median iteration time.
pub fn window_onset(windows: &[&WindowSummary]) -> Option<LevelChange<u64>> {
    let steps = windows::window_steps(windows);
    let series: Vec<f64> = steps.iter().map(|s| s.1).collect();
    change_in(&series, |i| steps[i].2).map(|c| c.map(|i| steps[i].0))
}

#[cfg(test)]
mod tests;
