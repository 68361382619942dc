//! Flare's diagnosis engine: a window of a trace in, findings out. No I/O.
//!
//! [`Analysis`] preprocesses the window once; each detector ([`detectors`]) is a small
//! module behind the [`Detector`] trait, and [`registry`] is the one list of them.

pub mod abnormal;
pub mod analysis;
pub mod breakdown;
pub mod changepoint;
pub mod clock;
pub mod compare;
pub mod consolidate;
pub mod context;
pub mod detectors;
pub mod digest;
pub mod document;
pub mod forest;
pub mod graph;
pub mod live;
pub(crate) mod par;
pub mod pipeline;
pub mod stats;
pub mod stream;

pub use analysis::Analysis;
pub use context::JobContext;
use flare_model::{DetectorId, Finding, RankMetrics, RankTrace, SkippedDetector, Trace};
pub use stream::Engine;
pub use stream::StreamError;

/// How the engine digests iterations, and each detector's thresholds (in its own module).
/// Defaults are the documented behaviour.
#[derive(Clone, Debug)]
pub struct EngineConfig {
    /// Worker threads for digesting iterations (0: one per available core).
    pub threads: usize,
    /// Reuse the previous iteration's slot layout when the schedule repeats (checked key
    /// by key; off only to test that it changes nothing).
    pub predict_slots: bool,
    /// How op groups are judged abnormal before the graph search.
    pub abnormal: abnormal::AbnormalMethod,
    /// Shift the classifier's thresholds on time-valued features by the drift of
    /// iteration time (Holmes); off only to measure what it changes.
    pub adjust_drift: bool,
    pub iteration: detectors::iteration::IterationConfig,
    pub slow_rank: detectors::slow_rank::SlowRankConfig,
    pub graph: detectors::graph::GraphConfig,
    pub metrics: detectors::metrics::MetricsConfig,
    pub machine: detectors::machine::MachineConfig,
    pub slow_path: detectors::slow_path::SlowPathConfig,
    pub imbalance: detectors::imbalance::ImbalanceConfig,
    pub extra_work: detectors::extra_work::ExtraWorkConfig,
    pub startup: detectors::startup::StartupConfig,
}

impl EngineConfig {
    /// The worker threads to use.
    pub fn threads(&self) -> usize {
        if self.threads > 0 {
            self.threads
        } else {
            std::thread::available_parallelism().map_or(1, |n| n.get())
        }
    }
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            threads: 0,
            predict_slots: true,
            abnormal: abnormal::AbnormalMethod::Forest,
            adjust_drift: true,
            iteration: Default::default(),
            slow_rank: Default::default(),
            graph: Default::default(),
            metrics: Default::default(),
            machine: Default::default(),
            slow_path: Default::default(),
            imbalance: Default::default(),
            extra_work: Default::default(),
            startup: Default::default(),
        }
    }
}

/// What a detector returns.
pub enum Outcome {
    Findings(Vec<Finding>),
    /// The window lacks what this detector needs; the reason says what.
    NotEnoughData(String),
    /// This kind of source never carries what it reads (watchdog records in a file,
    /// in-flight collectives in live summaries), and another detector covers the same
    /// fault from what the source has: not listed as skipped.
    NotApplicable,
}

/// One diagnosis rule.
pub trait Detector: Send + Sync {
    /// Stable identifier.
    fn id(&self) -> DetectorId;
    /// Whether it localizes slowdowns (names a rank or a path from how collectives
    /// waited): a window none of these could look at is not evidence of health.
    fn localizes(&self) -> bool {
        false
    }
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
        Box::new(detectors::watchdog::WatchdogDetector),
        Box::new(detectors::in_collective::InCollectiveDetector),
        Box::new(detectors::iteration::IterationDetector),
        Box::new(detectors::slow_rank::SlowRankDetector),
        Box::new(detectors::graph::GraphDetector),
        Box::new(detectors::metrics::MetricsDetector),
        Box::new(detectors::machine::MachineDetector),
        Box::new(detectors::topology::TopologyDetector),
        Box::new(detectors::slow_path::SlowPathDetector),
        Box::new(detectors::imbalance::StageImbalanceDetector),
        Box::new(detectors::imbalance::SequenceImbalanceDetector),
        Box::new(detectors::extra_work::ExtraWorkDetector),
        Box::new(detectors::startup::StartupDetector),
    ]
}

