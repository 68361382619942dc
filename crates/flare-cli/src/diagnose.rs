//! `flare diagnose PATH`: load a trace, run the engine, print the findings.

use anyhow::{bail, Context, Result};
use clap::{Args, ValueEnum};
use flare_engine::EngineConfig;
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
    /// PyTorch Flight Recorder dumps (pickle or JSON), one file per rank: hang analysis.
    FlightRecorder,
    /// NCCL Inspector JSON lines, one file per process.
    NcclInspector,
    /// Dumps of NCCL's example profiler plugin (Chrome trace `b`/`e` events).
    NcclProfiler,
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
    /// The job's machine metrics (GPU clocks, power, temperature, utilisation, NIC rates,
    /// CPU) as the JSON of a Prometheus query_range request over DCGM and node exporter
    /// series. A directory given as the trace is searched for machine.json.
    #[arg(long)]
    pub machine_metrics: Option<PathBuf>,
}

fn is_native_file(p: &Path) -> bool {
    let mut magic = [0u8; 8];
    std::fs::File::open(p)
        .and_then(|mut f| f.read_exact(&mut magic))
        .map(|_| &magic == b"FLARETRC")
        .unwrap_or(false)
}

/// Recognises NCCL Inspector logs and NCCL profiler dumps from their first bytes (of the
/// file, or of the first file in a directory).
fn sniff_nccl(path: &Path) -> Option<Format> {
    let file = if path.is_dir() {
        let mut files: Vec<PathBuf> = std::fs::read_dir(path)
            .ok()?
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.is_file())
            .collect();
        files.sort();
        files.into_iter().next()?
    } else {
        path.to_path_buf()
    };
    let mut head = vec![0u8; 4096];
    let n = std::fs::File::open(&file)
        .and_then(|mut f| f.read(&mut head))
        .ok()?;
    let head = &head[..n];
    if flare_import::nccl_inspector::sniff(head) {
        Some(Format::NcclInspector)
    } else if flare_import::nccl_profiler::sniff(head) {
        Some(Format::NcclProfiler)
    } else {
        None
    }
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
        Format::Auto => sniff_nccl(path).unwrap_or(Format::Kineto),
        f => f,
    };
    let nccl_opts = flare_import::nccl_inspector::NcclOptions {
        gpus_per_node,
        nodes_per_pod,
        ..Default::default()
    };
    match format {
        Format::NcclInspector => {
            return if path.is_dir() {
                flare_import::nccl_inspector::read_inspector_dir(path, &nccl_opts)
            } else {
                flare_import::nccl_inspector::read_inspector_files(
                    &[path.to_path_buf()],
                    &nccl_opts,
                )
            }
            .with_context(|| format!("reading NCCL Inspector output in {}", path.display()));
        }
        Format::NcclProfiler => {
            return if path.is_dir() {
                flare_import::nccl_profiler::read_profiler_dump_dir(path, &nccl_opts)
            } else {
                flare_import::nccl_profiler::read_profiler_dump_files(
                    &[path.to_path_buf()],
                    &nccl_opts,
                )
            }
            .with_context(|| format!("reading NCCL profiler dumps in {}", path.display()));
        }
        _ => {}
    }
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

/// Flight Recorder dumps hold no timeline but each rank's collective state: they get their
/// own analysis and the same findings JSON.
fn run_flight_recorder(a: &DiagnoseArgs) -> Result<ExitCode> {
    let path = &a.paths[0];
    if a.paths.len() > 1 {
        bail!(
            "Flight Recorder dumps are read from one directory; got {} paths",
            a.paths.len()
        );
    }
    let t0 = Instant::now();
    let job = if path.is_dir() {
        flare_import::flight_recorder::read_fr_dir(path)
    } else {
        flare_import::flight_recorder::read_fr_file(path).and_then(|d| {
            flare_import::flight_recorder::assemble_job(
                &path.display().to_string(),
                vec![(path.display().to_string(), d)],
            )
        })
    }
    .with_context(|| format!("reading Flight Recorder dumps in {}", path.display()))?;
    let load_ms = t0.elapsed().as_secs_f64() * 1e3;
    let t1 = Instant::now();
    let findings = flare_engine::flight_recorder::analyze(&job);
    let ms = t1.elapsed().as_secs_f64() * 1e3;
    eprintln!(
        "read {} dumps in {load_ms:.0} ms, analysed in {ms:.0} ms",
        job.dumps.len()
    );
    let doc =
        flare_engine::document::of_flight_recorder(&path.display().to_string(), &job, findings, ms);
    if a.json {
        println!("{}", doc.to_json());
    } else {
        println!(
            "Flare hang analysis of {} ({} dumps, ranks without a dump: {:?}) in {ms:.0} ms",
            path.display(),
            job.dumps.len(),
            job.missing_ranks
        );
        if doc.findings().is_empty() {
            println!("\nNo divergence: every process group's ranks reached the same collectives.");
        }
        for (i, f) in doc.findings().iter().enumerate() {
            print!("{}", crate::present::finding_text(i + 1, f));
        }
    }
    Ok(ExitCode::SUCCESS)
}

pub fn run(a: DiagnoseArgs) -> Result<ExitCode> {
    let fr = match a.format {
        Format::FlightRecorder => true,
        Format::Auto => {
            a.paths.len() == 1
                && !a.paths[0].join("trace.flare").is_file()
                && !is_native_file(&a.paths[0])
                && flare_import::flight_recorder::looks_like_fr_dump(&a.paths[0])
        }
        _ => false,
    };
    if fr {
        return run_flight_recorder(&a);
    }
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
    let machine_path = a.machine_metrics.clone().or_else(|| {
        let p = a.paths[0].join("machine.json");
        (a.paths.len() == 1 && p.is_file()).then_some(p)
    });
    let machine = match &machine_path {
        Some(p) => {
            let (m, stats) = flare_import::prometheus::read_machine_metrics(p)
                .with_context(|| format!("reading machine metrics {}", p.display()))?;
            eprintln!(
                "machine metrics: {} machines, {} series, {} samples every {} s{}",
                m.machines.len(),
                stats.series,
                m.samples,
                m.interval_s,
                if stats.skipped_series > 0 {
                    format!(
                        " ({} series of other metrics skipped)",
                        stats.skipped_series
                    )
                } else {
                    String::new()
                }
            );
            Some(m)
        }
        None => None,
    };
    let load_ms = t0.elapsed().as_secs_f64() * 1e3;
    sp.set_message(format!("diagnosing {} ops", trace.op_count()));
    let t1 = Instant::now();
    let d = flare_engine::diagnose_with_machine(&trace, machine.as_ref(), &EngineConfig::default());
    let diag_ms = t1.elapsed().as_secs_f64() * 1e3;
    sp.finish_and_clear();
    eprintln!("loaded in {load_ms:.0} ms, diagnosed in {diag_ms:.0} ms");
    let doc = crate::present::document(&trace, &d, diag_ms);
    if a.json {
        println!("{}", doc.to_json());
    } else {
        print!("{}", crate::present::text(&doc));
    }
    if let Some(report) = &a.report {
        let html = crate::present::report_html(
            &trace,
            &d,
            &doc,
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
