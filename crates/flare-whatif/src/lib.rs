//! What-if straggler analysis of NDTimeline traces.
//!
//! The method of "Understanding Stragglers in Large Model Training Using What-if
//! Analysis" (OSDI'25, ByteDance): build the dependency model of a Megatron step, replay it
//! with the measured durations, replay it again with every op *idealized*, and compare the
//! mean step times. Implemented here from the paper and the published artifact's
//! definitions (ByteDance-Seed/StragglerAnalysis), so that S, M_W and M_S agree with its
//! reference results.
//!
//! # Dependency model
//!
//! Built from the ops of data-parallel rank 0 in the first step; every worker (a
//! data-parallel rank and pipeline stage) and step must hold the same ops. Ops are named
//! by (type, sequence number, stage). Within a stage, ordered by start time:
//!
//! * forward and backward compute form one chain; each pipeline op type (forward send,
//!   forward receive, backward send, backward receive) forms its own chain;
//! * the k-th send or receive of a type is matched to the compute that produces or
//!   consumes it (sends before the first compute ends and receives after the last compute
//!   starts are no-ops); a send waits for its compute, a compute waits for its receive,
//!   and a receive waits for the compute before the one it feeds;
//! * the first backward send and receive wait for the second-last forward before the
//!   first backward;
//! * with data parallelism, parameter all-gathers and gradient reduce-scatters form a
//!   chain, the first forward of each model chunk waits for its chunk's all-gather, and
//!   after the last compute come gc, layernorm all-reduce, embedding all-reduce (first and
//!   last stage), the reduce-scatters (or, when they overlap backward, the separate
//!   all-reduce), gradient clipping and the optimizer.
//!
//! Collectives: the valid k-th send of a stage pairs with the valid k-th receive of its
//! peer stage; data-parallel collectives and gradient clipping synchronize all data-parallel
//! ranks (clipping also all stages); the embedding all-reduce joins the first and last
//! stage. A collective ends for every member at the last member's start plus that
//! member's own *transfer time*, measured in the trace as its end minus the last member's
//! start.
//!
//! # Idealization and results
//!
//! Ideal durations are per op type: the mean duration for compute-like ops and the median
//! transfer time for communication. S is the mean simulated step time with measured
//! durations over the mean with ideal ones. Attribution to an op type, data-parallel rank
//! or stage is the slowdown left when only those ops keep their measured durations; a
//! worker's is the smaller of its rank's and its stage's. M_W is the fraction of
//! `original - ideal` removed by idealizing only the worst 3% of workers (by that score),
//! M_S the fraction removed by idealizing only the last stage.

pub mod trace;

use flare_model::ndtimeline::{
    Band, BandAxis, FixEffect, HeatPattern, IndexSlowdown, NdOpType, NdTrace, OpTypeSlowdown,
    StepSlowdown, WhatIfHeatmap, WhatIfReport, WorkerRef, WorkerSlowdown,
};
use std::collections::{HashMap, VecDeque};
use std::fmt;

/// Tunables; the defaults are the artifact's.
#[derive(Clone, Debug)]
pub struct WhatIfOptions {
    /// M_W idealizes the worst `ceil(workers * percent / 100)` workers.
    pub worst_worker_percent: f64,
    /// Heatmap: a worker is hot at `1 + hot_fraction * (max - 1)` or above.
    pub hot_fraction: f64,
    /// Heatmap: below this largest worker slowdown there is no pattern.
    pub min_slowdown: f64,
}

impl Default for WhatIfOptions {
    fn default() -> Self {
        WhatIfOptions {
            worst_worker_percent: 3.0,
            hot_fraction: 0.5,
            min_slowdown: 1.03,
        }
    }
}

/// Why a trace cannot be analysed.
#[derive(Clone, Debug, PartialEq)]
pub enum WhatIfError {
    /// No ops of a known type.
    Empty,
    /// Workers or steps do not hold the same ops, or ranks are not contiguous.
    Inconsistent(String),
    /// The pipeline schedule does not fit the dependency model.
    Schedule(String),
    /// The dependency model has a cycle through these ops.
    Cycle(Vec<String>),
}

impl fmt::Display for WhatIfError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WhatIfError::Empty => write!(f, "the trace has no ops of a known type"),
            WhatIfError::Inconsistent(m) => write!(f, "inconsistent trace: {m}"),
            WhatIfError::Schedule(m) => write!(f, "unsupported pipeline schedule: {m}"),
            WhatIfError::Cycle(ops) => {
                write!(
                    f,
                    "the dependency model has a cycle through {}",
                    ops.join(", ")
                )
            }
        }
    }
}

impl std::error::Error for WhatIfError {}

/// Runs the analysis with the default options.
pub fn analyze(trace: &NdTrace) -> Result<WhatIfReport, WhatIfError> {
    analyze_with(trace, &WhatIfOptions::default())
}

/// Runs the analysis.
pub fn analyze_with(trace: &NdTrace, opts: &WhatIfOptions) -> Result<WhatIfReport, WhatIfError> {
    let model = Model::build(trace)?;
    let sim = Simulator::new(&model)?;
    Ok(model.report(trace, &sim, opts))
}

/// Op types in a fixed index order (the documented ones).
fn type_index(t: &NdOpType) -> Option<usize> {
    NdOpType::KNOWN.iter().position(|k| k == t)
}

const EPS_P2P: f64 = 5e-5;
const EPS_TRANSFER: f64 = 1e-2;

/// One op name: (type, sequence number, stage), with its instances across steps and
/// data-parallel ranks.
struct Name {
    ty: NdOpType,
    seq: i64,
    stage: u32,
    /// Template (data-parallel rank 0, first step) timing and chunk.
    t_start: f64,
    t_end: f64,
    mc: i64,
    gmc: i64,
}

struct Model {
    names: Vec<Name>,
    /// `deps[v]`: names `v` waits for.
    deps: Vec<Vec<usize>>,
    groups: Vec<Vec<usize>>,
    gid: Vec<Option<usize>>,
    dp_sync: Vec<bool>,
    steps: Vec<i64>,
    nd: usize,
    pp: usize,
    /// Instances per name: `m = steps * nd`, slot `name * m + step * nd + dp`.
    m: usize,
    /// Measured duration and transfer time per slot.
    dur: Vec<f64>,
    transfer: Vec<f64>,
    /// Global rank of each worker, `stage * nd + dp`.
    worker_rank: Vec<u32>,
    trace_step_time: Vec<f64>,
    ignored: usize,
    warnings: Vec<String>,
}

fn sort_key_cmp(a: &Name, b: &Name) -> std::cmp::Ordering {
    a.t_start
        .total_cmp(&b.t_start)
        .then(a.seq.cmp(&b.seq))
        .then(a.ty.as_str().cmp(b.ty.as_str()))
}

