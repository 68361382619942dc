//! Presenting a diagnosis: text for people, JSON for machines, the HTML report.

use flare_engine::{Diagnosis, JobContext};
use flare_model::{Finding, FindingsDocument, Severity, Verdict};
use flare_report::{Heatmap, ReportInput};
use indicatif::{ProgressBar, ProgressStyle};
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

pub fn spinner(msg: &str) -> ProgressBar {
    let pb = ProgressBar::new_spinner();
    pb.set_style(ProgressStyle::with_template("{spinner} {msg} ({elapsed})").expect("template"));
    pb.set_message(msg.to_string());
    pb.enable_steady_tick(Duration::from_millis(100));
    pb
}

pub fn bar(len: u64, msg: &str) -> ProgressBar {
    let pb = ProgressBar::new(len);
    pb.set_style(
        ProgressStyle::with_template("{msg} [{bar:40}] {pos}/{len} ({eta})")
            .expect("template")
            .progress_chars("=> "),
    );
    pb.set_message(msg.to_string());
    pb
}

fn severity_word(s: Severity) -> &'static str {
    match s {
        Severity::Info => "info",
        Severity::Warning => "WARNING",
        Severity::Critical => "CRITICAL",
    }
}

/// Text for a person: what is wrong, where, the evidence, the confidence and the action.
pub fn text(doc: &FindingsDocument) -> String {
    let mut out = String::new();
    let job = &doc.job;
    out.push_str(&format!(
        "Flare diagnosis of {} ({} ranks, {} ops, iterations {}..{}) in {:.0} ms\n",
        job.id,
        job.world_size,
        job.ops.unwrap_or(0),
        job.iterations.first().copied().unwrap_or(0),
        job.iterations.last().copied().unwrap_or(0),
        doc.diagnosis_ms.unwrap_or(0.0)
    ));
    // A document read back from an older Flare has the list and no count.
    let missing = job.missing_rank_count.max(job.missing_ranks.len() as u64);
    if missing > 0 {
        out.push_str(&format!(
            "note: no data for {missing} rank(s): {:?}\n",
            &job.missing_ranks[..job.missing_ranks.len().min(16)]
        ));
    }
    match doc.verdict() {
        Verdict::Inconclusive => out.push_str(
            "\nINCONCLUSIVE: the trace lacks what the localization detectors need (see the skipped detectors below); nothing can be said about stragglers.\n",
        ),
        Verdict::Healthy => {
            out.push_str("\nHEALTHY: no rank, link, switch or stage stands out.\n")
        }
        Verdict::Unhealthy => {}
    }
    for (i, f) in doc.findings().iter().enumerate() {
        out.push_str(&finding_text(i + 1, f));
    }
    if doc
        .rank_metrics
        .iter()
        .any(|m| m.relative_score < 0.95 || m.individual_score < 0.95)
    {
        out.push_str("\nPer-rank metrics, lowest performance score first (scores: 1.0 = fastest peer / own best):\n");
        out.push_str(&format!(
            "   {:>6} {:>9} {:>10} {:>8} {:>9} {:>8} {:>8}\n",
            "rank", "relative", "individual", "TFLOPS", "bus GB/s", "void", "launch"
        ));
        for m in doc.rank_metrics.iter().take(8) {
            out.push_str(&format!(
                "   {:>6} {:>9.3} {:>10.3} {:>8.1} {:>9.1} {:>7.1}% {:>7.1}%\n",
                m.rank,
                m.relative_score,
                m.individual_score,
                m.tflops,
                m.bus_gbps,
                m.void_share * 100.0,
                m.immediate_launch_share * 100.0
            ));
        }
    }
    let b = &doc.rank_breakdown[..doc.rank_breakdown.len().min(8)];
    if !b.is_empty() {
        out.push_str("\nTime per rank (most idle + exposed communication first), ms:\n");
        out.push_str(&format!(
            "   {:>6} {:>10} {:>10} {:>10} {:>10} {:>10}\n",
            "rank", "window", "compute", "comm", "exposed", "idle"
        ));
        for x in b {
            out.push_str(&format!(
                "   {:>6} {:>10.1} {:>10.1} {:>10.1} {:>10.1} {:>10.1}\n",
                x.rank,
                x.window_ms,
                x.compute_ms,
                x.communication_ms,
                x.exposed_communication_ms,
                x.idle_ms
            ));
        }
    }
    for s in &doc.skipped_detectors {
        out.push_str(&format!(
            "\n(detector {} skipped: {})",
            s.detector, s.reason
        ));
    }
    for n in &doc.notes {
        out.push_str(&format!("\n(note: {n})"));
    }
    out.push('\n');
    out
}

