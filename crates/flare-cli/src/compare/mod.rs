//! `flare compare BASELINE CURRENT`: why one run's steps are slower (or faster) than
//! another's, class of time by class, the classes' changes adding up to the step's.
//! `flare compare RUN`: the same, for one run's iterations before and after a persistent
//! change of its step. Live jobs (a server's history, or `flare agent --out` summaries)
//! compare window by window the same way.

use anyhow::{Context, Result};
use clap::Args;
use flare_engine::compare::{
    add_reruns, compare, compare_windows, onset, regression_findings, trace_point, window_onset,
    windows_point, CompareConfig, LevelChange, RunPoint,
};
use flare_model::{Comparison, FindingsDocument, JobSummary, Trace, WindowSummary};
use source::Run;
use std::path::PathBuf;
use std::process::ExitCode;

pub(crate) mod source;

#[derive(Args)]
pub struct CompareArgs {
    /// The run to compare against: a .flare file, a directory of per-rank Kineto traces,
    /// a directory of `flare agent --out` summaries, or a live job on a Flare server
    /// (`http://HOST:PORT/jobs/JOB[?from=A&to=B]`, token in FLARE_TOKEN). Alone, the run
    /// to look into: where a persistent change of its step began, and its iterations (or
    /// windows) before against after.
    pub baseline: String,
    /// The run to explain (of the same kind as the baseline).
    pub current: Option<String>,
    /// Another run of the baseline's code (repeatable). With reruns of either side, a
    /// change of time alone is also judged against how much runs of the same code differ
    /// (other machines, their load and clocks), which one run of each cannot measure.
    #[arg(long = "baseline-rerun", value_name = "RUN")]
    pub baseline_reruns: Vec<String>,
    /// Another run of the current's code (repeatable; see --baseline-rerun).
    #[arg(long = "current-rerun", value_name = "RUN")]
    pub current_reruns: Vec<String>,
    /// Print the findings document (with its `comparison`) as JSON.
    #[arg(long)]
    pub json: bool,
    /// Classes of time listed in the text output.
    #[arg(long, default_value_t = 12)]
    pub top: usize,
    /// Also write a self-contained HTML report here (waterfall, findings, classes, host).
    #[arg(long)]
    pub report: Option<PathBuf>,
}

pub fn run(a: CompareArgs) -> Result<ExitCode> {
    let compared = match &a.current {
        Some(current) => {
            let (mut c, job, windows) = two_runs(&a.baseline, current)?;
            let points = |reruns: &[String]| -> Result<Vec<RunPoint>> {
                reruns.iter().map(|r| rerun_point(r, windows)).collect()
            };
            add_reruns(
                &mut c,
                &points(&a.baseline_reruns)?,
                &points(&a.current_reruns)?,
            );
            (c, job)
        }
        None if !(a.baseline_reruns.is_empty() && a.current_reruns.is_empty()) => {
            anyhow::bail!(
                "--baseline-rerun and --current-rerun need two runs to compare (BASELINE CURRENT); alone, {} is split where its step changed",
                a.baseline
            )
        }
        None => match one_run(&a.baseline)? {
            Some(c) => c,
            None => return Ok(ExitCode::SUCCESS),
        },
    };
    let (mut comparison, job) = compared;
    let sources = (
        comparison.baseline.source.clone(),
        comparison.current.source.clone(),
    );
    if comparison.baseline.rank_iterations == 0 || comparison.current.rank_iterations == 0 {
        anyhow::bail!(
            "{}: no op with a duration in any iteration; nothing to compare",
            if comparison.baseline.rank_iterations == 0 {
                &sources.0
            } else {
                &sources.1
            }
        );
    }
    let cfg = CompareConfig {
        within_one_run: a.current.is_none(),
        ..CompareConfig::default()
    };
    let findings = regression_findings(&mut comparison, &cfg);
    let mut doc = FindingsDocument::new(job, findings, true);
    doc.comparison = Some(comparison);
    if let Some(report) = &a.report {
        let title = format!("Flare comparison: {} against {}", sources.1, sources.0);
        std::fs::write(report, flare_report::render_comparison_html(&doc, &title))
            .with_context(|| format!("writing {}", report.display()))?;
        eprintln!("wrote {}", report.display());
    }
    if a.json {
        println!("{}", doc.to_json());
    } else {
        print!("{}", text(&doc, a.top));
    }
    Ok(ExitCode::SUCCESS)
}

/// A rerun's mean step and classes, read as the compared runs are (`windows`: a live
/// job's window summaries, else traces).
fn rerun_point(source: &str, windows: bool) -> Result<RunPoint> {
    let kind = if windows {
        "a live job's summaries"
    } else {
        "a trace"
    };
    let other_kind = || {
        anyhow::anyhow!(
            "{source}: a rerun must be of the kind the compared runs are ({kind}); compare traces with traces and live jobs with live jobs"
        )
    };
    // (a server's address is a live job's: said before it is fetched)
    if !windows && (source.starts_with("http://") || source.starts_with("https://")) {
        return Err(other_kind());
    }
    let point = match (source::read(source)?, windows) {
        (Run::Trace(t), false) => trace_point(&t, source),
        (Run::Windows(w), true) => windows_point(&refs(&w), source),
        _ => return Err(other_kind()),
    };
    if point.step_ms > 0.0 {
        Ok(point)
    } else {
        anyhow::bail!("{source}: no op with a duration in any iteration; no step to compare")
    }
}

