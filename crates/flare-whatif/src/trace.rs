//! Flare traces as what-if input: turns a [`Trace`] of a Megatron-style job into the
//! per-op timeline the what-if analysis ([`crate`]) reads, one worker per
//! (data-parallel rank, pipeline stage).
//!
//! Mapping, per worker (the rank with tensor- and context-parallel coordinate 0):
//! - forward / backward compute: each maximal run of compute ops (and the tensor-, context-
//!   and expert-parallel collectives inside them) with one direction is one microbatch's
//!   compute, spanning from the run's first start to its last end. The direction comes from
//!   the op names (`forward`/`fwd` vs `backward`/`bwd`), the only place a trace says it;
//! - pipeline P2P: direction from the peer's stage (send to the next stage is a
//!   forward-send, receive from the next stage a backward-recv, ...); a combined
//!   send-and-receive op counts as both of its halves;
//! - data-parallel collectives: reduce-scatter of gradients, all-gather of parameters,
//!   all-reduce of gradients, parameter all-gather before the first forward; optimizer (by
//!   kind, or compute ops named `optim*`). Host phases (dataloader, GC pauses mid-step) and
//!   a parameter all-gather after the optimizer are left out: the dependency model has no
//!   place for them, so what-if, like NDTimeline, does not see host stalls (the engine's
//!   detectors do).
//!
//! Times are seconds from the iteration's earliest start among the workers.

use crate::WhatIfError;
use flare_model::ndtimeline::{NdMeta, NdOp, NdOpType, NdTrace};
use flare_model::{GroupKind, Op, OpKind, Trace};
use std::collections::HashMap;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Direction {
    Forward,
    Backward,
}

fn direction(name: &str) -> Option<Direction> {
    let n = name.to_ascii_lowercase();
    if n.contains("backward") || n.contains("bwd") {
        Some(Direction::Backward)
    } else if n.contains("forward") || n.contains("fwd") {
        Some(Direction::Forward)
    } else {
        None
    }
}

/// Appends one op: (ops, iteration, type, start ns, end ns).
type PushOp<'a> = dyn FnMut(&mut Vec<NdOp>, u32, NdOpType, i64, i64) + 'a;

/// A microbatch's compute being accumulated.
struct Segment {
    dir: Option<Direction>,
    start_ns: i64,
    end_ns: i64,
}