pub fn finding_text(n: usize, f: &Finding) -> String {
    let mut s = format!(
        "\n{n}. [{}] {} — {}\n   confidence {:.0}%\n",
        severity_word(f.severity),
        f.kind,
        f.summary,
        f.confidence * 100.0
    );
    for c in f.culprits.iter().take(5) {
        s.push_str(&format!("   culprit: {}\n", c.describe()));
    }
    // The evidence that decided the finding; the rest is in --json (a finding with none
    // marked shows all).
    let any = f.evidence.iter().any(|e| e.decisive);
    let mut shown = 0;
    for e in f.evidence.iter().filter(|e| e.decisive || !any) {
        let base = e
            .baseline
            .map(|b| format!(" (baseline {b:.3})"))
            .unwrap_or_default();
        s.push_str(&format!(
            "   evidence: {} = {:.3} {}{} — {}\n",
            e.metric, e.value, e.unit, base, e.detail
        ));
        shown += 1;
    }
    if f.evidence.len() > shown {
        s.push_str(&format!("   {} more in --json\n", f.evidence.len() - shown));
    }
    if let Some(fd) = &f.failure {
        s.push_str(&failure_text(fd));
    }
    // Agreement of independent detectors matters to a reader: always shown.
    if !f.corroborated_by.is_empty() {
        let also: Vec<String> = f
            .corroborated_by
            .iter()
            .map(|c| format!("{} ({}, {:.0}%)", c.detector, c.kind, c.confidence * 100.0))
            .collect();
        s.push_str(&format!("   also found by {}\n", also.join(", ")));
    }
    s.push_str(&format!("   action: {}\n", f.action));
    s
}

/// A line of a log for a person: where, and the text cut to fit.
fn log_line_text(l: &flare_model::LogLine) -> String {
    let text: String = l.text.chars().take(240).collect();
    let more = if l.text.chars().count() > 240 {
        "…"
    } else {
        ""
    };
    format!("{}:{}  {}{}", l.file, l.line, text.trim(), more)
}

/// The failure a finding explains: category, stage, restart, the lines, the effects.
fn failure_text(fd: &flare_model::FailureDetail) -> String {
    let mut s = format!("   category: {}; stage: {}", fd.category, fd.stage);
    if let Some(i) = fd.iteration {
        s.push_str(&format!(", iteration {i}"));
    }
    s.push_str(&format!(
        "; a restart unchanged {}\n",
        match fd.restart_helps {
            Some(true) => "can succeed",
            Some(false) => "fails again",
            None => "may or may not succeed (the logs do not say)",
        }
    ));
    for l in &fd.lines {
        s.push_str(&format!(
            "   {:<8} {}\n",
            format!("{}:", l.role),
            log_line_text(l)
        ));
    }
    for g in fd.cascade.iter().take(8) {
        let from = match (g.rank_count, g.host_count) {
            (0, 0) => String::new(),
            (0, h) => format!(" from {h} host(s)"),
            (r, _) => format!(" from {r} rank(s)"),
        };
        s.push_str(&format!(
            "   effect:  {} x{}{}: {}\n            first {}\n",
            g.signature,
            g.lines,
            from,
            g.explanation,
            log_line_text(&g.first)
        ));
    }
    if fd.cascade.len() > 8 {
        s.push_str(&format!(
            "   {} more groups of effects in --json\n",
            fd.cascade.len() - 8
        ));
    }
    for g in fd.earlier.iter().take(4) {
        s.push_str(&format!(
            "   earlier: {} x{}: {}\n            first {}\n",
            g.signature,
            g.lines,
            g.explanation,
            log_line_text(&g.first)
        ));
    }
    s
}

