//! The dashboard's content, rendered on the server: the jobs table, and a job's page
//! from the offline report's components. Pure: the API gathers what they show.

use crate::alerts::{AlertEvent, Transition};
use crate::store::{ArrivingWindow, JobRow, WindowDiagnosis};
use flare_model::{FindingKind, FindingsDocument, Severity, Verdict};
use flare_report::{escape, flame_svg, render_sections, Heatmap, RankStack, ReportInput, Step};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write;

/// Rows of the heatmap before ranks are binned by the chart itself.
const HEATMAP_RANKS: usize = 4096;

/// A path segment with everything but unreserved characters percent-encoded.
pub(crate) fn path_segment(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(b as char);
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
}

/// A job's health at a glance: its latest window's verdict and worst finding.
fn health(doc: Option<&FindingsDocument>) -> (&'static str, &'static str) {
    let Some(doc) = doc else {
        return ("pending", "no window analysed yet");
    };
    let worst = doc.findings().iter().map(|f| f.severity).max();
    match (doc.verdict(), worst) {
        (_, Some(Severity::Critical)) => ("critical", "critical"),
        (Verdict::Unhealthy, _) => ("warning", "warning"),
        (Verdict::Inconclusive, _) => ("inconclusive", "inconclusive"),
        (Verdict::Healthy, _) => ("healthy", "healthy"),
    }
}

/// The jobs table: each job with its latest window's health.
pub(crate) fn jobs_fragment(jobs: &[(JobRow, Option<FindingsDocument>)], now_ns: u64) -> String {
    let mut s = String::from("<section id=\"jobs\">\n<h2>Jobs</h2>\n");
    if jobs.is_empty() {
        s.push_str("<p class=\"note\">No job has reported yet: start `flare agent --server ...` on the job's nodes.</p>\n</section>\n");
        return s;
    }
    s.push_str(
        "<table class=\"jobs\">\n<thead><tr><th>Job</th><th>Health</th><th>Top finding</th>\
         <th class=\"num\">Ranks</th><th class=\"num\">Nodes</th><th class=\"num\">Last window</th>\
         <th class=\"num\">Last seen</th></tr></thead>\n<tbody>\n",
    );
    for (row, doc) in jobs {
        let (class, label) = health(doc.as_ref());
        let top = doc
            .as_ref()
            .and_then(|d| d.findings().first())
            .filter(|f| f.severity > Severity::Info)
            .map(|f| escape(&f.summary))
            .unwrap_or_default();
        let ago = now_ns.saturating_sub(row.last_seen_unix_ns) / 1_000_000_000;
        let _ = writeln!(
            s,
            "<tr><td><a href=\"/jobs/{}\">{}</a></td><td><span class=\"health {class}\">{label}</span></td>\
             <td>{top}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td>\
             <td class=\"num\">{ago} s ago</td></tr>",
            escape(&path_segment(&row.job_id)),
            escape(&row.job_id),
            row.ranks_seen,
            row.nodes,
            row.last_window,
        );
    }
    s.push_str("</tbody>\n</table>\n</section>\n");
    s
}

/// A job's page: its alerts, then the report's sections over its latest windows.
/// What a job's page shows beside its latest findings document.
pub(crate) struct JobPage {
    /// The latest windows analysed, oldest first.
    pub timeline: Vec<(u64, WindowDiagnosis)>,
    pub alerts: Vec<AlertEvent>,
    /// The captured main-thread stacks of the document's window.
    pub stacks: Vec<RankStack>,
    /// The window still coming in, if any.
    pub arriving: Option<ArrivingWindow>,
    /// Where its timeline opens (see [`super::perfetto_ui`]).
    pub perfetto_ui: String,
}

