//! Writes sample reports built from made-up data, to look at in a browser.
//!
//! ```text
//! cargo run -p flare-report --example sample_report [-- OUT.html]
//! ```
//!
//! Writes `OUT.html` (default `/tmp/flare-report-sample.html`: 1,024 ranks shown as 128 rows
//! of 8) and, next to it, `…-1024.html` with one heatmap row per rank and `…-healthy.html`
//! with no findings and no iteration data.

use flare_model::{
    Component, Culprit, DetectorId, Evidence, EvidenceKey, Finding, FindingKind, FindingsDocument,
    JobSummary, RankTime, Severity, Unit,
};
use flare_report::{render_html, Heatmap, ReportInput};

/// A tiny deterministic generator (xorshift64*), enough for noise.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> f64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 11) as f64 / (1u64 << 53) as f64
    }
}

const RANKS: usize = 1024;
const ITERS: u32 = 80;
const SLOW_RANK: usize = 139;
const SPIKES: [u32; 2] = [23, 57];

fn findings() -> Vec<Finding> {
    let mut gpu = Culprit::new(Component::Gpu);
    gpu.rank = Some(SLOW_RANK as u32);
    gpu.node = Some(17);
    gpu.local_gpu = Some(3);
    gpu.stage = Some(1);
    let mut host = Culprit::new(Component::Host);
    host.node = Some(17);
    host.score = 0.35;
    let mut nic = Culprit::new(Component::Nic);
    nic.element = Some("pod2/node41/nic5".into());
    nic.rank = Some(333);
    nic.score = 1.0;
    let mut sw = Culprit::new(Component::Switch);
    sw.element = Some("pod2/leaf-rail5".into());
    sw.score = 0.4;
    vec![
        Finding {
            kind: FindingKind::IterationSpike,
            severity: Severity::Info,
            summary: "2 cluster-wide iteration spikes (+38% over the median), not attributable to one rank".into(),
            confidence: 0.71,
            culprits: vec![],
            evidence: vec![Evidence::new(
                EvidenceKey::MaxIterationRatio,
                1.38,
                Some(1.05),
                Unit::Ratio,
                "delta-irregular iterations 23 and 57; every rank slows equally".into(),
            )],
            action: "Nothing to fix on a single machine; check checkpointing or evaluation hooks scheduled at these iterations.".into(),
            iterations: SPIKES.to_vec(),
            detector: DetectorId::Iteration,
            corroborated_by: vec![],
            failure: None,
        },
        Finding {
            kind: FindingKind::SlowGpu,
            severity: Severity::Warning,
            summary: "GPU 3 of node 17 (rank 139) computes 31% slower than its tensor-parallel peers; the whole job waits for it".into(),
            confidence: 0.93,
            culprits: vec![gpu, host],
            evidence: vec![
                Evidence::new(EvidenceKey::ComputeTimeRatio, 1.31, Some(1.0), Unit::Ratio, "median over 80 iterations vs. the TP group's median".into()),
                Evidence::new(EvidenceKey::SelfTimeExcess, 31.1, Some(0.4), Unit::Percent, "consistent across all iterations (robust z = 14.2)".into()),
                Evidence::new(EvidenceKey::BlameShare, 2.1, None, Unit::Percent, "the 7 TP peers wait on rank 139 in every all-reduce".into()),
            ],
            action: "Drain node 17 and run GPU diagnostics on GPU 3 (clocks, thermals, ECC); replace it if it is throttling.".into(),
            iterations: vec![],
            detector: DetectorId::SlowRank,
            corroborated_by: vec![],
            failure: None,
        },
        Finding {
            kind: FindingKind::SlowLink,
            severity: Severity::Warning,
            summary: "NIC 5 of node 41 moves data at 42% of its peers' bandwidth from iteration 60 on".into(),
            confidence: 0.64,
            culprits: vec![nic, sw],
            evidence: vec![Evidence::new(
                EvidenceKey::TransferTimeRatio,
                2.4,
                Some(1.0),
                Unit::Ratio,
                "send/recv between pipeline stages 2 and 3 <rail 5>".into(),
            )],
            action: "Check the cable and port counters of node41/nic5 on leaf-rail5 & reseat or replace the link.".into(),
            iterations: (60..ITERS).collect(),
            detector: DetectorId::SlowPath,
            corroborated_by: vec![],
            failure: None,
        },
    ]
}

