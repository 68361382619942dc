//! `flare compare BASELINE CURRENT`: why one run's steps are slower (or faster) than
//! another's, class of time by class, the classes' changes adding up to the step's.
//! `flare compare RUN`: the same, for one run's iterations before and after a persistent
//! change of its step.

use crate::diagnose::{load, Format};
use anyhow::{Context, Result};
use clap::Args;
use flare_engine::compare::{compare, regression_findings, CompareConfig};
use flare_model::{Comparison, FindingsDocument, JobSummary, Trace};
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Args)]
pub struct CompareArgs {
    /// The run to compare against: a .flare file, or a directory of per-rank Kineto traces.
    /// Alone, the run to look into: where a persistent change of its step began, and its
    /// iterations before against after.
    pub baseline: PathBuf,
    /// The run to explain.
    pub current: Option<PathBuf>,
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

fn read(path: &PathBuf) -> Result<Trace> {
    let mut t = load(std::slice::from_ref(path), Format::Auto)
        .with_context(|| format!("reading {}", path.display()))?;
    if crate::diagnose::needs_alignment(&t.meta) {
        // Waiting is read across ranks: their clocks must agree.
        flare_engine::clock::align_clocks(&mut t);
    }
    Ok(t)
}

pub fn run(a: CompareArgs) -> Result<ExitCode> {
    let (b, c, sources) = match &a.current {
        Some(current) => (
            read(&a.baseline)?,
            read(current)?,
            (
                a.baseline.display().to_string(),
                current.display().to_string(),
            ),
        ),
        None => {
            let t = read(&a.baseline)?;
            let its = t.iterations_with_ops();
            let Some((first, last, cp)) = flare_engine::compare::onset(&t) else {
                println!(
                    "{}: no persistent change of the step in its {} iterations; nothing to compare",
                    a.baseline.display(),
                    its.len()
                );
                return Ok(ExitCode::SUCCESS);
            };
            // Before: from the start; after: the new level, to the next change.
            let (lo, hi) = (its[0], last);
            let w = |a, b| flare_model::Window {
                first_iteration: a,
                last_iteration: b,
            };
            eprintln!(
                "the step went from {:.2} to {:.2} ms at iteration {first} (probability {:.2}): iterations {lo}..{} against {first}..{hi}",
                cp.before / 1e6,
                cp.after / 1e6,
                cp.probability,
                first - 1
            );
            let name = a.baseline.display();
            (
                t.window(w(lo, first - 1)),
                t.window(w(first, hi)),
                (
                    format!("{name} iterations {lo}..{}", first - 1),
                    format!("{name} iterations {first}..{hi}"),
                ),
            )
        }
    };
    let mut comparison = compare(&b, &c, (&sources.0, &sources.1));
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
    let findings = regression_findings(&mut comparison, &CompareConfig::default());
    let job = JobSummary {
        id: c.job.job_id.clone(),
        source: c.meta.source.clone(),
        world_size: c.job.world_size,
        ranks_with_data: c.ranks.len(),
        ..JobSummary::default()
    };
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
        let rate = match (r.baseline_rate, r.current_rate) {
            (Some(b), Some(c)) => format!(
                "  ({b:.3} -> {c:.3} {})",
                if r.kind == flare_model::TimeClassKind::Compute {
                    "TFLOPS"
                } else {
                    "bus GB/s"
                }
            ),
            _ => String::new(),
        };
        out.push_str(&format!(
            "  {:>+9.2}  {:>9.2}  {:>9.2}  {:>13}  {:<13} {}{rate}\n",
            r.delta_ms(),
            r.baseline_ms,
            r.current_ms,
            format!("{:.1} -> {:.1}", r.baseline_count, r.current_count),
            r.kind.as_str(),
            r.class
        ));
    }
    if c.classes.len() > top {
        let rest: f64 = c.classes[top..].iter().map(|r| r.delta_ms()).sum();
        out.push_str(&format!(
            "  {rest:>+9.2}  ({} more classes)\n",
            c.classes.len() - top
        ));
    }
    if doc.findings().is_empty() {
        out.push_str("\nNo change of the step worth a finding.\n");
    }
    for (i, f) in doc.findings().iter().enumerate() {
        out.push('\n');
        out.push_str(&crate::present::finding_text(i + 1, f));
    }
    out
}

fn header(c: &Comparison) -> String {
    let (b, cur) = (&c.baseline, &c.current);
    format!(
        "Flare comparison: {} against {}\n  step (a rank's mean, first op to last): {:.2} ms -> {:.2} ms ({:+.2} ms, {:+.1}%)\n  baseline: {} ranks, {} rank-iterations; current: {} ranks, {} rank-iterations\n",
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
