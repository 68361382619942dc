//! Reading and writing traces.
//!
//! * [`native`]: Flare's own compact binary format (`.flare`), about ten bytes per op,
//!   exact round trips, documented byte by byte in `FORMAT.md`.
//! * [`kineto`]: PyTorch profiler (Kineto / Chrome trace JSON) files, one per rank, plain
//!   or gzip: a reader that turns real torch.profiler traces into the model, and a writer
//!   that produces files of the same shape from any trace.
//!
//! [`open()`] is the one entry point for trace inputs: it checks the paths, detects the
//! format ([`sniff`]) or takes the one given, and reads within the bounds of [`Limits`]
//! ([`limits`]: special files refused, bytes read and inflated per file and files per
//! directory capped), returning a timeline or a Flight Recorder job.
//!
//! Every importer returns typed errors naming the file, the place in it and what was
//! expected; none panics on bad input, and whatever an import does not keep is counted.

pub mod agent_summaries;
pub mod flight_recorder;
pub mod kineto;
pub mod limits;
pub mod native;
pub mod nccl_inspector;
pub mod nccl_profiler;
pub mod ndtimeline;
pub mod open;
pub mod prometheus;
pub mod sniff;
pub mod text_logs;
mod varint;

pub use limits::{LimitError, Limits};
pub use open::{open, open_chunked, Chunked, Format, OpenError, OpenOptions, Opened};

pub use kineto::{
    list_trace_files, read_kineto_bytes, read_kineto_dir, read_kineto_dir_with_stats,
    read_kineto_files, read_kineto_files_with_stats, write_kineto_dir, write_kineto_rank,
    KinetoError, KinetoImportStats, KinetoOptions, KinetoWriteStats,
};
pub use native::{
    open_native_file, read_native, read_native_file, write_native, write_native_file, NativeError,
    NativeReader,
};
