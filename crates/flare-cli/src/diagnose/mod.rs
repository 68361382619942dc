//! `flare diagnose PATH`: load a trace, run the engine, print the findings. A native file
//! is read and diagnosed an iteration at a time ([`chunked`]); other formats are read
//! whole. The job's logs found beside the trace or dumps (or given with `--logs`) are
//! diagnosed too and merged into the same findings ([`flare_log_diagnosis::merge`]); a
//! directory that holds only logs is diagnosed from them.

mod chunked;

use anyhow::{bail, Context, Result};
use clap::{Args, ValueEnum};
use flare_engine::{EngineConfig, Offline};
use flare_import::kineto::KinetoError;
use flare_import::{Chunked, Limits, OpenError, OpenOptions, Opened};
use flare_log_diagnosis::LogDiagnosis;
use flare_model::flight_recorder::FrJob;
use flare_model::{FindingsDocument, MachineMetrics, Trace};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

/// The input formats, as `--format` spells them ([`flare_import::Format`]).
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
    /// Flare agents' window summaries (`flare agent --out DIR`), diagnosed window by
    /// window as the server would.
    AgentSummaries,
}

impl From<Format> for flare_import::Format {
    fn from(f: Format) -> Self {
        match f {
            Format::Auto => flare_import::Format::Auto,
            Format::Flare => flare_import::Format::Flare,
            Format::Kineto => flare_import::Format::Kineto,
            Format::FlightRecorder => flare_import::Format::FlightRecorder,
            Format::NcclInspector => flare_import::Format::NcclInspector,
            Format::NcclProfiler => flare_import::Format::NcclProfiler,
            Format::AgentSummaries => flare_import::Format::AgentSummaries,
        }
    }
}

#[derive(Args)]
pub struct DiagnoseArgs {
    /// A .flare file, a directory holding trace.flare, a directory of Kineto traces, or
    /// one or more Kineto trace files (one per rank) of the same job; Flight Recorder
    /// dumps, NCCL Inspector logs or profiler dumps, or a Flare agent's window summaries
    /// (`flare agent --out DIR`) of one job.
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
    /// The most bytes read from any one input file, as stored.
    #[arg(long, default_value_t = flare_import::limits::DEFAULT_MAX_INPUT_BYTES)]
    pub max_input_bytes: u64,
    /// The most bytes inflated from any one gzip or LZ4 stream.
    #[arg(long, default_value_t = flare_import::limits::DEFAULT_MAX_INFLATED_BYTES)]
    pub max_inflated_bytes: u64,
    /// The most files read from one directory.
    #[arg(long, default_value_t = flare_import::limits::DEFAULT_MAX_FILES)]
    pub max_files: usize,
    /// The job's logs elsewhere (files or directories: per-rank output, dmesg, Slurm
    /// output), read with the logs found beside the input.
    #[arg(long = "logs", value_name = "PATH")]
    pub logs: Vec<PathBuf>,
    /// Read no logs, not even those beside the input.
    #[arg(long, conflicts_with = "logs")]
    pub no_logs: bool,
    /// The job's parallel layout, for a trace that does not state it: `tp=2,pp=4`, with
    /// `cp`, `ep`, `dp` (the rest of the world by default) and `order=tp-cp-ep-dp-pp`
    /// (Megatron's, the default) as needed. The detectors read pipeline stages and
    /// replicas from it, and the report lays ranks out by it.
    #[arg(long, value_name = "SPEC")]
    pub parallel: Option<String>,
}

impl DiagnoseArgs {
    /// The layout `--parallel` states for a job of `world` ranks.
    fn stated_layout(&self, world: u32) -> Result<Option<flare_model::ParallelConfig>> {
        let Some(spec) = &self.parallel else {
            return Ok(None);
        };
        flare_model::ParallelConfig::from_spec(spec, world)
            .map(Some)
            .map_err(|e| anyhow::anyhow!("--parallel {spec:?} for a job of {world} ranks: {e}"))
    }

    fn limits(&self) -> Limits {
        Limits {
            max_input_bytes: self.max_input_bytes,
            max_inflated_bytes: self.max_inflated_bytes,
            max_files: self.max_files,
        }
    }
}