impl Model {
    fn build(trace: &NdTrace) -> Result<Model, WhatIfError> {
        let ops: Vec<_> = trace
            .ops
            .iter()
            .filter(|o| type_index(&o.optype).is_some())
            .collect();
        let ignored = trace.ops.len() - ops.len();
        if ops.is_empty() {
            return Err(WhatIfError::Empty);
        }
        let mut steps: Vec<i64> = ops.iter().map(|o| o.step).collect();
        steps.sort_unstable();
        steps.dedup();
        let nd = ops.iter().map(|o| o.dp_rank).max().unwrap_or(0) as usize + 1;
        let pp = ops.iter().map(|o| o.stage).max().unwrap_or(0) as usize + 1;
        let step_idx: HashMap<i64, usize> =
            steps.iter().enumerate().map(|(i, s)| (*s, i)).collect();
        let m = steps.len() * nd;

        // Every worker holds ops: guards the allocations below against absurd ranks.
        if nd.saturating_mul(pp) > ops.len() {
            return Err(WhatIfError::Inconsistent(format!(
                "{} ops cannot cover {nd} data-parallel ranks x {pp} stages; ranks and stages must be contiguous from 0",
                ops.len()
            )));
        }
        // Worker ranks, and every worker present.
        let mut worker_rank = vec![u32::MAX; nd * pp];
        for o in &ops {
            let w = o.stage as usize * nd + o.dp_rank as usize;
            if worker_rank[w] == u32::MAX {
                worker_rank[w] = o.rank;
            } else if worker_rank[w] != o.rank {
                return Err(WhatIfError::Inconsistent(format!(
                    "worker (dp_rank {}, stage {}) has ops of ranks {} and {}",
                    o.dp_rank, o.stage, worker_rank[w], o.rank
                )));
            }
        }
        if let Some(w) = worker_rank.iter().position(|r| *r == u32::MAX) {
            return Err(WhatIfError::Inconsistent(format!(
                "no ops for worker (dp_rank {}, stage {}); data-parallel ranks and stages must be contiguous from 0",
                w % nd,
                w / nd
            )));
        }

        // Template: data-parallel rank 0, first step.
        let first = steps[0];
        let mut names: Vec<Name> = Vec::new();
        let mut by_key: HashMap<(usize, i64, u32), usize> = HashMap::new();
        for o in ops.iter().filter(|o| o.dp_rank == 0 && o.step == first) {
            let key = (type_index(&o.optype).unwrap_or(0), o.seq_id, o.stage);
            if by_key.contains_key(&key) {
                return Err(WhatIfError::Inconsistent(format!(
                    "{} seq_id {} appears twice on (dp_rank 0, stage {}) in step {first}",
                    o.optype, o.seq_id, o.stage
                )));
            }
            by_key.insert(key, names.len());
            names.push(Name {
                ty: o.optype.clone(),
                seq: o.seq_id,
                stage: o.stage,
                t_start: o.start_s,
                t_end: o.end_s(),
                mc: o.mc,
                gmc: o.gmc,
            });
        }

        // Instances.
        let n = names.len();
        if n.saturating_mul(m) != ops.len() {
            return Err(WhatIfError::Inconsistent(format!(
                "{} ops where {n} ops per data-parallel rank 0 step x {} steps x {nd} data-parallel ranks = {} were expected: workers or steps hold different ops",
                ops.len(),
                steps.len(),
                n.saturating_mul(m)
            )));
        }
        let mut filled = vec![false; n * m];
        let mut dur = vec![0.0; n * m];
        let mut start = vec![0.0; n * m];
        let mut step_lo = vec![f64::INFINITY; steps.len()];
        let mut step_hi = vec![f64::NEG_INFINITY; steps.len()];
        for o in &ops {
            let key = (type_index(&o.optype).unwrap_or(0), o.seq_id, o.stage);
            let Some(&v) = by_key.get(&key) else {
                return Err(WhatIfError::Inconsistent(format!(
                    "{} seq_id {} on (dp_rank {}, stage {}) in step {} has no counterpart on dp_rank 0 in step {first}",
                    o.optype, o.seq_id, o.dp_rank, o.stage, o.step
                )));
            };
            let s = step_idx[&o.step];
            let slot = v * m + s * nd + o.dp_rank as usize;
            if filled[slot] {
                return Err(WhatIfError::Inconsistent(format!(
                    "{} seq_id {} appears twice on (dp_rank {}, stage {}) in step {}",
                    o.optype, o.seq_id, o.dp_rank, o.stage, o.step
                )));
            }
            if !(o.start_s.is_finite() && o.duration_s.is_finite()) {
                return Err(WhatIfError::Inconsistent(format!(
                    "{} seq_id {} on (dp_rank {}, stage {}) in step {} has a non-finite time",
                    o.optype, o.seq_id, o.dp_rank, o.stage, o.step
                )));
            }
            filled[slot] = true;
            dur[slot] = o.duration_s;
            start[slot] = o.start_s;
            step_lo[s] = step_lo[s].min(o.start_s);
            step_hi[s] = step_hi[s].max(o.end_s());
        }
        if let Some(slot) = filled.iter().position(|f| !f) {
            let v = slot / m;
            let k = slot % m;
            return Err(WhatIfError::Inconsistent(format!(
                "{} seq_id {} of stage {} is missing on dp_rank {} in step {}",
                names[v].ty,
                names[v].seq,
                names[v].stage,
                k % nd,
                steps[k / nd]
            )));
        }
        let trace_step_time = step_lo.iter().zip(&step_hi).map(|(a, b)| b - a).collect();

        let mut model = Model {
            names,
            deps: vec![Vec::new(); n],
            groups: Vec::new(),
            gid: vec![None; n],
            dp_sync: vec![false; n],
            steps,
            nd,
            pp,
            m,
            dur,
            transfer: vec![f64::NAN; n * m],
            worker_rank,
            trace_step_time,
            ignored,
            warnings: Vec::new(),
        };
        let dsp = trace.meta.dsp_size.max(1) as usize;
        model.build_deps(&by_key, dsp)?;
        model.transfer_times(&start);
        Ok(model)
    }

    fn lookup(
        by_key: &HashMap<(usize, i64, u32), usize>,
        t: NdOpType,
        seq: i64,
        stage: u32,
    ) -> Option<usize> {
        by_key.get(&(type_index(&t)?, seq, stage)).copied()
    }

    fn chain(&mut self, ops: &[usize], last: &[usize]) {
        let mut last: Vec<usize> = last.to_vec();
        for &op in ops {
            self.deps[op].extend(last.iter().copied());
            last = vec![op];
        }
    }

