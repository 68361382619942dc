//! The HTML page: header, verdict, findings, charts and breakdown table.

use crate::util::{c, escape, fmt_num, format_iterations, with_unit};
use crate::{heatmap_svg, line_chart_svg_of, ReportInput};
use flare_model::{Evidence, Finding, RankTime, Severity, SkippedDetector, Verdict};
use std::fmt::Write;

/// Rows shown in the breakdown table.
const BREAKDOWN_ROWS: usize = 20;
/// Culprits listed per finding before `+N more`.
const MAX_CULPRITS: usize = 12;
/// Iteration ranges listed per finding before `+N more`.
const MAX_ITERATION_RANGES: usize = 40;

/// The report's stylesheet (the dashboard uses it too).
pub const STYLE: &str = r#"
:root{--fg:#18181b;--muted:#52525b;--line:#e4e4e7;--bg:#f6f6f7;--card:#fff;
--crit:#b91c1c;--warn:#b45309;--info:#1d4ed8;--ok:#15803d;--compute:#2563eb;--exposed:#f97316;--idle:#a1a1aa}
*{box-sizing:border-box}
body{margin:0;background:var(--bg);color:var(--fg);font:14px/1.5 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif}
main{max-width:980px;margin:0 auto;padding:24px 20px 48px}
header h1{font-size:22px;margin:0 0 4px}
.subtitle{color:var(--muted);margin:0 0 8px}
nav{font-size:13px;margin-bottom:16px}
nav a{color:var(--info);margin-right:14px;text-decoration:none}
section{background:var(--card);border:1px solid var(--line);border-radius:8px;padding:16px 20px;margin:16px 0}
h2{font-size:17px;margin:0 0 10px}
h3{font-size:15px;margin:6px 0 8px}
h4{font-size:12px;text-transform:uppercase;letter-spacing:.04em;color:var(--muted);margin:12px 0 4px}
.note{color:var(--muted);font-size:13px;margin:4px 0 8px}
details.more-evidence>summary{color:var(--muted);font-size:13px;cursor:pointer;margin:4px 0}
.chart-wrap{overflow-x:auto}
svg.chart{display:block;max-width:100%;height:auto}
.verdict{border-left:6px solid var(--warn)}
.verdict.healthy{border-left-color:var(--ok)}
.verdict.critical{border-left-color:var(--crit)}
.verdict p{margin:4px 0}
.verdict .big{font-size:16px;font-weight:600}
.healthy .big{color:var(--ok)}
.counts span{display:inline-block;margin-right:10px}
.finding{border:1px solid var(--line);border-left:6px solid var(--info);border-radius:6px;padding:12px 16px;margin:12px 0;background:#fff}
.finding.sev-warning{border-left-color:var(--warn)}
.finding.sev-critical{border-left-color:var(--crit)}
.finding-head{display:flex;flex-wrap:wrap;gap:10px;align-items:center;font-size:13px}
.badge{display:inline-block;padding:1px 8px;border-radius:10px;color:#fff;font-size:12px;font-weight:600;text-transform:uppercase;letter-spacing:.03em;background:var(--info)}
.badge.sev-warning{background:var(--warn)}
.badge.sev-critical{background:var(--crit)}
code,.kind{font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;font-size:12.5px}
.kind{background:#f4f4f5;padding:1px 6px;border-radius:4px}
.detector,.pos{color:var(--muted)}
.confidence{display:flex;align-items:center;gap:8px;font-size:13px;color:var(--muted)}
.bar{flex:0 0 220px;height:10px;background:#ececef;border-radius:5px;overflow:hidden}
.bar .fill{height:100%;background:var(--info)}
.sev-warning .bar .fill{background:var(--warn)}
.sev-critical .bar .fill{background:var(--crit)}
.confidence b{color:var(--fg)}
ol.culprits{margin:0;padding-left:22px}
ol.culprits li{margin:2px 0}
.score{color:var(--muted);font-size:12px;margin-left:6px}
table{border-collapse:collapse;width:100%;font-size:13px}
th,td{text-align:left;padding:4px 8px;border-bottom:1px solid var(--line);vertical-align:top}
th{color:var(--muted);font-weight:600;background:#fafafa}
td.num,th.num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
.ratio{color:var(--muted);font-size:12px;margin-left:4px}
.action{background:#f0f7ff;border:1px solid #cfe3ff;border-radius:6px;padding:8px 12px;margin-top:12px}
.action p{margin:2px 0 0}
.iterations{font-size:13px;margin:10px 0 0;color:var(--muted)}
.iterations span{color:var(--fg)}
.stack{display:flex;width:160px;height:10px;background:#f4f4f5;border-radius:3px;overflow:hidden}
.stack i{display:block;height:100%}
.s-compute{background:var(--compute)}
.s-exposed{background:var(--exposed)}
.s-idle{background:var(--idle)}
.key i{display:inline-block;width:10px;height:10px;margin:0 4px 0 12px;vertical-align:-1px;border-radius:2px}
footer{color:var(--muted);font-size:12px;text-align:center;margin-top:24px}
@media print{body{background:#fff}section{break-inside:avoid;border:none}}
"#;

/// `info`, `warning` or `critical`: the severity's name, used as label and CSS class.
fn severity_name(s: Severity) -> String {
    format!("{s:?}").to_lowercase()
}

/// A finite number clamped to `[0, 1]`; NaN counts as 0.
fn unit_interval(v: f64) -> f64 {
    if v.is_nan() {
        0.0
    } else {
        v.clamp(0.0, 1.0)
    }
}

/// Renders the whole report as one self-contained HTML document.
///
/// Sections, in order: title and subtitle; a verdict (finding counts by severity, or
/// "No anomaly found: the job looks healthy"); one card per finding, most severe then most
/// confident first (severity badge, kind, summary, confidence bar, culprits, evidence table,
/// recommended action, iterations); the iteration-time chart with flagged iterations; the
/// heatmap; and, when `breakdown` is not empty, the 20 rows with the most idle plus exposed
/// communication time. No JavaScript and no external resources; all input strings are escaped.
pub fn render_html(input: &ReportInput) -> String {
    let mut s = String::with_capacity(64 * 1024);
    let title = escape(&input.title);
    let _ = write!(
        s,
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
         <meta name=\"generator\" content=\"flare-report {ver}\">\n\
         <title>{title}</title>\n<style>{STYLE}</style>\n</head>\n<body>\n<main>\n",
        ver = env!("CARGO_PKG_VERSION")
    );
    let _ = write!(
        s,
        "<header>\n<h1>{title}</h1>\n<p class=\"subtitle\">{}</p>\n\
         <nav><a href=\"#findings\">Findings</a><a href=\"#iterations\">Iteration time</a>\
         <a href=\"#heatmap\">Per-rank heatmap</a>{}{}</nav>\n</header>\n",
        escape(&input.subtitle),
        if input.layout.is_some() {
            "<a href=\"#layout\">By parallel group</a>"
        } else {
            ""
        },
        if input.document.rank_breakdown.is_empty() {
            ""
        } else {
            "<a href=\"#breakdown\">Time breakdown</a>"
        }
    );

    s.push_str(&render_sections(input));

    let _ = write!(
        s,
        "<footer>Generated by Flare (flare-report {}). Self-contained: no scripts, no external resources.</footer>\n</main>\n</body>\n</html>\n",
        env!("CARGO_PKG_VERSION")
    );
    s
}

/// The report's sections, without the page around them: the verdict, the findings, the
/// iteration-time chart, the heatmap and the breakdown. The server's dashboard shows
/// the same sections for a live job.
pub fn render_sections(input: &ReportInput) -> String {
    let mut s = String::with_capacity(32 * 1024);
    let mut findings: Vec<&Finding> = input.document.findings().iter().collect();
    findings.sort_by(|a, b| {
        b.severity
            .cmp(&a.severity)
            .then(unit_interval(b.confidence).total_cmp(&unit_interval(a.confidence)))
    });

    write_verdict(&mut s, &findings, input);

    s.push_str("<section id=\"findings\">\n<h2>Findings</h2>\n");
    if findings.is_empty() {
        s.push_str("<p class=\"note\">No detector raised a finding for this window.</p>\n");
    }
    for f in &findings {
        write_finding(&mut s, f, input.step);
    }
    write_skipped(&mut s, &input.document.skipped_detectors);
    s.push_str("</section>\n");

    write_iterations(&mut s, input);

    s.push_str("<section id=\"heatmap\">\n<h2>Per-rank heatmap</h2>\n");
    let _ = writeln!(
        s,
        "<p class=\"note\">{} Darker cells deviate more; grey cells have no data. \
         Rows outlined in blue contain a culprit. Hover a cell for its value.</p>",
        escape(&format!(
            "{} rows × {} {}s.",
            input.heatmap.rows.len(),
            input.heatmap.columns.len(),
            input.step.word()
        ))
    );
    let _ = writeln!(
        s,
        "<div class=\"chart-wrap\">{}</div>",
        heatmap_svg(&input.heatmap)
    );
    s.push_str("</section>\n");

    if let Some(layout) = &input.layout {
        write_layout(&mut s, layout, input);
    }

    if !input.document.rank_breakdown.is_empty() {
        write_breakdown(&mut s, &input.document.rank_breakdown);
    }

    s
}

/// The per-rank metric on the job's parallel grid, with how to read it.
fn write_layout(s: &mut String, layout: &crate::Heatmap, input: &ReportInput) {
    let shape = input
        .document
        .job
        .parallel
        .as_ref()
        .map(crate::layout_text)
        .unwrap_or_default();
    s.push_str("<section id=\"layout\">\n<h2>By parallel group</h2>\n");
    let _ = writeln!(
        s,
        "<p class=\"note\">{}</p>",
        escape(&format!(
            "The job's layout, {shape}: one row per pipeline stage and model-parallel rank, one column per data-parallel replica, each cell one rank's mean over the {}s shown. A row dark across every replica is a place in the model's split (a stage with more work, a tensor shard); a column is one replica (its nodes); a lone dark cell is one GPU.",
            input.step.word()
        ))
    );
    let _ = writeln!(s, "<div class=\"chart-wrap\">{}</div>", heatmap_svg(layout));
    s.push_str("</section>\n");
}

fn write_verdict(s: &mut String, findings: &[&Finding], input: &ReportInput) {
    let n_its = input.iteration_times_ms.len();
    match input.document.verdict() {
        Verdict::Inconclusive => {
            let _ = write!(
                s,
                "<section class=\"verdict\">\n<p class=\"big\">Inconclusive: the data lacks what the localization detectors need.</p>\n\
                 <p class=\"note\">Nothing can be said about stragglers; the skipped detectors below say what is missing.</p>\n</section>\n"
            );
            return;
        }
        Verdict::Healthy if findings.is_empty() => {
            let _ = write!(
                s,
                "<section class=\"verdict healthy\">\n<p class=\"big\">No anomaly found: the job looks healthy.</p>\n\
                 <p class=\"note\">{n_its} {}(s) examined, {} flagged as irregular.</p>\n</section>\n",
                input.step.word(),
                input.flagged_iterations.len()
            );
            return;
        }
        Verdict::Healthy | Verdict::Unhealthy => {}
    }
    let count = |sev: Severity| findings.iter().filter(|f| f.severity == sev).count();
    let (crit, warn, info) = (
        count(Severity::Critical),
        count(Severity::Warning),
        count(Severity::Info),
    );
    let class = if crit > 0 {
        "verdict critical"
    } else if input.document.verdict() == Verdict::Healthy {
        "verdict healthy"
    } else {
        "verdict"
    };
    let _ = write!(
        s,
        "<section class=\"{class}\">\n<p class=\"big\">{} finding{}</p>\n<p class=\"counts\">",
        findings.len(),
        if findings.len() == 1 { "" } else { "s" }
    );
    for (n, sev) in [
        (crit, Severity::Critical),
        (warn, Severity::Warning),
        (info, Severity::Info),
    ] {
        if n > 0 {
            let name = severity_name(sev);
            let _ = write!(
                s,
                "<span><span class=\"badge sev-{name}\">{name}</span> × {n}</span>"
            );
        }
    }
    let top = findings[0];
    let _ = write!(
        s,
        "</p>\n<p>Most important: <b>{}</b></p>\n</section>\n",
        escape(&top.summary)
    );
}

/// A table of evidence rows.
fn write_evidence_table(s: &mut String, evidence: &[&Evidence]) {
    s.push_str(
        "<table class=\"evidence\">\n<thead><tr><th>Metric</th><th class=\"num\">Value</th>\
         <th class=\"num\">Baseline</th><th>Unit</th><th>Detail</th></tr></thead>\n<tbody>\n",
    );
    for e in evidence {
        let ratio = match e.baseline {
            Some(b) if b.is_finite() && b != 0.0 && e.value.is_finite() => format!(
                "<span class=\"ratio\">(×{})</span>",
                escape(&fmt_num(e.value / b))
            ),
            _ => String::new(),
        };
        let _ = writeln!(
            s,
            "<tr><td><code>{}</code></td><td class=\"num\">{}{ratio}</td><td class=\"num\">{}</td><td>{}</td><td>{}</td></tr>",
            escape(e.metric.as_str()),
            escape(&fmt_num(e.value)),
            escape(&e.baseline.map(fmt_num).unwrap_or_else(|| "—".to_string())),
            escape(e.unit.as_str()),
            escape(&e.detail)
        );
    }
    s.push_str("</tbody>\n</table>\n");
}

pub(crate) fn write_finding(s: &mut String, f: &Finding, step: crate::Step) {
    let sev = severity_name(f.severity);
    let conf = unit_interval(f.confidence);
    let pct = (conf * 100.0).round() as u32;
    let _ = write!(
        s,
        "<article class=\"finding sev-{sev}\">\n<div class=\"finding-head\">\
         <span class=\"badge sev-{sev}\">{sev}</span><span class=\"kind\">{kind}</span>\
         <span class=\"detector\">detector: {det}</span></div>\n\
         <h3>{summary}</h3>\n\
         <div class=\"confidence\">confidence <div class=\"bar\" title=\"{pct}%\"><div class=\"fill\" style=\"width:{w}%\"></div></div><b>{pct}%</b></div>\n",
        kind = escape(f.kind.as_str()),
        det = escape(f.detector.as_str()),
        summary = escape(&f.summary),
        w = c(conf * 100.0),
    );

    s.push_str("<h4>Culprits</h4>\n");
    if f.culprits.is_empty() {
        s.push_str("<p class=\"note\">No single component to blame.</p>\n");
    } else {
        s.push_str("<ol class=\"culprits\">\n");
        for cu in f.culprits.iter().take(MAX_CULPRITS) {
            let _ = writeln!(
                s,
                "<li>{}<span class=\"score\">score {}</span></li>",
                escape(&cu.describe()),
                escape(&fmt_num(cu.score))
            );
        }
        s.push_str("</ol>\n");
        if f.culprits.len() > MAX_CULPRITS {
            let _ = writeln!(
                s,
                "<p class=\"note\">… and {} more culprit(s).</p>",
                f.culprits.len() - MAX_CULPRITS
            );
        }
    }

    s.push_str("<h4>Evidence</h4>\n");
    if f.evidence.is_empty() {
        s.push_str("<p class=\"note\">No evidence recorded.</p>\n");
    } else {
        // The evidence that decided the finding in view, the rest folded away (a
        // `<details>` element: no script needed). A finding with none marked shows all.
        let any = f.evidence.iter().any(|e| e.decisive);
        let (decisive, rest): (Vec<&Evidence>, Vec<&Evidence>) =
            f.evidence.iter().partition(|e| e.decisive || !any);
        if !decisive.is_empty() {
            write_evidence_table(s, &decisive);
        }
        if !rest.is_empty() {
            let _ = writeln!(
                s,
                "<details class=\"more-evidence\"><summary>{} more piece{} of evidence</summary>",
                rest.len(),
                if rest.len() == 1 { "" } else { "s" }
            );
            write_evidence_table(s, &rest);
            s.push_str("</details>\n");
        }
    }

    if !f.corroborated_by.is_empty() {
        let also: Vec<String> = f
            .corroborated_by
            .iter()
            .map(|c| {
                format!(
                    "{} ({}, {:.0}%)",
                    c.detector,
                    c.kind,
                    unit_interval(c.confidence) * 100.0
                )
            })
            .collect();
        let _ = writeln!(
            s,
            "<p class=\"note\">Also found by {}.</p>",
            escape(&also.join(", "))
        );
    }

    let _ = writeln!(
        s,
        "<div class=\"action\"><strong>Recommended action</strong><p>{}</p></div>",
        escape(&f.action)
    );
    let its = if f.iterations.is_empty() {
        match step {
            crate::Step::Iteration => "all iterations of the window".to_string(),
            crate::Step::Window => "every window shown".to_string(),
        }
    } else {
        format_iterations(&f.iterations, MAX_ITERATION_RANGES)
    };
    let _ = write!(
        s,
        "<p class=\"iterations\">{}s: <span>{}</span></p>\n</article>\n",
        match step {
            crate::Step::Iteration => "Iteration",
            crate::Step::Window => "Window",
        },
        escape(&its)
    );
}

fn write_iterations(s: &mut String, input: &ReportInput) {
    let word = input.step.word();
    s.push_str("<section id=\"iterations\">\n<h2>Iteration time</h2>\n");
    let fin: Vec<(u32, f64)> = input
        .iteration_times_ms
        .iter()
        .copied()
        .filter(|p| p.1.is_finite())
        .collect();
    if !fin.is_empty() {
        let mut v: Vec<f64> = fin.iter().map(|p| p.1).collect();
        v.sort_by(f64::total_cmp);
        let median = v[v.len() / 2];
        let (imax, max) = fin
            .iter()
            .copied()
            .max_by(|a, b| a.1.total_cmp(&b.1))
            .unwrap_or((0, f64::NAN));
        let first = fin.iter().map(|p| p.0).min().unwrap_or(0);
        let last = fin.iter().map(|p| p.0).max().unwrap_or(0);
        let flagged = if input.flagged_iterations.is_empty() {
            "none flagged as irregular".to_string()
        } else {
            format!(
                "flagged (red): {}",
                format_iterations(&input.flagged_iterations, MAX_ITERATION_RANGES)
            )
        };
        let _ = writeln!(
            s,
            "<p class=\"note\">{}</p>",
            escape(&format!(
                "{} {word}s ({first}–{last}); median {}, max {} at {word} {imax}; {flagged}.",
                fin.len(),
                with_unit(median, "ms"),
                with_unit(max, "ms"),
            ))
        );
    }
    let _ = writeln!(
        s,
        "<div class=\"chart-wrap\">{}</div>",
        line_chart_svg_of(
            &input.iteration_times_ms,
            &input.flagged_iterations,
            "iteration time (ms)",
            input.step
        )
    );
    s.push_str("</section>\n");
}

fn write_skipped(s: &mut String, skipped: &[SkippedDetector]) {
    if skipped.is_empty() {
        return;
    }
    s.push_str("<h3>Detectors that could not run</h3>\n<ul class=\"skipped\">\n");
    for d in skipped {
        let _ = writeln!(
            s,
            "<li><code>{}</code>: {}</li>",
            escape(d.detector.as_str()),
            escape(&d.reason)
        );
    }
    s.push_str("</ul>\n");
}

fn write_breakdown(s: &mut String, rows: &[RankTime]) {
    let z = |v: f64| if v.is_finite() { v.max(0.0) } else { 0.0 };
    let key = |r: &RankTime| z(r.idle_ms) + z(r.exposed_communication_ms);
    let mut sorted: Vec<&RankTime> = rows.iter().collect();
    sorted.sort_by(|a, b| key(b).total_cmp(&key(a)));
    sorted.truncate(BREAKDOWN_ROWS);
    let scale = sorted
        .iter()
        .map(|r| z(r.compute_ms) + z(r.exposed_communication_ms) + z(r.idle_ms))
        .fold(0.0, f64::max);
    s.push_str("<section id=\"breakdown\">\n<h2>Time breakdown</h2>\n");
    let _ = writeln!(
        s,
        "<p class=\"note\">The {} of {} row(s) with the most idle plus exposed communication time, in ms. \
         <span class=\"key\"><i class=\"s-compute\"></i>compute<i class=\"s-exposed\"></i>exposed communication<i class=\"s-idle\"></i>idle</span></p>",
        sorted.len(),
        rows.len()
    );
    s.push_str(
        "<table class=\"breakdown\">\n<thead><tr><th>Row</th><th class=\"num\">Compute</th>\
         <th class=\"num\">Communication</th><th class=\"num\">Exposed comm.</th><th class=\"num\">Idle</th>\
         <th class=\"num\">Idle + exposed</th><th>Share</th></tr></thead>\n<tbody>\n",
    );
    for r in sorted {
        let pct = |v: f64| {
            if scale > 0.0 {
                c(z(v) / scale * 100.0)
            } else {
                "0".to_string()
            }
        };
        let _ = writeln!(
            s,
            "<tr><td>{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td>\
             <td class=\"num\">{}</td><td class=\"num\"><b>{}</b></td><td><div class=\"stack\">\
             <i class=\"s-compute\" style=\"width:{}%\"></i><i class=\"s-exposed\" style=\"width:{}%\"></i>\
             <i class=\"s-idle\" style=\"width:{}%\"></i></div></td></tr>",
            escape(&format!("rank {}", r.rank)),
            fmt_num(r.compute_ms),
            fmt_num(r.communication_ms),
            fmt_num(r.exposed_communication_ms),
            fmt_num(r.idle_ms),
            fmt_num(key(r)),
            pct(r.compute_ms),
            pct(r.exposed_communication_ms),
            pct(r.idle_ms),
        );
    }
    s.push_str("</tbody>\n</table>\n</section>\n");
}
