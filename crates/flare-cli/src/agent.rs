//! `flare agent`: the node agent. Drains the tracer rings of the processes on this node,
//! summarises each window, watches for hangs, serves Prometheus metrics and pushes the
//! summaries to `flare serve` (or writes them as JSON).

use anyhow::{bail, Context, Result};
use clap::Args;
use flare_agent::{AgentConfig, PushConfig};
use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

#[derive(Args)]
pub struct AgentArgs {
    /// Directory where traced processes create their ring files.
    #[arg(long, default_value = "/dev/shm")]
    pub shm_dir: PathBuf,
    /// Only collect this job's processes (the tracer's job id); all jobs by default.
    #[arg(long)]
    pub job: Option<String>,
    /// Node name in the summaries (the host name by default).
    #[arg(long)]
    pub node: Option<String>,
    /// Summary window, aligned to Unix time so every node cuts the same windows.
    #[arg(long, default_value = "10s", value_parser = duration)]
    pub window: Duration,
    /// How often the rings are drained.
    #[arg(long, default_value = "100ms", value_parser = duration)]
    pub poll: Duration,
    /// Where summaries go: `http://host:port` of `flare serve`, or `nats://host:4222`
    /// to publish them to NATS JetStream for `flare serve --nats` workers (the token, if
    /// any, is then the NATS server's auth token).
    #[arg(long, value_name = "URL")]
    pub server: Option<String>,
    /// Bearer token for the server. Prefer the FLARE_TOKEN environment variable: a
    /// command-line argument is visible to other users in `ps`.
    #[arg(long, value_name = "TOKEN")]
    pub token: Option<String>,
    /// PEM certificate(s) to trust for an https --server (the cluster's own CA) instead of
    /// the public roots.
    #[arg(long, value_name = "FILE")]
    pub ca_cert: Option<PathBuf>,
    /// Export each window's metrics over OTLP/HTTP (JSON) to this endpoint: a base
    /// (`http://collector:4318`, `/v1/metrics` is appended) or the full metrics URL. Else
    /// OTEL_EXPORTER_OTLP_METRICS_ENDPOINT or OTEL_EXPORTER_OTLP_ENDPOINT; headers from
    /// OTEL_EXPORTER_OTLP_HEADERS (`key=value,...`).
    #[arg(long, value_name = "URL")]
    pub otlp_endpoint: Option<String>,
    /// Also write every summary as JSON into this directory.
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// Write NCCL Inspector's output here from the events of Flare's NCCL plugin: per
    /// process `<host>-pid<pid>.log` (JSON lines, one per collective or P2P operation) and
    /// per rank `nccl_inspector_metrics_rank<R>.prom` (Prometheus textfile).
    #[arg(long, value_name = "DIR")]
    pub inspector_out: Option<PathBuf>,
    /// Prometheus metrics address (`/metrics`); "off" disables it.
    #[arg(long, default_value = flare_agent::DEFAULT_METRICS_LISTEN, value_parser = listen_addr)]
    pub metrics_listen: Listen,
    /// Report an op open with no progress for this long as a hang.
    #[arg(long, default_value = "300s", value_parser = duration)]
    pub hang_timeout: Duration,
    /// py-spy binary for Python stacks of hung processes (default: py-spy on PATH, then
    /// target/flare-venv/bin/py-spy).
    #[arg(long, value_name = "PATH")]
    pub py_spy: Option<PathBuf>,
    /// Follow the job's log files (a file, or a directory walked for log files:
    /// torchrun's --log-dir, Slurm output, a kernel log): the lines the diagnosis needs
    /// go to the server with the window's summary. Needs --job. Repeatable.
    #[arg(long = "logs", value_name = "PATH")]
    pub logs: Vec<PathBuf>,
    /// Drain what is there, emit the current (partial) window, and exit. Without
    /// --server or --out the summaries are printed as JSON lines.
    #[arg(long)]
    pub once: bool,
}

/// A metrics listen address, or none.
#[derive(Clone, Copy, Debug)]
pub struct Listen(Option<SocketAddr>);

/// A command-line duration (`10s`, `100ms`, `30d`), as the agent's configuration reads it.
pub(crate) fn duration(s: &str) -> Result<Duration, String> {
    flare_agent::parse_duration(s).map_err(|e| e.to_string())
}

fn listen_addr(s: &str) -> Result<Listen, String> {
    if matches!(s, "off" | "none" | "") {
        return Ok(Listen(None));
    }
    s.parse()
        .map(|a| Listen(Some(a)))
        .map_err(|_| format!("{s:?} is not an address like 127.0.0.1:9470 (or \"off\")"))
}