    // Stages, ranks and steps index several parallel arrays at once.
    #[allow(clippy::needless_range_loop)]
    fn build_deps(
        &mut self,
        by_key: &HashMap<(usize, i64, u32), usize>,
        dsp: usize,
    ) -> Result<(), WhatIfError> {
        use NdOpType as T;
        let pp = self.pp;
        let vpp = self.names.iter().map(|n| n.mc).max().unwrap_or(0).max(0) + 1;
        let tot_gmcs = vpp * pp as i64;
        let use_dp = self.nd * dsp > 1;
        let ovlp_dp = self.names.iter().any(|n| n.ty == T::SeparateGradsAllReduce);

        // Per stage, ops in schedule order.
        let mut per_stage: Vec<Vec<usize>> = vec![Vec::new(); pp];
        for (i, n) in self.names.iter().enumerate() {
            per_stage[n.stage as usize].push(i);
        }
        for list in &mut per_stage {
            let names = &self.names;
            list.sort_by(|a, b| sort_key_cmp(&names[*a], &names[*b]));
        }
        // Per stage, its compute ops in schedule order (the chains below build on them).
        let stage_compute: Vec<Vec<usize>> = per_stage
            .iter()
            .map(|list| {
                list.iter()
                    .copied()
                    .filter(|&i| self.names[i].ty.is_compute())
                    .collect()
            })
            .collect();

        // Pipeline sends/receives: match to computes, pair with peers.
        // pairs[(type of the lower-named side, k, stage)] -> op
        let mut pair_members: HashMap<(String, i64, u32, String, u32), Vec<usize>> = HashMap::new();
        let mut no_ops: Vec<usize> = Vec::new();
        for stage in 0..pp {
            let list = &per_stage[stage];
            let comm: Vec<usize> = list
                .iter()
                .copied()
                .filter(|&i| self.names[i].ty.is_p2p())
                .collect();
            let comp: Vec<usize> = list
                .iter()
                .copied()
                .filter(|&i| self.names[i].ty.is_compute())
                .collect();
            // is_no_op per p2p op (true unless matched to a compute with a real peer).
            let mut is_no_op: HashMap<usize, bool> = comm.iter().map(|&i| (i, true)).collect();
            for (fwd, ct) in [(true, T::ForwardCompute), (false, T::BackwardCompute)] {
                let cs: Vec<usize> = comp
                    .iter()
                    .copied()
                    .filter(|&i| self.names[i].ty == ct)
                    .collect();
                let last_st = cs
                    .iter()
                    .map(|&i| self.names[i].t_start)
                    .fold(f64::NEG_INFINITY, f64::max);
                let first_ed = cs
                    .iter()
                    .map(|&i| self.names[i].t_end)
                    .fold(f64::INFINITY, f64::min);
                for send in [true, false] {
                    let ty = match (fwd, send) {
                        (true, true) => T::ForwardSend,
                        (true, false) => T::ForwardRecv,
                        (false, true) => T::BackwardSend,
                        (false, false) => T::BackwardRecv,
                    };
                    let of_ty: Vec<usize> = comm
                        .iter()
                        .copied()
                        .filter(|&i| self.names[i].ty == ty)
                        .collect();
                    let type1_noop = |i: usize| {
                        if send {
                            self.names[i].t_end < first_ed - EPS_P2P
                        } else {
                            self.names[i].t_start > last_st + EPS_P2P
                        }
                    };
                    let cnt = of_ty.iter().filter(|&&i| !type1_noop(i)).count();
                    let mut compute_id: i64 = 0;
                    if cnt != cs.len() {
                        if !(stage == 0 || stage == pp - 1) || !(cnt == 0 || cnt + 1 == cs.len()) {
                            return Err(WhatIfError::Schedule(format!(
                                "stage {stage} has {cnt} {ty} ops for {} {ct} ops",
                                cs.len()
                            )));
                        }
                        if !send && cnt + 1 == cs.len() {
                            compute_id += 1;
                        }
                    }
                    for &i in &of_ty {
                        if type1_noop(i) {
                            continue;
                        }
                        let Some(c) = Self::lookup(by_key, ct.clone(), compute_id, stage as u32)
                        else {
                            return Err(WhatIfError::Schedule(format!(
                                "stage {stage}: {ty} seq_id {} has no {ct} seq_id {compute_id} to match",
                                self.names[i].seq
                            )));
                        };
                        let delta: i64 = match (fwd, send) {
                            (true, true) | (false, false) => 1,
                            _ => -1,
                        };
                        let peer_gmc = self.names[c].gmc + delta;
                        is_no_op.insert(i, peer_gmc >= tot_gmcs || peer_gmc < 0);
                        // Compute/communication dependencies.
                        if send {
                            self.deps[i].push(c);
                        } else {
                            self.deps[c].push(i);
                            if compute_id >= 1 {
                                if let Some(prev) =
                                    Self::lookup(by_key, ct.clone(), compute_id - 1, stage as u32)
                                {
                                    self.deps[i].push(prev);
                                }
                            }
                        }
                        compute_id += 1;
                    }
                }
            }
            // Pair the k-th valid op of each type with the peer's.
            for ty in [
                T::ForwardSend,
                T::ForwardRecv,
                T::BackwardSend,
                T::BackwardRecv,
            ] {
                let (peer_ty, delta): (NdOpType, i64) = match ty {
                    T::ForwardSend => (T::ForwardRecv, 1),
                    T::ForwardRecv => (T::ForwardSend, -1),
                    T::BackwardSend => (T::BackwardRecv, -1),
                    _ => (T::BackwardSend, 1),
                };
                let peer_stage = ((stage as i64 + delta + pp as i64) % pp as i64) as u32;
                let mut k = 0;
                for &i in comm.iter().filter(|&&i| self.names[i].ty == ty) {
                    if is_no_op[&i] {
                        no_ops.push(i);
                        continue;
                    }
                    let a = (ty.as_str().to_string(), stage as u32);
                    let b = (peer_ty.as_str().to_string(), peer_stage);
                    let (lo, hi) = if a <= b { (a, b) } else { (b, a) };
                    pair_members
                        .entry((lo.0, k, lo.1, hi.0, hi.1))
                        .or_default()
                        .push(i);
                    k += 1;
                }
            }
        }

        // In-stage chains.
        for stage in 0..pp {
            let list = per_stage[stage].clone();
            let comp = stage_compute[stage].clone();
            self.chain(&comp, &[]);
            for ty in [
                T::ForwardSend,
                T::ForwardRecv,
                T::BackwardSend,
                T::BackwardRecv,
            ] {
                let stream: Vec<usize> = list
                    .iter()
                    .copied()
                    .filter(|&i| self.names[i].ty == ty)
                    .collect();
                self.chain(&stream, &[]);
            }
            // First backward send/receive wait for the second-last forward before the
            // first backward.
            if let Some(fb) = comp
                .iter()
                .position(|&i| self.names[i].ty == T::BackwardCompute)
            {
                if fb >= 2 {
                    if self.names[comp[fb - 1]].ty == T::ForwardCompute
                        && self.names[comp[fb - 2]].ty == T::ForwardCompute
                    {
                        let op = comp[fb - 2];
                        for t in [T::BackwardRecv, T::BackwardSend] {
                            if let Some(x) = Self::lookup(by_key, t, 0, stage as u32) {
                                self.deps[x].push(op);
                            }
                        }
                    } else {
                        self.warnings.push(format!(
                            "stage {stage}: the two computes before the first backward are not both forward"
                        ));
                    }
                }
            }
            if use_dp {
                let dpc: Vec<usize> = list
                    .iter()
                    .copied()
                    .filter(|&i| {
                        matches!(self.names[i].ty, T::ParamsAllGather | T::GradsReduceScatter)
                    })
                    .collect();
                self.chain(&dpc, &[]);
            }
        }

        // Data-parallel collectives and the compute they wait for / feed.
        for stage in 0..pp {
            let list = per_stage[stage].clone();
            let comp = stage_compute[stage].clone();
            let st = stage as u32;
            if use_dp {
                let ag_cnt = list
                    .iter()
                    .filter(|&&i| self.names[i].ty == T::ParamsAllGather)
                    .count() as i64;
                let mut assigned = Vec::new();
                for s in (0..ag_cnt).rev() {
                    let Some(ag) = Self::lookup(by_key, T::ParamsAllGather, s, st) else {
                        continue;
                    };
                    let mc = self.names[ag].mc;
                    if assigned.contains(&mc) {
                        continue;
                    }
                    let first = comp
                        .iter()
                        .copied()
                        .filter(|&i| {
                            self.names[i].ty == T::ForwardCompute && self.names[i].mc == mc
                        })
                        .min_by(|a, b| self.names[*a].t_start.total_cmp(&self.names[*b].t_start));
                    if let Some(f) = first {
                        self.deps[f].push(ag);
                    }
                    assigned.push(mc);
                }
                if ovlp_dp {
                    let rs_cnt = list
                        .iter()
                        .filter(|&&i| self.names[i].ty == T::GradsReduceScatter)
                        .count() as i64;
                    let mut assigned = Vec::new();
                    for s in 0..rs_cnt {
                        let Some(rs) = Self::lookup(by_key, T::GradsReduceScatter, s, st) else {
                            continue;
                        };
                        let mc = self.names[rs].mc;
                        if assigned.contains(&mc) {
                            continue;
                        }
                        // Last backward of the chunk (first of equal ends in schedule order).
                        let mut last: Option<usize> = None;
                        for &i in &comp {
                            if self.names[i].ty == T::BackwardCompute
                                && self.names[i].mc == mc
                                && last.is_none_or(|l| self.names[i].t_end > self.names[l].t_end)
                            {
                                last = Some(i);
                            }
                        }
                        if let Some(l) = last {
                            self.deps[rs].push(l);
                        }
                        assigned.push(mc);
                    }
                }
            }

            // After the last compute.
            let mut last_compute: Option<usize> = None;
            for &i in &comp {
                if last_compute.is_none_or(|l| self.names[i].t_end > self.names[l].t_end) {
                    last_compute = Some(i);
                }
            }
            let gc = Self::lookup(by_key, T::Gc, 0, st);
            if let (Some(g), Some(l)) = (gc, last_compute) {
                self.deps[g].push(l);
            }
            let anchor: Vec<usize> = gc.or(last_compute).into_iter().collect();
            let n_rs = list
                .iter()
                .filter(|&&i| self.names[i].ty == T::GradsReduceScatter)
                .map(|&i| self.names[i].seq + 1)
                .max()
                .unwrap_or(0);
            let mut chain: Vec<Option<usize>> =
                vec![Self::lookup(by_key, T::LayernormGradsAllReduce, 0, st)];
            if stage == 0 || stage == pp - 1 {
                chain.push(Self::lookup(by_key, T::EmbeddingGradsAllReduce, 0, st));
            }
            let mut last_ops = anchor.clone();
            if !use_dp {
            } else if ovlp_dp {
                chain.push(Self::lookup(by_key, T::SeparateGradsAllReduce, 0, st));
                if n_rs > 0 {
                    if let Some(rs) = Self::lookup(by_key, T::GradsReduceScatter, n_rs - 1, st) {
                        last_ops.insert(0, rs);
                    }
                }
            } else {
                for s in 0..n_rs {
                    chain.push(Self::lookup(by_key, T::GradsReduceScatter, s, st));
                }
            }
            chain.push(Self::lookup(by_key, T::OptimizerClipMainGrad, 0, st));
            chain.push(Self::lookup(by_key, T::Optimizer, 0, st));
            let chain: Vec<usize> = chain.into_iter().flatten().collect();
            self.chain(&chain, &last_ops);
        }

        // Collective groups.
        let mut pairs: Vec<_> = pair_members.into_iter().collect();
        pairs.sort_by(|a, b| a.0.cmp(&b.0));
        for (key, members) in pairs {
            if members.len() != 2 {
                return Err(WhatIfError::Schedule(format!(
                    "pipeline exchange {} #{} of stage {} / {} of stage {} has {} participants instead of 2",
                    key.0,
                    key.1,
                    key.2,
                    key.3,
                    key.4,
                    members.len()
                )));
            }
            self.groups.push(members);
        }
        for i in no_ops {
            self.groups.push(vec![i]);
        }
        if use_dp {
            for (i, n) in self.names.iter().enumerate() {
                if matches!(
                    n.ty,
                    T::ParamsAllGather | T::GradsReduceScatter | T::SeparateGradsAllReduce
                ) {
                    self.groups.push(vec![i]);
                }
            }
        }
        let mut emb = vec![Self::lookup(by_key, T::EmbeddingGradsAllReduce, 0, 0)];
        if pp > 1 {
            emb.push(Self::lookup(
                by_key,
                T::EmbeddingGradsAllReduce,
                0,
                pp as u32 - 1,
            ));
        }
        let emb: Vec<usize> = emb.into_iter().flatten().collect();
        if !emb.is_empty() {
            self.groups.push(emb);
        }
        let clip: Vec<usize> = (0..pp as u32)
            .filter_map(|s| Self::lookup(by_key, T::OptimizerClipMainGrad, 0, s))
            .collect();
        if !clip.is_empty() {
            self.groups.push(clip);
        }
        for (g, members) in self.groups.iter().enumerate() {
            for &v in members {
                self.gid[v] = Some(g);
            }
        }
        for (v, n) in self.names.iter().enumerate() {
            self.dp_sync[v] = self.gid[v].is_some()
                && matches!(
                    n.ty,
                    T::ParamsAllGather
                        | T::GradsReduceScatter
                        | T::SeparateGradsAllReduce
                        | T::OptimizerClipMainGrad
                );
        }
        for d in &mut self.deps {
            d.sort_unstable();
            d.dedup();
        }
        Ok(())
    }