/// The current run against the baseline, the job it is, and whether they are a live
/// job's window summaries (else traces).
fn two_runs(baseline: &str, current: &str) -> Result<(Comparison, JobSummary, bool)> {
    let sources = (baseline, current);
    Ok(match (source::read(baseline)?, source::read(current)?) {
        (Run::Trace(b), Run::Trace(c)) => (compare(&b, &c, sources), trace_job(&c), false),
        (Run::Windows(b), Run::Windows(c)) => (
            compare_windows(&refs(&b), &refs(&c), sources),
            windows_job(&c),
            true,
        ),
        _ => anyhow::bail!(
            "{baseline} and {current}: one is a trace and the other a live job's summaries; compare traces with traces and live jobs with live jobs"
        ),
    })
}

/// One run's iterations (or a live job's windows) before and after a persistent change
/// of its step; `None` (said on stdout) when there is none.
fn one_run(source: &str) -> Result<Option<(Comparison, JobSummary)>> {
    match source::read(source)? {
        Run::Trace(t) => {
            let Some(change) = onset(&t) else {
                println!(
                    "{source}: no persistent change of the step in its {} iterations; nothing to compare",
                    t.iterations_with_ops().len()
                );
                return Ok(None);
            };
            let w = |(a, b)| flare_model::Window {
                first_iteration: a,
                last_iteration: b,
            };
            let names = said("iteration", "iterations", source, &change);
            let c = compare(
                &t.window(w(change.before)),
                &t.window(w(change.after)),
                (&names.0, &names.1),
            );
            Ok(Some((c, trace_job(&t))))
        }
        Run::Windows(all) => {
            let windows = refs(&all);
            let Some(change) = window_onset(&windows) else {
                println!(
                    "{source}: no persistent change of the step in its windows; nothing to compare"
                );
                return Ok(None);
            };
            let pick = |(a, b): (u64, u64)| -> Vec<&WindowSummary> {
                windows
                    .iter()
                    .copied()
                    .filter(|w| (a..=b).contains(&w.window))
                    .collect()
            };
            let names = said("window", "windows", source, &change);
            let c = compare_windows(
                &pick(change.before),
                &pick(change.after),
                (&names.0, &names.1),
            );
            Ok(Some((c, windows_job(&all))))
        }
    }
}

/// Says on stderr where the step changed, and names the two ranges compared.
fn said<T: std::fmt::Display>(
    one: &str,
    many: &str,
    source: &str,
    c: &LevelChange<T>,
) -> (String, String) {
    let cp = &c.change;
    eprintln!(
        "the step went from {:.2} to {:.2} ms at {one} {} (probability {:.2}): {many} {}..{} against {}..{}",
        cp.before / 1e6,
        cp.after / 1e6,
        c.after.0,
        cp.probability,
        c.before.0,
        c.before.1,
        c.after.0,
        c.after.1
    );
    (
        format!("{source} {many} {}..{}", c.before.0, c.before.1),
        format!("{source} {many} {}..{}", c.after.0, c.after.1),
    )
}

fn refs(w: &[WindowSummary]) -> Vec<&WindowSummary> {
    w.iter().collect()
}

fn trace_job(t: &Trace) -> JobSummary {
    JobSummary {
        id: t.job.job_id.clone(),
        source: t.meta.source.clone(),
        world_size: t.job.world_size,
        ranks_with_data: t.ranks.len(),
        ..JobSummary::default()
    }
}

fn windows_job(w: &[WindowSummary]) -> JobSummary {
    let ranks: std::collections::BTreeSet<u32> = w
        .iter()
        .flat_map(|s| s.ranks.iter().map(|r| r.rank))
        .collect();
    JobSummary {
        id: w.first().map(|s| s.job_id.clone()).unwrap_or_default(),
        source: "agent".into(),
        world_size: w.iter().map(|s| s.world_size).max().unwrap_or(0),
        ranks_with_data: ranks.len(),
        ..JobSummary::default()
    }
}