/// The OTLP export: the flag, else the OpenTelemetry SDKs' variables (the metrics one is
/// a full URL, the general one a base).
fn otlp_config(flag: Option<&str>) -> Result<Option<flare_agent::otlp::OtlpConfig>> {
    use flare_agent::otlp::OtlpConfig;
    let env = |k: &str| std::env::var(k).ok().filter(|v| !v.trim().is_empty());
    let mut cfg = match (
        flag,
        env("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT"),
        env("OTEL_EXPORTER_OTLP_ENDPOINT"),
    ) {
        (Some(f), ..) => OtlpConfig::new(f)?,
        (None, Some(full), _) => OtlpConfig {
            // Used as given, even without the usual path (the SDKs' rule).
            url: full.trim().trim_end_matches('/').to_string(),
            ..OtlpConfig::new(&full)?
        },
        (None, None, Some(base)) => OtlpConfig::new(&base)?,
        (None, None, None) => return Ok(None),
    };
    if let Some(h) = env("OTEL_EXPORTER_OTLP_HEADERS") {
        cfg.headers = OtlpConfig::parse_headers(&h)?;
    }
    Ok(Some(cfg))
}

pub fn run(args: AgentArgs) -> Result<ExitCode> {
    let token = match args.token {
        Some(t) => Some(t),
        None => match std::env::var("FLARE_TOKEN") {
            Ok(t) => Some(t),
            Err(std::env::VarError::NotPresent) => None,
            Err(std::env::VarError::NotUnicode(_)) => bail!("FLARE_TOKEN is not valid UTF-8"),
        },
    };
    let push = match args.server {
        Some(server) => {
            let token = token.filter(|t| !t.trim().is_empty());
            if token.is_none() && !flare_agent::is_nats(&server) {
                bail!("--server needs a token: pass --token TOKEN or set FLARE_TOKEN");
            }
            Some(PushConfig {
                ca_cert: args.ca_cert,
                ..PushConfig::new(server, token)
            })
        }
        None => None,
    };
    let otlp = otlp_config(args.otlp_endpoint.as_deref())?;
    let print = args.once && push.is_none() && args.out.is_none();
    let mut cfg = AgentConfig {
        shm_dir: args.shm_dir,
        job: args.job,
        window: args.window,
        poll: args.poll,
        hang_timeout: args.hang_timeout,
        py_spy: args.py_spy,
        out_dir: args.out,
        inspector_dir: args.inspector_out,
        push,
        otlp,
        // A one-shot run neither serves metrics nor claims the files: producers that
        // exit later should clean up after themselves.
        metrics_listen: if args.once {
            None
        } else {
            args.metrics_listen.0
        },
        heartbeat: !args.once,
        logs: (!args.logs.is_empty()).then(|| flare_agent::LogConfig::new(args.logs)),
        ..AgentConfig::default()
    };
    if let Some(node) = args.node {
        cfg.node = node;
    }
    // A one-shot run over a missing directory is a mistake; a long-running agent may
    // start before the directory exists, and waits for it.
    if args.once && !cfg.shm_dir.is_dir() {
        bail!("{} is not a directory", cfg.shm_dir.display());
    }
    if !args.once && cfg.push.is_none() && cfg.out_dir.is_none() {
        eprintln!("note: no --server and no --out: summaries only feed /metrics");
    }
    flare_agent::init_logging();
    let agent = flare_agent::Agent::new(cfg).context("starting the agent")?;
    let report = if args.once {
        let (summaries, report) = agent.run_once();
        if print {
            let mut out = std::io::stdout().lock();
            for s in &summaries {
                serde_json::to_writer(&mut out, s)?;
                writeln!(out)?;
            }
            out.flush()?;
        }
        report
    } else {
        let stop = flare_agent::install_stop_handlers()?;
        agent.run(stop)
    };
    eprintln!(
        "{} summaries, {} events, {} hangs",
        report.summaries, report.events, report.hangs
    );
    if let Some(l) = &report.logs {
        eprintln!(
            "logs: {} files, {} lines read, {} sent, {} over the per-window budget",
            l.tail.files, l.lines_read, l.lines_sent, l.lines_dropped
        );
    }
    let mut failed = report.write_errors > 0;
    if let Some(p) = &report.push {
        eprintln!(
            "pushed {}, undelivered {}, dropped {}, rejected {}",
            p.sent, p.queued, p.dropped, p.rejected
        );
        failed |= args.once && (p.queued > 0 || p.dropped > 0 || p.rejected > 0);
    }
    Ok(if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}
