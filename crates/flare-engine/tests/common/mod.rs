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

/// Drops the layout and the pipeline's transfers (their peers): nothing says which stage
/// a rank is on.
pub fn without_layout_or_transfers(t: &mut Trace) {
    without_layout(t);
    for r in &mut t.ranks {
        for op in r.ops.iter_mut().filter(|o| o.kind.is_p2p()) {
            op.peer = flare_model::Op::NO_PEER;
        }
    }
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

/// A hand-built job with no parallel layout: `ranks` ranks on one world communicator,
/// each iteration two rounds of a 10 ms kernel then an all-reduce (2 ms once the last
/// member arrives), with `slow = Some((rank, factor))` computing `factor` times longer.
/// No noise at all: the edge cases of the detectors' statistics, not of the data.
pub fn tiny_trace(ranks: u32, iterations: u32, slow: Option<(u32, f64)>) -> Trace {
    use flare_model::{
        ClusterTopology, Communicator, GroupKind, IterationSpan, JobInfo, Op, OpKind, RankTrace,
        TraceMeta,
    };
    const COMPUTE_NS: f64 = 10e6;
    const TRANSFER_NS: i64 = 2_000_000;
    let op = |kind, name, iteration, comm, seq, start_ns, end_ns, amount| Op {
        kind,
        name,
        iteration,
        comm,
        seq,
        peer: Op::NO_PEER,
        start_ns,
        end_ns,
        issue_ns: Op::UNKNOWN,
        amount,
    };
    let compute = |r: u32| match slow {
        Some((s, f)) if s == r => (COMPUTE_NS * f) as i64,
        _ => COMPUTE_NS as i64,
    };
    let mut out: Vec<RankTrace> = (0..ranks)
        .map(|rank| RankTrace {
            rank,
            ops: vec![],
            iterations: vec![],
        })
        .collect();
    let mut t = 1_000_000_000i64;
    let mut seq = 0;
    for it in 0..iterations {
        let start = t;
        for _round in 0..2 {
            let last = (0..ranks).map(|r| t + compute(r)).max().unwrap_or(t);
            let end = last + TRANSFER_NS;
            for (r, rt) in out.iter_mut().enumerate() {
                let arrive = t + compute(r as u32);
                rt.ops.push(op(
                    OpKind::Compute,
                    0,
                    it,
                    Op::NO_COMM,
                    0,
                    t,
                    arrive,
                    1 << 40,
                ));
                rt.ops
                    .push(op(OpKind::AllReduce, 1, it, 0, seq, arrive, end, 1 << 26));
            }
            seq += 1;
            t = end;
        }
        for rt in &mut out {
            rt.iterations.push(IterationSpan {
                iteration: it,
                start_ns: start,
                end_ns: Some(t),
            });
        }
        t += 1_000_000;
    }
    Trace {
        meta: TraceMeta {
            source: "hand-built".into(),
            ..TraceMeta::default()
        },
        job: JobInfo {
            job_id: "tiny".into(),
            world_size: ranks,
            cluster: ClusterTopology::for_world(ranks, 8, 4),
            parallel: None,
            microbatches: None,
        },
        communicators: vec![Communicator {
            id: 0,
            kind: GroupKind::World,
            members: (0..ranks).collect(),
            label: "world".into(),
        }],
        names: vec!["gemm".into(), "allreduce".into()],
        ranks: out,
    }
}

/// What one detector must say about a hand-built trace.
#[derive(Clone, Copy, Debug)]
pub enum TinyExpect {
    /// Its first localized finding has this kind and names this rank.
    Names(FindingKind, u32),
    Silent,
    /// It skips, with a reason containing this text.
    Skips(&'static str),
}

/// A hand-built case: name, ranks, the slow rank and its factor, the expectation.
pub type TinyCase<'a> = (&'a str, u32, Option<(u32, f64)>, TinyExpect);

/// A table of hand-built cases, each
/// over 6 iterations of [`tiny_trace`]: every failure is listed, then the test fails.
pub fn check_tiny(detector: DetectorId, cases: &[TinyCase]) {
    let mut failures = Vec::new();
    for &(name, ranks, slow, expect) in cases {
        let d = diagnose(&tiny_trace(ranks, 6, slow), &EngineConfig::default());
        let skipped = d.skipped_reason(detector);
        let first = d
            .localized_by(detector)
            .first()
            .map(|f| (f.kind, f.culprits[0].rank, f.summary.clone()));
        let ok = match expect {
            TinyExpect::Names(kind, rank) => {
                matches!(&first, Some((k, Some(r), _)) if *k == kind && *r == rank)
            }
            TinyExpect::Silent => skipped.is_none() && first.is_none(),
            TinyExpect::Skips(text) => skipped.is_some_and(|r| r.contains(text)),
        };
        if !ok {
            failures.push(format!(
                "{name}: expected {expect:?}, got {first:?}, skipped: {skipped:?}"
            ));
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}