fn build(per_rank: bool, document: &mut FindingsDocument) -> ReportInput<'_> {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let iteration_times_ms: Vec<(u32, f64)> = (0..ITERS)
        .map(|i| {
            let mut t = 1000.0 + 12.0 * rng.next() + if i >= 60 { 35.0 } else { 0.0 };
            if SPIKES.contains(&i) {
                t *= 1.38;
            }
            (i, t)
        })
        .collect();
    let group = if per_rank { 1 } else { 8 };
    let nrows = RANKS / group;
    let rows: Vec<String> = (0..nrows)
        .map(|r| {
            if group == 1 {
                r.to_string()
            } else {
                format!("ranks {}-{}", r * group, r * group + group - 1)
            }
        })
        .collect();
    let mut values = Vec::with_capacity(nrows * ITERS as usize);
    for r in 0..nrows {
        for i in 0..ITERS {
            let ranks = r * group..(r + 1) * group;
            let v = if ranks.contains(&SLOW_RANK) {
                30.0 + 3.0 * rng.next()
            } else if ranks.contains(&333) && i >= 60 {
                12.0 + 2.0 * rng.next()
            } else {
                2.0 * rng.next()
            };
            // A few holes: rank group 100 lost its trace for iterations 40-44.
            values.push(if r == nrows * 100 / 128 && (40..45).contains(&i) {
                f64::NAN
            } else {
                v
            });
        }
    }
    let highlight_rows = vec![SLOW_RANK / group, 333 / group];
    let breakdown = (0..64)
        .map(|r| {
            let rank = r * 16 + 11;
            let slow = rank == SLOW_RANK;
            RankTime {
                rank: rank as u32,
                window_ms: 80_000.0,
                compute_ms: if slow {
                    61_000.0
                } else {
                    46_500.0 + 500.0 * rng.next()
                },
                communication_ms: 22_000.0 + 800.0 * rng.next(),
                exposed_communication_ms: if slow {
                    2_100.0
                } else {
                    6_000.0 + 9_000.0 * rng.next()
                },
                idle_ms: if slow {
                    800.0
                } else {
                    9_000.0 + 4_000.0 * rng.next()
                },
            }
        })
        .collect();
    document.rank_breakdown = breakdown;
    ReportInput {
        step: flare_report::Step::Iteration,
        title: "Flare diagnosis — sim-1024 (TP8 x PP4 x DP32)".into(),
        subtitle: format!(
            "simulator (seed 7) · 1,024 ranks on 128 nodes · iterations 0–{} · diagnosed in 1.8 s",
            ITERS - 1
        ),
        iteration_times_ms,
        flagged_iterations: SPIKES.to_vec(),
        heatmap: Heatmap {
            title: "Self time excess per rank and iteration (%)".into(),
            row_label: "rank".into(),
            rows,
            columns: (0..ITERS).map(|i| i.to_string()).collect(),
            values,
            unit: "%".into(),
            highlight_rows,
            column_label: "iteration".into(),
        },
        layout: None,
        document,
    }
}

fn main() -> std::io::Result<()> {
    let out = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "/tmp/flare-report-sample.html".to_string());
    let mut doc = FindingsDocument::new(JobSummary::default(), findings(), true);
    let html = render_html(&build(false, &mut doc));
    std::fs::write(&out, &html)?;
    println!("wrote {out} ({} KiB)", html.len() / 1024);
    let big = match out.strip_suffix(".html") {
        Some(stem) => format!("{stem}-1024.html"),
        None => format!("{out}-1024.html"),
    };
    let html = render_html(&build(true, &mut doc));
    std::fs::write(&big, &html)?;
    println!("wrote {big} ({} KiB)", html.len() / 1024);
    // A healthy job: no findings, nothing flagged, no iteration data at all.
    let healthy = big.replace("-1024.html", "-healthy.html");
    let mut empty = FindingsDocument::new(JobSummary::default(), vec![], true);
    let mut input = build(false, &mut empty);
    input.iteration_times_ms.clear();
    input.flagged_iterations.clear();
    input.heatmap.highlight_rows.clear();
    let html = render_html(&input);
    std::fs::write(&healthy, &html)?;
    println!("wrote {healthy} ({} KiB)", html.len() / 1024);
    Ok(())
}