pub(crate) fn job_fragment(job_id: &str, doc: &FindingsDocument, page: &JobPage) -> String {
    let JobPage {
        timeline,
        alerts,
        stacks,
        arriving,
        perfetto_ui,
    } = page;
    let mut s = String::new();
    let (class, label) = health(Some(doc));
    let mut note = format!(
        "window {} · {} of {} ranks with data · {} node(s) · {} windows analysed",
        doc.job.window.unwrap_or(0),
        doc.job.ranks_with_data,
        doc.job.world_size,
        doc.job.nodes.unwrap_or(0),
        doc.job.windows_analysed.unwrap_or(0),
    );
    if let Some(a) = arriving.filter(|a| Some(a.window) > doc.job.window) {
        let _ = write!(
            note,
            " · window {} arriving ({} of {} ranks in; analysed once every rank is in, or once the others stop coming)",
            a.window, a.ranks, a.world_size
        );
    }
    let _ = writeln!(
        s,
        "<section id=\"job\">\n<h2>{} <span class=\"health {class}\">{label}</span></h2>\n<p class=\"note\">{}</p>\n</section>",
        escape(job_id),
        escape(&note)
    );
    write_alerts(&mut s, alerts);
    if !stacks.is_empty() {
        let _ = writeln!(
            s,
            "<section id=\"stacks\">\n<h2>Stacks</h2>\n<p class=\"note\">{}</p>\n<div class=\"chart-wrap\">{}</div>\n</section>",
            escape(&format!(
                "The main thread of the {} ranks the agents captured in window {} (stuck, and beside the stuck ones), merged: frames that ranks share are one box, as wide as its ranks; the ranks whose stack leaves the common path are red. Hover a box for its ranks.",
                stacks.len(),
                doc.job.window.unwrap_or(0)
            )),
            flame_svg(stacks)
        );
    }
    let input = ReportInput {
        title: job_id.to_string(),
        subtitle: String::new(),
        iteration_times_ms: timeline
            .iter()
            .filter_map(|(w, d)| d.figures.iteration_ms.map(|ms| (*w as u32, ms)))
            .collect(),
        flagged_iterations: timeline
            .iter()
            .filter(|(_, d)| {
                d.findings.iter().any(|f| {
                    matches!(
                        f.kind,
                        FindingKind::IterationSpike | FindingKind::IterationSlowdown
                    ) && f.severity > Severity::Info
                })
            })
            .map(|(w, _)| *w as u32)
            .collect(),
        heatmap: heatmap(doc, timeline),
        layout: layout(doc, timeline),
        document: doc,
        step: Step::Window,
    };
    s.push_str(&render_sections(&input));
    write_timeline_links(&mut s, job_id, timeline, perfetto_ui);
    s
}

/// Links to the windows shown as one Perfetto timeline (`GET /api/jobs/{id}/timeline`):
/// the page's script fetches it with the tab's token, then saves it or hands it to the
/// Perfetto UI at `perfetto_ui` (the browser sends the file there, not the server's
/// address).
fn write_timeline_links(
    s: &mut String,
    job_id: &str,
    timeline: &[(u64, WindowDiagnosis)],
    perfetto_ui: &str,
) {
    let (Some((from, _)), Some((to, _))) = (timeline.first(), timeline.last()) else {
        return;
    };
    let url = format!(
        "/api/jobs/{}/timeline?from={from}&to={to}",
        path_segment(job_id)
    );
    let _ = writeln!(
        s,
        "<section id=\"timeline\">\n<h2>Timeline</h2>\n<p class=\"note\">{}</p>\n\
         <p><a href=\"#\" data-timeline=\"{url}\" data-action=\"save\">Download the timeline</a> · \
         <a href=\"#\" data-timeline=\"{url}\" data-action=\"perfetto\" data-perfetto=\"{ui}\">Open it in Perfetto</a></p>\n</section>",
        escape(&format!(
            "Windows {from} to {to} of every rank on one wall clock, in the trace-event JSON that Perfetto and chrome://tracing open: each rank's steps, its time per kind of work in each window, the ops the watchdog found stuck, the culprits named on their ranks."
        )),
        url = escape(&url),
        ui = escape(perfetto_ui)
    );
}

/// Each rank's mean over the windows shown, on the job's parallel grid (when its ranks
/// state one).
fn layout(doc: &FindingsDocument, timeline: &[(u64, WindowDiagnosis)]) -> Option<Heatmap> {
    let parallel = doc.job.parallel.as_ref()?;
    let mut sums: BTreeMap<u32, (f64, u32)> = BTreeMap::new();
    for (_, d) in timeline {
        for &(rank, pct) in &d.figures.rank_excess_pct {
            let e = sums.entry(rank).or_default();
            e.0 += f64::from(pct);
            e.1 += 1;
        }
    }
    let values: BTreeMap<u32, f64> = sums
        .into_iter()
        .map(|(r, (sum, n))| (r, sum / f64::from(n)))
        .collect();
    flare_report::layout_heatmap(
        parallel,
        &values,
        &doc.blamed_ranks().into_keys().collect(),
        "Time outside collectives over the median rank's, per rank by parallel group, mean over the windows (%)",
        "%",
    )
}

