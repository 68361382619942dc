//! Tests of the whole page.

use super::*;
use flare_model::{
    Component, Culprit, DetectorId, Evidence, EvidenceKey, Finding, FindingKind, FindingsDocument,
    JobSummary, RankTime, Severity, Unit,
};

/// Checks that every non-void element is closed in order; returns the first problem.
fn check_balanced(html: &str) -> Result<(), String> {
    const VOID: [&str; 6] = ["meta", "br", "hr", "img", "input", "link"];
    let mut stack: Vec<String> = Vec::new();
    let mut rest = html;
    while let Some(i) = rest.find('<') {
        rest = &rest[i..];
        if rest.starts_with("<!--") {
            let end = rest.find("-->").ok_or("unterminated comment")?;
            rest = &rest[end + 3..];
            continue;
        }
        let end = rest.find('>').ok_or("unterminated tag")?;
        let tag = &rest[1..end];
        rest = &rest[end + 1..];
        if tag.starts_with('!') {
            continue;
        }
        if let Some(name) = tag.strip_prefix('/') {
            let name = name.trim();
            match stack.pop() {
                Some(open) if open == name => {}
                other => return Err(format!("</{name}> closes {other:?}")),
            }
            continue;
        }
        let name: String = tag
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric())
            .collect();
        if name.is_empty() {
            return Err(format!("bad tag <{tag}>"));
        }
        if tag.ends_with('/') || VOID.contains(&name.as_str()) {
            continue;
        }
        stack.push(name);
    }
    if stack.is_empty() {
        Ok(())
    } else {
        Err(format!("unclosed: {stack:?}"))
    }
}

fn finding(kind: FindingKind, severity: Severity, summary: &str, confidence: f64) -> Finding {
    let mut c = Culprit::new(Component::Gpu);
    c.rank = Some(139);
    c.node = Some(17);
    c.local_gpu = Some(3);
    Finding {
        kind,
        severity,
        summary: summary.to_string(),
        confidence,
        culprits: vec![c],
        evidence: vec![Evidence::new(
            EvidenceKey::ComputeTime,
            182.0,
            Some(140.0),
            Unit::Ms,
            "median over 40 iterations".to_string(),
        )],
        action: "Drain node 17 and run GPU diagnostics.".to_string(),
        iterations: vec![3, 4, 5, 9],
        detector: DetectorId::SlowRank,
        corroborated_by: vec![],
        failure: None,
    }
}

fn small_heatmap() -> Heatmap {
    Heatmap {
        title: "Self time excess per rank and iteration (%)".into(),
        row_label: "rank".into(),
        rows: (0..4).map(|r| r.to_string()).collect(),
        columns: (0..5).map(|c| c.to_string()).collect(),
        values: (0..20).map(|i| (i % 7) as f64).collect(),
        unit: "%".into(),
        highlight_rows: vec![1],
        column_label: "iteration".into(),
    }
}

fn doc(findings: Vec<Finding>) -> FindingsDocument {
    FindingsDocument::new(JobSummary::default(), findings, true)
}

fn rank_time(rank: u32) -> RankTime {
    RankTime {
        rank,
        window_ms: 0.0,
        compute_ms: 0.0,
        communication_ms: 0.0,
        exposed_communication_ms: 0.0,
        idle_ms: 0.0,
    }
}

fn input(document: &FindingsDocument) -> ReportInput<'_> {
    ReportInput {
        step: crate::Step::Iteration,
        title: "Flare diagnosis — test (TP2 x PP1 x DP2)".into(),
        subtitle: "simulator · 4 ranks · 5 iterations · 0.1 s".into(),
        iteration_times_ms: (0..5).map(|i| (i, 100.0 + i as f64)).collect(),
        flagged_iterations: vec![3],
        heatmap: small_heatmap(),
        layout: None,
        document,
    }
}

