//! Table-driven detector tests: a case is a simulated job (fault, shape, seed, iterations,
//! optionally edited afterwards) and what ONE detector must say about it, read from
//! `Diagnosis::localized_by` / `skipped_reason` so that the other detectors neither mask
//! nor stand in for it. Seeds are below 1000: the accuracy benchmark uses seeds from
//! 1,000,000.

#![allow(dead_code)]

use flare_engine::{diagnose, Diagnosis, EngineConfig};
use flare_model::{DetectorId, FindingKind, Trace};
use flare_sim::{fault::FaultKind, simulate, SimConfig, SimOutput};

/// The job's parallel layout.
#[derive(Clone, Copy, Debug)]
pub enum Shape {
    /// `SimConfig::for_scale(world)`: the benchmark's standard shape.
    Scale(u32),
    /// `SimConfig::megatron(tp, pp, dp)`.
    Megatron { tp: u32, pp: u32, dp: u32 },
}

/// What the detector under test must say.
#[derive(Clone, Copy, Debug)]
pub enum Expect {
    /// Its most important localized finding has this kind and names the injected fault's
    /// culprit (`Truth::matches`).
    Culprit(FindingKind),
    /// Its most important localized finding names the injected fault's rank, whatever
    /// kind it says (for a detector whose cause reading is checked elsewhere).
    CulpritRank,
    /// No localized finding from it.
    Silent,
    /// It could not run; its reason contains this text.
    NotEnoughData(&'static str),
}

/// One row of a table.
#[derive(Clone, Copy)]
pub struct Case {
    pub fault: FaultKind,
    pub shape: Shape,
    pub seed: u64,
    pub iterations: u32,
    /// Probability of a cluster-wide spike per iteration (the simulator's default when
    /// `None`).
    pub spikes: Option<f64>,
    /// Applied to the simulated trace before diagnosis (drop metadata, ranks...).
    pub edit: Option<fn(&mut Trace)>,
    pub expect: Expect,
}

impl Case {
    pub const fn new(fault: FaultKind, shape: Shape, seed: u64, expect: Expect) -> Case {
        Case {
            fault,
            shape,
            seed,
            iterations: 8,
            spikes: None,
            edit: None,
            expect,
        }
    }
    pub const fn iterations(mut self, n: u32) -> Case {
        self.iterations = n;
        self
    }
    pub const fn spikes(mut self, probability: f64) -> Case {
        self.spikes = Some(probability);
        self
    }
    pub const fn edit(mut self, f: fn(&mut Trace)) -> Case {
        self.edit = Some(f);
        self
    }
}

pub fn simulated(case: &Case) -> SimOutput {
    assert!(
        case.seed < 1000,
        "benchmark seeds (>= 1,000,000) are off limits"
    );
    let mut cfg = match case.shape {
        Shape::Scale(world) => SimConfig::for_scale(world),
        Shape::Megatron { tp, pp, dp } => SimConfig::megatron(tp, pp, dp),
    };
    cfg.iterations = case.iterations;
    cfg.seed = case.seed;
    cfg.fault = case.fault;
    if let Some(p) = case.spikes {
        cfg.spike_probability = p;
    }
    let mut out = simulate(&cfg).expect("a valid simulation");
    if case.spikes.is_some_and(|p| p > 0.0) {
        assert!(
            !out.truth.spike_iterations.is_empty(),
            "seed {}: a spike case without a spike",
            case.seed
        );
    }
    if let Some(edit) = case.edit {
        edit(&mut out.trace);
    }
    out
}

/// Runs one case and panics with what the detector said instead.
pub fn check(detector: DetectorId, name: &str, case: Case) {
    let out = simulated(&case);
    let d = diagnose(&out.trace, &EngineConfig::default());
    if let Err(why) = verdict(detector, &case, &out, &d) {
        panic!(
            "{name} ({:?}, {:?}, seed {}, {} iterations, spikes in {:?}) | truth: {} | {why}",
            case.fault,
            case.shape,
            case.seed,
            case.iterations,
            out.truth.spike_iterations,
            out.truth.description
        );
    }
}

fn verdict(
    detector: DetectorId,
    case: &Case,
    out: &SimOutput,
    d: &Diagnosis,
) -> Result<(), String> {
    let mine = d.localized_by(detector);
    let said = || {
        let mut s: Vec<String> = mine
            .iter()
            .map(|f| format!("{}: {}", f.kind.as_str(), f.summary))
            .collect();
        if let Some(r) = d.skipped_reason(detector) {
            s.push(format!("skipped: {r}"));
        }
        if s.is_empty() {
            "nothing".to_string()
        } else {
            s.join(" || ")
        }
    };
    match case.expect {
        Expect::Culprit(kind) => {
            assert_eq!(
                out.truth.expected_finding,
                Some(kind),
                "the case's expected kind disagrees with the simulator's truth"
            );
            match mine.first() {
                Some(f) if f.kind == kind && out.truth.matches(f.kind, &f.culprits[0]) => Ok(()),
                _ => Err(format!(
                    "expected {} naming the culprit, got {}",
                    kind.as_str(),
                    said()
                )),
            }
        }
        Expect::CulpritRank => {
            let rank = out.truth.culprits.first().and_then(|c| c.rank);
            assert!(rank.is_some(), "the injected fault has no rank to name");
            match mine.first() {
                Some(f) if f.culprits[0].rank == rank => Ok(()),
                _ => Err(format!("expected rank {rank:?} first, got {}", said())),
            }
        }
        Expect::Silent => {
            if let Some(r) = d.skipped_reason(detector) {
                return Err(format!(
                    "expected it to run and find nothing, it skipped: {r}"
                ));
            }
            if mine.is_empty() {
                Ok(())
            } else {
                Err(format!("expected silence, got {}", said()))
            }
        }
        Expect::NotEnoughData(text) => match d.skipped_reason(detector) {
            Some(r) if r.contains(text) && mine.is_empty() => Ok(()),
            _ => Err(format!(
                "expected not enough data ({text:?}), got {}",
                said()
            )),
        },
    }
}

/// One `#[test]` per row: `name: case,` (attributes such as `#[ignore = "..."]` allowed).
macro_rules! detector_cases {
    ($detector:expr; $( $(#[$meta:meta])* $name:ident: $case:expr, )*) => {
        $(
            $(#[$meta])*
            #[test]
            fn $name() {
                common::check($detector, stringify!($name), $case);
            }
        )*
    };
}

/// Drops the job's parallel layout, as a trace from a profiler that does not know it.
pub fn without_layout(t: &mut Trace) {
    t.job.parallel = None;
}

/// Keeps only the ops outside any communicator: a compute-only profile.
pub fn compute_only(t: &mut Trace) {
    for r in &mut t.ranks {
        r.ops.retain(|op| op.comm().is_none());
    }
}

/// Keeps only the ops on a communicator, with no byte counts: a collectives-only profile
/// that does not record sizes.
pub fn collectives_without_bytes(t: &mut Trace) {
    for r in &mut t.ranks {
        r.ops.retain(|op| op.comm().is_some());
        for op in &mut r.ops {
            op.amount = 0;
        }
    }
}

/// Keeps only the ranks of pipeline stage 0, the others listed as missing: a sampled
/// profile.
pub fn first_stage_only(t: &mut Trace) {
    let par = t.job.parallel.clone().expect("a pipeline layout");
    let (kept, dropped): (Vec<_>, Vec<_>) = std::mem::take(&mut t.ranks)
        .into_iter()
        .partition(|r| par.coords(r.rank).pp == 0);
    t.meta.missing_ranks = dropped.iter().map(|r| r.rank).collect();
    t.ranks = kept;
}
