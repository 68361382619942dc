//! The findings document: the one answer Flare gives, whoever asks. `flare diagnose
//! --json` and `flare demo --json` print it, the server's findings API serves it, and the
//! HTML report renders it. It is serialized here and nowhere else, and its JSON Schema
//! ([`FindingsDocument::schema`], committed as `schema/findings.schema.json`) is generated
//! from these types.

use super::{DetectorId, Finding, FindingKind, Severity};
use serde::{Deserialize, Serialize};

string_enum! {
    /// The answer in one word.
    pub enum Verdict {
        /// There was enough data to look, and nothing is blamed.
        Healthy => "healthy",
        /// At least one finding is a warning or worse: something slows or stops the job,
        /// whether or not it could be pinned on a culprit (a fail-slow onset of the whole
        /// job is not healthy either).
        Unhealthy => "unhealthy",
        /// The data lacks what localization needs: nothing can be said about health.
        Inconclusive => "inconclusive",
    }
}

impl Verdict {
    /// The verdict of a set of findings. `conclusive`: whether the detectors that localize
    /// slowdowns could look at the data.
    pub fn of(conclusive: bool, findings: &[Finding]) -> Verdict {
        if findings.iter().any(|f| f.severity >= Severity::Warning) {
            Verdict::Unhealthy
        } else if conclusive {
            Verdict::Healthy
        } else {
            Verdict::Inconclusive
        }
    }
}

/// What was analysed.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct JobSummary {
    /// The job's id, or the path it was read from.
    pub id: String,
    /// Where the data came from: `simulator`, `kineto`, `native`, `flight_recorder`,
    /// `agent`, ...
    pub source: String,
    pub world_size: u32,
    pub ranks_with_data: usize,
    /// Ranks the job has but the data holds nothing for: the first
    /// [`JobSummary::MISSING_RANKS_LISTED`] of them (`missing_rank_count` says how many).
    pub missing_ranks: Vec<u32>,
    /// How many ranks have no data; more than `missing_ranks` lists when the list was cut.
    #[serde(default)]
    pub missing_rank_count: u64,
    /// The iterations analysed (traces).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub iterations: Vec<u32>,
    /// Ops read (traces).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ops: Option<u64>,
    /// Nodes that reported (live windows).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nodes: Option<usize>,
    /// The window's index (live windows).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window: Option<u64>,
    /// Windows of the job analysed so far (live).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub windows_analysed: Option<u64>,
    /// When the window was analysed, Unix ns (live).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub analysed_unix_ns: Option<u64>,
    /// The job's parallel layout (tensor, context, expert, data and pipeline sizes and
    /// the order ranks take in them), where the trace or the ranks state it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parallel: Option<crate::ParallelConfig>,
}

impl JobSummary {
    /// Missing ranks the document spells out: a job that lost most of a large world
    /// (or a summary that claims a huge one) must not make every read megabytes long.
    pub const MISSING_RANKS_LISTED: usize = 1024;

    /// Sets `missing_ranks` (the first [`Self::MISSING_RANKS_LISTED`]) and
    /// `missing_rank_count` from ranges of missing ranks, inclusive, in order.
    pub fn set_missing_rank_ranges(&mut self, ranges: &[(u32, u32)]) {
        self.missing_rank_count = ranges
            .iter()
            .map(|&(lo, hi)| u64::from(hi.saturating_sub(lo)) + 1)
            .sum();
        self.missing_ranks = ranges
            .iter()
            .flat_map(|&(lo, hi)| lo..=hi)
            .take(Self::MISSING_RANKS_LISTED)
            .collect();
    }

    /// Cuts a full list of missing ranks to the listed ones, counting them all.
    fn limit_missing_ranks(&mut self) {
        let listed = self.missing_ranks.len() as u64;
        self.missing_rank_count = self.missing_rank_count.max(listed);
        self.missing_ranks.truncate(Self::MISSING_RANKS_LISTED);
    }
}

/// A detector that could not run on this data, and why.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct SkippedDetector {
    pub detector: DetectorId,
    pub reason: String,
}