#[test]
fn report_is_balanced_and_contains_everything() {
    let findings = vec![
        finding(
            FindingKind::SlowGpu,
            Severity::Warning,
            "GPU on rank 139 computes 30% slower & stalls its peers",
            0.87,
        ),
        finding(
            FindingKind::Hang,
            Severity::Critical,
            "Ranks 4-7 never joined",
            0.99,
        ),
    ];
    let html = render_html(&input(&doc(findings)));
    check_balanced(&html).unwrap();
    assert!(html.starts_with("<!DOCTYPE html>"));
    assert_eq!(html.matches("<svg").count(), 2);
    assert_eq!(html.matches("</svg>").count(), 2);
    assert!(html.contains("GPU on rank 139 computes 30% slower &amp; stalls its peers"));
    assert!(html.contains("Ranks 4-7 never joined"));
    // Critical first, whatever the input order.
    assert!(html.find("Ranks 4-7 never joined").unwrap() < html.find("GPU on rank 139").unwrap());
    assert!(html.contains("gpu rank 139 (node 17, GPU 3)"));
    assert!(html.contains("87%"));
    assert!(html.contains("3–5, 9"));
    assert!(html.contains("Recommended action"));
    assert!(html.contains("compute_time"));
    assert!(html.contains("(×1.30)"));
    // One rect per heatmap cell.
    assert_eq!(html.matches(r#"<rect class="c""#).count(), 20);
    assert!(html.contains("iteration 3: 103.0 (flagged)"));
    assert!(!html.contains("No anomaly found"));
    assert!(!html.contains("id=\"breakdown\""));
    assert!(!html.to_ascii_lowercase().contains("<script"));
    // Self-contained: the only URL is the SVG namespace.
    assert!(!html
        .replace("http://www.w3.org/2000/svg", "")
        .contains("http"));
}

#[test]
fn everything_from_traces_is_escaped() {
    let evil = "<script>alert(1)</script>";
    let mut f = finding(FindingKind::SlowLink, Severity::Warning, evil, 0.5);
    f.culprits[0].element = Some(evil.into());
    f.evidence[0].detail = evil.into();
    f.action = evil.into();
    f.culprits[0].element = Some("\"'><script>".into());
    let mut d = doc(vec![f]);
    d.skipped_detectors = vec![flare_model::SkippedDetector {
        detector: DetectorId::Graph,
        reason: evil.into(),
    }];
    let mut inp = input(&d);
    inp.title = evil.into();
    inp.subtitle = evil.into();
    inp.heatmap.title = evil.into();
    inp.heatmap.row_label = evil.into();
    inp.heatmap.rows[0] = evil.into();
    inp.heatmap.columns[0] = evil.into();
    inp.heatmap.unit = evil.into();
    let html = render_html(&inp);
    assert!(!html.to_ascii_lowercase().contains("<script"));
    assert!(html.contains("&lt;script&gt;alert(1)&lt;/script&gt;"));
    assert!(html.contains("&quot;&#39;&gt;&lt;script&gt;"));
    check_balanced(&html).unwrap();
}

#[test]
fn empty_inputs_render_a_healthy_report() {
    let inp = ReportInput {
        step: crate::Step::Iteration,
        title: String::new(),
        subtitle: String::new(),
        iteration_times_ms: vec![],
        flagged_iterations: vec![],
        heatmap: Heatmap::default(),
        layout: None,
        document: &doc(vec![]),
    };
    let html = render_html(&inp);
    check_balanced(&html).unwrap();
    assert!(html.contains("No anomaly found: the job looks healthy"));
    assert!(html.contains("No iteration data"));
    assert!(html.contains("No data"));
    assert_eq!(html.matches("<svg").count(), 2);
}

#[test]
fn nan_everywhere_is_handled() {
    let mut f = finding(
        FindingKind::SlowGpu,
        Severity::Info,
        "nan finding",
        f64::NAN,
    );
    f.evidence[0].value = f64::NAN;
    f.evidence[0].baseline = Some(f64::NAN);
    f.culprits[0].score = f64::INFINITY;
    let mut d = doc(vec![
        f,
        finding(FindingKind::SlowGpu, Severity::Info, "ok", 0.4),
    ]);
    d.rank_breakdown = vec![RankTime {
        compute_ms: f64::NAN,
        communication_ms: 1.0,
        exposed_communication_ms: f64::NAN,
        idle_ms: 2.0,
        ..rank_time(0)
    }];
    let mut inp = input(&d);
    inp.iteration_times_ms = vec![(0, f64::NAN), (1, 100.0), (2, f64::NAN), (3, 120.0)];
    inp.heatmap.values = vec![f64::NAN; 20];
    let html = render_html(&inp);
    check_balanced(&html).unwrap();
    assert!(!html.contains("NaN"));
    for bad in ["inf<", "inf%", "inf ", "inf\""] {
        assert!(!html.contains(bad), "{bad}");
    }
    assert!(html.contains("n/a"));
    assert!(html.contains("width:0%"));
    // NaN confidence sorts as 0: the 40% finding comes first.
    assert!(html.find(">ok</h3>").unwrap() < html.find(">nan finding</h3>").unwrap());
}

#[test]
fn breakdown_shows_top_20_by_idle_plus_exposed() {
    let mut d = doc(vec![]);
    d.rank_breakdown = (0..30)
        .map(|r| RankTime {
            compute_ms: 100.0,
            communication_ms: 20.0,
            exposed_communication_ms: r as f64,
            idle_ms: if r == 7 { 500.0 } else { 1.0 },
            ..rank_time(r)
        })
        .collect();
    let html = render_html(&input(&d));
    check_balanced(&html).unwrap();
    let table = html.split("<table class=\"breakdown\">").nth(1).unwrap();
    assert_eq!(table.matches("<tr>").count(), 21); // header + 20
    let pos = |l: &str| table.find(&format!("<td>{l}</td>")).unwrap();
    assert!(pos("rank 7") < pos("rank 29"));
    assert!(pos("rank 29") < pos("rank 28"));
    assert!(!table.contains("<td>rank 0</td>"));
    assert!(html.contains("The 20 of 30 row(s)"));
}

#[test]
fn thousand_rank_report_stays_small() {
    let rows = 1024;
    let cols = 100;
    let d = doc(vec![finding(
        FindingKind::SlowGpu,
        Severity::Warning,
        "slow",
        0.9,
    )]);
    let mut inp = input(&d);
    inp.iteration_times_ms = (0..cols as u32)
        .map(|i| (i, 1000.0 + (i % 13) as f64))
        .collect();
    inp.heatmap = Heatmap {
        title: "Self time excess per rank and iteration (%)".into(),
        row_label: "rank".into(),
        rows: (0..rows).map(|r| r.to_string()).collect(),
        columns: (0..cols).map(|c| c.to_string()).collect(),
        values: (0..rows * cols)
            .map(|i| {
                if i / cols == 139 {
                    35.0
                } else {
                    (i % 11) as f64 * 0.3
                }
            })
            .collect(),
        unit: "%".into(),
        highlight_rows: vec![139],
        column_label: "iteration".into(),
    };
    let html = render_html(&inp);
    check_balanced(&html).unwrap();
    assert!(html.len() < 2_500_000, "{} bytes", html.len());
}

#[test]
fn decisive_evidence_shows_and_the_rest_folds_into_details() {
    let evil = "<script>alert(1)</script>";
    let mut f = finding(FindingKind::SlowGpu, Severity::Warning, "slow", 0.9);
    for (i, key) in [
        EvidenceKey::SelfTimeExcess,
        EvidenceKey::IrregularIterations,
        EvidenceKey::ComputeTimeRatio,
        EvidenceKey::HostPhaseExcessMs,
    ]
    .into_iter()
    .enumerate()
    {
        f.evidence.push(
            Evidence::new(key, 1.0, None, Unit::None, format!("{evil} {i}")).decisive_if(i < 3),
        );
    }
    // The first (compute_time) unmarked, three marked: it and host_phase fold away.
    let html = render_html(&input(&doc(vec![f])));
    let details = html
        .find("<details class=\"more-evidence\">")
        .expect("details");
    assert!(html.contains("<summary>2 more pieces of evidence</summary>"));
    for key in [
        "self_time_excess",
        "irregular_iterations",
        "compute_time_ratio",
    ] {
        assert!(
            html.find(key).unwrap() < details,
            "{key} shown before the fold"
        );
    }
    for key in ["host_phase_excess_ms", "<code>compute_time</code>"] {
        assert!(html.find(key).unwrap() > details, "{key} folded");
    }
    assert!(!html.to_ascii_lowercase().contains("<script"));
    check_balanced(&html).unwrap();
}

#[test]
fn comparison_report_is_balanced_and_escapes_what_traces_say() {
    use flare_model::{
        Comparison, HostCallKind, HostCallRate, LatencyQuantiles, RegressionCause, RunProfile,
        TimeClassChange, TimeClassKind,
    };
    let evil = "<script>alert(1)</script>";
    let run = |step_ms: f64| RunProfile {
        source: evil.into(),
        ranks: 2,
        rank_iterations: 20,
        step_ms,
        step_sd_ms: 0.5,
        step_median_ms: step_ms,
        step_robust_sd_ms: 0.5,
        cpu_compute: false,
        host_calls: vec![HostCallRate {
            kind: HostCallKind::Synchronize,
            name: evil.into(),
            dtype: None,
            per_step: 1.0,
            ms_per_step: 0.1,
            device_ms_per_step: None,
            tflops: None,
            sites: vec![(evil.into(), 3)],
        }],
        gc_sites: vec![(evil.into(), 2)],
        gc_longest_ms: None,
        issue_latency: Some(LatencyQuantiles {
            count: 100,
            p10_us: 1.0,
            p50_us: 2.0,
            p90_us: 3.0,
            p99_us: 4.0,
            cdf_us: (1..=20).map(|i| i as f64).collect(),
        }),
    };
    let class = |name: &str, b: f64, c: f64| TimeClassChange {
        kind: TimeClassKind::Compute,
        class: name.into(),
        baseline_ms: b,
        current_ms: c,
        baseline_sd_ms: 0.1,
        current_sd_ms: 0.1,
        baseline_algorithms: vec![evil.into()],
        current_algorithms: vec![],
        baseline_count: 1.0,
        current_count: 1.0,
        baseline_rate: None,
        current_rate: None,
        changed_on: None,
        reruns: None,
    };
    let mut classes: Vec<TimeClassChange> = (0..15)
        .map(|i| class(&format!("op{i}"), 1.0, 1.5))
        .collect();
    classes.insert(0, class(evil, 10.0, 5.0));
    let mut d = doc(vec![finding(
        FindingKind::Regression,
        Severity::Warning,
        evil,
        0.9,
    )]);
    d.comparison = Some(Comparison {
        baseline: run(40.0),
        current: run(42.5),
        classes,
        sequence: None,
        causes: vec![RegressionCause::DeviceSynchronization],
        waited_for: None,
        reruns: None,
    });
    let html = render_comparison_html(&d, evil);
    assert!(!html.to_ascii_lowercase().contains("<script"), "{html}");
    check_balanced(&html).unwrap();
    // Baseline, 12 classes, the other 4 as one bar, current: 15 bars.
    assert_eq!(html.matches("<rect ").count(), 15);
    assert!(html.contains("4 more classes"));
    assert!(html.contains("device_synchronization"));
    // Both runs' issue-latency CDFs, one line each.
    assert_eq!(html.matches("<polyline ").count(), 2);
    assert!(!html.contains("Runs of the same code"));
    // With reruns: each side's runs and their drift, in the verdict.
    let step = |ms: f64| flare_model::RunStep {
        source: evil.into(),
        step_ms: ms,
    };
    d.comparison.as_mut().unwrap().reruns = Some(flare_model::RunToRun {
        baseline: vec![step(40.0), step(41.0)],
        current: vec![step(42.5)],
        step_sd_ms: 0.7,
        degrees_of_freedom: 1,
        critical_t: 31.821,
    });
    let html = render_comparison_html(&d, evil);
    check_balanced(&html).unwrap();
    assert!(
        html.contains(
            "Runs of the same code, mean step: baseline 40.00, 41.00 ms; current 42.50 ms"
        ),
        "{html}"
    );
    assert!(!html.to_ascii_lowercase().contains("<script"));
    // Without a comparison: a page that says so.
    let plain = render_comparison_html(&doc(vec![]), "t");
    assert!(plain.contains("holds no comparison"));
    check_balanced(&plain).unwrap();
}
