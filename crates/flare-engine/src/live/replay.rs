//! A job's window summaries read back from disk (`flare agent --out DIR`, then `flare
//! diagnose DIR`), diagnosed window by window as the server diagnoses them when they
//! arrive, and summed up in one findings document.

use super::{diagnose_window, LiveConfig, LiveDiagnosis, LiveWindow};
use flare_model::{Finding, FindingsDocument, JobSummary, WindowHistory, WindowSummary};
use std::collections::{BTreeMap, BTreeSet};

/// One window's diagnosis.
#[derive(Clone, Debug)]
pub struct ReplayedWindow {
    pub window: u64,
    pub diagnosis: LiveDiagnosis,
}

/// Diagnoses one job's summaries (any order) window by window, each with the earlier
/// windows and the previous window's findings, as the server does.
pub fn replay(summaries: &[WindowSummary], cfg: &LiveConfig) -> Vec<ReplayedWindow> {
    let mut by_window: BTreeMap<u64, Vec<WindowSummary>> = BTreeMap::new();
    for s in summaries {
        by_window.entry(s.window).or_default().push(s.clone());
    }
    let mut seen: Vec<LiveWindow> = Vec::new();
    let mut out: Vec<ReplayedWindow> = Vec::new();
    for group in by_window.values() {
        let current = LiveWindow::from_summaries(group);
        let from = seen.len().saturating_sub(cfg.history);
        let earlier: Vec<&LiveWindow> = seen[from..].iter().collect();
        let previous = out.last().map(|w| w.diagnosis.findings.as_slice());
        let diagnosis = diagnose_window(&current, &earlier, previous, cfg);
        out.push(ReplayedWindow {
            window: current.window,
            diagnosis,
        });
        seen.push(current);
    }
    out
}

/// The job's document: each finding once, as the last window that reported it said it,
/// with the windows it was reported in as its iterations; the windows' history; the last
/// window's notes; the job conclusive when any window was.
pub fn document(
    job_id: &str,
    summaries: &[WindowSummary],
    windows: &[ReplayedWindow],
) -> FindingsDocument {
    let mut merged: BTreeMap<String, Finding> = BTreeMap::new();
    let mut order: Vec<String> = Vec::new();
    for w in windows {
        for f in &w.diagnosis.findings {
            // The same finding from window to window: its subject.
            let k = f.subject_key();
            let mut f = f.clone();
            let mut seen_in = merged
                .remove(&k)
                .map(|old| old.iterations)
                .unwrap_or_else(|| {
                    order.push(k.clone());
                    Vec::new()
                });
            seen_in.push(w.window as u32);
            f.iterations = seen_in;
            merged.insert(k, f);
        }
    }
    let findings: Vec<Finding> = order.iter().filter_map(|k| merged.remove(k)).collect();
    let ranks: BTreeSet<u32> = summaries
        .iter()
        .flat_map(|s| s.ranks.iter().map(|r| r.rank))
        .collect();
    let nodes: BTreeSet<&str> = summaries.iter().map(|s| s.node.as_str()).collect();
    let world_size = summaries.iter().map(|s| s.world_size).max().unwrap_or(0);
    let job = JobSummary {
        id: job_id.to_string(),
        source: "agent summaries".into(),
        world_size,
        ranks_with_data: ranks.len(),
        missing_ranks: (0..world_size).filter(|r| !ranks.contains(r)).collect(),
        nodes: Some(nodes.len()),
        window: windows.last().map(|w| w.window),
        windows_analysed: Some(windows.len() as u64),
        parallel: summaries.iter().find_map(|s| s.parallel.clone()),
        ..JobSummary::default()
    };
    let conclusive = windows.iter().any(|w| w.diagnosis.conclusive);
    let mut doc = FindingsDocument::new(job, findings, conclusive);
    // The last window's notes: each window's notes are about that window.
    let mut notes: Vec<String> = windows
        .last()
        .map(|w| w.diagnosis.notes.clone())
        .unwrap_or_default();
    notes.push(format!(
        "{} windows replayed from agent summaries; iterations in findings are the windows that reported them",
        windows.len()
    ));
    doc.notes = notes;
    doc.skipped_detectors = windows
        .last()
        .map(|w| w.diagnosis.skipped.clone())
        .unwrap_or_default();
    doc.history = windows
        .iter()
        .map(|w| WindowHistory {
            window: w.window,
            findings: w.diagnosis.findings.len() as u64,
            kinds: flare_model::distinct_kinds(&w.diagnosis.findings),
        })
        .collect();
    doc
}