/// One rank's performance figures over the window (XPUTimer's cross-rank metrics and
/// nvidia-resiliency-ext's scores). Figures that could not be measured are `null`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct RankMetrics {
    pub rank: u32,
    /// Achieved TFLOPS of its compute kernels that carry FLOPs.
    #[serde(with = "super::finite")]
    #[schemars(with = "Option<f64>")]
    pub tflops: f64,
    /// Bus bandwidth of its completed collectives, GB/s.
    #[serde(with = "super::finite")]
    #[schemars(with = "Option<f64>")]
    pub bus_gbps: f64,
    /// Share of its compute kernels that started as soon as they were launched.
    #[serde(with = "super::finite")]
    #[schemars(with = "Option<f64>")]
    pub immediate_launch_share: f64,
    /// Share of its iterations' time with no traced op running.
    #[serde(with = "super::finite")]
    #[schemars(with = "Option<f64>")]
    pub void_share: f64,
    /// Iterations per second (over its own iteration spans).
    #[serde(with = "super::finite")]
    #[schemars(with = "Option<f64>")]
    pub iterations_per_s: f64,
    /// The best peer's kernel time over its own (1.0: as fast as the fastest).
    #[serde(with = "super::finite")]
    #[schemars(with = "Option<f64>")]
    pub relative_score: f64,
    /// Its own best kernel time over its current (1.0: as fast as it ever was).
    #[serde(with = "super::finite")]
    #[schemars(with = "Option<f64>")]
    pub individual_score: f64,
}

/// Where one rank's time went over the window, in ms.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct RankTime {
    pub rank: u32,
    pub window_ms: f64,
    pub compute_ms: f64,
    pub communication_ms: f64,
    /// Communication not overlapped by compute.
    pub exposed_communication_ms: f64,
    /// Time with nothing traced running.
    pub idle_ms: f64,
}

/// One earlier window of a live job, for the trend.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct WindowHistory {
    pub window: u64,
    pub findings: u64,
    /// Distinct finding kinds, most important first.
    pub kinds: Vec<FindingKind>,
}

/// The findings document. Built by [`FindingsDocument::new`], which orders the findings and
/// derives the verdict, so that every producer says "healthy" for the same reasons.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct FindingsDocument {
    pub job: JobSummary,
    verdict: Verdict,
    /// `verdict == healthy` (kept for readers of earlier versions).
    healthy: bool,
    /// Whether the localization detectors could look at the data.
    conclusive: bool,
    /// Most important first: severity, then confidence.
    findings: Vec<Finding>,
    /// The ranks the most important localizing finding blames.
    culprit_ranks: Vec<u32>,
    /// Detectors that could not run on this data, with why.
    #[serde(default)]
    pub skipped_detectors: Vec<SkippedDetector>,
    /// The ranks with the lowest performance scores (traces).
    #[serde(default)]
    pub rank_metrics: Vec<RankMetrics>,
    /// Per-rank time breakdown, most idle plus exposed communication first (traces).
    #[serde(default)]
    pub rank_breakdown: Vec<RankTime>,
    /// What a person should know about the data itself (drops, skipped comparisons).
    #[serde(default)]
    pub notes: Vec<String>,
    /// The job's earlier windows, oldest first (live).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub history: Vec<WindowHistory>,
    /// Time the analysis took.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub diagnosis_ms: Option<f64>,
    /// Two runs compared, class by class (`flare compare`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub comparison: Option<super::Comparison>,
}

