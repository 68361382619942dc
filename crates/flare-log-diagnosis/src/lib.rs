//! The root cause of a failed training job, from its logs.
//!
//! One streaming pass ([`collect::Collector`]) reads every line once: its prefixes say
//! which rank, host and GPU wrote it and when ([`origin`], with [`source`] for what the
//! file's path says), the [`signatures`] table says whether it names a cause, a symptom
//! or an effect, [`traceback`] and [`elastic`] follow Python tracebacks and torchrun's
//! failure summary, [`progress`] the stage and iteration, and [`stats`] keeps the
//! templates of error-looking lines no signature knows. [`verdict`] then picks the root
//! cause, the culprit and what the rest are effects of. Pure computation: the caller
//! reads the files and feeds the lines. [`merge`] joins the result to the findings of
//! traces or dumps of the same job. [`excerpt`] picks the lines worth sending for a
//! diagnosis made elsewhere (the agent following logs live, the server diagnosing).

pub mod collect;
pub mod elastic;
pub mod excerpt;
pub mod lexicon;
pub mod merge;
pub mod node_service;
pub mod origin;
pub mod progress;
mod shapes;
pub mod signatures;
pub mod source;
pub mod stats;
pub mod time;
pub mod traceback;
pub mod verdict;

pub use collect::{Collector, Limits, LinePreparer, Prepared};
pub use excerpt::{Excerpter, Kept};
pub use merge::{merge, Merged};
pub use verdict::{diagnose, LogDiagnosis};
