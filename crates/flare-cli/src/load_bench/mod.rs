//! `flare bench load`: a 10,240-GPU job's agents against real servers. `--agents` agents
//! (1,280 by default, 8 GPUs each) each send one window summary per `--window`, within
//! `--jitter` of the window's end, for `--windows` windows, through the agent's own
//! pusher: over HTTP to one `flare serve` on a new SQLite file (`--mode http`), or to
//! NATS JetStream consumed by `--servers` `flare serve --nats` workers on a PostgreSQL
//! database (`--mode nats --db postgres://...`). The servers are started here, as the
//! user would start them. Printed: what was lost, the time from a window's last summary
//! leaving its agent to the window's diagnosis being stored, the servers' CPU and
//! memory, and the bytes per GPU per day the agents sent.
//!
//! The summaries are those of a simulated job with a slow GPU, replayed through the
//! agent's aggregation; its few simulated windows are sent in turn, renumbered.

use anyhow::{bail, Context, Result};
use clap::{Args, ValueEnum};
use flare_agent::{PushConfig, Pusher};
use flare_model::WindowSummary;
use procs::{Postgres, Proc};
use std::io::{BufRead, BufReader};
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

mod procs;

const TOKEN: &str = "flare-bench-load-token";
const JOB: &str = "bench-load";
/// Iterations of the simulated job per window.
const ITERATIONS_PER_WINDOW: u32 = 4;

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum LoadMode {
    /// Agents post over HTTP to one server on SQLite.
    Http,
    /// Agents publish to NATS JetStream; servers consume it into PostgreSQL.
    Nats,
}

#[derive(Args)]
pub struct LoadBenchArgs {
    #[arg(long, value_enum)]
    pub mode: LoadMode,
    /// The PostgreSQL database for `--mode nats` (`postgres://...`, with no Flare data).
    #[arg(long, value_name = "URL")]
    pub db: Option<String>,
    /// Servers consuming NATS (`--mode nats`).
    #[arg(long, default_value_t = 2)]
    pub servers: usize,
    /// Agents (nodes); the job has 8 GPUs per agent.
    #[arg(long, default_value_t = 1280)]
    pub agents: u32,
    #[arg(long, default_value = "10s", value_parser = crate::agent::duration)]
    pub window: Duration,
    #[arg(long, default_value_t = 60)]
    pub windows: u64,
    /// Agents send within this long after a window ends (spread evenly).
    #[arg(long, default_value = "2s", value_parser = crate::agent::duration)]
    pub jitter: Duration,
    /// Pushers (connections) the agents' summaries are spread over.
    #[arg(long, default_value_t = 32)]
    pub connections: usize,
}

/// A scratch directory (the SQLite file, NATS's store), removed when the bench ends.
struct ScratchDir(std::path::PathBuf);

impl ScratchDir {
    fn new() -> Result<ScratchDir> {
        let p = std::env::temp_dir().join(format!("flare-bench-load-{}", std::process::id()));
        std::fs::create_dir_all(&p).with_context(|| format!("creating {}", p.display()))?;
        Ok(ScratchDir(p))
    }
    fn path(&self) -> &std::path::Path {
        &self.0
    }
}

impl Drop for ScratchDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn unix_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// `flare serve` with `args`, and the address it listens on.
fn start_server(args: &[&str]) -> Result<(Proc, String)> {
    let exe = std::env::current_exe().context("finding the flare binary")?;
    let mut child = Command::new(exe)
        .arg("serve")
        .args(args)
        .env("FLARE_TOKEN", TOKEN)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .context("starting flare serve")?;
    let mut line = String::new();
    BufReader::new(child.stdout.take().context("its stdout")?).read_line(&mut line)?;
    let Some(addr) = line.trim().strip_prefix("listening on ") else {
        bail!("flare serve did not start: {line:?}");
    };
    let addr = addr.to_string();
    Ok((
        Proc {
            child,
            name: "flare serve".into(),
        },
        addr,
    ))
}

