//! Flare's diagnosis engine: a window of a trace in, findings out. No I/O.
//!
//! [`Analysis`] preprocesses the window once; each detector ([`detectors`]) is a small
//! module behind the [`Detector`] trait, and [`registry`] is the one list of them.

pub mod analysis;
pub mod breakdown;
pub mod clock;
pub mod detectors;
pub mod flight_recorder;
pub mod live;
pub mod stats;
pub mod whatif;
pub mod whatif_trace;

pub use analysis::Analysis;
use flare_model::{Finding, Severity, Trace};

/// Thresholds shared by the detectors. Defaults are the documented behaviour.
#[derive(Clone, Debug)]
pub struct EngineConfig {
    /// An iteration is irregular when it takes more than `delta` times the window's
    /// typical iteration (Holmes' delta-irregularity).
    pub delta: f64,
    /// A rank is a suspect when its self time exceeds its peers' by this fraction...
    pub min_rank_excess: f64,
    /// ...and by this many robust standard deviations of the ranks' excess.
    pub min_rank_z: f64,
    /// A communicator's transfers are slow at this ratio to comparable ones.
    pub min_transfer_ratio: f64,
    /// A stage or replica is imbalanced at this ratio of compute to the median.
    pub min_imbalance: f64,
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            delta: 1.1,
            min_rank_excess: 0.02,
            min_rank_z: 6.0,
            min_transfer_ratio: 1.3,
            min_imbalance: 1.08,
        }
    }
}

/// What a detector returns.
pub enum Outcome {
    Findings(Vec<Finding>),
    /// The window lacks what this detector needs; the reason says what.
    NotEnoughData(String),
}

/// One diagnosis rule.
pub trait Detector: Send + Sync {
    /// Stable identifier, e.g. `slow_rank`.
    fn id(&self) -> &'static str;
    /// One line on what it finds.
    fn summary(&self) -> &'static str;
    /// The signals it needs, for `flare diagnose --explain`.
    fn needs(&self) -> &'static str;
    fn detect(&self, a: &Analysis, cfg: &EngineConfig) -> Outcome;
}

/// Every detector, in the order they run.
pub fn registry() -> Vec<Box<dyn Detector>> {
    vec![
        Box::new(detectors::hang::HangDetector),
        Box::new(detectors::iteration::IterationDetector),
        Box::new(detectors::slow_rank::SlowRankDetector),
        Box::new(detectors::slow_path::SlowPathDetector),
        Box::new(detectors::imbalance::StageImbalanceDetector),
        Box::new(detectors::imbalance::SequenceImbalanceDetector),
    ]
}

/// The engine's answer for a window.
pub struct Diagnosis<'t> {
    /// Most important first: severity, then confidence.
    pub findings: Vec<Finding>,
    /// Detectors that could not run, with why.
    pub skipped: Vec<(String, String)>,
    pub analysis: Analysis<'t>,
}

impl Diagnosis<'_> {
    /// Whether the detectors that localize slowdowns could run. A window where they could
    /// not (two ranks, no communicator metadata) is not evidence of health.
    pub fn conclusive(&self) -> bool {
        ["slow_rank", "slow_path"]
            .iter()
            .any(|id| !self.skipped.iter().any(|(s, _)| s == id))
            || self.localized().next().is_some()
    }

    /// Findings that blame something (not cluster-wide information).
    pub fn localized(&self) -> impl Iterator<Item = &Finding> {
        self.findings
            .iter()
            .filter(|f| f.severity > Severity::Info && !f.culprits.is_empty())
    }
}

/// Runs every detector on a trace window.
pub fn diagnose<'t>(trace: &'t Trace, cfg: &EngineConfig) -> Diagnosis<'t> {
    let analysis = Analysis::new(trace);
    let mut findings = Vec::new();
    let mut skipped = Vec::new();
    for d in registry() {
        match d.detect(&analysis, cfg) {
            Outcome::Findings(mut f) => findings.append(&mut f),
            Outcome::NotEnoughData(why) => skipped.push((d.id().to_string(), why)),
        }
    }
    findings.sort_by(Finding::by_importance);
    Diagnosis {
        findings,
        skipped,
        analysis,
    }
}
