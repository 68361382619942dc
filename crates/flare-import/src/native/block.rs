//! Decoding one rank block (the same in every version).

use super::{
    LastSeq, FLAG_IN_FLIGHT, FLAG_ISSUE_UNKNOWN, FLAG_NO_COMM, FLAG_NO_PEER, KIND_MASK,
    MIN_OP_BYTES, MIN_SPAN_BYTES,
};
use crate::varint::{Cursor, VarintError};
use flare_model::{IterationSpan, Op, OpKind, RankTrace};

/// What a block of a version 2 chunk must hold: the rank the header lists at its
/// position, and only the chunk's iterations.
#[derive(Clone, Copy)]
pub(super) struct Expect<'a> {
    pub rank: u32,
    pub iterations: &'a [u32],
}

impl Expect<'_> {
    #[inline]
    fn has(&self, it: u32) -> bool {
        match self.iterations {
            [one] => *one == it,
            many => many.binary_search(&it).is_ok(),
        }
    }

    fn describe(&self) -> String {
        match self.iterations {
            [one] => format!("iteration {one}, the chunk's"),
            many => format!("one of the chunk's {} iterations", many.len()),
        }
    }
}

/// A decoding failure inside one rank block.
pub(super) struct BlockError {
    pub pos: usize,
    pub rank: Option<u32>,
    pub place: String,
    pub expected: String,
}

impl BlockError {
    pub fn rank_note(&self) -> String {
        match self.rank {
            Some(r) => format!(" (rank {r})"),
            None => String::new(),
        }
    }
}

/// Buffers a decoder reuses from block to block.
#[derive(Default)]
pub(super) struct Scratch {
    last_seq: LastSeq,
    flags: Vec<u8>,
}

