//! Reruns of the same code beside the compared pair (see [`flare_model::RunToRun`]): each
//! run's mean step and classes' time, their spread about each side's mean pooled into the
//! drift between runs, which a change of time alone must stand past.

use super::profile::{profile, Profile};
use super::windows::profile_windows;
use flare_model::finding::reruns::pooled_sd;
use flare_model::{
    ClassRunToRun, Comparison, RunStep, RunToRun, TimeClassKind, Trace, WindowSummary,
};
use std::collections::BTreeMap;

/// One run's mean step and each class's time per step, ms, as [`super::compare`] reads
/// them.
#[derive(Clone, Debug, PartialEq)]
pub struct RunPoint {
    pub source: String,
    pub step_ms: f64,
    pub classes: BTreeMap<(TimeClassKind, String), f64>,
}

/// A trace's run point.
pub fn trace_point(trace: &Trace, source: &str) -> RunPoint {
    point(&profile(trace), source)
}

/// A live job's windows' run point.
pub fn windows_point(windows: &[&WindowSummary], source: &str) -> RunPoint {
    point(&profile_windows(windows), source)
}

fn point(p: &Profile, source: &str) -> RunPoint {
    RunPoint {
        source: source.to_string(),
        step_ms: super::run_of(p, source).step_ms,
        classes: p
            .classes
            .iter()
            .map(|(key, t)| (key.clone(), super::per_step_ms(p, t.ns)))
            .collect(),
    }
}

