//! `flare timeline`: a trace as one Perfetto-readable timeline of every rank on one
//! aligned clock, grouped by parallel group, the diagnosis's culprits marked.

use crate::compare::source::Run;
use crate::diagnose::{load, needs_alignment, Format};
use anyhow::{bail, Context, Result};
use clap::Args;
use flare_engine::EngineConfig;
use flare_report::timeline::{
    write_timeline, write_window_timeline, TimelineOptions, TimelineStats,
};
use std::collections::BTreeMap;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

#[derive(Args)]
pub struct TimelineArgs {
    /// The trace (any format `flare diagnose` reads but Flight Recorder dumps), or a live
    /// job: its agents' summaries on disk (`flare agent --out`) or its address on a
    /// server (`http://HOST:PORT/jobs/JOB[?from=A&to=B]`, token in FLARE_TOKEN).
    #[arg(required = true)]
    pub paths: Vec<PathBuf>,
    /// The Chrome trace-event JSON file to write (open it in ui.perfetto.dev).
    #[arg(long)]
    pub out: PathBuf,
    #[arg(long, value_enum, default_value_t = Format::Auto)]
    pub format: Format,
    /// Only these iterations, `A-B` (or `A`): a long trace of a large job is big.
    #[arg(long, value_name = "A-B", value_parser = iteration_range)]
    pub iterations: Option<(u32, u32)>,
    /// No launch-to-op flow arrows.
    #[arg(long)]
    pub no_flows: bool,
    /// Do not diagnose the trace to mark its culprits.
    #[arg(long)]
    pub no_diagnosis: bool,
}

fn iteration_range(s: &str) -> Result<(u32, u32), String> {
    let bad = || format!("{s:?}: expected A-B or A (iteration numbers)");
    let (a, b) = match s.split_once('-') {
        Some((a, b)) => (a.trim(), b.trim()),
        None => (s.trim(), s.trim()),
    };
    let (a, b): (u32, u32) = (a.parse().map_err(|_| bad())?, b.parse().map_err(|_| bad())?);
    if a > b {
        return Err(bad());
    }
    Ok((a, b))
}

pub fn run(a: TimelineArgs) -> Result<ExitCode> {
    // One input as `flare compare` reads it (a trace, a live job's summaries on disk or
    // on a server); several, or a format named, as `flare diagnose` reads a trace.
    let trace = if a.paths.len() == 1 && a.format == Format::Auto {
        match crate::compare::source::read(&a.paths[0].to_string_lossy())? {
            Run::Trace(t) => *t,
            Run::Windows(w) => return windows(&a, &w),
        }
    } else {
        let mut t = load(&a.paths, a.format)?;
        if needs_alignment(&t.meta) {
            flare_engine::clock::align_clocks(&mut t);
        }
        t
    };
    let mut culprits = BTreeMap::new();
    if !a.no_diagnosis {
        let doc =
            flare_engine::diagnose_whole(&trace, None, &EngineConfig::default()).document(0.0);
        culprits = culprits_of(&doc);
    }
    let opts = TimelineOptions {
        culprits,
        iterations: a.iterations,
        flows: !a.no_flows,
    };
    let stats = write_out(&a.out, |w| write_timeline(&trace, &opts, w))?;
    if stats.ops == 0 {
        eprintln!("note: no op in the iterations asked for");
    }
    println!(
        "wrote {}: {} ranks, {} ops, {} launch arrows, {} culprit rank(s) marked; open it in https://ui.perfetto.dev",
        a.out.display(),
        stats.ranks,
        stats.ops,
        stats.flows,
        opts.culprits.len()
    );
    Ok(ExitCode::SUCCESS)
}

/// Ranks that findings above `info` blame, with what the first says of each.
fn culprits_of(doc: &flare_model::FindingsDocument) -> BTreeMap<u32, String> {
    doc.blamed_ranks()
        .into_iter()
        .map(|(r, f)| (r, format!("{} ({})", f.kind, f.detector)))
        .collect()
}

/// Writes `out` (a file, not a directory) with `write`.
fn write_out(
    out: &Path,
    write: impl FnOnce(&mut BufWriter<std::fs::File>) -> std::io::Result<TimelineStats>,
) -> Result<TimelineStats> {
    if out.is_dir() {
        bail!("{}: a directory; give the file to write", out.display());
    }
    let file = std::fs::File::create(out).with_context(|| format!("creating {}", out.display()))?;
    let mut w = BufWriter::new(file);
    let stats = write(&mut w).with_context(|| format!("writing {}", out.display()))?;
    w.flush()
        .with_context(|| format!("writing {}", out.display()))?;
    Ok(stats)
}

/// A live job's windows (its agents' summaries) as one timeline, the ranks the live
/// engine blames over them marked.
fn windows(a: &TimelineArgs, summaries: &[flare_model::WindowSummary]) -> Result<ExitCode> {
    if a.iterations.is_some() {
        bail!("--iterations: a live job's summaries are read by window; narrow a server's job with ?from=A&to=B");
    }
    let mut culprits = BTreeMap::new();
    if !a.no_diagnosis {
        let job = summaries.first().map_or("", |s| s.job_id.as_str());
        let cfg = flare_engine::live::LiveConfig::default();
        let replayed = flare_engine::live::replay::replay(summaries, &cfg);
        culprits = culprits_of(&flare_engine::live::replay::document(
            job, summaries, &replayed,
        ));
    }
    let stats = write_out(&a.out, |w| write_window_timeline(summaries, &culprits, w))?;
    println!(
        "wrote {}: {} ranks from {} window summaries, {} steps and stuck ops, {} culprit rank(s) marked; open it in https://ui.perfetto.dev",
        a.out.display(),
        stats.ranks,
        summaries.len(),
        stats.ops,
        culprits.len()
    );
    Ok(ExitCode::SUCCESS)
}