    /// Transfer time of every collective member: its end minus the last member's start
    /// (over all data-parallel ranks for synchronized collectives); clearly negative
    /// values (a send that ended before its peer started) become 0.
    // Stages, ranks and steps index several parallel arrays at once.
    #[allow(clippy::needless_range_loop)]
    fn transfer_times(&mut self, start: &[f64]) {
        let (m, nd) = (self.m, self.nd);
        for members in &self.groups {
            for sync in [false, true] {
                let ms: Vec<usize> = members
                    .iter()
                    .copied()
                    .filter(|&v| self.dp_sync[v] == sync)
                    .collect();
                if ms.is_empty() {
                    continue;
                }
                for s in 0..self.steps.len() {
                    let mut mx = vec![f64::NEG_INFINITY; nd];
                    for &v in &ms {
                        for d in 0..nd {
                            let x = start[v * m + s * nd + d];
                            mx[d] = mx[d].max(x);
                        }
                    }
                    if sync {
                        let g = mx.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                        mx.iter_mut().for_each(|x| *x = g);
                    }
                    for &v in &ms {
                        for d in 0..nd {
                            let k = v * m + s * nd + d;
                            let mut t = start[k] + self.dur[k] - mx[d];
                            if t <= -EPS_TRANSFER {
                                t = 0.0;
                            }
                            self.transfer[k] = t;
                        }
                    }
                }
            }
        }
    }