/// Loads a timeline trace (any format but Flight Recorder dumps) with the default limits.
pub fn load(paths: &[PathBuf], format: Format) -> Result<Trace> {
    let opts = OpenOptions {
        format: format.into(),
        ..OpenOptions::default()
    };
    match flare_import::open(paths, &opts)? {
        Opened::Trace(t) => Ok(*t),
        Opened::FlightRecorder(_) => bail!(
            "{}: Flight Recorder dumps hold no timeline; expected a trace",
            paths[0].display()
        ),
        Opened::AgentSummaries(_) => bail!(
            "{}: agent window summaries hold no timeline (flare diagnose reads them); expected a trace",
            paths[0].display()
        ),
    }
}

/// Flight Recorder dumps hold no timeline but each rank's collective state: they get their
/// own analysis and the same findings JSON.
fn run_flight_recorder(a: &DiagnoseArgs, job: FrJob, load_ms: f64) -> Result<ExitCode> {
    let path = &a.paths[0];
    let t1 = Instant::now();
    let findings = flare_hang::analyze(&job);
    let ms = t1.elapsed().as_secs_f64() * 1e3;
    eprintln!(
        "read {} dumps in {load_ms:.0} ms, analysed in {ms:.0} ms",
        job.dumps.len()
    );
    let doc = flare_hang::document(&path.display().to_string(), &job, findings, ms);
    let doc = with_logs(a, doc, "the Flight Recorder dumps")?;
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
        for n in &doc.notes {
            println!("\n(note: {n})");
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Agent window summaries (`flare agent --out DIR`): the live engine replayed over them
/// window by window, one document for the job.
fn run_agent_summaries(
    a: &DiagnoseArgs,
    mut summaries: Vec<flare_model::WindowSummary>,
    load_ms: f64,
) -> Result<ExitCode> {
    let path = &a.paths[0];
    let world = summaries.iter().map(|s| s.world_size).max().unwrap_or(0);
    if let Some(p) = a.stated_layout(world)? {
        for s in &mut summaries {
            s.parallel = Some(p.clone());
        }
    }
    let jobs: std::collections::BTreeSet<&str> =
        summaries.iter().map(|s| s.job_id.as_str()).collect();
    if jobs.len() > 1 {
        bail!(
            "{}: window summaries of {} jobs ({}); give one job's files (the agent names them <job>-<node>-w<window>.json)",
            path.display(),
            jobs.len(),
            jobs.iter().take(8).copied().collect::<Vec<_>>().join(", ")
        );
    }
    let job_id = jobs.first().copied().unwrap_or_default().to_string();
    let t1 = Instant::now();
    let cfg = flare_engine::live::LiveConfig::default();
    let windows = flare_engine::live::replay::replay(&summaries, &cfg);
    let doc = flare_engine::live::replay::document(&job_id, &summaries, &windows);
    let ms = t1.elapsed().as_secs_f64() * 1e3;
    eprintln!(
        "read {} window summaries in {load_ms:.0} ms, diagnosed {} windows in {ms:.0} ms",
        summaries.len(),
        windows.len()
    );
    let doc = with_logs(a, doc, "the agent summaries")?;
    if a.json {
        println!("{}", doc.to_json());
    } else {
        println!(
            "Flare diagnosis of job {job_id} from {} ({} windows, {} ranks with data): {}",
            path.display(),
            windows.len(),
            doc.job.ranks_with_data,
            doc.verdict().as_str()
        );
        for (i, f) in doc.findings().iter().enumerate() {
            print!("{}", crate::present::finding_text(i + 1, f));
        }
        for n in &doc.notes {
            println!("\n(note: {n})");
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// The logs beside the input (in the directories given) and those given with `--logs`,
/// diagnosed; `None` when there are none.
fn logs_beside(a: &DiagnoseArgs) -> Result<Option<(LogDiagnosis, Vec<String>, f64)>> {
    if a.no_logs {
        return Ok(None);
    }
    let t = Instant::now();
    let lim = a.limits();
    let mut roots: Vec<PathBuf> = a.paths.iter().filter(|p| p.is_dir()).cloned().collect();
    roots.extend(a.logs.iter().cloned());
    let mut listed = flare_import::text_logs::list_log_files(&roots, &lim)?;
    // what is not a log beside a trace or dumps is the trace or the dumps
    listed.skipped.clear();
    if listed.files.is_empty() {
        if !a.logs.is_empty() {
            bail!(
                "--logs: no log files under {}: expected .log, .txt, .out, .err, .dmesg or extension-less text files",
                a.logs.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", ")
            );
        }
        return Ok(None);
    }
    let (d, notes) = crate::logs::diagnose::diagnose_listed(listed, &[], &lim)?;
    Ok(Some((d, notes, t.elapsed().as_secs_f64() * 1e3)))
}

/// `doc` with the findings of the job's logs merged in (`source`: what `doc` was made
/// from, for notes).
fn with_logs(a: &DiagnoseArgs, doc: FindingsDocument, source: &str) -> Result<FindingsDocument> {
    let Some((logs, notes, ms)) = logs_beside(a)? else {
        return Ok(doc);
    };
    eprintln!(
        "read {} log files ({} lines) in {ms:.0} ms",
        logs.files, logs.lines
    );
    let mut merge_notes = Vec::new();
    let mut doc = doc.map_findings(|findings| {
        let m = flare_log_diagnosis::merge(findings, &logs, source);
        merge_notes = m.notes;
        m.findings
    });
    doc.notes.push(format!(
        "logs: read {} files, {} lines, from {} ranks and {} hosts; their findings are merged where they name the same rank or host",
        logs.files,
        logs.lines,
        logs.ranks.len(),
        logs.hosts.len()
    ));
    doc.notes.extend(notes);
    doc.notes.extend(logs.notes.iter().cloned());
    doc.notes.extend(merge_notes);
    Ok(doc)
}

/// A directory with no trace or dump but logs: the log diagnosis alone.
fn logs_only(a: &DiagnoseArgs, t0: Instant) -> Result<Option<ExitCode>> {
    let Some((logs, mut notes, _)) = logs_beside(a)? else {
        return Ok(None);
    };
    notes.insert(
        0,
        "no trace or dump here: diagnosed from the logs alone".to_string(),
    );
    let doc =
        crate::logs::diagnose::document(&a.paths, &logs, notes, t0.elapsed().as_secs_f64() * 1e3);
    if a.json {
        println!("{}", doc.to_json());
    } else {
        print!("{}", crate::present::logs_text(&doc));
    }
    Ok(Some(ExitCode::SUCCESS))
}

pub fn run(a: DiagnoseArgs) -> Result<ExitCode> {
    let t0 = Instant::now();
    let shown = a.paths[0].display().to_string()
        + &if a.paths.len() > 1 {
            format!(" and {} more", a.paths.len() - 1)
        } else {
            String::new()
        };
    let window = match &a.window {
        None => None,
        Some(w) => match flare_model::Window::parse(w) {
            Some(w) => Some(w),
            None => bail!("--window '{w}': expected FIRST..LAST iterations, e.g. 10..19"),
        },
    };
    let opts = OpenOptions {
        format: a.format.into(),
        gpus_per_node: a.gpus_per_node,
        nodes_per_pod: a.nodes_per_pod,
        limits: a.limits(),
    };
    let machine = machine_metrics(&a, &opts)?;
    let sp = crate::present::spinner(&format!("reading {shown}"));
    // A stated layout replaces the trace's own: read whole, where it is set.
    let opened = if a.parallel.is_some() {
        flare_import::open(&a.paths, &opts).map(Chunked::Whole)
    } else {
        flare_import::open_chunked(&a.paths, &opts)
    };
    let run = match opened {
        Ok(Chunked::Native(reader)) => {
            match chunked::diagnose(&a, *reader, window, machine.as_ref(), &opts.limits, &sp)? {
                Some(run) => {
                    eprintln!(
                        "read and diagnosed {} ops in {:.0} ms, an iteration at a time",
                        run.ops,
                        t0.elapsed().as_secs_f64() * 1e3
                    );
                    run
                }
                None => {
                    eprintln!(
                        "some collectives' members are tagged with different iterations: reading the trace whole"
                    );
                    let trace = match flare_import::open(&a.paths, &opts)? {
                        Opened::Trace(t) => *t,
                        Opened::FlightRecorder(_) | Opened::AgentSummaries(_) => {
                            bail!("{shown}: not a native trace")
                        }
                    };
                    whole(&a, trace, window, machine.as_ref(), t0, &sp)?
                }
            }
        }
        Ok(Chunked::Whole(Opened::Trace(t))) => whole(&a, *t, window, machine.as_ref(), t0, &sp)?,
        Ok(Chunked::Whole(Opened::AgentSummaries(summaries))) => {
            sp.finish_and_clear();
            let load_ms = t0.elapsed().as_secs_f64() * 1e3;
            return run_agent_summaries(&a, summaries, load_ms);
        }
        Ok(Chunked::Whole(Opened::FlightRecorder(job))) => {
            sp.finish_and_clear();
            if a.parallel.is_some() {
                bail!("--parallel: {shown} holds Flight Recorder dumps, whose hang analysis reads no layout");
            }
            let load_ms = t0.elapsed().as_secs_f64() * 1e3;
            return run_flight_recorder(&a, *job, load_ms);
        }
        Err(e) => {
            sp.finish_and_clear();
            // a directory without traces (Kineto's reading is the fallback) may hold logs
            let no_trace = matches!(&e, OpenError::Kineto { source, .. }
                if matches!(**source, KinetoError::EmptyDirectory { .. }));
            if no_trace && a.format == Format::Auto {
                if let Some(code) = logs_only(&a, t0)? {
                    return Ok(code);
                }
            }
            return Err(e.into());
        }
    };
    let doc = run.document(t0.elapsed().as_secs_f64() * 1e3);
    let doc = with_logs(&a, doc, "the trace")?;
    if a.json {
        println!("{}", doc.to_json());
    } else {
        print!("{}", crate::present::text(&doc));
    }
    if let Some(report) = &a.report {
        let html = crate::present::report_html(
            &run.ctx,
            &run.diagnosis,
            &doc,
            &format!("Flare diagnosis — {}", run.ctx.job.job_id),
            &format!(
                "{} ({}), {} ranks, {} ops",
                shown, run.ctx.meta.source, run.ctx.job.world_size, run.ops
            ),
        );
        std::fs::write(report, html).with_context(|| format!("writing {}", report.display()))?;
        eprintln!("wrote {}", report.display());
    }
    Ok(ExitCode::SUCCESS)
}

/// Diagnoses a trace held whole: the given window, clocks aligned unless asked not to.
fn whole(
    a: &DiagnoseArgs,
    mut trace: Trace,
    window: Option<flare_model::Window>,
    machine: Option<&MachineMetrics>,
    t0: Instant,
    sp: &indicatif::ProgressBar,
) -> Result<Offline> {
    if let Some(p) = a.stated_layout(trace.job.world_size)? {
        trace.job.parallel = Some(p);
    }
    if let Some(w) = window {
        trace = trace.window(w);
    }
    if !a.no_align && needs_alignment(&trace.meta) {
        let al = flare_engine::clock::align_clocks(&mut trace);
        report_alignment(&al);
    }
    let load_ms = t0.elapsed().as_secs_f64() * 1e3;
    sp.set_message(format!("diagnosing {} ops", trace.op_count()));
    let t1 = Instant::now();
    let run = flare_engine::diagnose_whole(&trace, machine, &EngineConfig::default());
    let diag_ms = t1.elapsed().as_secs_f64() * 1e3;
    sp.finish_and_clear();
    eprintln!("loaded in {load_ms:.0} ms, diagnosed in {diag_ms:.0} ms");
    Ok(run)
}

/// Whether a trace's ranks' clocks need aligning: every source records each host's own
/// clock but the simulator, which has one.
pub(crate) fn needs_alignment(meta: &flare_model::TraceMeta) -> bool {
    meta.source != "simulator"
}

fn report_alignment(al: &flare_engine::clock::ClockAlignment) {
    if al.instances_used > 0 {
        eprintln!(
            "aligned rank clocks on {} shared collectives: largest correction {:.3} ms",
            al.instances_used,
            al.max_abs_offset_ns as f64 / 1e6
        );
    }
}

/// The job's machine metrics: the file given, or `machine.json` in the trace directory.
fn machine_metrics(a: &DiagnoseArgs, opts: &OpenOptions) -> Result<Option<MachineMetrics>> {
    let machine_path = a.machine_metrics.clone().or_else(|| {
        let p = a.paths[0].join("machine.json");
        (a.paths.len() == 1 && p.is_file()).then_some(p)
    });
    let Some(p) = &machine_path else {
        return Ok(None);
    };
    let (m, stats) = flare_import::prometheus::read_machine_metrics_with_limits(p, &opts.limits)
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
    Ok(Some(m))
}
