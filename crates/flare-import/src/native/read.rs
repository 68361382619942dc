//! Reading native traces: the header, then chunk after chunk ([`NativeReader`]), or the
//! whole trace at once ([`read_native`]).

use super::block::{decode_rank, BlockError, Expect, Scratch};
use super::payload::{describe_bytes, read_full, Decompressed, EofWatch};
use super::{
    io_error, Chunk, HeaderIn, HeaderInV1, NativeError, NativeHeader, MAGIC, OLDEST_VERSION,
    VERSION,
};
use crate::limits::{self, Limits};
use crate::varint;
use flare_model::{RankTrace, Trace};
use std::fs::File;
use std::io::{BufReader, Read};
use std::path::Path;

/// Reads a native file chunk by chunk: [`NativeReader::header`] first, then each
/// [`NativeReader::next_chunk`] (one iteration of every rank in a version 2 file written
/// from a trace in iteration order), so that a caller can process a trace larger than
/// memory. Every check of the whole-file reader is made; the end-of-file checks (op counts,
/// checksum, trailing bytes) with the last chunk.
pub struct NativeReader<R: Read> {
    dec: Decompressed<R>,
    header: NativeHeader,
    threads: usize,
    chunks_read: u64,
    /// Version 1: the whole trace, read when the file was opened, handed out as the only
    /// chunk.
    whole: Option<Chunk>,
    /// Ops seen so far per rank (version 2).
    ops_seen: Vec<u64>,
    /// The last iteration of the previous chunk.
    last_iteration: Option<u32>,
    /// A chunk handed back ([`NativeReader::recycle`]), to decode the next one into.
    spare: Vec<RankTrace>,
}

impl<R: Read> NativeReader<R> {
    /// Reads the preamble and the header (a version 1 file: all of it). `source_name`
    /// (usually the path) names the input in errors.
    pub fn new(r: R, source_name: &str, limits: &Limits) -> Result<Self, NativeError> {
        Self::with_threads(r, source_name, limits, decode_threads())
    }

    /// [`Self::new`] decoding rank blocks on `threads` threads besides the caller (0 or 1:
    /// on the calling thread, between reads).
    pub fn with_threads(
        mut r: R,
        source_name: &str,
        limits: &Limits,
        threads: usize,
    ) -> Result<Self, NativeError> {
        let file = source_name;
        let version = read_preamble(&mut r, file)?;
        let mut dec = Decompressed {
            inner: lz4_flex::frame::FrameDecoder::new(EofWatch {
                inner: r,
                hit_eof: false,
                consumed: 0,
                cap: limits.max_input_bytes.saturating_sub(12),
                over: false,
            }),
            offset: 0,
            file: file.to_string(),
            limits: *limits,
        };
        let mut len4 = [0u8; 4];
        dec.exact(&mut len4, "in the header length", "a 4-byte header length")?;
        let header_len = u32::from_le_bytes(len4) as u64;
        let json = dec.chunk(header_len, "in the JSON header", "the JSON header")?;
        let header_error = |source| NativeError::Header {
            file: file.to_string(),
            source,
        };
        if version == 1 {
            let h: HeaderInV1 = serde_json::from_slice(&json).map_err(header_error)?;
            let n_comms = h.communicators.len();
            let ranks = read_blocks(
                &mut dec,
                h.rank_count,
                n_comms,
                threads,
                |_| None,
                Vec::new(),
            )?;
            let ops_per_rank: Vec<u64> = ranks.iter().map(|r| r.ops.len() as u64).collect();
            let ops_seen: u64 = ops_per_rank.iter().sum();
            if ops_seen != h.op_count {
                return Err(NativeError::Corrupt {
                    file: file.to_string(),
                    offset: dec.offset,
                    location: "after the last rank block".into(),
                    expected: format!(
                        "{} ops in all as the header says, found {ops_seen}",
                        h.op_count
                    ),
                });
            }
            dec.expect_end()?;
            let iterations = flare_model::iterations_with_ops(&ranks);
            let header = NativeHeader {
                version,
                meta: h.meta,
                job: h.job,
                communicators: h.communicators,
                names: h.names,
                ranks: ranks.iter().map(|r| r.rank).collect(),
                ops_per_rank: ops_per_rank.clone(),
                iterations: iterations.clone(),
                chunk_count: 1,
            };
            return Ok(NativeReader {
                dec,
                header,
                threads,
                chunks_read: 0,
                whole: Some(Chunk { iterations, ranks }),
                ops_seen: ops_per_rank,
                last_iteration: None,
                spare: Vec::new(),
            });
        }
        let h: HeaderIn = serde_json::from_slice(&json).map_err(header_error)?;
        let corrupt_header = |expected: String| NativeError::Corrupt {
            file: file.to_string(),
            offset: 4,
            location: "in the JSON header".into(),
            expected,
        };
        if h.ops_per_rank.len() != h.ranks.len() {
            return Err(corrupt_header(format!(
                "one op count per rank in ops_per_rank ({} ranks), found {}",
                h.ranks.len(),
                h.ops_per_rank.len()
            )));
        }
        if !h.iterations.windows(2).all(|w| w[0] < w[1]) {
            return Err(corrupt_header("iterations in increasing order".into()));
        }
        if h.chunk_count == 0 || h.chunk_count > h.iterations.len().max(1) as u64 {
            return Err(corrupt_header(format!(
                "between 1 and {} chunks (one per iteration at most), found {}",
                h.iterations.len().max(1),
                h.chunk_count
            )));
        }
        let n = h.ranks.len();
        Ok(NativeReader {
            dec,
            header: NativeHeader {
                version,
                meta: h.meta,
                job: h.job,
                communicators: h.communicators,
                names: h.names,
                ranks: h.ranks,
                ops_per_rank: h.ops_per_rank,
                iterations: h.iterations,
                chunk_count: h.chunk_count,
            },
            threads,
            chunks_read: 0,
            whole: None,
            ops_seen: vec![0; n],
            last_iteration: None,
            spare: Vec::new(),
        })
    }

