//! The root cause of a failed training job, from its logs.

pub mod origin;
pub mod signatures;
pub mod source;
pub mod time;