/// The engine's answer for a window.
#[derive(Clone, Debug, Default)]
pub struct Diagnosis {
    /// Most important first: severity, then confidence.
    pub findings: Vec<Finding>,
    /// Detectors that could not run, with why.
    pub skipped: Vec<SkippedDetector>,
    /// Whether a detector that localizes slowdowns ([`Detector::localizes`]) ran.
    pub localizer_ran: bool,
    /// The window's iterations and their durations (median rank span, ns).
    pub iterations: Vec<u32>,
    pub iteration_ns: Vec<Option<f64>>,
    /// Rank ids with data, in the order of [`Diagnosis::relative_excess`]'s rank index.
    pub ranks: Vec<u32>,
    /// Per (rank index, iteration index), rank-major: the rank's self time before its
    /// collectives over the other members' median, minus 1 (NaN when unknown).
    pub self_excess: Vec<f64>,
    /// Per-rank metrics of the ranks with the lowest performance scores (at most 16).
    pub rank_metrics: Vec<RankMetrics>,
    /// Each detector's own findings before those naming the same culprit merged, in
    /// registry order: what one method finds alone (the benchmark scores them).
    pub by_detector: Vec<Finding>,
}

impl Diagnosis {
    /// A rank's relative self-time excess in an iteration (NaN when unknown).
    pub fn relative_excess(&self, rank_index: usize, it_index: usize) -> f64 {
        self.self_excess
            .get(rank_index * self.iterations.len() + it_index)
            .copied()
            .unwrap_or(f64::NAN)
    }

    /// Whether the detectors that localize slowdowns could run. A window where they could
    /// not (two ranks, no communicator metadata) is not evidence of health.
    pub fn conclusive(&self) -> bool {
        self.localizer_ran || self.localized().next().is_some()
    }

    /// Whether this detector could not run, and why.
    pub fn skipped_reason(&self, detector: DetectorId) -> Option<&str> {
        self.skipped
            .iter()
            .find(|s| s.detector == detector)
            .map(|s| s.reason.as_str())
    }

    /// Findings that blame something (not cluster-wide information).
    pub fn localized(&self) -> impl Iterator<Item = &Finding> {
        self.findings.iter().filter(|f| f.localizes())
    }

    /// One detector's own findings that name a culprit, most important first.
    pub fn localized_by(&self, detector: DetectorId) -> Vec<&Finding> {
        let mut v: Vec<&Finding> = self
            .by_detector
            .iter()
            .filter(|f| f.detector == detector && f.localizes())
            .collect();
        v.sort_by(|x, y| Finding::by_importance(x, y));
        v
    }
}

/// Runs every detector on a trace: its iterations are digested one by one, as the
/// streaming engine does, and the whole trace is the window.
pub fn diagnose(trace: &Trace, cfg: &EngineConfig) -> Diagnosis {
    diagnose_with_machine(trace, None, cfg)
}

/// [`diagnose`] with the job's machine metrics (node monitoring) as well.
pub fn diagnose_with_machine(
    trace: &Trace,
    machine: Option<&flare_model::MachineMetrics>,
    cfg: &EngineConfig,
) -> Diagnosis {
    // No per-rank breakdown: only the findings document shows it.
    let mut run = run_whole(trace, cfg, false);
    run.engine.set_machine_metrics(machine.cloned());
    run.engine.diagnose()
}

/// [`diagnose_with_machine`], with what the findings document needs besides.
pub fn diagnose_whole(
    trace: &Trace,
    machine: Option<&flare_model::MachineMetrics>,
    cfg: &EngineConfig,
) -> Offline {
    run_whole(trace, cfg, true).finish(machine)
}

