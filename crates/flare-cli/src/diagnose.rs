//! `flare diagnose PATH`: load a trace, run the engine, print the findings.

use anyhow::{bail, Context, Result};
use clap::{Args, ValueEnum};
use flare_engine::{diagnose, EngineConfig};
use flare_model::Trace;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
pub enum Format {
    /// Decide from the file's magic bytes or the directory's contents.
    Auto,
    /// Flare's native trace (`trace.flare`, or a directory holding one).
    Flare,
    /// PyTorch profiler (Kineto) JSON, one file per rank, plain or gzipped.
    Kineto,
}

#[derive(Args)]
pub struct DiagnoseArgs {
    /// A .flare file, a directory holding trace.flare, a directory of Kineto traces, or
    /// one or more Kineto trace files (one per rank) of the same job.
    #[arg(required = true)]
    pub paths: Vec<PathBuf>,
    #[arg(long, value_enum, default_value_t = Format::Auto)]
    pub format: Format,
    /// GPUs per node, to map ranks to nodes for traces that do not say (Kineto).
    #[arg(long, default_value_t = 8)]
    pub gpus_per_node: u32,
    /// Nodes per pod (leaf-switch domain), for traces that do not say.
    #[arg(long, default_value_t = 32)]
    pub nodes_per_pod: u32,
    /// Print the findings as JSON (see README: "Findings JSON").
    #[arg(long)]
    pub json: bool,
    /// Also write a self-contained HTML report here.
    #[arg(long)]
    pub report: Option<PathBuf>,
    /// Keep each rank's clock as recorded. By default, traces from several hosts (Kineto)
    /// are aligned on the end times of the collectives their ranks share.
    #[arg(long)]
    pub no_align: bool,
    /// Only diagnose these iterations, e.g. `10..19` (inclusive).
    #[arg(long)]
    pub window: Option<String>,
}

fn is_native_file(p: &Path) -> bool {
    let mut magic = [0u8; 8];
    std::fs::File::open(p)
        .and_then(|mut f| f.read_exact(&mut magic))
        .map(|_| &magic == b"FLARETRC")
        .unwrap_or(false)
}

/// Loads a trace in the given (or detected) format from one path or several Kineto files.
pub fn load(
    paths: &[PathBuf],
    format: Format,
    gpus_per_node: u32,
    nodes_per_pod: u32,
) -> Result<Trace> {
    if paths.len() > 1 {
        if format == Format::Flare {
            bail!("a Flare trace is one file; got {} paths", paths.len());
        }
        let opts = flare_import::kineto::KinetoOptions {
            gpus_per_node,
            nodes_per_pod,
        };
        return flare_import::kineto::read_kineto_files(paths, &opts)
            .with_context(|| format!("reading {} Kineto trace files", paths.len()));
    }
    let path = paths[0].as_path();
    if !path.exists() {
        bail!("{}: no such file or directory", path.display());
    }
    let native_path = if path.is_dir() {
        path.join("trace.flare")
    } else {
        path.to_path_buf()
    };
    let format = match format {
        Format::Auto if native_path.is_file() && is_native_file(&native_path) => Format::Flare,
        Format::Auto => Format::Kineto,
        f => f,
    };
    match format {
        Format::Flare => flare_import::native::read_native_file(&native_path)
            .with_context(|| format!("reading Flare trace {}", native_path.display())),
        _ => {
            let opts = flare_import::kineto::KinetoOptions {
                gpus_per_node,
                nodes_per_pod,
            };
            if path.is_dir() {
                flare_import::kineto::read_kineto_dir(path, &opts)
                    .with_context(|| format!("reading Kineto traces in {}", path.display()))
            } else {
                flare_import::kineto::read_kineto_files(&[path.to_path_buf()], &opts)
                    .with_context(|| format!("reading Kineto trace {}", path.display()))
            }
        }
    }
}

pub fn run(a: DiagnoseArgs) -> Result<ExitCode> {
    let t0 = Instant::now();
    let shown = a.paths[0].display().to_string()
        + &if a.paths.len() > 1 {
            format!(" and {} more", a.paths.len() - 1)
        } else {
            String::new()
        };
    let sp = crate::present::spinner(&format!("reading {shown}"));
    let mut trace = load(&a.paths, a.format, a.gpus_per_node, a.nodes_per_pod)?;
    if let Some(w) = &a.window {
        let Some(w) = flare_model::Window::parse(w) else {
            bail!("--window '{w}': expected FIRST..LAST iterations, e.g. 10..19");
        };
        trace = trace.window(w);
    }
    if !a.no_align && trace.meta.source != "simulator" {
        let al = flare_engine::clock::align_clocks(&mut trace);
        if al.instances_used > 0 {
            eprintln!(
                "aligned rank clocks on {} shared collectives: largest correction {:.3} ms",
                al.instances_used,
                al.max_abs_offset_ns as f64 / 1e6
            );
        }
    }
    let load_ms = t0.elapsed().as_secs_f64() * 1e3;
    sp.set_message(format!("diagnosing {} ops", trace.op_count()));
    let t1 = Instant::now();
    let d = diagnose(&trace, &EngineConfig::default());
    let diag_ms = t1.elapsed().as_secs_f64() * 1e3;
    sp.finish_and_clear();
    eprintln!("loaded in {load_ms:.0} ms, diagnosed in {diag_ms:.0} ms");
    if a.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&crate::present::json(&d, diag_ms))?
        );
    } else {
        print!("{}", crate::present::text(&d, diag_ms));
    }
    if let Some(report) = &a.report {
        let html = crate::present::report_html(
            &d,
            &format!("Flare diagnosis — {}", trace.job.job_id),
            &format!(
                "{} ({}), {} ranks, {} ops",
                shown,
                trace.meta.source,
                trace.job.world_size,
                trace.op_count()
            ),
        );
        std::fs::write(report, html).with_context(|| format!("writing {}", report.display()))?;
        eprintln!("wrote {}", report.display());
    }
    Ok(ExitCode::SUCCESS)
}