impl FindingsDocument {
    /// A document for these findings: sorted most important first, with the verdict and
    /// the culprit ranks derived from them.
    pub fn new(mut job: JobSummary, mut findings: Vec<Finding>, conclusive: bool) -> Self {
        job.limit_missing_ranks();
        findings.sort_by(Finding::by_importance);
        for f in findings.iter_mut() {
            f.settle_decisive();
        }
        let verdict = Verdict::of(conclusive, &findings);
        let culprit_ranks = findings
            .iter()
            .find(|f| f.localizes())
            .map(|f| f.culprits.iter().filter_map(|c| c.rank).collect())
            .unwrap_or_default();
        FindingsDocument {
            job,
            verdict,
            healthy: verdict == Verdict::Healthy,
            conclusive,
            findings,
            culprit_ranks,
            skipped_detectors: Vec::new(),
            rank_metrics: Vec::new(),
            rank_breakdown: Vec::new(),
            notes: Vec::new(),
            history: Vec::new(),
            diagnosis_ms: None,
            comparison: None,
        }
    }

    /// The same document with `f` applied to its findings (another source's merged in):
    /// sorted again, and the verdict and culprit ranks derived again; the rest is kept.
    pub fn map_findings(mut self, f: impl FnOnce(Vec<Finding>) -> Vec<Finding>) -> Self {
        let findings = f(std::mem::take(&mut self.findings));
        let fresh = FindingsDocument::new(self.job.clone(), findings, self.conclusive);
        self.findings = fresh.findings;
        self.verdict = fresh.verdict;
        self.healthy = fresh.healthy;
        self.culprit_ranks = fresh.culprit_ranks;
        self
    }

    pub fn verdict(&self) -> Verdict {
        self.verdict
    }

    pub fn healthy(&self) -> bool {
        self.healthy
    }

    pub fn conclusive(&self) -> bool {
        self.conclusive
    }

    /// Most important first.
    pub fn findings(&self) -> &[Finding] {
        &self.findings
    }

    pub fn culprit_ranks(&self) -> &[u32] {
        &self.culprit_ranks
    }

    /// Each rank a finding above `info` names, with the most important such finding:
    /// the ranks a view of the job marks.
    pub fn blamed_ranks(&self) -> std::collections::BTreeMap<u32, &Finding> {
        let mut out = std::collections::BTreeMap::new();
        for f in self.findings.iter().filter(|f| f.severity > Severity::Info) {
            for r in f.culprits.iter().filter_map(|c| c.rank) {
                out.entry(r).or_insert(f);
            }
        }
        out
    }

