//! Flare's native trace format (`.flare`): one compact file per trace.
//!
//! Kineto JSON costs hundreds of bytes per op and parsing time to match; the engine and the
//! CLI need to reload a 10,000-rank window in seconds. This format stores exactly what the
//! model holds, at about ten bytes per op or less, and reads back bit for bit.
//!
//! The layout is documented byte by byte in `crates/flare-import/FORMAT.md`. In short: the
//! magic `FLARETRC`, a little-endian `u32` version, then one LZ4 frame (content and block
//! checksums on) holding a length-prefixed JSON header (meta, job, communicators, names)
//! and one length-prefixed block per rank. Inside a block ops are stored column by column
//! (kinds and flags, names, iterations, communicators, sequence numbers, peers, starts,
//! durations, issue lags, amounts) as LEB128 varints with zigzag deltas: the columns of a
//! training job repeat every iteration, which LZ4 then removes.

use crate::limits::{self, LimitError, Limits};
use crate::varint::{self, Cursor, VarintError};
use flare_model::{Communicator, IterationSpan, JobInfo, Op, OpKind, RankTrace, Trace, TraceMeta};
use serde::{Deserialize, Serialize};
use std::fs::File;
use std::io::{self, BufRead, BufReader, BufWriter, Read, Write};
use std::path::Path;

/// The eight bytes every native trace starts with.
pub const MAGIC: [u8; 8] = *b"FLARETRC";
/// The format version this build writes and reads.
pub const VERSION: u32 = 1;

// Bits of the per-op `kind_flags` byte (see FORMAT.md).
const KIND_MASK: u8 = 0x0f;
const FLAG_IN_FLIGHT: u8 = 0x10;
const FLAG_ISSUE_UNKNOWN: u8 = 0x20;
const FLAG_NO_COMM: u8 = 0x40;
const FLAG_NO_PEER: u8 = 0x80;

/// The smallest number of bytes one op takes in a block (kind_flags, name, iteration, seq,
/// start, amount): used to reject absurd op counts before allocating.
const MIN_OP_BYTES: usize = 6;
/// The smallest number of bytes one iteration span takes (iteration, start, end flag).
const MIN_SPAN_BYTES: usize = 3;

/// Errors reading or writing a native trace. Every variant names the file; the places
/// inside the compressed payload are given as offsets into the *decompressed* payload
/// (the bytes after the LZ4 frame is undone), plus the rank block, column and op.
#[derive(Debug, thiserror::Error)]
pub enum NativeError {
    #[error("{file}: I/O error: {source}")]
    Io {
        file: String,
        #[source]
        source: io::Error,
    },
    #[error(
        "{file}: not a Flare native trace: expected the magic bytes \"FLARETRC\" at byte offset 0, found {found}"
    )]
    BadMagic { file: String, found: String },
    #[error(
        "{file}: native format version {found} is not supported: this build reads version {supported} (byte offset 8)"
    )]
    UnsupportedVersion {
        file: String,
        found: u32,
        supported: u32,
    },
    #[error("{file}: truncated: the data ends {location}; expected {expected}")]
    Truncated {
        file: String,
        location: String,
        expected: String,
    },
    #[error("{file}: corrupt compressed data {location}: {detail}")]
    Compression {
        file: String,
        location: String,
        detail: String,
    },
    #[error("{file}: the JSON header (decompressed offset 4) is invalid: {source}")]
    Header {
        file: String,
        #[source]
        source: serde_json::Error,
    },
    #[error("{file}: unexpected bytes at byte offset {offset}, after the end of the trace: expected the end of the file")]
    TrailingData { file: String, offset: u64 },
    #[error(
        "{file}: corrupt data at decompressed offset {offset} ({location}): expected {expected}"
    )]
    Corrupt {
        file: String,
        offset: u64,
        location: String,
        expected: String,
    },
    #[error(transparent)]
    Limit(LimitError),
}

crate::limits::limit_error_into!(NativeError, file);

/// The JSON header, as written.
#[derive(Serialize)]
struct HeaderOut<'a> {
    meta: &'a TraceMeta,
    job: &'a JobInfo,
    communicators: &'a [Communicator],
    names: &'a [String],
    rank_count: u64,
    op_count: u64,
}

impl<'a> HeaderOut<'a> {
    fn of(trace: &'a Trace) -> Self {
        HeaderOut {
            meta: &trace.meta,
            job: &trace.job,
            communicators: &trace.communicators,
            names: &trace.names,
            rank_count: trace.ranks.len() as u64,
            op_count: trace.op_count() as u64,
        }
    }
}

