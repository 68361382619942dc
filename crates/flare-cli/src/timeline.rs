//! `flare timeline`: a trace as one Perfetto-readable timeline of every rank on one
//! aligned clock, grouped by parallel group, the diagnosis's culprits marked.

use crate::diagnose::{load, needs_alignment, Format};
use anyhow::{bail, Context, Result};
use clap::Args;
use flare_engine::EngineConfig;
use flare_import::timeline::{write_timeline, TimelineOptions};
use flare_model::Severity;
use std::io::{BufWriter, Write};
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Args)]
pub struct TimelineArgs {
    /// The trace (any format `flare diagnose` reads but Flight Recorder dumps).
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
    let mut trace = load(&a.paths, a.format)?;
    if needs_alignment(&trace.meta) {
        flare_engine::clock::align_clocks(&mut trace);
    }
    let mut culprits = std::collections::BTreeMap::new();
    if !a.no_diagnosis {
        let doc =
            flare_engine::diagnose_whole(&trace, None, &EngineConfig::default()).document(0.0);
        for f in doc
            .findings()
            .iter()
            .filter(|f| f.severity > Severity::Info)
        {
            for c in f.culprits.iter() {
                if let Some(r) = c.rank {
                    culprits
                        .entry(r)
                        .or_insert_with(|| format!("{} ({})", f.kind, f.detector));
                }
            }
        }
    }
    let opts = TimelineOptions {
        culprits,
        iterations: a.iterations,
        flows: !a.no_flows,
    };
    if a.out.exists() && a.out.is_dir() {
        bail!("{}: a directory; give the file to write", a.out.display());
    }
    let file =
        std::fs::File::create(&a.out).with_context(|| format!("creating {}", a.out.display()))?;
    let mut w = BufWriter::new(file);
    let stats = write_timeline(&trace, &opts, &mut w)
        .with_context(|| format!("writing {}", a.out.display()))?;
    w.flush()
        .with_context(|| format!("writing {}", a.out.display()))?;
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