    /// The document as pretty-printed JSON: the one serialization of findings that leaves
    /// the process.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("a findings document always serializes")
    }

    /// Reads a document back (what the server stores, what tests check).
    pub fn from_json(s: &str) -> Result<FindingsDocument, serde_json::Error> {
        serde_json::from_str(s)
    }

    /// The document's JSON Schema (draft 2020-12), generated from these types.
    pub fn schema() -> serde_json::Value {
        serde_json::to_value(schemars::schema_for!(FindingsDocument))
            .expect("a schema always serializes")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Component, Culprit};

    fn finding(severity: Severity, culprit_rank: Option<u32>) -> Finding {
        Finding {
            kind: crate::FindingKind::SlowGpu,
            severity,
            summary: String::new(),
            confidence: 0.5,
            culprits: culprit_rank
                .map(|r| {
                    let mut c = Culprit::new(Component::Gpu);
                    c.rank = Some(r);
                    vec![c]
                })
                .unwrap_or_default(),
            evidence: vec![],
            action: String::new(),
            iterations: vec![],
            detector: DetectorId::SlowRank,
            corroborated_by: vec![],
            failure: None,
        }
    }

    #[test]
    fn missing_ranks_are_listed_up_to_a_bound_and_counted_in_full() {
        let mut job = JobSummary::default();
        job.set_missing_rank_ranges(&[(2, 3), (5, (1 << 20) - 1)]);
        assert_eq!(job.missing_rank_count, 2 + (1 << 20) - 5);
        assert_eq!(job.missing_ranks.len(), JobSummary::MISSING_RANKS_LISTED);
        assert_eq!(&job.missing_ranks[..4], &[2, 3, 5, 6]);
        // A full list given by an importer is cut by the document, and counted.
        let full = JobSummary {
            missing_ranks: (0..5000).collect(),
            ..JobSummary::default()
        };
        let doc = FindingsDocument::new(full, vec![], true);
        assert_eq!(doc.job.missing_rank_count, 5000);
        assert_eq!(
            doc.job.missing_ranks.len(),
            JobSummary::MISSING_RANKS_LISTED
        );
        assert!(doc.to_json().len() < 16 << 10);
    }

    #[test]
    fn verdict_table() {
        use Severity::*;
        let cases: &[(&str, bool, Vec<Finding>, Verdict)] = &[
            ("nothing found", true, vec![], Verdict::Healthy),
            ("nothing could look", false, vec![], Verdict::Inconclusive),
            (
                "information only",
                true,
                vec![finding(Info, Some(3))],
                Verdict::Healthy,
            ),
            (
                "information, nothing could look",
                false,
                vec![finding(Info, Some(3))],
                Verdict::Inconclusive,
            ),
            (
                "a culprit",
                true,
                vec![finding(Warning, Some(3))],
                Verdict::Unhealthy,
            ),
            (
                "a culprit found without the localizers",
                false,
                vec![finding(Critical, Some(3))],
                Verdict::Unhealthy,
            ),
            (
                "a job-wide warning without a culprit",
                true,
                vec![finding(Warning, None)],
                Verdict::Unhealthy,
            ),
        ];
        for (name, conclusive, findings, want) in cases {
            assert_eq!(Verdict::of(*conclusive, findings), *want, "{name}");
            let doc = FindingsDocument::new(JobSummary::default(), findings.clone(), *conclusive);
            assert_eq!(doc.healthy(), *want == Verdict::Healthy, "{name}");
        }
    }

    #[test]
    fn culprit_ranks_come_from_the_most_important_localizing_finding() {
        let doc = FindingsDocument::new(
            JobSummary::default(),
            vec![
                finding(Severity::Info, Some(1)),
                finding(Severity::Warning, None),
                finding(Severity::Critical, Some(7)),
            ],
            true,
        );
        assert_eq!(doc.culprit_ranks(), [7]);
        assert_eq!(doc.findings()[0].severity, Severity::Critical);
    }

    #[test]
    fn blamed_ranks_are_those_findings_above_info_name_each_with_its_most_important() {
        let doc = FindingsDocument::new(
            JobSummary::default(),
            vec![
                finding(Severity::Info, Some(1)),
                finding(Severity::Warning, Some(7)),
                finding(Severity::Critical, Some(7)),
                finding(Severity::Warning, Some(3)),
            ],
            true,
        );
        let blamed: Vec<(u32, Severity)> = doc
            .blamed_ranks()
            .into_iter()
            .map(|(r, f)| (r, f.severity))
            .collect();
        assert_eq!(blamed, [(3, Severity::Warning), (7, Severity::Critical)]);
    }

    #[test]
    fn mapped_findings_derive_the_verdict_again_and_keep_the_rest() {
        let mut doc = FindingsDocument::new(JobSummary::default(), vec![], true);
        doc.notes.push("kept".into());
        assert_eq!(doc.verdict(), Verdict::Healthy);
        let doc = doc.map_findings(|mut f| {
            f.push(finding(Severity::Info, Some(1)));
            f.push(finding(Severity::Critical, Some(7)));
            f
        });
        assert_eq!(doc.verdict(), Verdict::Unhealthy);
        assert_eq!(doc.culprit_ranks(), [7]);
        assert_eq!(doc.findings()[0].severity, Severity::Critical);
        assert_eq!(doc.notes, ["kept"]);
    }

    #[test]
    fn nan_figures_round_trip_as_null() {
        let mut doc = FindingsDocument::new(JobSummary::default(), vec![], true);
        doc.rank_metrics = vec![RankMetrics {
            rank: 4,
            tflops: f64::NAN,
            ..RankMetrics::default()
        }];
        let json = doc.to_json();
        assert!(json.contains("\"tflops\": null"), "{json}");
        let back = FindingsDocument::from_json(&json).unwrap();
        assert!(back.rank_metrics[0].tflops.is_nan());
        assert_eq!(back.rank_metrics[0].rank, 4);
        assert_eq!(back.verdict(), Verdict::Healthy);
    }
}