/// The JSON header, as read.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct HeaderIn {
    meta: TraceMeta,
    job: JobInfo,
    communicators: Vec<Communicator>,
    names: Vec<String>,
    rank_count: u64,
    op_count: u64,
}

/// Writes `trace` in the native format to `w`.
///
/// `w` should be buffered (the encoder writes in 4 MiB blocks, so it matters little).
pub fn write_native<W: Write>(trace: &Trace, w: W) -> Result<(), NativeError> {
    write_native_named(trace, w, "<writer>")
}

fn write_native_named<W: Write>(trace: &Trace, mut w: W, file: &str) -> Result<(), NativeError> {
    let io_err = |source: io::Error| NativeError::Io {
        file: file.to_string(),
        source,
    };
    w.write_all(&MAGIC).map_err(io_err)?;
    w.write_all(&VERSION.to_le_bytes()).map_err(io_err)?;

    let info = lz4_flex::frame::FrameInfo::new()
        .block_size(lz4_flex::frame::BlockSize::Max4MB)
        .block_mode(lz4_flex::frame::BlockMode::Linked)
        .block_checksums(true)
        .content_checksum(true);
    let mut enc = lz4_flex::frame::FrameEncoder::with_frame_info(info, w);

    let header = HeaderOut::of(trace);
    let json = serde_json::to_vec(&header).map_err(|e| NativeError::Io {
        file: file.to_string(),
        source: io::Error::other(e),
    })?;
    let json_len = u32::try_from(json.len()).map_err(|_| NativeError::Io {
        file: file.to_string(),
        source: io::Error::other("the JSON header exceeds 4 GiB"),
    })?;
    enc.write_all(&json_len.to_le_bytes()).map_err(io_err)?;
    enc.write_all(&json).map_err(io_err)?;

    let n_comms = trace.communicators.len();
    let mut block = Vec::with_capacity(1 << 16);
    let mut len_buf = Vec::with_capacity(10);
    let mut scratch = Scratch::default();
    for rt in &trace.ranks {
        block.clear();
        encode_rank(rt, n_comms, &mut block, &mut scratch);
        len_buf.clear();
        varint::put_u64(&mut len_buf, block.len() as u64);
        enc.write_all(&len_buf).map_err(io_err)?;
        enc.write_all(&block).map_err(io_err)?;
    }
    let mut w = enc.finish().map_err(|e| io_err(e.into()))?;
    w.flush().map_err(io_err)?;
    Ok(())
}

/// Column buffers reused across ranks by the encoder.
#[derive(Default)]
struct Scratch {
    cols: [Vec<u8>; 9],
    last_seq: Vec<i64>,
}