/// Every iteration of `trace` pushed into one run; when some instance's members carry
/// different iteration tags (time-windowed iterations, ops launched across a step
/// boundary), each instance is tagged with its earliest member's iteration and the trace
/// digested again.
fn run_whole(trace: &Trace, cfg: &EngineConfig, breakdown: bool) -> OfflineRun {
    let its = trace.iterations_with_ops();
    let run_of = |t: &Trace| {
        let mut run = OfflineRun::with(JobContext::from_trace(t), its.len(), cfg, breakdown);
        run.push(&t.ranks, &its)
            .expect("a trace's iterations are distinct and pushed in order");
        run
    };
    let run = run_of(trace);
    if run.needs_unified_instances() {
        run_of(&trace.unify_instance_iterations())
    } else {
        run
    }
}

/// A whole trace diagnosed as it is read, a run of iterations at a time (a native file read
/// chunk by chunk): memory holds the engine's digests of the iterations, not their ops.
/// The answer is [`diagnose_whole`]'s on the same trace, unless
/// [`OfflineRun::needs_unified_instances`] says that the trace must be held whole.
pub struct OfflineRun {
    engine: Engine,
    /// `None` where nothing shows it ([`diagnose_with_machine`]).
    breakdown: Option<breakdown::Breakdown>,
    ops: u64,
}

/// The result of an [`OfflineRun`].
pub struct Offline {
    pub diagnosis: Diagnosis,
    /// Per-rank time breakdown of the whole trace.
    pub breakdown: breakdown::Breakdown,
    pub ctx: JobContext,
    /// Ops pushed.
    pub ops: u64,
}

impl Offline {
    /// The findings document, `diagnosis_ms` being what the diagnosis took.
    pub fn document(&self, diagnosis_ms: f64) -> flare_model::FindingsDocument {
        document::of_run(self, diagnosis_ms)
    }
}

impl OfflineRun {
    /// A run over a trace of `iterations` iterations (all of them are the window).
    pub fn new(ctx: JobContext, iterations: usize, cfg: &EngineConfig) -> Self {
        Self::with(ctx, iterations, cfg, true)
    }

    fn with(ctx: JobContext, iterations: usize, cfg: &EngineConfig, breakdown: bool) -> Self {
        let breakdown = breakdown.then(|| breakdown::Breakdown::new(ctx.ranks.iter().copied()));
        OfflineRun {
            engine: Engine::new(ctx, cfg.clone(), iterations),
            breakdown,
            ops: 0,
        }
    }

    /// Digests `iterations` (sorted, after those pushed before) of `ranks`: every rank of
    /// the context, in its order, with only ops of those iterations.
    pub fn push(&mut self, ranks: &[RankTrace], iterations: &[u32]) -> Result<(), StreamError> {
        let ops: u64 = ranks.iter().map(|r| r.ops.len() as u64).sum();
        self.ops += ops;
        // The breakdown beside the digest: it fills the engine's sequential phases.
        let parallel = par::threads_for(ops as usize, self.engine.config().threads()) > 1;
        let (engine, breakdown) = (&mut self.engine, &mut self.breakdown);
        let Some(breakdown) = breakdown else {
            return engine.push_ranks(ranks, iterations);
        };
        let (pushed, ()) = par::join(
            parallel,
            || engine.push_ranks(ranks, iterations),
            || breakdown.add(ranks, iterations),
        );
        pushed
    }

    /// Whether some collective instance's members were tagged with different iterations:
    /// the trace must then be diagnosed whole, with [`Trace::unify_instance_iterations`].
    pub fn needs_unified_instances(&self) -> bool {
        digest::split_instances(&self.engine.digests().collect::<Vec<_>>())
    }

    /// The diagnosis of every iteration pushed, and the per-rank time breakdown.
    pub fn finish(mut self, machine: Option<&flare_model::MachineMetrics>) -> Offline {
        self.engine.set_machine_metrics(machine.cloned());
        Offline {
            diagnosis: self.engine.diagnose(),
            breakdown: self.breakdown.expect(
                "only diagnose_with_machine's runs skip the breakdown, and it never finishes one",
            ),
            ctx: self.engine.into_context(),
            ops: self.ops,
        }
    }
}