/// Adds reruns of the baseline's code and of the current's to `c`: the step's drift between
/// runs of the same code and every class's (its means over each side's runs, the compared
/// pair's included). Nothing without reruns.
pub fn add_reruns(c: &mut Comparison, baseline: &[RunPoint], current: &[RunPoint]) {
    if baseline.is_empty() && current.is_empty() {
        return;
    }
    let compared = |is_current: bool| {
        let run = if is_current { &c.current } else { &c.baseline };
        RunPoint {
            source: run.source.clone(),
            step_ms: run.step_ms,
            classes: c
                .classes
                .iter()
                .map(|r| {
                    let ms = if is_current {
                        r.current_ms
                    } else {
                        r.baseline_ms
                    };
                    ((r.kind, r.class.clone()), ms)
                })
                .collect(),
        }
    };
    let sides = [
        std::iter::once(compared(false))
            .chain(baseline.iter().cloned())
            .collect::<Vec<_>>(),
        std::iter::once(compared(true))
            .chain(current.iter().cloned())
            .collect::<Vec<_>>(),
    ];
    let dof = (sides[0].len() + sides[1].len() - 2) as u32;
    let step = |r: &RunPoint| r.step_ms;
    for row in &mut c.classes {
        let key = (row.kind, row.class.clone());
        let of = |r: &RunPoint| r.classes.get(&key).copied().unwrap_or(0.0);
        let runs = |side: &[RunPoint]| side.iter().map(&of).collect::<Vec<f64>>();
        row.reruns = Some(ClassRunToRun::new(runs(&sides[0]), runs(&sides[1]), dof));
    }
    let steps = |runs: &[RunPoint]| {
        runs.iter()
            .map(|r| RunStep {
                source: r.source.clone(),
                step_ms: r.step_ms,
            })
            .collect()
    };
    c.reruns = Some(RunToRun {
        baseline: steps(&sides[0]),
        current: steps(&sides[1]),
        step_sd_ms: pooled_sd(
            [
                &sides[0].iter().map(step).collect::<Vec<_>>(),
                &sides[1].iter().map(step).collect::<Vec<_>>(),
            ],
            dof,
        ),
        degrees_of_freedom: dof,
        critical_t: crate::stats::student_t_99(dof),
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compare::scale::tests::job_from;
    use crate::compare::{regression_findings, CompareConfig};
    use flare_model::{EvidenceKey, Finding, Severity};

    /// A CPU job's classes, ms per step (see `job_from`): GEMMs first.
    const BASE: [f64; 6] = [11.0, 6.6, 12.3, 0.7, 0.7, 1.6];

    /// The job with its GEMMs `ms` longer.
    fn gemms(ms: f64) -> [f64; 6] {
        let mut t = BASE;
        t[0] += ms;
        t
    }

    /// A run of the job with these classes' times.
    fn point(times: [f64; 6], source: &str) -> RunPoint {
        let c = job_from(times, times);
        RunPoint {
            source: source.into(),
            step_ms: c.baseline.step_ms,
            classes: c
                .classes
                .iter()
                .map(|r| ((r.kind, r.class.clone()), r.baseline_ms))
                .collect(),
        }
    }

    fn points(shifts: &[f64]) -> Vec<RunPoint> {
        shifts
            .iter()
            .map(|&ms| point(gemms(ms), &format!("rerun {ms:+}")))
            .collect()
    }

    fn findings(c: &mut Comparison) -> Vec<Finding> {
        let mut f = regression_findings(c, &CompareConfig::default());
        f.sort_by(Finding::by_importance);
        f
    }

    #[test]
    fn the_drift_is_each_sides_runs_about_their_own_mean_pooled() {
        let mut c = job_from(BASE, gemms(3.0));
        add_reruns(&mut c, &points(&[1.0, -1.0]), &points(&[5.0]));
        let r = c.reruns.as_ref().unwrap();
        // GEMMs of 11, 12 and 10 ms about 11, and 14 and 16 about 15: squares 2 + 2, over
        // 5 runs less 2 sides.
        assert_eq!(r.degrees_of_freedom, 3);
        assert!((r.step_sd_ms - (4.0f64 / 3.0).sqrt()).abs() < 1e-9, "{r:?}");
        assert_eq!(r.critical_t, 4.541);
        let sources: Vec<&str> = r.baseline.iter().map(|s| s.source.as_str()).collect();
        assert_eq!(sources, ["run", "rerun +1", "rerun -1"]);
        assert!((r.mean_change_ms() - 4.0).abs() < 1e-9);
        let class = |name: &str| {
            c.classes
                .iter()
                .find(|r| r.class == name)
                .and_then(|r| r.reruns.clone())
                .unwrap()
        };
        let g = class("AddmmBackward0");
        assert_eq!(g.baseline_ms, [11.0, 12.0, 10.0]);
        assert_eq!(g.current_ms, [14.0, 16.0]);
        assert!((g.sd_ms - r.step_sd_ms).abs() < 1e-9);
        assert!(class("dataloader").sd_ms < 1e-9);
        let mut plain = job_from(BASE, gemms(3.0));
        add_reruns(&mut plain, &[], &[]);
        assert!(plain.reruns.is_none() && plain.classes.iter().all(|r| r.reruns.is_none()));
    }

    #[test]
    fn a_change_of_time_alone_is_told_only_past_the_drift_between_runs() {
        // (what, the baseline's reruns' and the current's (GEMMs' shift, ms), the step
        // finding's confidence or none). The compared pair: GEMMs 3 ms longer, 13 standard
        // errors of each run's own noise.
        type Case<'a> = (&'a str, &'a [f64], &'a [f64], Option<f64>);
        let cases: [Case; 4] = [
            (
                "no reruns: each run's noise alone, less sure",
                &[],
                &[],
                Some(0.8),
            ),
            (
                "runs of the same code 7 ms apart: the 3 ms are their drift",
                &[4.0, -3.0],
                &[],
                None,
            ),
            (
                "runs of the same code within 0.1 ms: past the drift, sure",
                &[0.1, -0.1],
                &[3.05],
                Some(0.99),
            ),
            (
                "one rerun 0.5 ms away: too little to know the drift by",
                &[0.5],
                &[],
                None,
            ),
        ];
        for (what, baseline, current, want) in cases {
            let mut c = job_from(BASE, gemms(3.0));
            add_reruns(&mut c, &points(baseline), &points(current));
            let f = findings(&mut c);
            match want {
                None => assert!(f.is_empty(), "{what}: {f:#?}"),
                Some(confidence) => {
                    assert_eq!(f.len(), 1, "{what}: {f:#?}");
                    assert_eq!(f[0].severity, Severity::Warning, "{what}");
                    assert_eq!(f[0].confidence, confidence, "{what}: {}", f[0].summary);
                    assert!(
                        f[0].summary.contains("AddmmBackward0 +3.00 ms"),
                        "{what}: {}",
                        f[0].summary
                    );
                    let drift = f[0]
                        .evidence
                        .iter()
                        .any(|e| e.metric == EvidenceKey::RunToRunChangeSe);
                    assert_eq!(drift, !baseline.is_empty(), "{what}");
                }
            }
        }
    }

    #[test]
    fn what_runs_differently_is_told_within_the_drift_only_where_its_net_cost_is_past_its_own() {
        // The GEMMs cut into twice as many calls of half the size (a micro-batch split):
        // the old class gone, a new one in its place costing 1.5 ms more; the step 1.5 ms
        // slower, within a drift of 4 ms from run to run. (what, the class that drifts in
        // the reruns (0: the GEMMs, 2: the all-reduce), told)
        let cases = [
            ("the GEMMs drift: their net +1.5 ms is within it", 0, false),
            (
                "the all-reduce drifts: the GEMMs' net is past theirs",
                2,
                true,
            ),
        ];
        for (what, drifting, told) in cases {
            let shifts: Vec<RunPoint> = [4.0, -3.0]
                .into_iter()
                .map(|ms| {
                    let mut t = BASE;
                    t[drifting] += ms;
                    point(t, "rerun")
                })
                .collect();
            let mut c = job_from(BASE, gemms(1.5));
            let mut split = c.classes[0].clone();
            split.class = "AddmmBackward0 (half)".into();
            (split.baseline_ms, split.baseline_count) = (0.0, 0.0);
            split.current_count = 2.0;
            (c.classes[0].current_ms, c.classes[0].current_count) = (0.0, 0.0);
            c.classes.push(split);
            add_reruns(&mut c, &shifts, &[]);
            assert!(!c.reruns.as_ref().unwrap().step_told(1.5), "{what}");
            let f = findings(&mut c);
            let step = f.iter().find(|f| f.summary.starts_with("steps slower"));
            assert_eq!(step.is_some(), told, "{what}: {f:#?}");
        }
    }

    #[test]
    fn within_the_drift_what_the_program_runs_differently_or_a_class_past_its_own_is_told() {
        // GEMMs 3 ms longer, within a 4-ms drift, and the forward run twice per step.
        let mut cur = gemms(3.0);
        cur[1] += 1.0;
        let mut c = job_from(BASE, cur);
        let forward = c
            .classes
            .iter_mut()
            .find(|r| r.class == "DistributedDataParallel.forward")
            .unwrap();
        forward.current_count = 2.0;
        add_reruns(&mut c, &points(&[4.0, -3.0]), &[]);
        let f = findings(&mut c);
        assert_eq!(f.len(), 1, "{f:#?}");
        assert_eq!(f[0].confidence, 0.99);
        assert!(
            f[0].summary.contains("within the drift between runs of the same code")
                && f[0].summary.contains(
                    "compute DistributedDataParallel.forward +1.00 ms (25% of the change), run 2.0 times per step against 1.0"
                ),
            "{}",
            f[0].summary
        );
        // The DataLoader 3 ms slower in a step that drifts by 4 ms from run to run, while
        // in every rerun it took what it took in the baseline: past its own drift.
        let mut cur = BASE;
        cur[4] += 3.0;
        let mut c = job_from(BASE, cur);
        add_reruns(&mut c, &points(&[4.0, -3.0]), &[]);
        let f = findings(&mut c);
        assert_eq!(f.len(), 2, "{f:#?}");
        assert!(
            f[0].summary.contains("within the drift")
                && f[0]
                    .summary
                    .contains("the most of it: host dataloader +3.00 ms"),
            "{}",
            f[0].summary
        );
        assert_eq!(f[0].confidence, 0.99);
        assert!(f[1].summary.starts_with("the DataLoader is slower"));
        // Every part 15% slower, past a drift of 0.1 ms: not a guess about one run's
        // machine any more, a warning that names the machines and settings to compare.
        let slower = BASE.map(|ms| ms * 1.15);
        let mut c = job_from(BASE, slower);
        let tight: Vec<RunPoint> = [0.1, -0.1]
            .into_iter()
            .map(|ms| point(BASE.map(|x| x * (1.0 + ms / 32.9)), "rerun"))
            .collect();
        add_reruns(&mut c, &tight, &[]);
        let f = findings(&mut c);
        assert_eq!(f.len(), 1, "{f:#?}");
        assert_eq!(f[0].severity, Severity::Warning);
        assert!(
            f[0].action
                .contains("compare the machines each side ran on"),
            "{}",
            f[0].action
        );
    }
}