fn encode_rank(rt: &RankTrace, n_comms: usize, out: &mut Vec<u8>, s: &mut Scratch) {
    varint::put_u64(out, rt.rank as u64);
    varint::put_u64(out, rt.iterations.len() as u64);
    let mut prev_iter: i64 = 0;
    let mut prev_start: i64 = 0;
    for span in &rt.iterations {
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
    varint::put_u64(out, rt.ops.len() as u64);

    for c in s.cols.iter_mut() {
        c.clear();
    }
    s.last_seq.clear();
    s.last_seq.resize(n_comms, -1);
    let [names, iters, comms, seqs, peers, starts, durs, issues, amounts] = &mut s.cols;
    let mut prev_iter: i64 = 0;
    let mut prev_start: i64 = 0;
    for op in &rt.ops {
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
            match s.last_seq.get_mut(op.comm as usize) {
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

/// Reads a native trace from `r`. `source_name` (usually the path) names the input in
/// errors. The default [`Limits`] apply.
///
/// The LZ4 frame is decompressed on the calling thread while the rank blocks are decoded
/// on [`decode_threads`] others (ranks are independent); errors are the same as a
/// sequential read's: the first failing place in file order.
pub fn read_native<R: Read>(r: R, source_name: &str) -> Result<Trace, NativeError> {
    read_native_with_limits(r, source_name, &Limits::default())
}

/// [`read_native`], reading at most `limits.max_input_bytes` from `r` and inflating at most
/// `limits.max_inflated_bytes`.
pub fn read_native_with_limits<R: Read>(
    r: R,
    source_name: &str,
    limits: &Limits,
) -> Result<Trace, NativeError> {
    read_native_threads(r, source_name, limits, decode_threads())
}

/// How many threads [`read_native`] decodes rank blocks on: `FLARE_DECODE_THREADS` if set
/// (0 or 1: the calling thread alone, between reads), else one per available core (the
/// calling thread, which decompresses, shares them), at most 8.
pub fn decode_threads() -> usize {
    if let Some(n) = std::env::var("FLARE_DECODE_THREADS")
        .ok()
        .and_then(|v| v.trim().parse::<usize>().ok())
    {
        return n.min(64);
    }
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
        .min(8)
}

/// Files with fewer rank blocks than this are decoded on the calling thread alone.
const PARALLEL_MIN_RANKS: u64 = 16;

/// [`read_native_with_limits`] with rank blocks decoded on `threads` threads besides the
/// caller (0 or 1: on the calling thread, between reads).
pub fn read_native_threads<R: Read>(
    r: R,
    source_name: &str,
    limits: &Limits,
    threads: usize,
) -> Result<Trace, NativeError> {
    let file = source_name;
    let mut r = r;
    let mut pre = [0u8; 12];
    let got = read_full(&mut r, &mut pre).map_err(|source| NativeError::Io {
        file: file.to_string(),
        source,
    })?;
    let m = got.min(8);
    if got == 0 || pre[..m] != MAGIC[..m] {
        return Err(NativeError::BadMagic {
            file: file.to_string(),
            found: describe_bytes(&pre[..m]),
        });
    }
    if got < 8 {
        return Err(NativeError::Truncated {
            file: file.to_string(),
            location: format!("at byte offset {got}, inside the magic bytes"),
            expected: "the 8 magic bytes \"FLARETRC\" and a 4-byte version".into(),
        });
    }
    if got < 12 {
        return Err(NativeError::Truncated {
            file: file.to_string(),
            location: format!("at byte offset {got}, inside the version field"),
            expected: "a 4-byte little-endian format version at byte offset 8".into(),
        });
    }
    let version = u32::from_le_bytes([pre[8], pre[9], pre[10], pre[11]]);
    if version != VERSION {
        return Err(NativeError::UnsupportedVersion {
            file: file.to_string(),
            found: version,
            supported: VERSION,
        });
    }

    let mut dec = Payload {
        inner: lz4_flex::frame::FrameDecoder::new(EofWatch {
            inner: r,
            hit_eof: false,
            consumed: 0,
            cap: limits.max_input_bytes.saturating_sub(12),
            over: false,
        }),
        offset: 0,
        file,
        limits: *limits,
    };

    let mut len4 = [0u8; 4];
    dec.exact(&mut len4, "in the header length", "a 4-byte header length")?;
    let header_len = u32::from_le_bytes(len4) as u64;
    let json = dec.chunk(header_len, "in the JSON header", "the JSON header")?;
    let header: HeaderIn = serde_json::from_slice(&json).map_err(|source| NativeError::Header {
        file: file.to_string(),
        source,
    })?;

    let n_comms = header.communicators.len();
    let workers = if header.rank_count >= PARALLEL_MIN_RANKS {
        threads
    } else {
        0
    };
    let ranks = if workers <= 1 {
        read_blocks_here(&mut dec, header.rank_count, n_comms)?
    } else {
        read_blocks_parallel(&mut dec, header.rank_count, n_comms, workers)?
    };
    let ops_seen: u64 = ranks.iter().map(|r| r.ops.len() as u64).sum();
    if ops_seen != header.op_count {
        return Err(NativeError::Corrupt {
            file: file.to_string(),
            offset: dec.offset,
            location: "after the last rank block".into(),
            expected: format!(
                "{} ops in all as the header says, found {ops_seen}",
                header.op_count
            ),
        });
    }
    dec.expect_end()?;

    Ok(Trace {
        meta: header.meta,
        job: header.job,
        communicators: header.communicators,
        names: header.names,
        ranks,
    })
}

/// Reads a rank block's length and bytes into `buf` (reused). Returns where the block
/// starts in the decompressed payload.
fn read_block<R: Read>(
    dec: &mut Payload<'_, R>,
    index: u64,
    buf: &mut Vec<u8>,
) -> Result<u64, NativeError> {
    let where_ = format!("in the length of rank block {index}");
    let block_len = dec.varint(&where_, "a varint block length")?;
    let block_offset = dec.offset;
    dec.chunk_into(
        buf,
        block_len,
        &format!("in rank block {index} (decompressed offset {block_offset})"),
        &format!("{block_len} bytes of rank block {index}"),
    )?;
    Ok(block_offset)
}

fn corrupt(file: &str, index: u64, block_offset: u64, e: BlockError) -> NativeError {
    NativeError::Corrupt {
        file: file.to_string(),
        offset: block_offset + e.pos as u64,
        location: format!("rank block {index}{}, {}", e.rank_note(), e.place),
        expected: e.expected,
    }
}

/// The rank blocks, read and decoded one after the other on this thread.
fn read_blocks_here<R: Read>(
    dec: &mut Payload<'_, R>,
    rank_count: u64,
    n_comms: usize,
) -> Result<Vec<RankTrace>, NativeError> {
    let mut ranks = Vec::with_capacity(rank_count.min(1 << 16) as usize);
    let mut last_seq = Vec::new();
    let mut block = Vec::new();
    for index in 0..rank_count {
        let block_offset = read_block(dec, index, &mut block)?;
        let rt = decode_rank(&block, n_comms, &mut last_seq)
            .map_err(|e| corrupt(dec.file, index, block_offset, e))?;
        ranks.push(rt);
    }
    Ok(ranks)
}

/// A rank block read, to be decoded.
struct BlockJob {
    index: u64,
    offset: u64,
    bytes: Vec<u8>,
}

/// Rank blocks queued per decoding thread: bounds the bytes read ahead (blocks are tens
/// of kilobytes).
const QUEUE_PER_THREAD: usize = 32;

/// The rank blocks, read (decompressed) on this thread and decoded on `workers` others,
/// block `i` on worker `i % workers`. The result, errors included, is what
/// [`read_blocks_here`] gives: a decoding error in block `i` wins over any error after
/// it (a later block's, or reading's), and blocks after a known decoding error are not
/// read.
fn read_blocks_parallel<R: Read>(
    dec: &mut Payload<'_, R>,
    rank_count: u64,
    n_comms: usize,
    workers: usize,
) -> Result<Vec<RankTrace>, NativeError> {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::mpsc;
    // The lowest index of a block that failed to decode, u64::MAX while none has.
    let first_bad = AtomicU64::new(u64::MAX);
    let file = dec.file;
    type Decoded = (Vec<RankTrace>, Option<(u64, u64, BlockError)>);
    let (outs, read_err): (Vec<Decoded>, Option<NativeError>) = std::thread::scope(|s| {
        let (spare_tx, spare_rx) = mpsc::channel::<Vec<u8>>();
        let mut queues = Vec::with_capacity(workers);
        let mut handles = Vec::with_capacity(workers);
        for _ in 0..workers {
            let (tx, rx) = mpsc::sync_channel::<BlockJob>(QUEUE_PER_THREAD);
            queues.push(tx);
            let spare_tx = spare_tx.clone();
            let first_bad = &first_bad;
            let share = (rank_count as usize).div_ceil(workers).min(1 << 16);
            handles.push(s.spawn(move || {
                let mut out = Vec::with_capacity(share);
                let mut failed = None;
                let mut last_seq = Vec::new();
                for job in rx {
                    if failed.is_none() {
                        match decode_rank(&job.bytes, n_comms, &mut last_seq) {
                            Ok(rt) => out.push(rt),
                            Err(e) => {
                                first_bad.fetch_min(job.index, Ordering::Relaxed);
                                failed = Some((job.index, job.offset, e));
                            }
                        }
                    }
                    // The reader reuses the buffer; if it has finished, it is dropped.
                    let _ = spare_tx.send(job.bytes);
                }
                (out, failed)
            }));
        }
        drop(spare_tx);
        let mut read_err = None;
        for index in 0..rank_count {
            if first_bad.load(Ordering::Relaxed) < index {
                break;
            }
            let mut bytes = spare_rx.try_recv().unwrap_or_default();
            match read_block(dec, index, &mut bytes) {
                Ok(offset) => {
                    let job = BlockJob {
                        index,
                        offset,
                        bytes,
                    };
                    // A worker only stops taking jobs by panicking, which the join
                    // below passes on.
                    if queues[(index % workers as u64) as usize].send(job).is_err() {
                        break;
                    }
                }
                Err(e) => {
                    read_err = Some(e);
                    break;
                }
            }
        }
        drop(queues);
        let outs = handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
            .collect();
        (outs, read_err)
    });
    let mut ranks = Vec::with_capacity(rank_count.min(1 << 16) as usize);
    let mut first: Option<(u64, u64, BlockError)> = None;
    let mut parts = Vec::with_capacity(outs.len());
    for (out, failed) in outs {
        if let Some(f) = failed {
            if first.as_ref().is_none_or(|g| f.0 < g.0) {
                first = Some(f);
            }
        }
        parts.push(out.into_iter());
    }
    if let Some((index, offset, e)) = first {
        return Err(corrupt(file, index, offset, e));
    }
    if let Some(e) = read_err {
        return Err(e);
    }
    for i in 0..rank_count {
        match parts[(i % workers as u64) as usize].next() {
            Some(rt) => ranks.push(rt),
            None => unreachable!("every block read was decoded or failed"),
        }
    }
    Ok(ranks)
}

/// Writes `trace` to `path` in the native format.
pub fn write_native_file(trace: &Trace, path: impl AsRef<Path>) -> Result<(), NativeError> {
    let path = path.as_ref();
    let file = path.display().to_string();
    let f = File::create(path).map_err(|source| NativeError::Io {
        file: file.clone(),
        source,
    })?;
    write_native_named(trace, BufWriter::with_capacity(1 << 20, f), &file)
}

/// Reads a native trace from `path`. The default [`Limits`] apply.
pub fn read_native_file(path: impl AsRef<Path>) -> Result<Trace, NativeError> {
    read_native_file_with_limits(path, &Limits::default())
}

/// [`read_native_file`] with the given limits; special files (FIFOs, devices) are refused
/// before they are opened.
pub fn read_native_file_with_limits(
    path: impl AsRef<Path>,
    limits: &Limits,
) -> Result<Trace, NativeError> {
    let path = path.as_ref();
    let file = path.display().to_string();
    let (f, _) = limits::open_file(path, limits)?;
    read_native_with_limits(BufReader::with_capacity(1 << 20, f), &file, limits)
}

/// Reads until `buf` is full or the input ends; returns how many bytes were read.
fn read_full<R: Read>(r: &mut R, buf: &mut [u8]) -> io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match r.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

fn describe_bytes(b: &[u8]) -> String {
    if b.is_empty() {
        return "an empty file".into();
    }
    let hex: Vec<String> = b.iter().map(|x| format!("{x:02x}")).collect();
    format!("bytes {}", hex.join(" "))
}

/// Notes whether the input ran out. lz4_flex reads exactly the frame's bytes and treats an
/// input that ends where the next block header (or the end mark) should be as a clean end
/// of frame, so this is how a file cut there is told from a complete one.
struct EofWatch<R> {
    inner: R,
    hit_eof: bool,
    /// Bytes read so far (after the 12-byte preamble).
    consumed: u64,
    /// The most bytes that may be read after the preamble ([`Limits::max_input_bytes`]).
    cap: u64,
    /// The input went on past `cap`.
    over: bool,
}

impl<R: Read> Read for EofWatch<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let room = self.cap.saturating_sub(self.consumed);
        if room == 0 && !buf.is_empty() {
            // At the cap: only the end of the input may follow.
            let mut one = [0u8; 1];
            if self.inner.read(&mut one)? != 0 {
                self.over = true;
                return Err(io::Error::other("the input is over the size limit"));
            }
            self.hit_eof = true;
            return Ok(0);
        }
        let want = buf.len().min(room.min(usize::MAX as u64) as usize);
        let n = self.inner.read(&mut buf[..want])?;
        if n == 0 && !buf.is_empty() {
            self.hit_eof = true;
        }
        self.consumed += n as u64;
        Ok(n)
    }
}

/// The decompressed payload, with its position for error messages.
struct Payload<'f, R: Read> {
    inner: lz4_flex::frame::FrameDecoder<EofWatch<R>>,
    offset: u64,
    file: &'f str,
    limits: Limits,
}

impl<R: Read> Payload<'_, R> {
    /// Where the reader stands, for messages: the file offset of the compressed bytes read
    /// so far and the offset in the decompressed payload.
    fn place(&self, location: &str) -> String {
        format!(
            "at byte offset {} of the file, {location} (decompressed offset {})",
            12 + self.inner.get_ref().consumed,
            self.offset
        )
    }

    /// The limit hit by reading `more` decompressed bytes from here, if any.
    fn over_inflated(&self, more: u64) -> Option<NativeError> {
        (self.offset.saturating_add(more) > self.limits.max_inflated_bytes).then(|| {
            NativeError::Limit(LimitError::Inflated {
                path: self.file.to_string(),
                codec: "LZ4",
                limit: self.limits.max_inflated_bytes,
            })
        })
    }

    fn fail(&self, e: io::Error, location: &str, expected: &str) -> NativeError {
        let file = self.file.to_string();
        if self.inner.get_ref().over {
            return NativeError::Limit(LimitError::ReadPastLimit {
                path: file,
                limit: self.limits.max_input_bytes,
            });
        }
        let location = self.place(location);
        match e.kind() {
            io::ErrorKind::UnexpectedEof => NativeError::Truncated {
                file,
                location,
                expected: expected.to_string(),
            },
            io::ErrorKind::InvalidData | io::ErrorKind::Other => {
                // lz4_flex reports bad frames, blocks and checksums this way. A frame
                // header or block cut short is reported as "unexpected end" by some
                // versions: call it truncation, which is what the user needs to hear.
                let detail = format!("lz4: {e}");
                if detail.to_ascii_lowercase().contains("eof")
                    || detail.to_ascii_lowercase().contains("unexpected end")
                {
                    NativeError::Truncated {
                        file,
                        location,
                        expected: expected.to_string(),
                    }
                } else {
                    NativeError::Compression {
                        file,
                        location,
                        detail,
                    }
                }
            }
            _ => NativeError::Io { file, source: e },
        }
    }

    fn exact(&mut self, buf: &mut [u8], location: &str, expected: &str) -> Result<(), NativeError> {
        if let Some(e) = self.over_inflated(buf.len() as u64) {
            return Err(e);
        }
        let n = read_full(&mut self.inner, buf).map_err(|e| self.fail(e, location, expected))?;
        self.offset += n as u64;
        if n < buf.len() {
            return Err(NativeError::Truncated {
                file: self.file.to_string(),
                location: self.place(location),
                expected: expected.to_string(),
            });
        }
        Ok(())
    }

    /// Reads `len` bytes without trusting `len` for the allocation: a corrupt length on a
    /// short input ends in a truncation error, not an out-of-memory abort.
    fn chunk(&mut self, len: u64, location: &str, expected: &str) -> Result<Vec<u8>, NativeError> {
        let mut buf = Vec::new();
        self.chunk_into(&mut buf, len, location, expected)?;
        Ok(buf)
    }

    /// [`Self::chunk`] into `buf`, which is cleared first; never inflates past
    /// `limits.max_inflated_bytes`.
    fn chunk_into(
        &mut self,
        buf: &mut Vec<u8>,
        len: u64,
        location: &str,
        expected: &str,
    ) -> Result<(), NativeError> {
        buf.clear();
        let room = self
            .limits
            .max_inflated_bytes
            .saturating_sub(self.offset)
            .min(len);
        buf.reserve(room.min(1 << 24) as usize);
        // Straight from the decoder's buffer: no zeroing of `buf`, one copy.
        let mut n = 0u64;
        while n < room {
            let avail = match self.inner.fill_buf() {
                Ok(avail) => avail,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(self.fail(e, location, expected)),
            };
            if avail.is_empty() {
                break;
            }
            let take = avail.len().min((room - n) as usize);
            buf.extend_from_slice(&avail[..take]);
            self.inner.consume(take);
            n += take as u64;
        }
        self.offset += n;
        if n == room && room < len {
            return Err(self
                .over_inflated(len - room)
                .unwrap_or_else(|| NativeError::Truncated {
                    file: self.file.to_string(),
                    location: self.place(location),
                    expected: expected.to_string(),
                }));
        }
        if n < len {
            return Err(NativeError::Truncated {
                file: self.file.to_string(),
                location: self.place(location),
                expected: expected.to_string(),
            });
        }
        Ok(())
    }

    fn varint(&mut self, location: &str, expected: &str) -> Result<u64, NativeError> {
        let start = self.offset;
        let mut v: u64 = 0;
        for i in 0..10u32 {
            let mut b = [0u8; 1];
            self.exact(&mut b, location, expected)?;
            let b = b[0];
            if i == 9 && b > 1 {
                break;
            }
            v |= ((b & 0x7f) as u64) << (7 * i);
            if b < 0x80 {
                return Ok(v);
            }
        }
        Err(NativeError::Corrupt {
            file: self.file.to_string(),
            offset: start,
            location: location.to_string(),
            expected: "a LEB128 varint of at most 10 bytes".into(),
        })
    }

    /// The payload must end here, with the frame's end mark and content checksum (which
    /// reading on verifies), and nothing may follow the frame.
    fn expect_end(&mut self) -> Result<(), NativeError> {
        let expected = "the end mark of the LZ4 frame and its content checksum";
        let mut b = [0u8; 1];
        let n = read_full(&mut self.inner, &mut b)
            .map_err(|e| self.fail(e, "after the last rank block", expected))?;
        if n != 0 {
            return Err(NativeError::Corrupt {
                file: self.file.to_string(),
                offset: self.offset,
                location: "after the last rank block".into(),
                expected: "the end of the payload (found extra data)".into(),
            });
        }
        if self.inner.get_ref().hit_eof {
            return Err(NativeError::Truncated {
                file: self.file.to_string(),
                location: self.place("after the last rank block"),
                expected: expected.into(),
            });
        }
        let raw = self.inner.get_mut();
        let extra = read_full(&mut raw.inner, &mut b).map_err(|source| NativeError::Io {
            file: self.file.to_string(),
            source,
        })?;
        if extra != 0 {
            return Err(NativeError::TrailingData {
                file: self.file.to_string(),
                offset: 12 + raw.consumed,
            });
        }
        Ok(())
    }
}

