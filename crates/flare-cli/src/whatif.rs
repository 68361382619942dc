//! `flare whatif TRACE`: what-if straggler analysis of an NDTimeline parquet trace: how
//! much faster the job would be without stragglers, and which op types and workers cost
//! most (ByteDance's OSDI'25 method).

use anyhow::{Context, Result};
use clap::Args;
use flare_report::Heatmap;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

#[derive(Args)]
pub struct WhatIfArgs {
    /// An NDTimeline parquet trace (its meta-*.yaml beside it is read when present), or a
    /// Flare trace of a job with a known parallel layout (a .flare file or a directory
    /// holding trace.flare, e.g. from `flare sim`).
    pub trace: PathBuf,
    /// Print the full result as JSON.
    #[arg(long)]
    pub json: bool,
    /// Write the worker heatmap (stage x DP rank) as SVG here.
    #[arg(long)]
    pub svg: Option<PathBuf>,
}

pub fn run(a: WhatIfArgs) -> Result<ExitCode> {
    let t0 = Instant::now();
    let is_parquet = a
        .trace
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("parquet"));
    let trace = if is_parquet {
        flare_import::ndtimeline::read_ndtimeline(&a.trace)
            .with_context(|| format!("reading NDTimeline trace {}", a.trace.display()))?
    } else {
        let t = crate::diagnose::load(
            std::slice::from_ref(&a.trace),
            crate::diagnose::Format::Auto,
        )?;
        flare_whatif::trace::to_ndtimeline(&t)
            .with_context(|| format!("turning {} into a what-if timeline", a.trace.display()))?
    };
    let read_ms = t0.elapsed().as_secs_f64() * 1e3;
    let t1 = Instant::now();
    let r = flare_whatif::analyze(&trace)
        .with_context(|| format!("what-if analysis of {}", a.trace.display()))?;
    let ms = t1.elapsed().as_secs_f64() * 1e3;
    eprintln!(
        "read {} ops in {read_ms:.0} ms, analysed in {ms:.0} ms",
        trace.ops.len()
    );
    if let Some(svg) = &a.svg {
        let h = &r.heatmap;
        let heat = Heatmap {
            title: "What-if slowdown per worker (pipeline stage x DP rank)".into(),
            row_label: "stage".into(),
            rows: (0..h.pp_size).map(|s| format!("stage {s}")).collect(),
            columns: (0..h.dp_size).map(|d| d.to_string()).collect(),
            values: h.values.iter().flatten().copied().collect(),
            unit: "x".into(),
            highlight_rows: vec![],
            column_label: "DP rank".into(),
        };
        std::fs::write(svg, flare_report::heatmap_svg(&heat))
            .with_context(|| format!("writing {}", svg.display()))?;
        eprintln!("wrote {}", svg.display());
    }
    if a.json {
        println!("{}", serde_json::to_string_pretty(&r)?);
        return Ok(ExitCode::SUCCESS);
    }
    println!(
        "What-if analysis of {} ({} workers: DP{} x PP{}, {} steps)",
        a.trace.display(),
        r.workers,
        r.dp_size,
        r.pp_size,
        r.steps
    );
    println!(
        "  slowdown S = {:.3}: a step takes {:.3} s; without stragglers it would take {:.3} s",
        r.slowdown, r.step_time_s, r.ideal_step_time_s
    );
    println!(
        "  M_W = {:.3}: fixing the worst 3% of workers ({} of them) removes {:.0}% of the slowdown",
        r.m_w,
        r.m_w_detail.workers.len(),
        r.m_w * 100.0
    );
    println!(
        "  M_S = {:.3}: fixing the last pipeline stage removes {:.0}% of the slowdown",
        r.m_s,
        r.m_s * 100.0
    );
    println!("  slowdown left when only one op type keeps its measured durations:");
    for o in r.by_op_type.iter().take(6) {
        println!("    {:<28} {:.3}", o.op_type, o.slowdown);
    }
    println!("  worst workers:");
    for w in r.by_worker.iter().take(5) {
        println!(
            "    rank {:>5} (DP rank {}, stage {})  {:.3}",
            w.rank, w.dp_rank, w.stage, w.slowdown
        );
    }
    println!(
        "  heatmap pattern: {:?}{}",
        r.heatmap.pattern,
        match r.heatmap.band {
            Some(b) => format!(" ({:?} {})", b.axis, b.index),
            None => String::new(),
        }
    );
    for w in &r.warnings {
        println!("  note: {w}");
    }
    Ok(ExitCode::SUCCESS)
}
