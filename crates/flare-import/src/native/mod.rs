//! Flare's native trace format (`.flare`): one compact file per trace.
//!
//! Kineto JSON costs hundreds of bytes per op and parsing time to match; the engine and the
//! CLI need to reload a 10,000-rank window in seconds. This format stores exactly what the
//! model holds, at about ten bytes per op or less, and reads back bit for bit.
//!
//! The layout is documented byte by byte in `crates/flare-import/FORMAT.md`. In short: the
//! magic `FLARETRC`, a little-endian `u32` version, then one LZ4 frame (content and block
//! checksums on) holding a length-prefixed JSON header (meta, job, communicators, names,
//! ranks, iterations) and then the ops in **chunks**, iteration by iteration: each chunk
//! holds one length-prefixed block per rank with that rank's ops of the chunk's
//! iterations. Inside a block ops are stored column by column (kinds and flags, names,
//! iterations, communicators, sequence numbers, peers, starts, durations, issue lags,
//! amounts) as LEB128 varints with zigzag deltas: the columns of a training job repeat
//! every iteration, which LZ4 then removes.
//!
//! Because chunks come in iteration order, a reader can hand the engine one iteration at a
//! time and never hold the whole trace ([`NativeReader::next_chunk`]); [`read_native`]
//! assembles the whole trace. Version 1 files (one block per rank, every iteration in it)
//! are still read, as a single chunk.

mod block;
mod payload;
mod read;
#[cfg(test)]
mod tests;
mod write;

use crate::limits::LimitError;
use flare_model::{Communicator, JobInfo, RankTrace, TraceMeta};
use serde::{Deserialize, Serialize};
use std::io;

pub use read::{
    decode_threads, open_native_file, read_native, read_native_file, read_native_file_with_limits,
    read_native_threads, read_native_with_limits, NativeReader,
};
pub use write::{write_native, write_native_file, write_native_version};

/// The eight bytes every native trace starts with.
pub const MAGIC: [u8; 8] = *b"FLARETRC";
/// The format version this build writes.
pub const VERSION: u32 = 2;
/// The oldest version this build reads.
pub const OLDEST_VERSION: u32 = 1;

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

/// What a native file says before its ops: everything in a [`flare_model::Trace`] but
/// the ops and iteration spans, plus where they are.
#[derive(Clone, Debug, PartialEq)]
pub struct NativeHeader {
    /// The file's format version.
    pub version: u32,
    pub meta: TraceMeta,
    pub job: JobInfo,
    pub communicators: Vec<Communicator>,
    pub names: Vec<String>,
    /// The ranks with a block in each chunk, in block order.
    pub ranks: Vec<u32>,
    /// Ops per rank over the whole file, in block order.
    pub ops_per_rank: Vec<u64>,
    /// Every iteration that has an op or a span, ascending.
    pub iterations: Vec<u32>,
    /// How many chunks follow the header.
    pub chunk_count: u64,
}

impl NativeHeader {
    pub fn op_count(&self) -> u64 {
        self.ops_per_rank.iter().sum()
    }
}

/// A run of iterations of every rank: the unit a [`NativeReader`] hands out.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Chunk {
    /// The iterations of the chunk's ops and spans, ascending; the chunks of a file cover
    /// ascending, disjoint sets of iterations.
    pub iterations: Vec<u32>,
    /// One entry per rank of the header, in its order.
    pub ranks: Vec<RankTrace>,
}

/// The JSON header of version 2, as written.
#[derive(Serialize)]
struct HeaderOut<'a> {
    meta: &'a TraceMeta,
    job: &'a JobInfo,
    communicators: &'a [Communicator],
    names: &'a [String],
    ranks: Vec<u32>,
    ops_per_rank: Vec<u64>,
    iterations: &'a [u32],
    chunk_count: u64,
}

/// The JSON header of version 2, as read.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct HeaderIn {
    meta: TraceMeta,
    job: JobInfo,
    communicators: Vec<Communicator>,
    names: Vec<String>,
    ranks: Vec<u32>,
    ops_per_rank: Vec<u64>,
    iterations: Vec<u32>,
    chunk_count: u64,
}

/// The JSON header of version 1, as written.
#[derive(Serialize)]
struct HeaderOutV1<'a> {
    meta: &'a TraceMeta,
    job: &'a JobInfo,
    communicators: &'a [Communicator],
    names: &'a [String],
    rank_count: u64,
    op_count: u64,
}

/// The JSON header of version 1, as read.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct HeaderInV1 {
    meta: TraceMeta,
    job: JobInfo,
    communicators: Vec<Communicator>,
    names: Vec<String>,
    rank_count: u64,
    op_count: u64,
}

/// The last sequence number per communicator within one block (-1: none yet), reset
/// between blocks in time proportional to the communicators the block used: a 10,000-rank
/// job has thousands of communicators, and its file hundreds of thousands of small blocks.
#[derive(Default)]
struct LastSeq {
    last: Vec<i64>,
    touched: Vec<u32>,
}

impl LastSeq {
    fn reset(&mut self, n_comms: usize) {
        if self.last.len() != n_comms {
            self.last.clear();
            self.last.resize(n_comms, -1);
        } else {
            for &c in &self.touched {
                self.last[c as usize] = -1;
            }
        }
        self.touched.clear();
    }

    /// Communicator `comm`'s entry, if it is in the table.
    #[inline]
    fn get_mut(&mut self, comm: u32) -> Option<&mut i64> {
        let slot = self.last.get_mut(comm as usize)?;
        if *slot == -1 {
            self.touched.push(comm);
        }
        Some(slot)
    }
}

fn io_error(file: &str) -> impl Fn(io::Error) -> NativeError + '_ {
    move |source| NativeError::Io {
        file: file.to_string(),
        source,
    }
}