/// A decoding failure inside one rank block.
struct BlockError {
    pos: usize,
    rank: Option<u32>,
    place: String,
    expected: String,
}

impl BlockError {
    fn rank_note(&self) -> String {
        match self.rank {
            Some(r) => format!(" (rank {r})"),
            None => String::new(),
        }
    }
}

fn decode_rank(
    block: &[u8],
    n_comms: usize,
    last_seq: &mut Vec<i64>,
) -> Result<RankTrace, BlockError> {
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
    let mut iterations = Vec::with_capacity(n_iter as usize);
    let mut prev_iter: i64 = 0;
    let mut prev_start: i64 = 0;
    for i in 0..n_iter {
        let place = || format!("iteration span {i}");
        let d = c.i64().map_err(|e| fail!(c, place(), ve(e).into()))?;
        let it = prev_iter.wrapping_add(d);
        let iteration = u32::try_from(it)
            .map_err(|_| fail!(c, place(), format!("an iteration number in u32, got {it}")))?;
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
    let mut ops = Vec::with_capacity(n);
    let mut flags = Vec::with_capacity(n);
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
    last_seq.clear();
    last_seq.resize(n_comms, -1);
    for (i, op) in ops.iter_mut().enumerate() {
        let place = || format!("column seq, op {i}");
        let in_table = if op.comm != Op::NO_COMM {
            last_seq.get_mut(op.comm as usize)
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

#[cfg(test)]
mod tests {
    use super::*;
    use flare_model::{ClusterTopology, GroupKind};

    fn small_trace() -> Trace {
        let op = |kind, start: i64| Op {
            kind,
            name: 0,
            iteration: 3,
            comm: if kind == OpKind::Compute {
                Op::NO_COMM
            } else {
                0
            },
            seq: 7,
            peer: Op::NO_PEER,
            start_ns: start,
            end_ns: start + 1000,
            issue_ns: start - 50,
            amount: 1 << 20,
        };
        Trace {
            meta: TraceMeta {
                source: "test".into(),
                detail: String::new(),
                missing_ranks: vec![2],
                cpu_compute: false,
                notes: Vec::new(),
            },
            job: JobInfo {
                job_id: "j".into(),
                world_size: 3,
                cluster: ClusterTopology::for_world(3, 8, 32),
                parallel: None,
                microbatches: Some(4),
            },
            communicators: vec![Communicator {
                id: 0,
                kind: GroupKind::World,
                members: vec![0, 1, 2],
                label: "world".into(),
            }],
            names: vec!["gemm".into()],
            ranks: vec![
                RankTrace {
                    rank: 0,
                    ops: vec![op(OpKind::Compute, 10), op(OpKind::AllReduce, 2000)],
                    iterations: vec![IterationSpan {
                        iteration: 3,
                        start_ns: 0,
                        end_ns: Some(5000),
                    }],
                },
                RankTrace {
                    rank: 1,
                    ops: vec![Op {
                        end_ns: Op::IN_FLIGHT,
                        issue_ns: Op::UNKNOWN,
                        ..op(OpKind::AllReduce, 2100)
                    }],
                    iterations: vec![IterationSpan {
                        iteration: 3,
                        start_ns: 1,
                        end_ns: None,
                    }],
                },
            ],
        }
    }

    /// A trace of `n` ranks, each with a few ops, for the parallel reader.
    fn many_ranks(n: u32) -> Trace {
        let mut t = small_trace();
        let proto = t.ranks[0].clone();
        t.job.world_size = n;
        t.meta.missing_ranks.clear();
        t.ranks = (0..n)
            .map(|r| {
                let mut rt = proto.clone();
                rt.rank = r;
                for (i, op) in rt.ops.iter_mut().enumerate() {
                    op.start_ns += (r as i64) * 7 + i as i64;
                    op.amount += r as u64;
                }
                rt
            })
            .collect();
        t
    }

    /// A file holding `trace`'s header and blocks, with `damage` applied to the payload
    /// (the blocks, each with its index) before compression.
    fn file_with(trace: &Trace, damage: impl Fn(u64, &mut Vec<u8>)) -> Vec<u8> {
        let mut payload = Vec::new();
        let header = HeaderOut::of(trace);
        let json = serde_json::to_vec(&header).unwrap();
        payload.extend_from_slice(&(json.len() as u32).to_le_bytes());
        payload.extend_from_slice(&json);
        let mut scratch = Scratch::default();
        for (i, rt) in trace.ranks.iter().enumerate() {
            let mut block = Vec::new();
            encode_rank(rt, trace.communicators.len(), &mut block, &mut scratch);
            damage(i as u64, &mut block);
            varint::put_u64(&mut payload, block.len() as u64);
            payload.extend_from_slice(&block);
        }
        let mut out = MAGIC.to_vec();
        out.extend_from_slice(&VERSION.to_le_bytes());
        let info = lz4_flex::frame::FrameInfo::new()
            .block_size(lz4_flex::frame::BlockSize::Max64KB)
            .block_mode(lz4_flex::frame::BlockMode::Linked)
            .block_checksums(true)
            .content_checksum(true);
        let mut enc = lz4_flex::frame::FrameEncoder::with_frame_info(info, out);
        enc.write_all(&payload).unwrap();
        enc.finish().unwrap()
    }

    /// A change to rank block `i`'s bytes.
    type Damage = dyn Fn(u64, &mut Vec<u8>);

    fn outcome(buf: &[u8], threads: usize) -> Result<Trace, String> {
        read_native_threads(buf, "p.flare", &Limits::default(), threads).map_err(|e| e.to_string())
    }

    #[test]
    fn parallel_reads_equal_sequential_ones() {
        let t = many_ranks(50);
        let good = file_with(&t, |_, _| {});
        for threads in [2, 3, 5] {
            assert_eq!(outcome(&good, threads), Ok(t.clone()));
        }
        // Blocks that fail to decode (a trailing byte, a cut column), alone or with a
        // truncated file after them: the first failure in file order is reported.
        let damages: [&Damage; 4] = [
            &|i, b| {
                if i == 7 {
                    b.push(0)
                }
            },
            &|i, b| {
                if i == 31 || i == 44 {
                    b.pop();
                }
            },
            &|i, b| {
                if i >= 12 {
                    b.push(1)
                }
            },
            &|i, b| {
                if i == 0 || i == 49 {
                    b.truncate(1)
                }
            },
        ];
        for damage in damages {
            let bad = file_with(&t, damage);
            let want = outcome(&bad, 0);
            assert!(want.is_err());
            for threads in [2, 3, 5] {
                assert_eq!(outcome(&bad, threads), want, "{threads} threads");
            }
            for cut in (12..bad.len()).step_by(97) {
                let want = outcome(&bad[..cut], 0);
                assert!(want.is_err());
                assert_eq!(outcome(&bad[..cut], 2), want, "cut at {cut}");
            }
        }
        for cut in (0..good.len()).step_by(13) {
            let want = outcome(&good[..cut], 0);
            assert!(want.is_err());
            assert_eq!(outcome(&good[..cut], 3), want, "cut at {cut}");
        }
    }

    #[test]
    fn small_round_trip() {
        let t = small_trace();
        let mut buf = Vec::new();
        write_native(&t, &mut buf).unwrap();
        let back = read_native(&buf[..], "mem").unwrap();
        assert_eq!(back, t);
    }
}
