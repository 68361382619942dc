//! `flare logs templates FILE... [--json]`.
//!
//! Files are read line by line (never whole). A line that is not UTF-8 is decoded
//! lossily (bad bytes become U+FFFD) and mined, not dropped; the first such line of each
//! file is reported on stderr with its number, and the count at the end. Unless
//! `--content` says the lines are bare messages, a generic header guess
//! ([`flare_logs::header::strip_header`]) drops leading timestamps, hosts, pids, levels
//! and `component:` tags before mining.

use anyhow::{Context, Result};
use clap::Args;
use flare_logs::{header::strip_header, Config, Miner};
use serde::Serialize;
use std::io::{BufRead, BufReader, BufWriter, Write};
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Args)]
pub struct TemplatesArgs {
    /// Log files, mined in order as one stream.
    #[arg(required = true)]
    pub files: Vec<PathBuf>,
    /// Print one JSON object per input line (file, line, template_id, template) instead
    /// of the summary. The template is the line's template as it stands when the line is
    /// read; ids are stable within a run.
    #[arg(long)]
    pub json: bool,
    /// The lines are bare messages: do not strip a header.
    #[arg(long)]
    pub content: bool,
    /// Templates kept at most; past it, lines that match none share one overflow
    /// template `<*>` (the summary says how many).
    #[arg(long, default_value_t = Config::default().max_clusters)]
    pub max_templates: usize,
}

/// One input line's template, as `--json` prints it (one object per line).
#[derive(Serialize)]
struct TemplatedLine<'a> {
    file: &'a str,
    /// 1-based line number in `file`.
    line: u64,
    template_id: flare_logs::TemplateId,
    /// The template as it stands when the line is read.
    template: &'a str,
}

pub fn run(a: TemplatesArgs) -> Result<ExitCode> {
    super::quiet_on_broken_pipe(mine(a))
}

fn mine(a: TemplatesArgs) -> Result<ExitCode> {
    let mut miner = Miner::new(Config {
        max_clusters: a.max_templates,
        ..Config::default()
    })
    .context("invalid --max-templates")?;
    let stdout = std::io::stdout();
    let mut out = BufWriter::new(stdout.lock());
    let mut raw = Vec::new();
    let mut lines = 0u64;
    let mut lossy = 0u64;
    for path in &a.files {
        let file = std::fs::File::open(path)
            .with_context(|| format!("cannot open log file {}", path.display()))?;
        let mut reader = BufReader::with_capacity(1 << 16, file);
        let mut number = 0u64;
        let mut warned = false;
        let file_name = path.display().to_string();
        loop {
            raw.clear();
            let n = reader
                .read_until(b'\n', &mut raw)
                .with_context(|| format!("reading {} after line {number}", path.display()))?;
            if n == 0 {
                break;
            }
            number += 1;
            while matches!(raw.last(), Some(b'\n' | b'\r')) {
                raw.pop();
            }
            let text = match std::str::from_utf8(&raw) {
                Ok(s) => std::borrow::Cow::Borrowed(s),
                Err(_) => {
                    lossy += 1;
                    if !warned {
                        eprintln!(
                            "warning: {}:{number}: not UTF-8, decoded lossily (further such lines of this file are not reported one by one)",
                            path.display()
                        );
                        warned = true;
                    }
                    String::from_utf8_lossy(&raw)
                }
            };
            let message = if a.content {
                &text[..]
            } else {
                strip_header(&text)
            };
            let id = miner.add(message);
            lines += 1;
            if a.json {
                let template = miner.template(id).map(|t| t.text()).unwrap_or_default();
                let record = TemplatedLine {
                    file: &file_name,
                    line: number,
                    template_id: id,
                    template: &template,
                };
                serde_json::to_writer(&mut out, &record)?;
                writeln!(out)?;
            }
        }
    }
    if lossy > 0 {
        eprintln!("warning: {lossy} line(s) were not UTF-8 and were decoded lossily");
    }
    if !a.json {
        summary(&mut out, &miner, lines)?;
    }
    out.flush()?;
    Ok(ExitCode::SUCCESS)
}

fn summary(out: &mut impl Write, miner: &Miner, lines: u64) -> Result<()> {
    let mut all: Vec<_> = miner.templates().collect();
    all.sort_by(|a, b| b.count.cmp(&a.count).then(a.id.cmp(&b.id)));
    writeln!(out, "{lines} lines, {} templates", all.len())?;
    if miner.overflowed() > 0 {
        writeln!(
            out,
            "template cap reached: {} lines matched no kept template and share id {} (<*>)",
            miner.overflowed(),
            miner.overflow_id()
        )?;
    }
    writeln!(out, "{:>8} {:>10}  template", "id", "count")?;
    for t in all {
        writeln!(out, "{:>8} {:>10}  {}", t.id, t.count, t.text())?;
    }
    Ok(())
}