fn text(doc: &FindingsDocument, top: usize) -> String {
    let Some(c) = doc.comparison.as_ref() else {
        return String::new();
    };
    let mut out = header(c);
    out.push_str(
        "\nWhere a step's time went, per step of a rank, most changed first (the changes add up to the step's):\n",
    );
    out.push_str(&format!(
        "  {:>9}  {:>9}  {:>9}  {:>13}  {:<13} class\n",
        "change", "baseline", "current", "ops per step", "kind"
    ));
    for r in c.classes.iter().take(top) {
        let unit = if r.kind == flare_model::TimeClassKind::Compute {
            "TFLOPS"
        } else {
            "bus GB/s"
        };
        // A class in one run only (a GEMM whose kernel changed) still says what it achieved.
        let rate = match (r.baseline_rate, r.current_rate) {
            (Some(b), Some(c)) => format!("  ({b:.3} -> {c:.3} {unit})"),
            (Some(b), None) => format!("  ({b:.3} {unit} in the baseline)"),
            (None, Some(c)) => format!("  ({c:.3} {unit})"),
            (None, None) => String::new(),
        };
        let ranks = r.changed_on.as_ref().map_or(String::new(), |on| {
            format!("  (ops per step on {})", on.counts())
        });
        out.push_str(&format!(
            "  {:>+9.2}  {:>9.2}  {:>9.2}  {:>13}  {:<13} {}{rate}{ranks}\n",
            r.delta_ms(),
            r.baseline_ms,
            r.current_ms,
            format!("{:.1} -> {:.1}", r.baseline_count, r.current_count),
            r.kind.as_str(),
            r.short_class()
        ));
    }
    if c.classes.len() > top {
        let rest: f64 = c.classes[top..].iter().map(|r| r.delta_ms()).sum();
        out.push_str(&format!(
            "  {rest:>+9.2}  ({} more classes)\n",
            c.classes.len() - top
        ));
    }
    out.push_str(&gemm_shapes_text(c, top));
    out.push_str(&reruns_text(c));
    if doc.findings().is_empty() {
        out.push_str("\nNo change of the step worth a finding.\n");
    }
    for (i, f) in doc.findings().iter().enumerate() {
        out.push('\n');
        out.push_str(&crate::present::finding_text(i + 1, f));
    }
    out
}

/// Each GEMM shape's kernels on the device, where a run's trace links them to the op that
/// launched them: the same GEMM compared whatever kernel the library picked in each run.
fn gemm_shapes_text(c: &Comparison, top: usize) -> String {
    let rows = c.gemm_shapes();
    if rows.is_empty() {
        return String::new();
    }
    let mut out = String::from(
        "\nGEMMs by shape, their kernels on the device per step of a rank, most changed first:\n",
    );
    out.push_str(&format!(
        "  {:>9}  {:>9}  {:>9}  {:>13}  {:>21}  shape\n",
        "change", "baseline", "current", "calls per step", "TFLOPS"
    ));
    let per_step = |h: Option<&flare_model::HostCallRate>| h.map_or(0.0, |h| h.per_step);
    let tflops = |h: Option<&flare_model::HostCallRate>| {
        h.and_then(|h| h.tflops)
            .map_or_else(|| "-".to_string(), |t| format!("{t:.1}"))
    };
    for r in rows.iter().take(top) {
        let dtype = r.dtype.map(|d| format!(" ({d})")).unwrap_or_default();
        out.push_str(&format!(
            "  {:>+9.2}  {:>9.2}  {:>9.2}  {:>13}  {:>21}  {}{dtype}\n",
            r.device_delta_ms(),
            flare_model::GemmShapeRow::device_ms(r.baseline),
            flare_model::GemmShapeRow::device_ms(r.current),
            format!("{:.1} -> {:.1}", per_step(r.baseline), per_step(r.current)),
            format!("{} -> {}", tflops(r.baseline), tflops(r.current)),
            r.name
        ));
    }
    if rows.len() > top {
        out.push_str(&format!("  ({} more shapes in --json)\n", rows.len() - top));
    }
    out
}

/// Each side's runs and the drift between runs of the same code, where reruns were given.
fn reruns_text(c: &Comparison) -> String {
    let Some(r) = &c.reruns else {
        return String::new();
    };
    let mut out =
        String::from("\nRuns of each side (the first of each compared above), mean step:\n");
    for (side, runs) in [("baseline", &r.baseline), ("current", &r.current)] {
        for run in runs {
            out.push_str(&format!(
                "  {side:<9} {:>9.2} ms  {}\n",
                run.step_ms, run.source
            ));
        }
    }
    let least = r.least_told_ms(r.step_sd_ms);
    out.push_str(&format!(
        "  runs of the same code differ by {:.2} ms (sd, {} degrees of freedom); the sides' means moved {:+.2} ms, {} the {:.2} ms these runs tell from that drift\n",
        r.step_sd_ms,
        r.degrees_of_freedom,
        r.mean_change_ms(),
        if r.mean_change_ms().abs() >= least { "past" } else { "within" },
        least
    ));
    out
}

fn header(c: &Comparison) -> String {
    let (b, cur) = (&c.baseline, &c.current);
    format!(
        "Flare comparison: {} against {}\n  step (a rank's mean iteration): {:.2} ms -> {:.2} ms ({:+.2} ms, {:+.1}%)\n  baseline: {} ranks, {} rank-iterations; current: {} ranks, {} rank-iterations\n",
        cur.source,
        b.source,
        b.step_ms,
        cur.step_ms,
        cur.step_ms - b.step_ms,
        (cur.step_ms / b.step_ms - 1.0) * 100.0,
        b.ranks,
        b.rank_iterations,
        cur.ranks,
        cur.rank_iterations
    )
}