    /// What the simulator uses per slot: the transfer time for collective members, the
    /// duration otherwise.
    fn measured(&self) -> Vec<f64> {
        let m = self.m;
        let mut eff = self.dur.clone();
        for v in 0..self.names.len() {
            if self.gid[v].is_some() {
                eff[v * m..(v + 1) * m].copy_from_slice(&self.transfer[v * m..(v + 1) * m]);
            }
        }
        eff
    }

    /// Idealized values: per op type, mean duration (compute-like) or median (communication)
    /// of the duration, for collective members of the transfer time.
    fn ideal(&self) -> Vec<f64> {
        let m = self.m;
        let nt = NdOpType::KNOWN.len();
        let mut durs: Vec<Vec<f64>> = vec![Vec::new(); nt];
        let mut trs: Vec<Vec<f64>> = vec![Vec::new(); nt];
        for (v, n) in self.names.iter().enumerate() {
            let t = type_index(&n.ty).unwrap_or(0);
            durs[t].extend_from_slice(&self.dur[v * m..(v + 1) * m]);
            if self.gid[v].is_some() {
                trs[t].extend_from_slice(&self.transfer[v * m..(v + 1) * m]);
            }
        }
        let agg = |xs: &mut Vec<f64>, comm: bool| -> f64 {
            if xs.is_empty() {
                return f64::NAN;
            }
            if comm {
                median(xs)
            } else {
                xs.iter().sum::<f64>() / xs.len() as f64
            }
        };
        let mut ideal_dur = vec![f64::NAN; nt];
        let mut ideal_tr = vec![f64::NAN; nt];
        for t in 0..nt {
            let comm = NdOpType::KNOWN[t].is_communication();
            ideal_dur[t] = agg(&mut durs[t], comm);
            ideal_tr[t] = agg(&mut trs[t], comm);
        }
        let mut eff = vec![0.0; self.names.len() * m];
        for (v, n) in self.names.iter().enumerate() {
            let t = type_index(&n.ty).unwrap_or(0);
            let x = if self.gid[v].is_some() {
                ideal_tr[t]
            } else {
                ideal_dur[t]
            };
            eff[v * m..(v + 1) * m].iter_mut().for_each(|e| *e = x);
        }
        eff
    }

    // Stages, ranks and steps index several parallel arrays at once.
    #[allow(clippy::needless_range_loop)]
    fn report(&self, trace: &NdTrace, sim: &Simulator, opts: &WhatIfOptions) -> WhatIfReport {
        let m = self.m;
        let nd = self.nd;
        let n = self.names.len();
        let measured = self.measured();
        let ideal = self.ideal();
        let base = sim.run(self, &measured);
        let ideal_t = sim.run(self, &ideal);
        let mean = |xs: &[f64]| xs.iter().sum::<f64>() / xs.len().max(1) as f64;
        let t_ori = mean(&base.all);
        let t_ideal_opt = mean(&ideal_t.opt);
        let t_ideal = mean(&ideal_t.all);
        let slowdown = t_ori / t_ideal_opt;

        // Replaying with a subset of slots switched from `from` to `to`.
        let mixed = |from: &[f64], to: &[f64], sel: &dyn Fn(usize, usize) -> bool| -> Vec<f64> {
            let mut eff = from.to_vec();
            for v in 0..n {
                for d in 0..nd {
                    if sel(v, d) {
                        for s in 0..self.steps.len() {
                            let k = v * m + s * nd + d;
                            eff[k] = to[k];
                        }
                    }
                }
            }
            eff
        };
        let attribution = |sel: &dyn Fn(usize, usize) -> bool| -> f64 {
            let t = sim.run(self, &mixed(&ideal, &measured, sel));
            mean(&t.opt) / t_ideal_opt
        };

        // By op type.
        let mut labels: Vec<&str> = self
            .names
            .iter()
            .map(|x| x.ty.attribution_label())
            .collect();
        labels.sort_unstable();
        labels.dedup();
        let mut by_op_type: Vec<OpTypeSlowdown> = labels
            .iter()
            .map(|l| OpTypeSlowdown {
                op_type: l.to_string(),
                slowdown: attribution(&|v, _| self.names[v].ty.attribution_label() == *l),
            })
            .collect();
        by_op_type.sort_by(|a, b| {
            b.slowdown
                .total_cmp(&a.slowdown)
                .then(a.op_type.cmp(&b.op_type))
        });
        let by_dp: Vec<f64> = (0..nd).map(|dd| attribution(&|_, d| d == dd)).collect();
        let by_st: Vec<f64> = (0..self.pp)
            .map(|ss| attribution(&|v, _| self.names[v].stage as usize == ss))
            .collect();
        let sorted_idx = |xs: &[f64]| {
            let mut out: Vec<IndexSlowdown> = xs
                .iter()
                .enumerate()
                .map(|(i, x)| IndexSlowdown {
                    index: i as u32,
                    slowdown: *x,
                })
                .collect();
            out.sort_by(|a, b| {
                b.slowdown
                    .total_cmp(&a.slowdown)
                    .then(a.index.cmp(&b.index))
            });
            out
        };

        // Per worker, and the worst ones.
        let mut by_worker: Vec<WorkerSlowdown> = Vec::new();
        for st in 0..self.pp {
            for d in 0..nd {
                by_worker.push(WorkerSlowdown {
                    dp_rank: d as u32,
                    stage: st as u32,
                    rank: self.worker_rank[st * nd + d],
                    slowdown: by_dp[d].min(by_st[st]),
                });
            }
        }
        by_worker.sort_by(|a, b| b.slowdown.total_cmp(&a.slowdown).then(a.rank.cmp(&b.rank)));
        let n_worst = ((by_worker.len() as f64 * opts.worst_worker_percent / 100.0).ceil()
            as usize)
            .clamp(1, by_worker.len());
        let worst: Vec<WorkerRef> = by_worker[..n_worst]
            .iter()
            .map(|w| WorkerRef {
                dp_rank: w.dp_rank,
                stage: w.stage,
                rank: w.rank,
            })
            .collect();

        let explain = |sel: &dyn Fn(usize, usize) -> bool, workers: Vec<WorkerRef>| -> FixEffect {
            let t_rem = mean(&sim.run(self, &mixed(&measured, &ideal, sel)).all);
            let t_add = mean(&sim.run(self, &mixed(&ideal, &measured, sel)).all);
            let gap = t_ori - t_ideal;
            let frac = |x: f64| if gap.abs() > 1e-12 { x / gap } else { 0.0 };
            FixEffect {
                fixed_step_time_s: t_rem,
                only_step_time_s: t_add,
                removed_fraction: frac(t_ori - t_rem),
                added_fraction: frac(t_add - t_ideal),
                workers,
            }
        };
        let m_w_detail = explain(
            &|v, d| {
                worst
                    .iter()
                    .any(|w| w.dp_rank as usize == d && w.stage == self.names[v].stage)
            },
            worst.clone(),
        );
        let last = self.pp as u32 - 1;
        let last_workers: Vec<WorkerRef> = (0..nd)
            .map(|d| WorkerRef {
                dp_rank: d as u32,
                stage: last,
                rank: self.worker_rank[last as usize * nd + d],
            })
            .collect();
        let m_s_detail = explain(&|v, _| self.names[v].stage == last, last_workers);

        let heatmap = self.heatmap(&by_dp, &by_st, opts);
        let per_step = self
            .steps
            .iter()
            .enumerate()
            .map(|(i, s)| StepSlowdown {
                step: *s,
                step_time_s: base.all[i],
                ideal_step_time_s: ideal_t.opt[i],
                slowdown: base.all[i] / ideal_t.opt[i],
            })
            .collect();

        WhatIfReport {
            trial: trace.meta.trial_name.clone(),
            steps: self.steps.len(),
            workers: nd * self.pp,
            dp_size: nd as u32,
            pp_size: self.pp as u32,
            slowdown,
            trace_step_time_s: mean(&self.trace_step_time),
            step_time_s: t_ori,
            ideal_step_time_s: t_ideal_opt,
            m_w: m_w_detail.removed_fraction,
            m_s: m_s_detail.removed_fraction,
            m_w_detail,
            m_s_detail,
            by_op_type,
            by_dp_rank: sorted_idx(&by_dp),
            by_stage: sorted_idx(&by_st),
            by_worker,
            heatmap,
            per_step,
            ignored_ops: self.ignored,
            warnings: self.warnings.clone(),
        }
    }

