//! `flare bench logs-corpus`: `flare logs diagnose` scored on labelled real failure logs
//! (`tests/fixtures/logs/corpus`, each case a folder of log excerpts and a `truth.json`,
//! see its README).
//!
//! Per case, the top finding is compared with the truth: its first line is a root-cause
//! line (one of `root_lines`), never a line labelled as an effect (`cascade_lines`), its
//! category, its culprit (rank or host, where the truth names one), its stage and whether
//! a restart helps (where the truth says). Two kinds of case besides the corpus's own,
//! which real generated jobs need: `"category": "none"` (a healthy run: right when no
//! finding is a warning or worse) and empty `root_lines` (no line shows the cause, as in
//! a hang: right when the top finding names no effect line as its root).

use super::diagnose::{diagnose_paths, is_log_name};
use anyhow::{bail, Context, Result};
use clap::Args;
use flare_import::limits::Limits;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

#[derive(Args)]
pub struct CorpusArgs {
    /// A folder of cases: <id>/truth.json beside the case's log files.
    #[arg(long, default_value = "tests/fixtures/logs/corpus")]
    pub dir: PathBuf,
    /// Print one JSON object (totals and cases) instead of the table.
    #[arg(long)]
    pub json: bool,
}

#[derive(Deserialize)]
struct Truth {
    id: String,
    category: String,
    root_lines: Vec<String>,
    #[serde(default)]
    cascade_lines: Vec<String>,
    culprit: TruthCulprit,
    stage: String,
    restart_helps: Option<bool>,
}

#[derive(Deserialize)]
struct TruthCulprit {
    rank: Option<u32>,
    node: Option<String>,
}

/// One case's result.
#[derive(Serialize)]
pub struct CaseResult {
    pub id: String,
    /// The top finding's first line is a root-cause line.
    pub root_line: bool,
    /// A root-cause line is among the top finding's lines.
    pub root_in_lines: bool,
    /// The top finding's first line is a line labelled as an effect.
    pub cascade_as_root: bool,
    pub category: String,
    pub category_named: Option<String>,
    /// `null` where the truth names no culprit.
    pub culprit: Option<bool>,
    pub stage: bool,
    pub stage_named: Option<String>,
    /// `null` where the truth does not say.
    pub restart: Option<bool>,
    pub line_named: Option<String>,
}

/// Totals over the cases.
#[derive(Serialize)]
pub struct CorpusScore {
    pub cases: usize,
    pub root_line: usize,
    pub root_in_lines: usize,
    pub cascade_as_root: usize,
    pub category: usize,
    pub culprit_right: usize,
    pub culprit_scored: usize,
    pub stage: usize,
    pub restart_right: usize,
    pub restart_scored: usize,
    pub per_case: Vec<CaseResult>,
}

fn case(dir: &Path) -> Result<CaseResult> {
    let truth_path = dir.join("truth.json");
    let truth: Truth = serde_json::from_str(
        &std::fs::read_to_string(&truth_path)
            .with_context(|| format!("cannot read {}", truth_path.display()))?,
    )
    .with_context(|| format!("{}: not a case's truth", truth_path.display()))?;
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n != "truth.json" && is_log_name(n))
        })
        .collect();
    files.sort();
    let (d, _) = diagnose_paths(&files, &[], &Limits::default())?;
    let top = d.findings.first();
    let lines: Vec<&str> = top
        .and_then(|f| f.failure.as_ref())
        .map(|fd| fd.lines.iter().map(|l| l.text.as_str()).collect())
        .unwrap_or_default();
    let healthy_case = truth.category == "none";
    let alarm = d
        .findings
        .iter()
        .any(|f| f.severity >= flare_model::Severity::Warning);
    let no_root_line = truth.root_lines.is_empty();
    let is_root = |t: &str| truth.root_lines.iter().any(|r| t.contains(r.as_str()));
    let is_cascade = |t: &str| truth.cascade_lines.iter().any(|r| t.contains(r.as_str()));
    let first = lines.first().copied();
    let category_named = top
        .and_then(|f| f.failure.as_ref())
        .map(|fd| fd.category.to_string());
    let stage_named = top
        .and_then(|f| f.failure.as_ref())
        .map(|fd| fd.stage.to_string());
    let culprit = top.and_then(|f| f.culprits.first());
    let culprit_right = match (&truth.culprit.rank, &truth.culprit.node) {
        (None, None) => None,
        (rank, node) => Some(culprit.is_some_and(|c| {
            rank.is_none_or(|r| c.rank == Some(r))
                && node
                    .as_ref()
                    .is_none_or(|n| c.host.as_deref() == Some(n.as_str()))
        })),
    };
    let restart_named = top
        .and_then(|f| f.failure.as_ref())
        .and_then(|fd| fd.restart_helps);
    if healthy_case {
        return Ok(CaseResult {
            id: truth.id,
            root_line: !alarm,
            root_in_lines: !alarm,
            cascade_as_root: false,
            category_named: Some(if alarm {
                category_named.unwrap_or_default()
            } else {
                "none".into()
            }),
            culprit: None,
            stage: !alarm,
            stage_named: None,
            restart: None,
            line_named: first.map(|l| l.chars().take(160).collect()),
            category: truth.category,
        });
    }
    let root_ok = if no_root_line {
        top.is_some() && lines.is_empty()
    } else {
        first.is_some_and(is_root)
    };
    Ok(CaseResult {
        id: truth.id,
        root_line: root_ok,
        root_in_lines: root_ok || lines.iter().any(|l| is_root(l)),
        cascade_as_root: first.is_some_and(|l| is_cascade(l) && !is_root(l)),
        category_named: category_named.clone(),
        culprit: culprit_right,
        stage: stage_named.as_deref() == Some(truth.stage.as_str()),
        stage_named,
        restart: truth.restart_helps.map(|r| restart_named == Some(r)),
        line_named: first.map(|l| l.chars().take(160).collect()),
        category: truth.category,
    })
}