/// Per rank and window: its time outside collectives over the median rank's.
fn heatmap(doc: &FindingsDocument, timeline: &[(u64, WindowDiagnosis)]) -> Heatmap {
    let ranks: BTreeSet<u32> = timeline
        .iter()
        .flat_map(|(_, d)| d.figures.rank_excess_pct.iter().map(|r| r.0))
        .take(HEATMAP_RANKS)
        .collect();
    let index: BTreeMap<u32, usize> = ranks.iter().enumerate().map(|(i, &r)| (r, i)).collect();
    let mut values = vec![f64::NAN; ranks.len() * timeline.len()];
    for (col, (_, d)) in timeline.iter().enumerate() {
        for &(rank, pct) in &d.figures.rank_excess_pct {
            if let Some(&row) = index.get(&rank) {
                values[row * timeline.len() + col] = pct as f64;
            }
        }
    }
    let culprits: BTreeSet<u32> = doc.blamed_ranks().into_keys().collect();
    Heatmap {
        title: "Time outside collectives over the median rank's, per rank and window (%)".into(),
        row_label: "rank".into(),
        rows: ranks.iter().map(|r| r.to_string()).collect(),
        columns: timeline.iter().map(|(w, _)| w.to_string()).collect(),
        values,
        unit: "%".into(),
        highlight_rows: ranks
            .iter()
            .enumerate()
            .filter(|(_, r)| culprits.contains(r))
            .map(|(i, _)| i)
            .collect(),
        column_label: "window".into(),
    }
}

fn write_alerts(s: &mut String, alerts: &[AlertEvent]) {
    s.push_str("<section id=\"alerts\">\n<h2>Alerts</h2>\n");
    // Open: an alert whose latest event is not its resolution.
    let mut latest: BTreeMap<&str, &AlertEvent> = BTreeMap::new();
    for e in alerts {
        // Newest first: the first event seen per alert is its latest.
        latest.entry(e.alert_key.as_str()).or_insert(e);
    }
    let open: Vec<&&AlertEvent> = latest
        .values()
        .filter(|e| e.event != Transition::Resolved)
        .collect();
    if open.is_empty() {
        s.push_str("<p class=\"note\">No alert open.</p>\n");
    } else {
        s.push_str("<ul class=\"alerts\">\n");
        for e in open {
            let _ = writeln!(
                s,
                "<li><span class=\"badge sev-{}\">{}</span> {} <span class=\"pos\">(open since window {}{})</span></li>",
                e.severity,
                e.severity,
                escape(&e.summary),
                e.opened_window.unwrap_or(e.window),
                if e.silenced { ", silenced" } else { "" }
            );
        }
        s.push_str("</ul>\n");
    }
    s.push_str("</section>\n");
}

#[cfg(test)]
mod tests {
    use super::*;
    use flare_model::JobSummary;

    #[test]
    fn path_segments_encode_everything_but_unreserved() {
        assert_eq!(path_segment("job-1_a.b~c"), "job-1_a.b~c");
        assert_eq!(path_segment("a/b c<\"'>"), "a%2Fb%20c%3C%22%27%3E");
    }

    #[test]
    fn job_ids_cannot_inject_markup() {
        let id = "<img src=x onerror=alert(1)>\"'";
        let row = JobRow {
            job_id: id.into(),
            world_size: 2,
            nodes: 1,
            ranks_seen: 2,
            first_window: 1,
            last_window: 2,
            last_seen_unix_ns: 0,
            latest_analysed_window: Some(2),
            open_findings: 0,
        };
        let html = jobs_fragment(&[(row, None)], 0);
        assert!(!html.contains("<img"), "{html}");
        assert!(
            html.contains("&lt;img src=x onerror=alert(1)&gt;"),
            "{html}"
        );
        assert!(
            html.contains("href=\"/jobs/%3Cimg%20src%3Dx%20onerror%3Dalert%281%29%3E%22%27\""),
            "{html}"
        );
        let doc = FindingsDocument::new(
            JobSummary {
                id: id.into(),
                ..JobSummary::default()
            },
            vec![],
            true,
        );
        let page = job_fragment(
            id,
            &doc,
            &JobPage {
                timeline: vec![],
                alerts: vec![],
                stacks: vec![],
                arriving: None,
                perfetto_ui: crate::dashboard::PERFETTO_UI.into(),
            },
        );
        assert!(!page.contains("<img"), "{page}");
    }
}