/// Decodes one rank block into `out`'s buffers (whatever they held is dropped; their
/// capacity is reused, which spares the allocator and the kernel a fresh page per op when
/// the chunks of a file are read one after another).
pub(super) fn decode_rank(
    block: &[u8],
    n_comms: usize,
    scratch: &mut Scratch,
    expect: Option<Expect<'_>>,
    out: RankTrace,
) -> Result<RankTrace, BlockError> {
    let Scratch { last_seq, flags } = scratch;
    let RankTrace {
        ops: mut reused_ops,
        iterations: mut reused_spans,
        ..
    } = out;
    reused_ops.clear();
    reused_spans.clear();
    let mut c = Cursor::new(block);
    let mut rank_id: Option<u32> = None;
    macro_rules! fail {
        ($c:expr, $place:expr, $expected:expr) => {
            BlockError {
                pos: $c.pos(),
                rank: rank_id,
                place: $place,
                expected: $expected,
            }
        };
    }
    let ve = |e: VarintError| match e {
        VarintError::Eof => "more bytes: the block ends inside this field",
        VarintError::Overflow => "a LEB128 varint that fits the field",
    };

    let rank = c
        .u32()
        .map_err(|e| fail!(c, "rank number".into(), ve(e).into()))?;
    rank_id = Some(rank);
    if let Some(x) = expect {
        if x.rank != rank {
            return Err(fail!(
                c,
                "rank number".into(),
                format!(
                    "rank {}, the header's rank at this block's position",
                    x.rank
                )
            ));
        }
    }
    let n_iter = c
        .u64()
        .map_err(|e| fail!(c, "iteration count".into(), ve(e).into()))?;
    if n_iter > (c.remaining() / MIN_SPAN_BYTES) as u64 {
        return Err(fail!(
            c,
            "iteration count".into(),
            format!(
                "at most {} iterations in the {} bytes left, found {n_iter}",
                c.remaining() / MIN_SPAN_BYTES,
                c.remaining()
            )
        ));
    }
    let mut iterations = reused_spans;
    iterations.reserve(n_iter as usize);
    let mut prev_iter: i64 = 0;
    let mut prev_start: i64 = 0;
    for i in 0..n_iter {
        let place = || format!("iteration span {i}");
        let d = c.i64().map_err(|e| fail!(c, place(), ve(e).into()))?;
        let it = prev_iter.wrapping_add(d);
        let iteration = u32::try_from(it)
            .map_err(|_| fail!(c, place(), format!("an iteration number in u32, got {it}")))?;
        if let Some(x) = expect.filter(|x| !x.has(iteration)) {
            return Err(fail!(
                c,
                place(),
                format!("{}, found iteration {iteration}", x.describe())
            ));
        }
        let start = prev_start.wrapping_add(c.i64().map_err(|e| fail!(c, place(), ve(e).into()))?);
        let end_ns = match c.u8().map_err(|e| fail!(c, place(), ve(e).into()))? {
            0 => None,
            1 => Some(start.wrapping_add(c.i64().map_err(|e| fail!(c, place(), ve(e).into()))?)),
            other => {
                return Err(fail!(
                    c,
                    place(),
                    format!("an end flag of 0 or 1, found {other}")
                ))
            }
        };
        iterations.push(IterationSpan {
            iteration,
            start_ns: start,
            end_ns,
        });
        prev_iter = it;
        prev_start = start;
    }

    let n_ops = c
        .u64()
        .map_err(|e| fail!(c, "op count".into(), ve(e).into()))?;
    if n_ops > (c.remaining() / MIN_OP_BYTES) as u64 {
        return Err(fail!(
            c,
            "op count".into(),
            format!(
                "at most {} ops in the {} bytes left, found {n_ops}",
                c.remaining() / MIN_OP_BYTES,
                c.remaining()
            )
        ));
    }
    let n = n_ops as usize;
    let blank = Op {
        kind: OpKind::Compute,
        name: 0,
        iteration: 0,
        comm: Op::NO_COMM,
        seq: 0,
        peer: Op::NO_PEER,
        start_ns: 0,
        end_ns: Op::IN_FLIGHT,
        issue_ns: Op::UNKNOWN,
        amount: 0,
    };
    // Column 1: kind and flags. Each op is written whole here, once, and completed
    // column by column below.
    let mut ops = reused_ops;
    ops.reserve(n);
    flags.clear();
    flags.reserve(n);
    for i in 0..n {
        let kf = c
            .u8()
            .map_err(|e| fail!(c, format!("column kind_flags, op {i}"), ve(e).into()))?;
        // Every 4-bit value is a kind (OpKind has 16 variants), so this cannot fail.
        let kind = OpKind::from_u8(kf & KIND_MASK).unwrap_or(OpKind::HostOther);
        ops.push(Op { kind, ..blank });
        flags.push(kf);
    }
    let flags = &flags[..ops.len()];
    // Column 2: names.
    for (i, op) in ops.iter_mut().enumerate() {
        op.name = c
            .u32()
            .map_err(|e| fail!(c, format!("column name, op {i}"), ve(e).into()))?;
    }
    // Column 3: iterations, as deltas.
    let mut prev: i64 = 0;
    for (i, op) in ops.iter_mut().enumerate() {
        let d = c
            .i64()
            .map_err(|e| fail!(c, format!("column iteration, op {i}"), ve(e).into()))?;
        let v = prev.wrapping_add(d);
        op.iteration = u32::try_from(v).map_err(|_| {
            fail!(
                c,
                format!("column iteration, op {i}"),
                format!("an iteration number in u32, got {v}")
            )
        })?;
        if let Some(x) = expect.filter(|x| !x.has(op.iteration)) {
            return Err(fail!(
                c,
                format!("column iteration, op {i}"),
                format!("{}, found iteration {}", x.describe(), op.iteration)
            ));
        }
        prev = v;
    }
    // Column 4: communicators, for ops that have one.
    for (i, op) in ops.iter_mut().enumerate() {
        if flags[i] & FLAG_NO_COMM == 0 {
            let v = c
                .u32()
                .map_err(|e| fail!(c, format!("column comm, op {i}"), ve(e).into()))?;
            if v == Op::NO_COMM {
                return Err(fail!(
                    c,
                    format!("column comm, op {i}"),
                    "a communicator id (the no-communicator sentinel is a flag)".into()
                ));
            }
            op.comm = v;
        }
    }
    // Column 5: sequence numbers, as deltas per communicator.
    last_seq.reset(n_comms);
    for (i, op) in ops.iter_mut().enumerate() {
        let place = || format!("column seq, op {i}");
        let in_table = if op.comm != Op::NO_COMM {
            last_seq.get_mut(op.comm)
        } else {
            None
        };
        let v = match in_table {
            Some(last) => {
                let d = c.i64().map_err(|e| fail!(c, place(), ve(e).into()))?;
                let v = last.wrapping_add(d);
                *last = v;
                v
            }
            None => c.u64().map_err(|e| fail!(c, place(), ve(e).into()))? as i64,
        };
        op.seq = u32::try_from(v)
            .map_err(|_| fail!(c, place(), format!("a sequence number in u32, got {v}")))?;
    }
    // Column 6: peers, for ops that have one.
    for (i, op) in ops.iter_mut().enumerate() {
        if flags[i] & FLAG_NO_PEER == 0 {
            let v = c
                .u32()
                .map_err(|e| fail!(c, format!("column peer, op {i}"), ve(e).into()))?;
            if v == Op::NO_PEER {
                return Err(fail!(
                    c,
                    format!("column peer, op {i}"),
                    "a peer rank (the no-peer sentinel is a flag)".into()
                ));
            }
            op.peer = v;
        }
    }
    // Column 7: starts, as deltas.
    let mut prev: i64 = 0;
    for (i, op) in ops.iter_mut().enumerate() {
        let d = c
            .i64()
            .map_err(|e| fail!(c, format!("column start, op {i}"), ve(e).into()))?;
        prev = prev.wrapping_add(d);
        op.start_ns = prev;
    }
    // Column 8: durations, for ops that ended.
    for (i, op) in ops.iter_mut().enumerate() {
        if flags[i] & FLAG_IN_FLIGHT == 0 {
            let d = c
                .i64()
                .map_err(|e| fail!(c, format!("column duration, op {i}"), ve(e).into()))?;
            let end = op.start_ns.wrapping_add(d);
            if end == Op::IN_FLIGHT {
                return Err(fail!(
                    c,
                    format!("column duration, op {i}"),
                    "an end time (in-flight is a flag)".into()
                ));
            }
            op.end_ns = end;
        }
    }
    // Column 9: issue lags, for ops whose issue time is known.
    for (i, op) in ops.iter_mut().enumerate() {
        if flags[i] & FLAG_ISSUE_UNKNOWN == 0 {
            let d = c
                .i64()
                .map_err(|e| fail!(c, format!("column issue, op {i}"), ve(e).into()))?;
            let issue = op.start_ns.wrapping_sub(d);
            if issue == Op::UNKNOWN {
                return Err(fail!(
                    c,
                    format!("column issue, op {i}"),
                    "an issue time (unknown is a flag)".into()
                ));
            }
            op.issue_ns = issue;
        }
    }
    // Column 10: amounts.
    for (i, op) in ops.iter_mut().enumerate() {
        op.amount = c
            .u64()
            .map_err(|e| fail!(c, format!("column amount, op {i}"), ve(e).into()))?;
    }
    if c.remaining() != 0 {
        return Err(fail!(
            c,
            "after the last column".into(),
            format!("the end of the block, found {} more bytes", c.remaining())
        ));
    }
    Ok(RankTrace {
        rank,
        ops,
        iterations,
    })
}