pub fn score(dir: &Path) -> Result<CorpusScore> {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(dir)
        .with_context(|| format!("cannot list {}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.join("truth.json").is_file())
        .collect();
    dirs.sort();
    if dirs.is_empty() {
        bail!("no cases (<id>/truth.json) under {}", dir.display());
    }
    let per_case: Vec<CaseResult> = dirs.iter().map(|d| case(d)).collect::<Result<_>>()?;
    let count = |f: &dyn Fn(&CaseResult) -> bool| per_case.iter().filter(|c| f(c)).count();
    Ok(CorpusScore {
        cases: per_case.len(),
        root_line: count(&|c| c.root_line),
        root_in_lines: count(&|c| c.root_in_lines),
        cascade_as_root: count(&|c| c.cascade_as_root),
        category: count(&|c| c.category_named.as_deref() == Some(c.category.as_str())),
        culprit_right: count(&|c| c.culprit == Some(true)),
        culprit_scored: count(&|c| c.culprit.is_some()),
        stage: count(&|c| c.stage),
        restart_right: count(&|c| c.restart == Some(true)),
        restart_scored: count(&|c| c.restart.is_some()),
        per_case,
    })
}

fn pct(a: usize, b: usize) -> String {
    if b == 0 {
        "-".into()
    } else {
        format!("{a}/{b} ({:.0}%)", 100.0 * a as f64 / b as f64)
    }
}

pub fn run(a: CorpusArgs) -> Result<ExitCode> {
    super::quiet_on_broken_pipe(score_and_print(a))
}

fn score_and_print(a: CorpusArgs) -> Result<ExitCode> {
    use std::fmt::Write as _;
    use std::io::Write as _;
    let s = score(&a.dir)?;
    let mut out = String::new();
    if a.json {
        out = serde_json::to_string_pretty(&s)? + "\n";
        std::io::stdout().lock().write_all(out.as_bytes())?;
        return Ok(ExitCode::SUCCESS);
    }
    writeln!(
        out,
        "{:<58} {:>4} {:>4} {:>20} {:>7} {:>5} {:>7}",
        "case", "root", "casc", "category (named)", "culprit", "stage", "restart"
    )?;
    let yn = |b: bool| if b { "yes" } else { "no" };
    let opt = |b: Option<bool>| b.map_or("-", |b| if b { "yes" } else { "no" });
    for c in &s.per_case {
        let cat = match &c.category_named {
            Some(n) if *n == c.category => n.clone(),
            Some(n) => format!("{}≠{n}", c.category),
            None => format!("{}≠none", c.category),
        };
        writeln!(
            out,
            "{:<58} {:>4} {:>4} {:>20} {:>7} {:>5} {:>7}",
            c.id.chars().take(58).collect::<String>(),
            yn(c.root_line),
            if c.cascade_as_root { "YES" } else { "-" },
            cat.chars().take(40).collect::<String>(),
            opt(c.culprit),
            yn(c.stage),
            opt(c.restart)
        )?;
    }
    writeln!(out)?;
    writeln!(out, "cases:                          {}", s.cases)?;
    writeln!(
        out,
        "root-cause line first:          {}",
        pct(s.root_line, s.cases)
    )?;
    writeln!(
        out,
        "root-cause line among shown:    {}",
        pct(s.root_in_lines, s.cases)
    )?;
    writeln!(
        out,
        "an effect line named as root:   {}",
        pct(s.cascade_as_root, s.cases)
    )?;
    writeln!(
        out,
        "category:                       {}",
        pct(s.category, s.cases)
    )?;
    writeln!(
        out,
        "culprit (where labelled):       {}",
        pct(s.culprit_right, s.culprit_scored)
    )?;
    writeln!(
        out,
        "stage:                          {}",
        pct(s.stage, s.cases)
    )?;
    writeln!(
        out,
        "restart helps (where labelled): {}",
        pct(s.restart_right, s.restart_scored)
    )?;
    std::io::stdout().lock().write_all(out.as_bytes())?;
    Ok(ExitCode::SUCCESS)
}