/// Converts a trace to the what-if timeline. Needs the job's parallel layout.
pub fn to_ndtimeline(trace: &Trace) -> Result<NdTrace, WhatIfError> {
    let par = trace.job.parallel.as_ref().ok_or_else(|| {
        WhatIfError::Inconsistent(
            "the trace does not say the job's parallel layout (tp, pp, dp); what-if needs it to place workers".into(),
        )
    })?;
    let by_rank: HashMap<u32, &flare_model::RankTrace> =
        trace.ranks.iter().map(|r| (r.rank, r)).collect();
    let comm_kind = |op: &Op| {
        op.comm()
            .and_then(|c| trace.communicators.get(c as usize))
            .map(|c| c.kind)
    };
    let mut workers = Vec::new();
    for rank in 0..trace.job.world_size {
        let c = par.coords(rank);
        if c.tp == 0 && c.cp == 0 {
            workers.push((rank, c.dp, c.pp));
        }
    }
    // Common origin per iteration: the earliest start among the workers.
    let mut origin: HashMap<u32, i64> = HashMap::new();
    for (rank, _, _) in &workers {
        let Some(rt) = by_rank.get(rank) else {
            return Err(WhatIfError::Inconsistent(format!(
                "worker rank {rank} has no data in the trace"
            )));
        };
        for it in &rt.iterations {
            let o = origin.entry(it.iteration).or_insert(it.start_ns);
            *o = (*o).min(it.start_ns);
        }
    }
    let mut ops = Vec::new();
    for &(rank, dp, stage) in &workers {
        let rt = by_rank[&rank];
        let mut seq: HashMap<(u32, NdOpType), i64> = HashMap::new();
        let mut push = |ops: &mut Vec<NdOp>, it: u32, ty: NdOpType, start: i64, end: i64| {
            let Some(&o) = origin.get(&it) else { return };
            let s = seq.entry((it, ty.clone())).or_insert(0);
            // NDTimeline's conventions: compute ops carry their microbatch and chunk;
            // the DP collectives chunk 0; P2P and the rest -1.
            let compute = matches!(ty, NdOpType::ForwardCompute | NdOpType::BackwardCompute);
            let chunked =
                compute || matches!(ty, NdOpType::ParamsAllGather | NdOpType::GradsReduceScatter);
            let mb = if compute { *s } else { -1 };
            ops.push(NdOp {
                dp_rank: dp,
                stage,
                rank,
                step: it as i64,
                optype: ty,
                start_s: (start - o) as f64 * 1e-9,
                duration_s: (end - start).max(0) as f64 * 1e-9,
                seq_id: *s,
                mc: if chunked { 0 } else { -1 },
                mb_id: mb,
                gmc: if compute { stage as i64 } else { -1 },
            });
            *s += 1;
        };
        let mut seg: Option<(u32, Segment)> = None;
        // Iterations whose compute has started: a parameter all-gather after that belongs
        // to the optimizer's tail, which the dependency model does not have.
        let mut computed: std::collections::HashSet<u32> = Default::default();
        let flush = |ops: &mut Vec<NdOp>,
                     seg: &mut Option<(u32, Segment)>,
                     push: &mut PushOp|
         -> Result<(), WhatIfError> {
            if let Some((it, s)) = seg.take() {
                let ty = match s.dir {
                    Some(Direction::Forward) => NdOpType::ForwardCompute,
                    Some(Direction::Backward) => NdOpType::BackwardCompute,
                    None => {
                        return Err(WhatIfError::Inconsistent(format!(
                            "rank {rank}: compute ops in iteration {it} have no forward/backward in their names; what-if cannot tell the two apart"
                        )))
                    }
                };
                push(ops, it, ty, s.start_ns, s.end_ns);
            }
            Ok(())
        };
        for op in &rt.ops {
            let Some(end) = op.end() else { continue };
            let kind = comm_kind(op);
            // Optimizer kernels are compute ops to a profiler; only the name tells.
            let optimizer = op.kind == OpKind::Optimizer
                || (op.kind == OpKind::Compute
                    && trace.name(op.name).to_ascii_lowercase().contains("optim"));
            let inside_compute = !optimizer && op.kind == OpKind::Compute
                || (op.kind.is_collective()
                    && matches!(kind, Some(GroupKind::Tp | GroupKind::Cp | GroupKind::Ep)));
            if inside_compute {
                computed.insert(op.iteration);
                let dir = (op.kind == OpKind::Compute)
                    .then(|| direction(trace.name(op.name)))
                    .flatten();
                let continues = match &seg {
                    Some((it, s)) => {
                        *it == op.iteration && (dir.is_none() || s.dir.is_none() || s.dir == dir)
                    }
                    None => false,
                };
                if continues {
                    let (_, s) = seg.as_mut().expect("checked");
                    s.end_ns = s.end_ns.max(end);
                    s.dir = s.dir.or(dir);
                } else {
                    flush(&mut ops, &mut seg, &mut push)?;
                    seg = Some((
                        op.iteration,
                        Segment {
                            dir,
                            start_ns: op.start_ns,
                            end_ns: end,
                        },
                    ));
                }
                continue;
            }
            flush(&mut ops, &mut seg, &mut push)?;
            let it = op.iteration;
            if op.kind.is_p2p() {
                let Some(peer) = op.peer() else { continue };
                let ps = par.coords(peer).pp;
                let next = ps == stage + 1;
                let prev = ps + 1 == stage;
                let types: &[NdOpType] = match (op.kind, next, prev) {
                    (OpKind::Send, true, _) => &[NdOpType::ForwardSend],
                    (OpKind::Send, _, true) => &[NdOpType::BackwardSend],
                    (OpKind::Recv, _, true) => &[NdOpType::ForwardRecv],
                    (OpKind::Recv, true, _) => &[NdOpType::BackwardRecv],
                    (OpKind::SendRecv, true, _) => &[NdOpType::ForwardSend, NdOpType::BackwardRecv],
                    (OpKind::SendRecv, _, true) => &[NdOpType::BackwardSend, NdOpType::ForwardRecv],
                    _ => &[],
                };
                for t in types {
                    push(&mut ops, it, t.clone(), op.start_ns, end);
                }
                continue;
            }
            let ty = match (op.kind, kind) {
                (OpKind::ReduceScatter, Some(GroupKind::Dp)) => NdOpType::GradsReduceScatter,
                (OpKind::AllGather, Some(GroupKind::Dp)) if !computed.contains(&it) => {
                    NdOpType::ParamsAllGather
                }
                (OpKind::AllReduce, Some(GroupKind::Dp)) => NdOpType::SeparateGradsAllReduce,
                _ if optimizer => NdOpType::Optimizer,
                _ => continue,
            };
            push(&mut ops, it, ty, op.start_ns, end);
        }
        flush(&mut ops, &mut seg, &mut push)?;
    }
    // Only iterations every worker finished: a half-recorded step would look like a
    // different program.
    let mut complete: HashMap<u32, usize> = HashMap::new();
    for &(rank, _, _) in &workers {
        for it in &by_rank[&rank].iterations {
            if it.end_ns.is_some() {
                *complete.entry(it.iteration).or_insert(0) += 1;
            }
        }
    }
    ops.retain(|o| complete.get(&(o.step as u32)) == Some(&workers.len()));
    if ops.is_empty() {
        return Err(WhatIfError::Empty);
    }
    Ok(NdTrace {
        ops,
        meta: NdMeta {
            trial_name: trace.job.job_id.clone(),
            run_id: 0,
            dp_size: par.dp,
            pp_size: par.pp,
            tp_size: par.tp,
            dsp_size: par.cp,
            vpp_size: 1,
            world_size: trace.job.world_size,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use flare_sim::fault::{FaultKind, Truth};
    use flare_sim::{simulate, SimConfig};

    fn sim(fault: FaultKind, seed: u64) -> (Trace, Truth) {
        let mut cfg = SimConfig::for_scale(64);
        cfg.seed = seed;
        cfg.iterations = 6;
        cfg.spike_probability = 0.0;
        cfg.fault = fault;
        let out = simulate(&cfg).unwrap();
        (out.trace, out.truth)
    }

    #[test]
    fn a_simulated_job_converts_to_one_worker_per_dp_rank_and_stage() {
        let (t, _) = sim(FaultKind::None, 3);
        let p = t.job.parallel.clone().unwrap();
        let nd = to_ndtimeline(&t).unwrap();
        let mut workers: Vec<(u32, u32)> = nd.ops.iter().map(|o| (o.dp_rank, o.stage)).collect();
        workers.sort_unstable();
        workers.dedup();
        assert_eq!(workers.len(), (p.dp * p.pp) as usize);
        let m = t.job.microbatches.unwrap() as usize;
        let fwd = nd
            .ops
            .iter()
            .filter(|o| o.dp_rank == 0 && o.stage == 0 && o.step == nd.ops[0].step)
            .filter(|o| o.optype == NdOpType::ForwardCompute)
            .count();
        assert_eq!(fwd, m, "one forward compute per microbatch");
        let r = crate::analyze(&nd).unwrap();
        assert!(
            r.slowdown < 1.06,
            "a healthy job is close to its ideal: {}",
            r.slowdown
        );
    }

    #[test]
    fn what_if_on_a_simulated_slow_gpu_points_at_its_worker() {
        let (t, truth) = sim(FaultKind::SlowGpu, 5);
        let nd = to_ndtimeline(&t).unwrap();
        let r = crate::analyze(&nd).unwrap();
        let culprit = truth.culprits[0].rank.unwrap();
        let c = t.job.parallel.as_ref().unwrap().coords(culprit);
        assert!(r.slowdown > 1.05, "slowdown {}", r.slowdown);
        let worst = r
            .by_worker
            .iter()
            .max_by(|a, b| a.slowdown.total_cmp(&b.slowdown))
            .unwrap();
        assert_eq!(
            (worst.dp_rank, worst.stage),
            (c.dp, c.pp),
            "{:?}",
            &r.by_worker[..4.min(r.by_worker.len())]
        );
    }

    #[test]
    fn a_trace_without_a_parallel_layout_is_refused_with_a_reason() {
        let (mut t, _) = sim(FaultKind::None, 1);
        t.job.parallel = None;
        let e = to_ndtimeline(&t).unwrap_err().to_string();
        assert!(e.contains("parallel layout"), "{e}");
    }
}