    pub fn header(&self) -> &NativeHeader {
        &self.header
    }

    /// Decodes the next chunks' rank blocks on `threads` threads besides the caller (0 or
    /// 1: on the reading thread alone).
    pub fn set_decode_threads(&mut self, threads: usize) {
        self.threads = threads;
    }

    /// Hands back a chunk this reader gave out, once its caller is done with it: the next
    /// chunk is decoded into its buffers.
    pub fn recycle(&mut self, chunk: Chunk) {
        self.spare = chunk.ranks;
    }

    /// The next chunk, or `None` after the last one. After an error, do not call again.
    pub fn next_chunk(&mut self) -> Result<Option<Chunk>, NativeError> {
        if self.chunks_read == self.header.chunk_count {
            return Ok(None);
        }
        self.chunks_read += 1;
        if let Some(c) = self.whole.take() {
            return Ok(Some(c));
        }
        let k = self.chunks_read - 1;
        let iterations = self.chunk_iterations(k)?;
        let n_comms = self.header.communicators.len();
        let ranks = &self.header.ranks;
        let its = &iterations;
        let blocks = read_blocks(
            &mut self.dec,
            ranks.len() as u64,
            n_comms,
            self.threads,
            |i| {
                Some(Expect {
                    rank: ranks[i as usize],
                    iterations: its,
                })
            },
            std::mem::take(&mut self.spare),
        )
        .map_err(|e| in_chunk(e, k))?;
        for (i, rt) in blocks.iter().enumerate() {
            self.ops_seen[i] += rt.ops.len() as u64;
        }
        if self.chunks_read == self.header.chunk_count {
            self.check_end()?;
        }
        Ok(Some(Chunk {
            iterations,
            ranks: blocks,
        }))
    }