fn start_nats(dir: &std::path::Path) -> Result<(Proc, String)> {
    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let child = Command::new("nats-server")
        .args(["-js", "-a", "127.0.0.1", "-p", &port.to_string(), "-sd"])
        .arg(dir)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .context("starting nats-server (apt-get install nats-server)")?;
    let t = Instant::now();
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        if t.elapsed() > Duration::from_secs(20) {
            bail!("nats-server did not start");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok((
        Proc {
            child,
            name: "nats-server".into(),
        },
        format!("nats://127.0.0.1:{port}"),
    ))
}

/// The job's window `k`: the template's summary of a node, renumbered and moved in time.
fn renumber(t: &WindowSummary, k: u64, its_per_window: u64) -> WindowSummary {
    let mut s = t.clone();
    let shift = k as i64 - t.window as i64;
    let dt = shift * t.window_ns as i64;
    let move_ns = |v: u64| (v as i64 + dt).max(0) as u64;
    s.window = k;
    s.start_unix_ns = move_ns(s.start_unix_ns);
    s.end_unix_ns = move_ns(s.end_unix_ns);
    for r in &mut s.ranks {
        for i in &mut r.iterations {
            i.start_unix_ns = move_ns(i.start_unix_ns);
            i.step = (i.step as i64 + shift * its_per_window as i64).max(0) as u64;
        }
    }
    s
}

fn get(agent: &ureq::Agent, api: &str, path: &str) -> Result<serde_json::Value> {
    let mut resp = agent
        .get(&format!("{api}{path}"))
        .header("Authorization", format!("Bearer {TOKEN}"))
        .call()
        .with_context(|| format!("GET {path}"))?;
    Ok(serde_json::from_str(&resp.body_mut().read_to_string()?)?)
}

pub fn run(a: LoadBenchArgs) -> Result<ExitCode> {
    let ranks = a.agents * 8;
    eprintln!("simulating the {ranks}-GPU job...");
    let (replayed, slow) = crate::store_bench::slow_gpu_job(ranks, 12, ITERATIONS_PER_WINDOW, JOB)?;
    let nodes = replayed.iter().map(Vec::len).max().unwrap_or(0);
    // Windows every node sent: the job's steady state.
    let templates: Vec<Vec<WindowSummary>> =
        replayed.into_iter().filter(|w| w.len() == nodes).collect();
    if templates.is_empty() {
        bail!("the simulated job has no complete window");
    }
    let bytes_per_window: Vec<usize> = templates
        .iter()
        .map(|w| {
            w.iter()
                .map(|s| flare_agent::encode_summary(s).map_or(0, |b| b.len()))
                .sum()
        })
        .collect();

    let dir = ScratchDir::new()?;
    let mut procs: Vec<Proc> = Vec::new();
    let postgres = match (a.mode, a.db.as_deref()) {
        (LoadMode::Nats, Some(db)) => Postgres::on_this_machine(db)?,
        _ => None,
    };
    let (target, api) = match a.mode {
        LoadMode::Http => {
            let db = dir.path().join("flare.db");
            let db = db.to_str().context("a UTF-8 temporary path")?;
            let (p, addr) = start_server(&[
                "--listen",
                "127.0.0.1:0",
                "--db",
                db,
                "--ingest-rate",
                "0",
                "--max-connections-per-ip",
                "0",
            ])?;
            procs.push(p);
            (addr.clone(), addr)
        }
        LoadMode::Nats => {
            let Some(db) = a.db.as_deref() else {
                bail!("--mode nats needs --db postgres://... (an empty database)");
            };
            let (p, nats) = start_nats(dir.path())?;
            procs.push(p);
            let mut api = String::new();
            for _ in 0..a.servers.max(1) {
                let (p, addr) =
                    start_server(&["--listen", "127.0.0.1:0", "--db", db, "--nats", &nats])?;
                procs.push(p);
                api = addr;
            }
            (nats, api)
        }
    };
    let pushers: Vec<Pusher> = (0..a.connections.max(1))
        .map(|_| {
            Pusher::start(PushConfig {
                max_queue: 1 << 20,
                max_queue_bytes: 8 << 30,
                ..PushConfig::new(target.clone(), Some(TOKEN.to_string()))
            })
        })
        .collect::<Result<_, _>>()?;
    // Each agent's send time in each window: the window's end plus its share of the
    // jitter (agents spread evenly, in an order that changes per window).
    let mut schedule: Vec<(Duration, u64, usize)> = Vec::new();
    for k in 0..a.windows {
        for node in 0..nodes {
            let spread =
                ((node as u64 * 2_654_435_761 + k * 40_503) % 1_000_003) as f64 / 1_000_003.0;
            let at = a.window * (k as u32 + 1) + a.jitter.mul_f64(spread);
            schedule.push((at, k, node));
        }
    }
    schedule.sort();
    eprintln!(
        "{} agents ({ranks} GPUs), {} windows of {:?}: {} summaries to {}",
        nodes,
        a.windows,
        a.window,
        schedule.len(),
        flare_server::nats::redact(&target)
    );
    let (cpu0, pg_cpu0, wall0) = (
        procs.iter().map(|p| p.usage().0).collect::<Vec<_>>(),
        postgres.as_ref().map(Postgres::cpu_s),
        Instant::now(),
    );
    let mut last_sent_ns = vec![0u64; a.windows as usize];
    let mut bytes = 0usize;
    let start = Instant::now();
    for (i, &(at, k, node)) in schedule.iter().enumerate() {
        if let Some(wait) = at.checked_sub(start.elapsed()) {
            std::thread::sleep(wait);
        }
        let t = (k as usize) % templates.len();
        let s = renumber(&templates[t][node], k, u64::from(ITERATIONS_PER_WINDOW));
        pushers[i % pushers.len()].submit(&s)?;
        last_sent_ns[k as usize] = unix_ns();
        if node == 0 {
            bytes += bytes_per_window[t];
        }
    }
    let mut sent = 0;
    let mut dropped = 0;
    let mut failures = 0;
    for p in pushers {
        let st = p.shutdown(Duration::from_secs(120));
        sent += st.sent;
        dropped += st.dropped + st.rejected + st.queued as u64;
        failures += st.failures;
    }
    let run_s = wall0.elapsed().as_secs_f64();
    let usage: Vec<(String, f64, f64)> = procs
        .iter()
        .zip(&cpu0)
        .map(|(p, c0)| {
            let (cpu, peak) = p.usage();
            (p.name.clone(), cpu - c0, peak)
        })
        .collect();
    let pg_usage = postgres
        .as_ref()
        .zip(pg_cpu0)
        .map(|(pg, c0)| (pg.cpu_s() - c0, pg.pss_mb()));
    // Every window whole, and when its diagnosis was stored.
    let http: ureq::Agent = ureq::Agent::config_builder()
        .timeout_global(Some(Duration::from_secs(60)))
        .build()
        .into();
    let deadline = Instant::now() + flare_server::nats::ACK_WAIT + Duration::from_secs(60);
    let mut latency_ms = Vec::new();
    let mut incomplete = Vec::new();
    let mut named = 0;
    for k in 0..a.windows {
        let doc = loop {
            let doc = get(&http, &api, &format!("/api/jobs/{JOB}/findings?window={k}"));
            match doc {
                Ok(d) if d["job"]["nodes"].as_u64() == Some(nodes as u64) => break Some(d),
                _ if Instant::now() > deadline => break None,
                _ => std::thread::sleep(Duration::from_millis(500)),
            }
        };
        let Some(doc) = doc else {
            incomplete.push(k);
            continue;
        };
        let analysed = doc["job"]["analysed_unix_ns"].as_u64().unwrap_or(0);
        latency_ms.push((analysed as f64 - last_sent_ns[k as usize] as f64) / 1e6);
        if std::env::var_os("FLARE_BENCH_DEBUG").is_some() {
            eprintln!(
                "window {k}: analysed {analysed}, last sent {}",
                last_sent_ns[k as usize]
            );
        }
        if slow.is_some()
            && doc["findings"][0]["culprits"][0]["rank"].as_u64() == slow.map(u64::from)
        {
            named += 1;
        }
    }
    latency_ms.sort_by(f64::total_cmp);
    let pct = |p: f64| {
        latency_ms
            .get(((latency_ms.len() as f64 * p) as usize).min(latency_ms.len().saturating_sub(1)))
            .copied()
            .unwrap_or(f64::NAN)
    };
    let gpu_days = f64::from(ranks) * a.windows as f64 * a.window.as_secs_f64() / 86_400.0;
    println!(
        "{:?}: {} agents, {ranks} GPUs, {} windows of {:?} in {run_s:.0} s; summaries sent {sent} of {}, lost {dropped} (send failures retried: {failures})",
        a.mode,
        nodes,
        a.windows,
        a.window,
        schedule.len()
    );
    println!(
        "windows stored whole: {} of {} (incomplete: {incomplete:?}); whose top finding names the simulated slow GPU (rank {}): {named}",
        a.windows as usize - incomplete.len(),
        a.windows,
        slow.map_or("none".into(), |r| r.to_string())
    );
    println!(
        "last summary sent -> window's diagnosis stored: p50 {:.0} ms, p99 {:.0} ms, max {:.0} ms",
        pct(0.5),
        pct(0.99),
        latency_ms.last().copied().unwrap_or(f64::NAN)
    );
    for (name, cpu, peak) in &usage {
        println!(
            "{name}: {cpu:.1} CPU-s ({:.2} cores on average), peak RSS {peak:.0} MB",
            cpu / run_s
        );
    }
    match (pg_usage, a.mode) {
        (Some((cpu, pss)), _) => println!(
            "PostgreSQL (postmaster and backends): {cpu:.1} CPU-s ({:.2} cores on average), {} at the end",
            cpu / run_s,
            pss.map_or("memory not readable".into(), |mb| format!(
                "{mb:.0} MB proportional set size"
            ))
        ),
        (None, LoadMode::Nats) => {
            println!("PostgreSQL: not measured (not on this machine)")
        }
        (None, LoadMode::Http) => {}
    }
    println!(
        "on the wire: {:.1} KB per summary (zstd JSON), {:.2} MB per GPU per day",
        bytes as f64 / schedule.len().max(1) as f64 / 1e3,
        bytes as f64 / gpu_days / 1e6
    );
    Ok(if dropped == 0 && incomplete.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}