    fn heatmap(&self, by_dp: &[f64], by_st: &[f64], opts: &WhatIfOptions) -> WhatIfHeatmap {
        let values: Vec<Vec<f64>> = by_st
            .iter()
            .map(|s| by_dp.iter().map(|d| d.min(*s)).collect())
            .collect();
        classify_heatmap(values, &self.worker_rank, opts)
    }
}

/// Classifies a stage x data-parallel-rank grid of worker slowdowns. `ranks[stage * dp +
/// dp_rank]` names the workers.
pub fn classify_heatmap(
    values: Vec<Vec<f64>>,
    ranks: &[u32],
    opts: &WhatIfOptions,
) -> WhatIfHeatmap {
    let pp = values.len();
    let nd = values.first().map_or(0, |r| r.len());
    let max = values
        .iter()
        .flatten()
        .copied()
        .filter(|x| x.is_finite())
        .fold(f64::NEG_INFINITY, f64::max);
    let mut out = WhatIfHeatmap {
        dp_size: nd as u32,
        pp_size: pp as u32,
        values,
        pattern: HeatPattern::None,
        hot: Vec::new(),
        band: None,
        threshold: f64::INFINITY,
    };
    if max.is_nan() || max < opts.min_slowdown {
        return out;
    }
    let threshold = 1.0 + opts.hot_fraction * (max - 1.0);
    out.threshold = threshold;
    for (s, row) in out.values.iter().enumerate() {
        for (d, x) in row.iter().enumerate() {
            if *x >= threshold {
                out.hot.push(WorkerRef {
                    dp_rank: d as u32,
                    stage: s as u32,
                    rank: ranks.get(s * nd + d).copied().unwrap_or(0),
                });
            }
        }
    }
    let w = nd * pp;
    let n_worst = ((w as f64 * opts.worst_worker_percent / 100.0).ceil() as usize).max(1);
    let hot = &out.hot;
    let one_stage = hot.iter().all(|h| h.stage == hot[0].stage);
    let one_dp = hot.iter().all(|h| h.dp_rank == hot[0].dp_rank);
    let band_min = |len: usize| ((len as f64 * 0.75).ceil() as usize).max(2);
    if hot.len() <= n_worst && !(one_stage && nd >= 2 && hot.len() >= band_min(nd)) {
        out.pattern = HeatPattern::HotCell;
    } else if one_stage && hot.len() >= band_min(nd) {
        out.pattern = HeatPattern::Band;
        out.band = Some(Band {
            axis: BandAxis::Stage,
            index: hot[0].stage,
        });
    } else if one_dp && hot.len() >= band_min(pp) {
        out.pattern = HeatPattern::Band;
        out.band = Some(Band {
            axis: BandAxis::DpRank,
            index: hot[0].dp_rank,
        });
    } else {
        out.pattern = HeatPattern::Scatter;
    }
    out
}

fn median(xs: &mut [f64]) -> f64 {
    xs.sort_by(|a, b| a.total_cmp(b));
    let n = xs.len();
    if n % 2 == 1 {
        xs[n / 2]
    } else {
        (xs[n / 2 - 1] + xs[n / 2]) / 2.0
    }
}

/// The replay order, computed once: ops in topological order of the model where a
/// collective completes when its last member starts.
struct Simulator {
    /// (op, collective completed when it starts).
    order: Vec<(usize, Option<usize>)>,
    optimizers: Vec<usize>,
}

struct StepTimes {
    /// Last end of any op, per step.
    all: Vec<f64>,
    /// Last end of an optimizer op per step (the artifact's step end), `all` without one.
    opt: Vec<f64>,
}

impl Simulator {
    fn new(model: &Model) -> Result<Simulator, WhatIfError> {
        let n = model.names.len();
        let mut deg: Vec<usize> = model.deps.iter().map(|d| d.len()).collect();
        let mut next: Vec<Vec<usize>> = vec![Vec::new(); n];
        for (v, ds) in model.deps.iter().enumerate() {
            for &u in ds {
                next[u].push(v);
            }
        }
        let mut started = vec![0usize; model.groups.len()];
        let mut queue: VecDeque<usize> = (0..n).filter(|&v| deg[v] == 0).collect();
        let mut order = Vec::with_capacity(n);
        while let Some(v) = queue.pop_front() {
            let mut finished: Vec<usize> = Vec::new();
            let mut done_group = None;
            match model.gid[v] {
                None => finished.push(v),
                Some(g) => {
                    started[g] += 1;
                    if started[g] == model.groups[g].len() {
                        finished.extend(model.groups[g].iter().copied());
                        done_group = Some(g);
                    }
                }
            }
            order.push((v, done_group));
            for u in finished {
                for &w in &next[u] {
                    deg[w] -= 1;
                    if deg[w] == 0 {
                        queue.push_back(w);
                    }
                }
            }
        }
        if order.len() < n {
            let mut seen = vec![false; n];
            for (v, _) in &order {
                seen[*v] = true;
            }
            let stuck: Vec<String> = (0..n)
                .filter(|&v| !seen[v])
                .take(8)
                .map(|v| {
                    let x = &model.names[v];
                    format!("{} #{} (stage {})", x.ty, x.seq, x.stage)
                })
                .collect();
            return Err(WhatIfError::Cycle(stuck));
        }
        let optimizers = (0..n)
            .filter(|&v| model.names[v].ty == NdOpType::Optimizer)
            .collect();
        Ok(Simulator { order, optimizers })
    }