    /// Reads chunk `k`'s iteration list and checks it against the header and the chunks
    /// before it.
    fn chunk_iterations(&mut self, k: u64) -> Result<Vec<u32>, NativeError> {
        let start = self.dec.offset;
        let location = format!("in the iteration list of chunk {k}");
        let n = self
            .dec
            .varint(&location, "a varint count of the chunk's iterations")?;
        let all = &self.header.iterations;
        let file = self.dec.file.clone();
        let corrupt = |expected: String| NativeError::Corrupt {
            file: file.clone(),
            offset: start,
            location: location.clone(),
            expected,
        };
        if n > all.len() as u64 || (n == 0 && !all.is_empty()) {
            return Err(corrupt(format!(
                "between 1 and {} iterations (the header lists {}), found {n}",
                all.len(),
                all.len()
            )));
        }
        let mut its = Vec::with_capacity(n as usize);
        let mut prev = 0i64;
        for _ in 0..n {
            let d = varint::unzigzag(
                self.dec
                    .varint(&location, "a zigzag varint iteration delta")?,
            );
            prev = prev.wrapping_add(d);
            its.push(prev);
        }
        let mut out = Vec::with_capacity(its.len());
        for v in its {
            let ok = u32::try_from(v)
                .ok()
                .filter(|it| all.binary_search(it).is_ok())
                .filter(|&it| out.last().is_none_or(|&p: &u32| p < it))
                .filter(|&it| self.last_iteration.is_none_or(|p| p < it));
            match ok {
                Some(it) => out.push(it),
                None => {
                    return Err(corrupt(format!(
                        "iterations the header lists, increasing, after those of the chunks before; found {v}"
                    )))
                }
            }
        }
        if let Some(&last) = out.last() {
            self.last_iteration = Some(last);
        }
        Ok(out)
    }

    fn check_end(&mut self) -> Result<(), NativeError> {
        let h = &self.header;
        for (i, (&seen, &want)) in self.ops_seen.iter().zip(&h.ops_per_rank).enumerate() {
            if seen != want {
                return Err(NativeError::Corrupt {
                    file: self.dec.file.clone(),
                    offset: self.dec.offset,
                    location: "after the last chunk".into(),
                    expected: format!(
                        "{want} ops of rank {} as the header says, found {seen}",
                        h.ranks[i]
                    ),
                });
            }
        }
        if let (Some(last), Some(&want)) = (self.last_iteration, h.iterations.last()) {
            if last != want {
                return Err(NativeError::Corrupt {
                    file: self.dec.file.clone(),
                    offset: self.dec.offset,
                    location: "after the last chunk".into(),
                    expected: format!(
                        "chunks up to iteration {want} as the header says, found up to {last}"
                    ),
                });
            }
        }
        self.dec.expect_end()
    }

    /// Reads the remaining chunks and assembles the trace (every chunk, if none was read).
    pub fn into_trace(mut self) -> Result<Trace, NativeError> {
        let mut ranks: Option<Vec<RankTrace>> = None;
        while let Some(chunk) = self.next_chunk()? {
            match ranks.as_mut() {
                None => {
                    let mut first = chunk.ranks;
                    for (rt, &n) in first.iter_mut().zip(&self.header.ops_per_rank) {
                        rt.ops
                            .reserve_exact((n as usize).saturating_sub(rt.ops.len()));
                    }
                    ranks = Some(first);
                }
                Some(all) => {
                    for (dst, src) in all.iter_mut().zip(&chunk.ranks) {
                        dst.ops.extend_from_slice(&src.ops);
                        dst.iterations.extend_from_slice(&src.iterations);
                    }
                    self.recycle(chunk);
                }
            }
        }
        let h = self.header;
        let ranks = ranks.unwrap_or_default();
        Ok(Trace {
            meta: h.meta,
            job: h.job,
            communicators: h.communicators,
            names: h.names,
            ranks,
        })
    }
}

/// Reads the magic bytes and the version; returns the version.
fn read_preamble<R: Read>(r: &mut R, file: &str) -> Result<u32, NativeError> {
    let mut pre = [0u8; 12];
    let got = read_full(r, &mut pre).map_err(io_error(file))?;
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
    if !(OLDEST_VERSION..=VERSION).contains(&version) {
        return Err(NativeError::UnsupportedVersion {
            file: file.to_string(),
            found: version,
            supported: VERSION,
        });
    }
    Ok(version)
}

