//! Writing native traces: version 2 (iteration chunks) by default, version 1 on request.

use super::{
    io_error, HeaderOut, HeaderOutV1, LastSeq, NativeError, FLAG_IN_FLIGHT, FLAG_ISSUE_UNKNOWN,
    FLAG_NO_COMM, FLAG_NO_PEER, MAGIC, VERSION,
};
use crate::varint;
use flare_model::{IterationSpan, Op, RankTrace, Trace};
use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::Path;

/// Writes `trace` in the native format (the current version) to `w`.
///
/// `w` should be buffered (the encoder writes in 4 MiB blocks, so it matters little).
pub fn write_native<W: Write>(trace: &Trace, w: W) -> Result<(), NativeError> {
    write_native_named(trace, w, "<writer>", VERSION)
}

/// [`write_native`] in format `version` (1 or 2), for readers that only know version 1.
pub fn write_native_version<W: Write>(
    trace: &Trace,
    w: W,
    version: u32,
) -> Result<(), NativeError> {
    write_native_named(trace, w, "<writer>", version)
}

/// Writes `trace` to `path` in the native format.
pub fn write_native_file(trace: &Trace, path: impl AsRef<Path>) -> Result<(), NativeError> {
    let path = path.as_ref();
    let file = path.display().to_string();
    let f = File::create(path).map_err(io_error(&file))?;
    write_native_named(trace, BufWriter::with_capacity(1 << 20, f), &file, VERSION)
}

/// The LZ4 frame every version uses.
pub(super) fn frame_info(block_size: lz4_flex::frame::BlockSize) -> lz4_flex::frame::FrameInfo {
    lz4_flex::frame::FrameInfo::new()
        .block_size(block_size)
        .block_mode(lz4_flex::frame::BlockMode::Linked)
        .block_checksums(true)
        .content_checksum(true)
}

fn write_native_named<W: Write>(
    trace: &Trace,
    mut w: W,
    file: &str,
    version: u32,
) -> Result<(), NativeError> {
    let io_err = io_error(file);
    if !(super::OLDEST_VERSION..=VERSION).contains(&version) {
        return Err(io_err(io::Error::other(format!(
            "cannot write native format version {version}: this build writes {}..={VERSION}",
            super::OLDEST_VERSION
        ))));
    }
    w.write_all(&MAGIC).map_err(&io_err)?;
    w.write_all(&version.to_le_bytes()).map_err(&io_err)?;
    let mut enc = lz4_flex::frame::FrameEncoder::with_frame_info(
        frame_info(lz4_flex::frame::BlockSize::Max4MB),
        w,
    );
    let payload = Payload::of(trace, version);
    let json = payload
        .header_json()
        .map_err(|e| io_err(io::Error::other(e)))?;
    let json_len = u32::try_from(json.len())
        .map_err(|_| io_err(io::Error::other("the JSON header exceeds 4 GiB")))?;
    enc.write_all(&json_len.to_le_bytes()).map_err(&io_err)?;
    enc.write_all(&json).map_err(&io_err)?;
    payload.write_body(&mut enc, |_, _| {}).map_err(&io_err)?;
    let mut w = enc.finish().map_err(|e| io_err(e.into()))?;
    w.flush().map_err(&io_err)?;
    Ok(())
}

/// How a trace is laid out in a file of a given version.
pub(super) struct Payload<'a> {
    trace: &'a Trace,
    version: u32,
    /// Every iteration with an op or a span, ascending.
    iterations: Vec<u32>,
    /// Version 2: the chunks' iterations (one each when every rank's ops and spans come
    /// in iteration order, else one chunk of all).
    chunks: Vec<Vec<u32>>,
}

impl<'a> Payload<'a> {
    pub(super) fn of(trace: &'a Trace, version: u32) -> Self {
        let iterations = trace.iterations_with_ops();
        let chunks = if iterations.is_empty() {
            vec![Vec::new()]
        } else if trace.ranks.iter().all(in_iteration_order) {
            iterations.iter().map(|&it| vec![it]).collect()
        } else {
            vec![iterations.clone()]
        };
        Payload {
            trace,
            version,
            iterations,
            chunks,
        }
    }

    pub(super) fn header_json(&self) -> serde_json::Result<Vec<u8>> {
        let t = self.trace;
        if self.version == 1 {
            return serde_json::to_vec(&HeaderOutV1 {
                meta: &t.meta,
                job: &t.job,
                communicators: &t.communicators,
                names: &t.names,
                rank_count: t.ranks.len() as u64,
                op_count: t.op_count() as u64,
            });
        }
        serde_json::to_vec(&HeaderOut {
            meta: &t.meta,
            job: &t.job,
            communicators: &t.communicators,
            names: &t.names,
            ranks: t.ranks.iter().map(|r| r.rank).collect(),
            ops_per_rank: t.ranks.iter().map(|r| r.ops.len() as u64).collect(),
            iterations: &self.iterations,
            chunk_count: self.chunks.len() as u64,
        })
    }