/// Text for a person: what a job's logs say about why it failed.
pub fn logs_text(doc: &FindingsDocument) -> String {
    let mut out = format!(
        "Flare log diagnosis of {} in {:.0} ms\n",
        doc.job.id,
        doc.diagnosis_ms.unwrap_or(0.0)
    );
    let mut notes = doc.notes.iter();
    if let Some(first) = notes.next() {
        out.push_str(&format!("{first}\n"));
    }
    match doc.verdict() {
        Verdict::Healthy => {
            out.push_str("\nNO FAILURE FOUND: no line of these logs shows a failure.\n")
        }
        Verdict::Inconclusive => out.push_str("\nINCONCLUSIVE: the logs hold no lines.\n"),
        Verdict::Unhealthy => {}
    }
    for (i, f) in doc.findings().iter().enumerate() {
        out.push_str(&finding_text(i + 1, f));
    }
    for n in notes {
        out.push_str(&format!("\n(note: {n})"));
    }
    out.push('\n');
    out
}

/// The HTML report of a diagnosis and its document.
pub fn report_html(
    ctx: &JobContext,
    d: &Diagnosis,
    doc: &FindingsDocument,
    title: &str,
    subtitle: &str,
) -> String {
    let iteration_times_ms: Vec<(u32, f64)> = d
        .iterations
        .iter()
        .zip(&d.iteration_ns)
        .filter_map(|(&it, ns)| ns.map(|v| (it, v / 1e6)))
        .collect();
    let flagged_iterations: Vec<u32> = doc
        .findings()
        .iter()
        .filter(|f| f.kind == flare_model::FindingKind::IterationSpike)
        .flat_map(|f| f.iterations.clone())
        .collect();
    // One row per rank up to 512 ranks, else one row per node (the worst rank in it).
    let per_row = if ctx.ranks.len() <= 512 {
        1
    } else {
        ctx.job.cluster.gpus_per_node.max(1) as usize
    };
    let n_its = d.iterations.len();
    let n_rows = ctx.ranks.len().div_ceil(per_row);
    let mut values = vec![f64::NAN; n_rows * n_its];
    let mut rows = Vec::with_capacity(n_rows);
    for row in 0..n_rows {
        let lo = row * per_row;
        let hi = ((row + 1) * per_row).min(ctx.ranks.len());
        rows.push(if per_row == 1 {
            format!("rank {}", ctx.ranks[lo])
        } else {
            format!("ranks {}-{}", ctx.ranks[lo], ctx.ranks[hi - 1])
        });
        for i in 0..n_its {
            let v = (lo..hi)
                .map(|r| d.relative_excess(r, i) * 100.0)
                .filter(|v| v.is_finite())
                .fold(f64::NAN, f64::max);
            values[row * n_its + i] = v;
        }
    }
    let culprits: BTreeSet<u32> = doc
        .findings()
        .iter()
        .filter(|f| f.localizes())
        .flat_map(|f| f.culprits.iter().filter_map(|c| c.rank))
        .collect();
    let mut highlight_rows: Vec<usize> = culprits
        .iter()
        .filter_map(|&r| ctx.rank_index(r))
        .map(|ri| ri / per_row)
        .collect();
    highlight_rows.sort_unstable();
    highlight_rows.dedup();
    let layout = doc.job.parallel.as_ref().and_then(|p| {
        // Each rank's mean excess over the iterations it has one in.
        let values: BTreeMap<u32, f64> = (0..ctx.ranks.len())
            .filter_map(|ri| {
                let v: Vec<f64> = (0..n_its)
                    .map(|i| d.relative_excess(ri, i) * 100.0)
                    .filter(|v| v.is_finite())
                    .collect();
                (!v.is_empty()).then(|| (ctx.ranks[ri], v.iter().sum::<f64>() / v.len() as f64))
            })
            .collect();
        flare_report::layout_heatmap(
            p,
            &values,
            &culprits,
            "Self-time excess per rank by parallel group, mean over the iterations (%)",
            "%",
        )
    });
    let input = ReportInput {
        title: title.to_string(),
        subtitle: subtitle.to_string(),
        iteration_times_ms,
        flagged_iterations,
        heatmap: Heatmap {
            title: "Self-time excess per rank and iteration: how much longer a rank took between its collectives than the other members (%)".into(),
            row_label: if per_row == 1 { "rank".into() } else { "node".into() },
            rows,
            columns: d.iterations.iter().map(|i| i.to_string()).collect(),
            values,
            unit: "%".into(),
            highlight_rows,
            column_label: "iteration".into(),
        },
        layout,
        document: doc,
        step: flare_report::Step::Iteration,
    };
    flare_report::render_html(&input)
}