/// Names the chunk in a block's corruption message.
fn in_chunk(e: NativeError, k: u64) -> NativeError {
    match e {
        NativeError::Corrupt {
            file,
            offset,
            location,
            expected,
        } if location.starts_with("rank block") => NativeError::Corrupt {
            file,
            offset,
            location: format!("chunk {k}, {location}"),
            expected,
        },
        other => other,
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

/// [`read_native_with_limits`] with rank blocks decoded on `threads` threads besides the
/// caller (0 or 1: on the calling thread, between reads).
pub fn read_native_threads<R: Read>(
    r: R,
    source_name: &str,
    limits: &Limits,
    threads: usize,
) -> Result<Trace, NativeError> {
    NativeReader::with_threads(r, source_name, limits, threads)?.into_trace()
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
    open_native_file(path, limits)?.into_trace()
}

/// Opens a native file for reading chunk by chunk (see [`NativeReader`]); special files
/// are refused before they are opened.
pub fn open_native_file(
    path: impl AsRef<Path>,
    limits: &Limits,
) -> Result<NativeReader<BufReader<File>>, NativeError> {
    let path = path.as_ref();
    let file = path.display().to_string();
    let (f, _) = limits::open_file(path, limits)?;
    NativeReader::new(BufReader::with_capacity(1 << 20, f), &file, limits)
}

/// How many threads the readers decode rank blocks on: `FLARE_DECODE_THREADS` if set
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

/// Runs of fewer rank blocks than this are decoded on the calling thread alone.
const PARALLEL_MIN_RANKS: u64 = 16;

/// Reads `count` rank blocks and decodes them, on this thread or on `threads` others;
/// `expect(i)` says what block `i` must hold.
fn read_blocks<'e, R: Read>(
    dec: &mut Decompressed<R>,
    count: u64,
    n_comms: usize,
    threads: usize,
    expect: impl Fn(u64) -> Option<Expect<'e>> + Sync,
    spare: Vec<RankTrace>,
) -> Result<Vec<RankTrace>, NativeError> {
    if threads <= 1 || count < PARALLEL_MIN_RANKS {
        read_blocks_here(dec, count, n_comms, expect, spare)
    } else {
        read_blocks_parallel(dec, count, n_comms, threads, expect, spare)
    }
}

/// Block `index`'s destination: the spare rank of that index (a chunk handed back), or a
/// new one.
fn spare_for(spare: &mut [RankTrace], index: u64) -> RankTrace {
    spare
        .get_mut(index as usize)
        .map(std::mem::take)
        .unwrap_or_default()
}

/// Reads a rank block's length and appends its bytes to `buf`. Returns where the block
/// starts in the decompressed payload.
fn read_block<R: Read>(
    dec: &mut Decompressed<R>,
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
fn read_blocks_here<'e, R: Read>(
    dec: &mut Decompressed<R>,
    count: u64,
    n_comms: usize,
    expect: impl Fn(u64) -> Option<Expect<'e>>,
    mut spare: Vec<RankTrace>,
) -> Result<Vec<RankTrace>, NativeError> {
    let mut ranks = Vec::with_capacity(count.min(1 << 16) as usize);
    let mut scratch = Scratch::default();
    let mut block = Vec::new();
    for index in 0..count {
        block.clear();
        let block_offset = read_block(dec, index, &mut block)?;
        let dest = spare_for(&mut spare, index);
        let rt = decode_rank(&block, n_comms, &mut scratch, expect(index), dest)
            .map_err(|e| corrupt(&dec.file, index, block_offset, e))?;
        ranks.push(rt);
    }
    Ok(ranks)
}

/// Consecutive rank blocks read, to be decoded by one thread: blocks of a version 2 chunk
/// are small, so they travel in batches of about this many bytes.
const BATCH_BYTES: usize = if cfg!(test) { 64 } else { 1 << 16 };

struct Batch {
    /// Index of the first block.
    first: u64,
    /// Per block: where it starts in the payload and where it ends in `bytes`.
    blocks: Vec<(u64, usize)>,
    bytes: Vec<u8>,
    /// Per block: the rank whose buffers it is decoded into.
    dests: Vec<RankTrace>,
}

/// Batches queued per decoding thread: bounds the bytes read ahead.
const QUEUE_PER_THREAD: usize = 32;

/// The rank blocks, read (decompressed) on this thread and decoded on `workers` others,
/// batch `b` on worker `b % workers`. The result, errors included, is what
/// [`read_blocks_here`] gives: a decoding error in block `i` wins over any error after
/// it (a later block's, or reading's), and blocks after a known decoding error are not
/// read.
fn read_blocks_parallel<'e, R: Read>(
    dec: &mut Decompressed<R>,
    count: u64,
    n_comms: usize,
    workers: usize,
    expect: impl Fn(u64) -> Option<Expect<'e>> + Sync,
    mut spare: Vec<RankTrace>,
) -> Result<Vec<RankTrace>, NativeError> {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::mpsc;
    // The lowest index of a block that failed to decode, u64::MAX while none has.
    let first_bad = AtomicU64::new(u64::MAX);
    let file = dec.file.clone();
    type Decoded = (Vec<RankTrace>, Option<(u64, u64, BlockError)>);
    let mut batch_sizes: Vec<usize> = Vec::new();
    let expect = &expect;
    let (outs, read_err): (Vec<Decoded>, Option<NativeError>) = std::thread::scope(|s| {
        let (spare_tx, spare_rx) = mpsc::channel::<Batch>();
        let mut queues = Vec::with_capacity(workers);
        let mut handles = Vec::with_capacity(workers);
        for _ in 0..workers {
            let (tx, rx) = mpsc::sync_channel::<Batch>(QUEUE_PER_THREAD);
            queues.push(tx);
            let spare_tx = spare_tx.clone();
            let first_bad = &first_bad;
            let share = (count as usize).div_ceil(workers).min(1 << 16);
            handles.push(s.spawn(move || {
                let mut out = Vec::with_capacity(share);
                let mut failed = None;
                let mut scratch = Scratch::default();
                for mut batch in rx {
                    let mut from = 0;
                    let blocks = batch.blocks.iter().zip(batch.dests.drain(..));
                    for (k, (&(offset, end), dest)) in blocks.enumerate() {
                        if failed.is_some() {
                            break;
                        }
                        let index = batch.first + k as u64;
                        match decode_rank(
                            &batch.bytes[from..end],
                            n_comms,
                            &mut scratch,
                            expect(index),
                            dest,
                        ) {
                            Ok(rt) => out.push(rt),
                            Err(e) => {
                                first_bad.fetch_min(index, Ordering::Relaxed);
                                failed = Some((index, offset, e));
                            }
                        }
                        from = end;
                    }
                    // The reader reuses the buffers; if it has finished, they are dropped.
                    let _ = spare_tx.send(batch);
                }
                (out, failed)
            }));
        }
        drop(spare_tx);
        let mut read_err = None;
        let mut index = 0u64;
        'read: while index < count {
            let mut batch = spare_rx.try_recv().unwrap_or(Batch {
                first: 0,
                blocks: Vec::new(),
                bytes: Vec::new(),
                dests: Vec::new(),
            });
            batch.first = index;
            batch.blocks.clear();
            batch.bytes.clear();
            batch.dests.clear();
            while index < count && batch.bytes.len() < BATCH_BYTES {
                if first_bad.load(Ordering::Relaxed) < index {
                    break 'read;
                }
                match read_block(dec, index, &mut batch.bytes) {
                    Ok(offset) => {
                        batch.blocks.push((offset, batch.bytes.len()));
                        batch.dests.push(spare_for(&mut spare, index));
                    }
                    Err(e) => {
                        read_err = Some(e);
                        break;
                    }
                }
                index += 1;
            }
            if !batch.blocks.is_empty() {
                batch_sizes.push(batch.blocks.len());
                let worker = (batch_sizes.len() - 1) % workers;
                // A worker only stops taking batches by panicking, which the join below
                // passes on.
                if queues[worker].send(batch).is_err() {
                    break;
                }
            }
            if read_err.is_some() {
                break;
            }
        }
        drop(queues);
        let outs = handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
            .collect();
        (outs, read_err)
    });
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
        return Err(corrupt(&file, index, offset, e));
    }
    if let Some(e) = read_err {
        return Err(e);
    }
    let mut ranks = Vec::with_capacity(count.min(1 << 16) as usize);
    for (b, &n) in batch_sizes.iter().enumerate() {
        let part = &mut parts[b % workers];
        for _ in 0..n {
            match part.next() {
                Some(rt) => ranks.push(rt),
                None => unreachable!("every block read was decoded or failed"),
            }
        }
    }
    Ok(ranks)
}
