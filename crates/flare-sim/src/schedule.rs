//! The per-stage program of one training iteration: Megatron's non-interleaved 1F1B
//! schedule over microbatches, TP/CP/EP collectives per layer block, P2P exchanges with
//! the neighbouring stages, then the data-parallel gradient reduce-scatter, the optimizer
//! and the parameter all-gather.

use flare_model::OpKind;

/// Which communicator of the rank an op uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    Local,
    Tp,
    Cp,
    Ep,
    Dp,
    /// The pair communicator with the previous stage.
    PrevStage,
    /// The pair communicator with the next stage.
    NextStage,
}

/// What the op's cost depends on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Work {
    /// Forward compute of one layer block of one microbatch.
    Forward,
    /// Backward compute of one layer block (about twice the forward).
    Backward,
    Optimizer,
    /// A communication op moving `bytes`.
    Comm,
    DataLoader,
    Gc,
}

#[derive(Clone, Copy, Debug)]
pub struct Step {
    pub kind: OpKind,
    pub role: Role,
    pub work: Work,
    /// Name index into [`NAMES`].
    pub name: u32,
    pub microbatch: u32,
    pub bytes: u64,
}

/// Names of the ops the simulator emits, interned in this order.
pub const NAMES: &[&str] = &[
    "dataloader.next",
    "gc.collect",
    "forward.block",
    "backward.block",
    "tp.all_reduce",
    "cp.all_gather",
    "cp.reduce_scatter",
    "ep.dispatch.all_to_all",
    "ep.combine.all_to_all",
    "pp.recv_forward",
    "pp.send_forward",
    "pp.send_forward_recv_backward",
    "pp.send_backward_recv_forward",
    "pp.send_backward",
    "pp.recv_backward",
    "dp.grads.reduce_scatter",
    "optimizer.step",
    "dp.params.all_gather",
];

fn name(n: &str) -> u32 {
    NAMES.iter().position(|x| *x == n).expect("known name") as u32
}

/// Sizes that shape the program.
#[derive(Clone, Debug)]
pub struct ProgramShape {
    pub stages: u32,
    pub microbatches: u32,
    pub layer_blocks: u32,
    pub tp: u32,
    pub cp: u32,
    pub ep: u32,
    pub dp: u32,
    pub tp_bytes: u64,
    pub pp_bytes: u64,
    pub cp_bytes: u64,
    pub ep_bytes: u64,
    pub dp_bytes: u64,
}

