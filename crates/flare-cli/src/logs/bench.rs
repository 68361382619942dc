//! `flare bench logs`: the template miner's grouping accuracy on LogHub-2k-shaped data
//! and its speed on one core.
//!
//! Accuracy is measured the usual LogHub way: the miner gets the Content column of each
//! `<System>_2k.log_structured_corrected.csv` and is scored against its EventId. A second
//! column scores the raw `<System>_2k.log` lines after the generic header guess, which is
//! what `flare logs templates` does to a file; that one is informative, not the benchmark.
//! Speed: all systems' content lines repeated to `--mb` MB in memory, then mined by one
//! fresh miner (masking + tree) on this thread, `--runs` times.

use anyhow::{bail, Context, Result};
use clap::Args;
use flare_logs::{csv, grouping_accuracy, header::strip_header, Config, Miner};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

#[derive(Args)]
pub struct LogsBenchArgs {
    /// A LogHub-2k-shaped directory: <System>/<System>_2k.log_structured_corrected.csv
    /// (or LogHub's original <System>_2k.log_structured.csv), and <System>_2k.log for the
    /// raw-line column.
    #[arg(long, default_value = "../shared/data/loghub-2k")]
    pub dir: PathBuf,
    /// Megabytes of content lines to time the miner on.
    #[arg(long, default_value_t = 64)]
    pub mb: usize,
    /// Timed runs.
    #[arg(long, default_value_t = 3)]
    pub runs: usize,
}

struct System {
    name: String,
    content: Vec<String>,
    events: Vec<String>,
}

fn load(dir: &Path) -> Result<Vec<System>> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .with_context(|| format!("cannot list {}", dir.display()))?
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| truth_path(dir, n).is_file())
        .collect();
    names.sort();
    if names.is_empty() {
        bail!(
            "no <System>/<System>_2k.log_structured_corrected.csv under {}",
            dir.display()
        );
    }
    names
        .into_iter()
        .map(|name| {
            let path = truth_path(dir, &name);
            let text = std::fs::read_to_string(&path)
                .with_context(|| format!("cannot read {}", path.display()))?;
            let rows = csv::columns(&text, &["Content", "EventId"])
                .with_context(|| format!("parsing {}", path.display()))?;
            let (content, events) = rows
                .into_iter()
                .map(|mut r| (std::mem::take(&mut r[0]), std::mem::take(&mut r[1])))
                .unzip();
            Ok(System {
                name,
                content,
                events,
            })
        })
        .collect()
}

/// The corrected ground truth, or LogHub's original one where there is no corrected.
fn truth_path(dir: &Path, name: &str) -> PathBuf {
    let corrected = dir
        .join(name)
        .join(format!("{name}_2k.log_structured_corrected.csv"));
    if corrected.is_file() {
        corrected
    } else {
        dir.join(name).join(format!("{name}_2k.log_structured.csv"))
    }
}

fn mine<'a>(lines: impl Iterator<Item = &'a str>) -> Vec<u32> {
    let mut miner = Miner::new(Config::default()).expect("default config is valid");
    lines.map(|l| miner.add(l)).collect()
}

/// GA on the raw log file's lines with the header guessed away, when the file is there
/// and has one line per ground-truth row.
fn raw_ga(dir: &Path, s: &System) -> Option<f64> {
    let text = std::fs::read(dir.join(&s.name).join(format!("{}_2k.log", s.name))).ok()?;
    let text = String::from_utf8_lossy(&text);
    let lines: Vec<&str> = text.lines().collect();
    (lines.len() == s.events.len()).then(|| {
        let pred = mine(lines.iter().map(|l| strip_header(l)));
        grouping_accuracy(&pred, &s.events)
    })
}

/// This thread's CPU time so far, in seconds (Linux: the first field of
/// /proc/thread-self/schedstat, nanoseconds on a CPU).
fn thread_cpu_s() -> Option<f64> {
    let s = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    let ns: u64 = s.split_whitespace().next()?.parse().ok()?;
    Some(ns as f64 / 1e9)
}

pub fn bench(a: LogsBenchArgs) -> Result<ExitCode> {
    let systems = load(&a.dir)?;
    println!(
        "Grouping accuracy on {} (miner fed the Content column):",
        a.dir.display()
    );
    println!(
        "{:14} {:>8} {:>10} {:>16}",
        "system", "GA", "templates", "GA raw lines*"
    );
    let mut sum = 0.0;
    for s in &systems {
        let pred = mine(s.content.iter().map(String::as_str));
        let ga = grouping_accuracy(&pred, &s.events);
        sum += ga;
        let templates = pred.iter().max().map_or(0, |m| m + 1);
        let raw = raw_ga(&a.dir, s).map_or("-".to_string(), |g| format!("{g:.4}"));
        println!("{:14} {ga:>8.4} {templates:>10} {raw:>16}", s.name);
    }
    println!("{:14} {:>8.4}", "mean", sum / systems.len() as f64);
    println!("* raw log lines, header stripped by the generic guess (not the benchmark figure)");

    // Speed: the content lines, repeated to the size asked, one big buffer.
    let one: usize = systems
        .iter()
        .flat_map(|s| &s.content)
        .map(|l| l.len() + 1)
        .sum();
    let target = a.mb.max(1) << 20;
    let mut buf = String::with_capacity(target + one);
    while buf.len() < target {
        for l in systems.iter().flat_map(|s| &s.content) {
            buf.push_str(l);
            buf.push('\n');
        }
    }
    let lines = buf.lines().count();
    println!(
        "\nSpeed: {lines} content lines, {:.1} MB, one thread, a fresh miner per run",
        buf.len() as f64 / 1e6
    );
    for run in 1..=a.runs.max(1) {
        let t = Instant::now();
        let cpu0 = thread_cpu_s();
        let mut miner = Miner::new(Config::default()).expect("default config is valid");
        let mut check = 0u64;
        for l in buf.lines() {
            check = check.wrapping_add(u64::from(miner.add(l)));
        }
        let dt = t.elapsed().as_secs_f64();
        let cpu = thread_cpu_s().zip(cpu0).map(|(b, a)| b - a);
        std::hint::black_box(check);
        // On a shared machine the wall clock counts time other processes held the core;
        // the thread's own CPU time does not.
        let on_cpu = cpu.map_or(String::new(), |c| {
            format!("; on CPU {c:.3} s, {:.2} M lines/s", lines as f64 / c / 1e6)
        });
        println!(
            "run {run}: {:.3} s, {:.2} M lines/s, {:.0} MB/s{on_cpu}; {} templates",
            dt,
            lines as f64 / dt / 1e6,
            buf.len() as f64 / dt / 1e6,
            miner.templates().count()
        );
    }
    Ok(ExitCode::SUCCESS)
}