    /// Writes everything after the header. `damage(i, block)` may change the `i`-th block
    /// written (in file order) before it is written: tests use it to make corrupt files.
    pub(super) fn write_body<W: Write>(
        &self,
        w: &mut W,
        damage: impl Fn(u64, &mut Vec<u8>),
    ) -> io::Result<()> {
        let n_comms = self.trace.communicators.len();
        let mut block = Vec::with_capacity(1 << 16);
        let mut head = Vec::with_capacity(64);
        let mut scratch = Scratch::default();
        let mut index = 0u64;
        let mut put_block = |w: &mut W, block: &mut Vec<u8>, head: &mut Vec<u8>| {
            damage(index, block);
            index += 1;
            head.clear();
            varint::put_u64(head, block.len() as u64);
            w.write_all(head)?;
            w.write_all(block)
        };
        if self.version == 1 {
            for rt in &self.trace.ranks {
                block.clear();
                encode_rank(
                    rt.rank,
                    &rt.iterations,
                    &rt.ops,
                    n_comms,
                    &mut block,
                    &mut scratch,
                );
                put_block(w, &mut block, &mut head)?;
            }
            return Ok(());
        }
        // Where each rank's next chunk starts, in its ops and its spans.
        let mut next: Vec<(usize, usize)> = vec![(0, 0); self.trace.ranks.len()];
        for chunk in &self.chunks {
            head.clear();
            varint::put_u64(&mut head, chunk.len() as u64);
            let mut prev = 0i64;
            for &it in chunk {
                varint::put_i64(&mut head, it as i64 - prev);
                prev = it as i64;
            }
            w.write_all(&head)?;
            let whole = chunk.len() != 1;
            for (rt, (op_at, span_at)) in self.trace.ranks.iter().zip(&mut next) {
                // One chunk per iteration only when every rank is in iteration order; a
                // chunk of several iterations is the only one and takes everything.
                let (ops, spans) = if whole {
                    (&rt.ops[*op_at..], &rt.iterations[*span_at..])
                } else {
                    let it = chunk[0];
                    let n_ops = rt.ops[*op_at..].partition_point(|o| o.iteration == it);
                    let n_spans = rt.iterations[*span_at..].partition_point(|s| s.iteration == it);
                    (
                        &rt.ops[*op_at..*op_at + n_ops],
                        &rt.iterations[*span_at..*span_at + n_spans],
                    )
                };
                *op_at += ops.len();
                *span_at += spans.len();
                block.clear();
                encode_rank(rt.rank, spans, ops, n_comms, &mut block, &mut scratch);
                put_block(w, &mut block, &mut head)?;
            }
        }
        Ok(())
    }
}

/// Whether a rank's ops come in non-decreasing iteration order and its spans in
/// increasing order: then each iteration is one run of each.
fn in_iteration_order(rt: &RankTrace) -> bool {
    rt.ops.windows(2).all(|w| w[0].iteration <= w[1].iteration)
        && rt
            .iterations
            .windows(2)
            .all(|w| w[0].iteration < w[1].iteration)
}

/// Column buffers reused across ranks by the encoder.
#[derive(Default)]
struct Scratch {
    cols: [Vec<u8>; 9],
    last_seq: LastSeq,
}

fn encode_rank(
    rank: u32,
    spans: &[IterationSpan],
    ops: &[Op],
    n_comms: usize,
    out: &mut Vec<u8>,
    s: &mut Scratch,
) {
    varint::put_u64(out, rank as u64);
    varint::put_u64(out, spans.len() as u64);
    let mut prev_iter: i64 = 0;
    let mut prev_start: i64 = 0;
    for span in spans {
        varint::put_i64(out, span.iteration as i64 - prev_iter);
        varint::put_i64(out, span.start_ns.wrapping_sub(prev_start));
        match span.end_ns {
            None => out.push(0),
            Some(end) => {
                out.push(1);
                varint::put_i64(out, end.wrapping_sub(span.start_ns));
            }
        }
        prev_iter = span.iteration as i64;
        prev_start = span.start_ns;
    }
    varint::put_u64(out, ops.len() as u64);

    for c in s.cols.iter_mut() {
        c.clear();
    }
    s.last_seq.reset(n_comms);
    let [names, iters, comms, seqs, peers, starts, durs, issues, amounts] = &mut s.cols;
    let mut prev_iter: i64 = 0;
    let mut prev_start: i64 = 0;
    for op in ops {
        let mut kf = op.kind as u8;
        if op.end_ns == Op::IN_FLIGHT {
            kf |= FLAG_IN_FLIGHT;
        } else {
            varint::put_i64(durs, op.end_ns.wrapping_sub(op.start_ns));
        }
        if op.issue_ns == Op::UNKNOWN {
            kf |= FLAG_ISSUE_UNKNOWN;
        } else {
            varint::put_i64(issues, op.start_ns.wrapping_sub(op.issue_ns));
        }
        if op.comm == Op::NO_COMM {
            kf |= FLAG_NO_COMM;
            varint::put_u64(seqs, op.seq as u64);
        } else {
            varint::put_u64(comms, op.comm as u64);
            match s.last_seq.get_mut(op.comm) {
                Some(last) => {
                    varint::put_i64(seqs, op.seq as i64 - *last);
                    *last = op.seq as i64;
                }
                None => varint::put_u64(seqs, op.seq as u64),
            }
        }
        if op.peer == Op::NO_PEER {
            kf |= FLAG_NO_PEER;
        } else {
            varint::put_u64(peers, op.peer as u64);
        }
        out.push(kf);
        varint::put_u64(names, op.name as u64);
        varint::put_i64(iters, op.iteration as i64 - prev_iter);
        prev_iter = op.iteration as i64;
        varint::put_i64(starts, op.start_ns.wrapping_sub(prev_start));
        prev_start = op.start_ns;
        varint::put_u64(amounts, op.amount);
    }
    for c in s.cols.iter() {
        out.extend_from_slice(c);
    }
}