/// Builds the program of stage `s`. Both sides of every stage pair issue their P2P ops in
/// the same order, as Megatron's batched send/recv guarantees, so no schedule deadlocks.
pub fn stage_program(shape: &ProgramShape, s: u32) -> Vec<Step> {
    let p = shape.stages;
    let m = shape.microbatches;
    let first = s == 0;
    let last = s + 1 == p;
    let mut out = Vec::new();
    let step = |kind, role, work, n: &str, mb, bytes| Step {
        kind,
        role,
        work,
        name: name(n),
        microbatch: mb,
        bytes,
    };
    out.push(step(
        OpKind::DataLoader,
        Role::Local,
        Work::DataLoader,
        "dataloader.next",
        0,
        0,
    ));
    let p2p = |out: &mut Vec<Step>, kind, role, n: &str, mb| {
        out.push(step(kind, role, Work::Comm, n, mb, shape.pp_bytes));
    };
    let forward = |out: &mut Vec<Step>, mb: u32| {
        for _ in 0..shape.layer_blocks {
            if shape.cp > 1 {
                out.push(step(
                    OpKind::AllGather,
                    Role::Cp,
                    Work::Comm,
                    "cp.all_gather",
                    mb,
                    shape.cp_bytes,
                ));
            }
            out.push(step(
                OpKind::Compute,
                Role::Local,
                Work::Forward,
                "forward.block",
                mb,
                0,
            ));
            if shape.ep > 1 {
                out.push(step(
                    OpKind::AllToAll,
                    Role::Ep,
                    Work::Comm,
                    "ep.dispatch.all_to_all",
                    mb,
                    shape.ep_bytes,
                ));
                out.push(step(
                    OpKind::AllToAll,
                    Role::Ep,
                    Work::Comm,
                    "ep.combine.all_to_all",
                    mb,
                    shape.ep_bytes,
                ));
            }
            if shape.tp > 1 {
                out.push(step(
                    OpKind::AllReduce,
                    Role::Tp,
                    Work::Comm,
                    "tp.all_reduce",
                    mb,
                    shape.tp_bytes,
                ));
            }
        }
    };
    let backward = |out: &mut Vec<Step>, mb: u32| {
        for _ in 0..shape.layer_blocks {
            if shape.tp > 1 {
                out.push(step(
                    OpKind::AllReduce,
                    Role::Tp,
                    Work::Comm,
                    "tp.all_reduce",
                    mb,
                    shape.tp_bytes,
                ));
            }
            if shape.ep > 1 {
                out.push(step(
                    OpKind::AllToAll,
                    Role::Ep,
                    Work::Comm,
                    "ep.combine.all_to_all",
                    mb,
                    shape.ep_bytes,
                ));
                out.push(step(
                    OpKind::AllToAll,
                    Role::Ep,
                    Work::Comm,
                    "ep.dispatch.all_to_all",
                    mb,
                    shape.ep_bytes,
                ));
            }
            out.push(step(
                OpKind::Compute,
                Role::Local,
                Work::Backward,
                "backward.block",
                mb,
                0,
            ));
            if shape.cp > 1 {
                out.push(step(
                    OpKind::ReduceScatter,
                    Role::Cp,
                    Work::Comm,
                    "cp.reduce_scatter",
                    mb,
                    shape.cp_bytes,
                ));
            }
        }
    };
    let warmup = (p - s - 1).min(m);
    for i in 0..warmup {
        if !first {
            p2p(
                &mut out,
                OpKind::Recv,
                Role::PrevStage,
                "pp.recv_forward",
                i,
            );
        }
        forward(&mut out, i);
        if !last {
            p2p(
                &mut out,
                OpKind::Send,
                Role::NextStage,
                "pp.send_forward",
                i,
            );
        }
    }
    let steady = m - warmup;
    if steady > 0 && !first {
        p2p(
            &mut out,
            OpKind::Recv,
            Role::PrevStage,
            "pp.recv_forward",
            warmup,
        );
    }
    for i in 0..steady {
        let fwd_mb = warmup + i;
        forward(&mut out, fwd_mb);
        if fwd_mb == m / 2 {
            // Python's generational GC tends to fire mid-iteration.
            out.push(step(
                OpKind::GarbageCollection,
                Role::Local,
                Work::Gc,
                "gc.collect",
                fwd_mb,
                0,
            ));
        }
        if !last {
            p2p(
                &mut out,
                OpKind::SendRecv,
                Role::NextStage,
                "pp.send_forward_recv_backward",
                fwd_mb,
            );
        }
        backward(&mut out, i);
        if !first {
            if i + 1 == steady {
                p2p(
                    &mut out,
                    OpKind::Send,
                    Role::PrevStage,
                    "pp.send_backward",
                    i,
                );
            } else {
                p2p(
                    &mut out,
                    OpKind::SendRecv,
                    Role::PrevStage,
                    "pp.send_backward_recv_forward",
                    i,
                );
            }
        }
    }
    for i in 0..warmup {
        let mb = steady + i;
        if !last {
            p2p(
                &mut out,
                OpKind::Recv,
                Role::NextStage,
                "pp.recv_backward",
                mb,
            );
        }
        backward(&mut out, mb);
        if !first {
            p2p(
                &mut out,
                OpKind::Send,
                Role::PrevStage,
                "pp.send_backward",
                mb,
            );
        }
    }
    if !out.iter().any(|s| s.work == Work::Gc) {
        out.push(step(
            OpKind::GarbageCollection,
            Role::Local,
            Work::Gc,
            "gc.collect",
            0,
            0,
        ));
    }
    if shape.dp > 1 {
        out.push(step(
            OpKind::ReduceScatter,
            Role::Dp,
            Work::Comm,
            "dp.grads.reduce_scatter",
            0,
            shape.dp_bytes,
        ));
    }
    out.push(step(
        OpKind::Compute,
        Role::Local,
        Work::Optimizer,
        "optimizer.step",
        0,
        0,
    ));
    if shape.dp > 1 {
        out.push(step(
            OpKind::AllGather,
            Role::Dp,
            Work::Comm,
            "dp.params.all_gather",
            0,
            shape.dp_bytes,
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape(p: u32, m: u32) -> ProgramShape {
        ProgramShape {
            stages: p,
            microbatches: m,
            layer_blocks: 2,
            tp: 8,
            cp: 1,
            ep: 1,
            dp: 4,
            tp_bytes: 1,
            pp_bytes: 1,
            cp_bytes: 1,
            ep_bytes: 1,
            dp_bytes: 1,
        }
    }

    /// Stage s's ops towards s+1 must pair one to one, in order, with s+1's ops towards s.
    #[test]
    fn pipeline_pairs_match_in_order() {
        for (p, m) in [(2, 2), (4, 8), (4, 4), (8, 16), (3, 7)] {
            let sh = shape(p, m);
            for s in 0..p - 1 {
                let a: Vec<OpKind> = stage_program(&sh, s)
                    .iter()
                    .filter(|x| x.role == Role::NextStage)
                    .map(|x| x.kind)
                    .collect();
                let b: Vec<OpKind> = stage_program(&sh, s + 1)
                    .iter()
                    .filter(|x| x.role == Role::PrevStage)
                    .map(|x| x.kind)
                    .collect();
                assert_eq!(a.len(), b.len(), "p={p} m={m} s={s}");
                for (x, y) in a.iter().zip(&b) {
                    let ok = matches!(
                        (x, y),
                        (OpKind::Send, OpKind::Recv)
                            | (OpKind::Recv, OpKind::Send)
                            | (OpKind::SendRecv, OpKind::SendRecv)
                    );
                    assert!(ok, "p={p} m={m} s={s}: {x:?} vs {y:?}");
                }
            }
        }
    }

    #[test]
    fn every_microbatch_runs_forward_and_backward_once_per_block() {
        let sh = shape(4, 8);
        for s in 0..4 {
            let prog = stage_program(&sh, s);
            let f = prog.iter().filter(|x| x.work == Work::Forward).count();
            let b = prog.iter().filter(|x| x.work == Work::Backward).count();
            assert_eq!((f, b), (16, 16));
        }
    }
}