    fn run(&self, model: &Model, eff: &[f64]) -> StepTimes {
        let (m, nd) = (model.m, model.nd);
        let n = model.names.len();
        let mut start = vec![0.0f64; n * m];
        let mut end = vec![0.0f64; n * m];
        let mut buf = vec![0.0f64; m];
        for &(v, done) in &self.order {
            let ds = &model.deps[v];
            let row = &mut start[v * m..(v + 1) * m];
            row.iter_mut().for_each(|x| *x = 0.0);
            for (i, &u) in ds.iter().enumerate() {
                let e = &end[u * m..(u + 1) * m];
                if i == 0 {
                    row.copy_from_slice(e);
                } else {
                    row.iter_mut().zip(e).for_each(|(a, b)| *a = a.max(*b));
                }
            }
            match model.gid[v] {
                None => {
                    for k in 0..m {
                        end[v * m + k] = start[v * m + k] + eff[v * m + k];
                    }
                }
                Some(_) => {
                    let Some(g) = done else { continue };
                    let members = &model.groups[g];
                    buf.iter_mut().for_each(|x| *x = f64::NEG_INFINITY);
                    for &u in members {
                        buf.iter_mut()
                            .zip(&start[u * m..(u + 1) * m])
                            .for_each(|(a, b)| *a = a.max(*b));
                    }
                    if model.dp_sync[v] {
                        for chunk in buf.chunks_mut(nd) {
                            let mx = chunk.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                            chunk.iter_mut().for_each(|x| *x = mx);
                        }
                    }
                    for &u in members {
                        for k in 0..m {
                            end[u * m + k] = buf[k] + eff[u * m + k];
                        }
                    }
                }
            }
        }
        let ns = model.steps.len();
        let mut all = vec![f64::NEG_INFINITY; ns];
        for v in 0..n {
            for s in 0..ns {
                for d in 0..nd {
                    all[s] = all[s].max(end[v * m + s * nd + d]);
                }
            }
        }
        let opt = if self.optimizers.is_empty() {
            all.clone()
        } else {
            let mut opt = vec![f64::NEG_INFINITY; ns];
            for &v in &self.optimizers {
                for s in 0..ns {
                    for d in 0..nd {
                        opt[s] = opt[s].max(end[v * m + s * nd + d]);
                    }
                }
            }
            opt
        };
        StepTimes { all, opt }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use flare_model::ndtimeline::{NdMeta, NdOp};

    /// (type, seq, start, duration) of one worker's step.
    type Prog = Vec<(NdOpType, i64, f64, f64)>;

    fn trace(dp: u32, pp: u32, steps: i64, prog: &dyn Fn(u32, u32) -> Prog) -> NdTrace {
        let mut ops = Vec::new();
        for step in 0..steps {
            for stage in 0..pp {
                for d in 0..dp {
                    for (optype, seq_id, start_s, duration_s) in prog(d, stage) {
                        ops.push(NdOp {
                            dp_rank: d,
                            stage,
                            rank: stage * dp + d,
                            step,
                            optype,
                            start_s,
                            duration_s,
                            seq_id,
                            mc: 0,
                            mb_id: 0,
                            gmc: stage as i64,
                        });
                    }
                }
            }
        }
        NdTrace {
            ops,
            meta: NdMeta {
                trial_name: "tiny".into(),
                dp_size: dp,
                pp_size: pp,
                world_size: dp * pp,
                ..NdMeta::default()
            },
        }
    }

    const TA: f64 = 0.1; // params all-gather
    const TR: f64 = 0.2; // grads reduce-scatter
    const TC: f64 = 0.05; // clip
    const TO: f64 = 0.15; // optimizer

    /// The tail after the last compute `c` of a worker: the embedding all-reduce waits for
    /// its peer stage until `emb_end`, the reduce-scatter for the slowest replica until `cmax`.
    fn tail(c: f64, emb_end: f64, cmax: f64) -> Prog {
        use NdOpType as T;
        vec![
            (T::Gc, 0, c, 0.0),
            (T::LayernormGradsAllReduce, 0, c, 0.0),
            (T::EmbeddingGradsAllReduce, 0, c, emb_end - c),
            (T::GradsReduceScatter, 0, emb_end, cmax + TR - emb_end),
            (T::OptimizerClipMainGrad, 0, cmax + TR, TC),
            (T::Optimizer, 0, cmax + TR + TC, TO),
        ]
    }

    /// Data parallelism only: two microbatches, compute time `f[dp]` per forward and
    /// backward.
    fn dp_only(f: &[f64]) -> NdTrace {
        use NdOpType as T;
        let f = f.to_vec();
        let cmax = TA + 4.0 * f.iter().copied().fold(0.0, f64::max);
        trace(f.len() as u32, 1, 2, &move |d, _| {
            let x = f[d as usize];
            let mut p = vec![
                (T::ParamsAllGather, 0, 0.0, TA),
                (T::ForwardCompute, 0, TA, x),
                (T::ForwardCompute, 1, TA + x, x),
                (T::BackwardCompute, 0, TA + 2.0 * x, x),
                (T::BackwardCompute, 1, TA + 3.0 * x, x),
            ];
            p.extend(tail(TA + 4.0 * x, TA + 4.0 * x, cmax));
            p
        })
    }

    /// 1F1B with two stages, two microbatches, two data-parallel ranks; forward and
    /// backward take `f0` on stage 0 and `f1 >= f0` on stage 1, transfers take no time.
    fn two_stages(f0: f64, f1: f64) -> NdTrace {
        use NdOpType as T;
        let a = TA;
        let c0 = a + 2.0 * f0 + 4.0 * f1;
        trace(2, 2, 2, &move |_, stage| {
            let mut p = vec![(T::ParamsAllGather, 0, 0.0, a)];
            if stage == 0 {
                p.extend([
                    (T::ForwardCompute, 0, a, f0),
                    (T::ForwardSend, 0, a + f0, 0.0),
                    (T::ForwardCompute, 1, a + f0, f0),
                    (T::ForwardSend, 1, a + 2.0 * f0, f1 - f0),
                    (T::BackwardRecv, 0, a + f0, 2.0 * f1),
                    (T::BackwardCompute, 0, a + f0 + 2.0 * f1, f0),
                    (T::BackwardRecv, 1, a + 2.0 * f0 + 2.0 * f1, 2.0 * f1 - f0),
                    (T::BackwardCompute, 1, a + f0 + 4.0 * f1, f0),
                ]);
                p.extend(tail(c0, c0, c0));
            } else {
                p.extend([
                    (T::ForwardRecv, 0, 0.0, a + f0),
                    (T::ForwardCompute, 0, a + f0, f1),
                    (T::BackwardCompute, 0, a + f0 + f1, f1),
                    (T::BackwardSend, 0, a + f0 + 2.0 * f1, 0.0),
                    (T::ForwardRecv, 1, a + f0 + f1, 0.0),
                    (T::ForwardCompute, 1, a + f0 + 2.0 * f1, f1),
                    (T::BackwardCompute, 1, a + f0 + 3.0 * f1, f1),
                    (T::BackwardSend, 1, a + f0 + 4.0 * f1, 0.0),
                ]);
                p.extend(tail(a + f0 + 4.0 * f1, c0, c0));
            }
            p
        })
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-9
    }

    #[test]
    fn known_answers() {
        let fixed = TA + TR + TC + TO;
        struct Case {
            name: &'static str,
            trace: NdTrace,
            original: f64,
            ideal: f64,
            m_w: f64,
            m_s: f64,
            pattern: HeatPattern,
            worst: (u32, u32),
        }
        let cases = [
            Case {
                name: "no straggler",
                trace: dp_only(&[1.0, 1.0, 1.0, 1.0]),
                original: fixed + 4.0,
                ideal: fixed + 4.0,
                m_w: 0.0,
                m_s: 0.0,
                pattern: HeatPattern::None,
                worst: (0, 0),
            },
            Case {
                // One slow data-parallel worker: the ideal computes take the mean, 1.25.
                name: "slow worker",
                trace: dp_only(&[1.0, 1.0, 2.0, 1.0]),
                original: fixed + 8.0,
                ideal: fixed + 5.0,
                m_w: 1.0,
                m_s: 1.0,
                pattern: HeatPattern::HotCell,
                worst: (2, 0),
            },
            Case {
                // Heavy last stage: compute span 2 f0 + 4 f1 = 14 against 6 x mean = 12.
                // Idealizing the last stage alone (f1 = 2, f0 stays 1) gives 10, below the
                // ideal: M_S = (14 - 10) / (14 - 12) = 2. Fixing one worker of the last
                // stage leaves its replica's twin as slow: M_W = 0.
                name: "heavy last stage",
                trace: two_stages(1.0, 3.0),
                original: fixed + 14.0,
                ideal: fixed + 12.0,
                m_w: 0.0,
                m_s: 2.0,
                pattern: HeatPattern::Band,
                worst: (0, 1),
            },
        ];
        for c in cases {
            let r = analyze(&c.trace).unwrap_or_else(|e| panic!("{}: {e}", c.name));
            assert!(
                close(r.trace_step_time_s, c.original),
                "{}: trace {}",
                c.name,
                r.trace_step_time_s
            );
            assert!(
                close(r.step_time_s, c.original),
                "{}: replay {} vs {}",
                c.name,
                r.step_time_s,
                c.original
            );
            assert!(
                close(r.ideal_step_time_s, c.ideal),
                "{}: ideal {}",
                c.name,
                r.ideal_step_time_s
            );
            assert!(
                close(r.slowdown, c.original / c.ideal),
                "{}: S {}",
                c.name,
                r.slowdown
            );
            assert!(close(r.m_w, c.m_w), "{}: M_W {}", c.name, r.m_w);
            assert!(close(r.m_s, c.m_s), "{}: M_S {}", c.name, r.m_s);
            assert_eq!(r.heatmap.pattern, c.pattern, "{}", c.name);
            let w = &r.m_w_detail.workers[0];
            if c.pattern != HeatPattern::None {
                assert_eq!((w.dp_rank, w.stage), c.worst, "{}", c.name);
            }
            assert!(r.warnings.is_empty(), "{}: {:?}", c.name, r.warnings);
        }
    }

    #[test]
    fn attribution_of_heavy_last_stage() {
        let r = analyze(&two_stages(1.0, 3.0)).unwrap();
        let stage = |i: u32| r.by_stage.iter().find(|s| s.index == i).unwrap().slowdown;
        let fixed = TA + TR + TC + TO;
        // Only stage 1 measured: f0 = 2 (ideal), f1 = 3 -> 4 + 12 = 16.
        assert!(close(stage(1), (fixed + 16.0) / (fixed + 12.0)));
        // Only stage 0 measured: f0 = 1, f1 = 2 -> 2 + 8 = 10.
        assert!(close(stage(0), (fixed + 10.0) / (fixed + 12.0)));
        assert_eq!(
            r.heatmap.band,
            Some(Band {
                axis: BandAxis::Stage,
                index: 1
            })
        );
        let top = &r.by_op_type[0].op_type;
        assert!(
            top == "forward-compute" || top == "backward-compute",
            "{top}"
        );
        let pp = r
            .by_op_type
            .iter()
            .find(|o| o.op_type == "forward-pp-comm")
            .unwrap();
        assert!(close(pp.slowdown, 1.0));
    }

    #[test]
    fn slow_worker_attribution() {
        let r = analyze(&dp_only(&[1.0, 1.0, 2.0, 1.0])).unwrap();
        assert_eq!(r.by_dp_rank[0].index, 2);
        assert!(close(r.by_dp_rank[0].slowdown, r.slowdown));
        assert!(close(r.by_dp_rank[1].slowdown, 1.0));
        assert_eq!(r.heatmap.hot.len(), 1);
        assert_eq!(r.by_worker[0].rank, 2);
    }

    #[test]
    fn inconsistent_traces_are_errors() {
        let mut t = dp_only(&[1.0, 1.0]);
        t.ops
            .retain(|o| !(o.dp_rank == 1 && o.step == 1 && o.optype == NdOpType::Gc));
        assert!(matches!(analyze(&t), Err(WhatIfError::Inconsistent(_))));
        let mut t = dp_only(&[1.0, 1.0]);
        t.ops.retain(|o| o.dp_rank == 1);
        assert!(matches!(analyze(&t), Err(WhatIfError::Inconsistent(_))));
        assert!(matches!(
            analyze(&NdTrace::default()),
            Err(WhatIfError::Empty)
        ));
        let mut t = dp_only(&[1.0, 1.0]);
        t.ops.push(NdOp {
            optype: NdOpType::Other("mystery".into()),
            ..t.ops[0].clone()
        });
        assert_eq!(analyze(&t).unwrap().ignored_ops, 1);
    }

    #[test]
    fn heatmap_patterns() {
        let o = WhatIfOptions::default();
        let ranks: Vec<u32> = (0..8).collect();
        let h = classify_heatmap(
            vec![vec![1.0, 1.0, 1.0, 1.0], vec![1.3, 1.31, 1.29, 1.3]],
            &ranks,
            &o,
        );
        assert_eq!(h.pattern, HeatPattern::Band);
        let h = classify_heatmap(
            vec![vec![1.3, 1.0, 1.0, 1.0], vec![1.3, 1.0, 1.0, 1.0]],
            &ranks,
            &o,
        );
        assert_eq!(
            h.band,
            Some(Band {
                axis: BandAxis::DpRank,
                index: 0
            })
        );
        let h = classify_heatmap(
            vec![vec![1.3, 1.0, 1.25, 1.0], vec![1.0, 1.3, 1.0, 1.0]],
            &ranks,
            &o,
        );
        assert_eq!(h.pattern, HeatPattern::Scatter);
        let h = classify_heatmap(vec![vec![1.0, 1.0, 1.01, 1.0], vec![1.0; 4]], &ranks, &o);
        assert_eq!(h.pattern, HeatPattern::None);
    }
}
