//! Flare's in-process tracer.
//!
//! Each traced process creates one file in shared memory (`/dev/shm` by default) holding
//! its identity, a clock anchor, a name table and one lock-free single-producer ring per
//! thread ([`layout`]). Recording an event ([`begin`], [`end`], [`step`], [`counter`],
//! [`record`]) reads the monotonic clock and copies 48 bytes into the thread's ring: no
//! lock, no allocation, no blocking. The node agent maps the same file and drains the
//! rings ([`reader`]); without an agent the rings fill, further events are dropped and
//! counted, memory stays bounded, and [`shutdown`] can dump what was kept to a file.
//!
//! The C ABI, the Python package and the NCCL profiler plugin are thin layers over this
//! crate's process-wide tracer.

pub mod clock;
mod dump;
pub mod layout;
pub mod nccl;
mod producer;
pub mod reader;
mod shm;
pub mod spans;
pub mod startup;
mod writer;

pub use layout::{Event, NameId, SpanArgs, Tag};
pub use producer::FileProducer;
pub use reader::{discover, Drops, ProcessInfo, RingEvent, RingFile};
pub use spans::{Assembler, Item, OpenSpan, Span};
pub use writer::{
    begin, counter, end, init, intern, is_initialized, record, ring_path, shutdown, stats, step,
    Stats,
};

use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
pub enum TracerError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: not a readable Flare tracer file: {what}")]
    Format { path: PathBuf, what: String },
    #[error("tracer configuration: {0}")]
    Config(String),
    #[error("the tracer is already initialized with another identity ({0})")]
    AlreadyInitialized(PathBuf),
}

impl TracerError {
    pub(crate) fn io(path: &Path, source: std::io::Error) -> Self {
        TracerError::Io {
            path: path.to_path_buf(),
            source,
        }
    }
}

/// Who this process is in the job, and how big its rings are.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Config {
    pub job_id: String,
    pub rank: u32,
    pub local_rank: u32,
    pub world_size: u32,
    /// Where the ring file lives (the agent scans it).
    pub shm_dir: PathBuf,
    pub max_rings: u32,
    /// Events per ring (a power of two).
    pub ring_capacity: u32,
    pub names_capacity: u32,
    /// Write the unconsumed events to this file at [`shutdown`].
    pub dump_path: Option<PathBuf>,
}

pub const DEFAULT_SHM_DIR: &str = "/dev/shm";

impl Default for Config {
    fn default() -> Self {
        Config {
            job_id: "local".into(),
            rank: 0,
            local_rank: 0,
            world_size: 1,
            shm_dir: PathBuf::from(DEFAULT_SHM_DIR),
            max_rings: 64,
            ring_capacity: 16384,
            names_capacity: 1 << 16,
            dump_path: None,
        }
    }
}

/// The job id the launcher's environment gives. Plain `torchrun` (no `--rdzv-id`) sets
/// `TORCHELASTIC_RUN_ID=none` for every job: then the job is named after its rendezvous
/// address (`torchrun-ADDR-PORT`), which all its ranks share and no concurrent job on
/// the same cluster can have (a later job on the same address and port gets the same id:
/// `FLARE_JOB_ID` or `--rdzv-id` tells runs apart).
fn job_id_of(get: &impl Fn(&str) -> Option<String>) -> Option<String> {
    // Flare's own variable is taken as given (empty is refused by `validate`); the
    // launchers' are ignored when empty.
    if let Some(id) = get("FLARE_JOB_ID") {
        return Some(id);
    }
    let set = |k: &str| get(k).filter(|v| !v.trim().is_empty());
    let torchrun = set("TORCHELASTIC_RUN_ID");
    if let Some(id) = torchrun.clone().filter(|id| id != "none") {
        return Some(id);
    }
    if let Some(id) = set("SLURM_JOB_ID") {
        return Some(id);
    }
    torchrun?;
    match (set("MASTER_ADDR"), set("MASTER_PORT")) {
        (Some(addr), Some(port)) => Some(format!("torchrun-{addr}-{port}")),
        _ => Some("torchrun".into()),
    }
}

impl Config {
    /// Reads the launcher's environment: torchrun (`RANK`, `LOCAL_RANK`, `WORLD_SIZE`,
    /// `TORCHELASTIC_RUN_ID`, see [`job_id_of`]), Slurm (`SLURM_PROCID`, `SLURM_LOCALID`, `SLURM_NTASKS`,
    /// `SLURM_JOB_ID`), Open MPI (`OMPI_COMM_WORLD_*`), and Flare's own `FLARE_JOB_ID`,
    /// `FLARE_SHM_DIR`, `FLARE_RING_EVENTS`, `FLARE_MAX_THREADS`, `FLARE_DUMP`.
    pub fn from_env() -> Result<Config, TracerError> {
        Config::from_lookup(|k| std::env::var(k).ok())
    }

    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Result<Config, TracerError> {
        fn first<'k>(
            get: &impl Fn(&str) -> Option<String>,
            keys: &[&'k str],
        ) -> Option<(&'k str, String)> {
            keys.iter().find_map(|k| get(k).map(|v| (*k, v)))
        }
        let num = |keys: &[&str], default: u32| -> Result<u32, TracerError> {
            match first(&get, keys) {
                None => Ok(default),
                Some((k, v)) => v.trim().parse::<u32>().map_err(|_| {
                    TracerError::Config(format!("{k}={v:?} is not a non-negative integer"))
                }),
            }
        };
        let d = Config::default();
        let job_id = job_id_of(&get).unwrap_or(d.job_id);
        let c = Config {
            job_id,
            rank: num(&["RANK", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK"], 0)?,
            local_rank: num(
                &["LOCAL_RANK", "SLURM_LOCALID", "OMPI_COMM_WORLD_LOCAL_RANK"],
                0,
            )?,
            world_size: num(&["WORLD_SIZE", "SLURM_NTASKS", "OMPI_COMM_WORLD_SIZE"], 1)?,
            shm_dir: get("FLARE_SHM_DIR").map(PathBuf::from).unwrap_or(d.shm_dir),
            max_rings: num(&["FLARE_MAX_THREADS"], d.max_rings)?,
            ring_capacity: num(&["FLARE_RING_EVENTS"], d.ring_capacity)?,
            names_capacity: d.names_capacity,
            dump_path: get("FLARE_DUMP")
                .filter(|s| !s.is_empty())
                .map(PathBuf::from),
        };
        c.validate()?;
        Ok(c)
    }

    pub fn validate(&self) -> Result<(), TracerError> {
        if self.world_size == 0 || self.rank >= self.world_size {
            return Err(TracerError::Config(format!(
                "rank {} is outside a world of {} ranks",
                self.rank, self.world_size
            )));
        }
        if !self.ring_capacity.is_power_of_two() || self.ring_capacity < 64 {
            return Err(TracerError::Config(format!(
                "ring capacity {} must be a power of two >= 64",
                self.ring_capacity
            )));
        }
        if self.job_id.is_empty() {
            return Err(TracerError::Config("empty job id".into()));
        }
        Ok(())
    }

    /// The job id as it appears in file names: `[A-Za-z0-9._-]`, others become `_`.
    pub fn file_job_id(job: &str) -> String {
        job.chars()
            .take(48)
            .map(|c| {
                if c.is_ascii_alphanumeric() || "._-".contains(c) {
                    c
                } else {
                    '_'
                }
            })
            .collect()
    }

    pub fn ring_path(&self) -> PathBuf {
        self.shm_dir.join(format!(
            "flare-{}-r{}-p{}.ring",
            Config::file_job_id(&self.job_id),
            self.rank,
            std::process::id()
        ))
    }

    pub(crate) fn geometry(&self) -> layout::Geometry {
        layout::Geometry {
            max_rings: self.max_rings,
            ring_capacity: self.ring_capacity,
            names_capacity: self.names_capacity,
        }
    }

    pub(crate) fn same_identity(&self, other: &Config) -> bool {
        self.job_id == other.job_id
            && self.rank == other.rank
            && self.local_rank == other.local_rank
            && self.world_size == other.world_size
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let m: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |k| m.get(k).cloned()
    }

    #[test]
    fn config_reads_torchrun_then_slurm_variables() {
        let c = Config::from_lookup(env(&[
            ("RANK", "5"),
            ("LOCAL_RANK", "1"),
            ("WORLD_SIZE", "16"),
            ("TORCHELASTIC_RUN_ID", "run-7"),
            ("SLURM_PROCID", "9"),
        ]))
        .unwrap();
        assert_eq!((c.rank, c.local_rank, c.world_size), (5, 1, 16));
        assert_eq!(c.job_id, "run-7");
        let s = Config::from_lookup(env(&[
            ("SLURM_PROCID", "9"),
            ("SLURM_LOCALID", "1"),
            ("SLURM_NTASKS", "32"),
            ("SLURM_JOB_ID", "4242"),
            ("FLARE_DUMP", "/tmp/x.ring"),
        ]))
        .unwrap();
        assert_eq!((s.rank, s.local_rank, s.world_size), (9, 1, 32));
        assert_eq!(s.job_id, "4242");
        assert_eq!(s.dump_path, Some(PathBuf::from("/tmp/x.ring")));
        let d = Config::from_lookup(env(&[])).unwrap();
        assert_eq!((d.rank, d.world_size, d.job_id.as_str()), (0, 1, "local"));
    }

    #[test]
    fn plain_torchrun_jobs_get_an_id_of_their_own() {
        // torchrun without --rdzv-id: every job says "none".
        let plain = [
            ("TORCHELASTIC_RUN_ID", "none"),
            ("MASTER_ADDR", "10.0.0.7"),
            ("MASTER_PORT", "29511"),
        ];
        let c = Config::from_lookup(env(&plain)).unwrap();
        assert_eq!(c.job_id, "torchrun-10.0.0.7-29511");
        // Inside Slurm the allocation names it; an explicit id always wins.
        let mut in_slurm = plain.to_vec();
        in_slurm.push(("SLURM_JOB_ID", "4242"));
        assert_eq!(Config::from_lookup(env(&in_slurm)).unwrap().job_id, "4242");
        in_slurm.push(("FLARE_JOB_ID", "mine"));
        assert_eq!(Config::from_lookup(env(&in_slurm)).unwrap().job_id, "mine");
        let c = Config::from_lookup(env(&[("TORCHELASTIC_RUN_ID", "none")])).unwrap();
        assert_eq!(c.job_id, "torchrun");
        // A launcher's empty value is not an id; an empty FLARE_JOB_ID is an error.
        let c = Config::from_lookup(env(&[("TORCHELASTIC_RUN_ID", ""), ("SLURM_JOB_ID", "9")]))
            .unwrap();
        assert_eq!(c.job_id, "9");
        let e = Config::from_lookup(env(&[("FLARE_JOB_ID", ""), ("SLURM_JOB_ID", "9")]));
        assert!(e.unwrap_err().to_string().contains("empty job id"));
    }

    #[test]
    fn config_errors_name_the_variable() {
        let e = Config::from_lookup(env(&[("RANK", "two")])).unwrap_err();
        assert!(e.to_string().contains("RANK=\"two\""), "{e}");
        let e = Config::from_lookup(env(&[("RANK", "8"), ("WORLD_SIZE", "8")])).unwrap_err();
        assert!(e.to_string().contains("outside a world of 8"), "{e}");
        let e = Config::from_lookup(env(&[("FLARE_RING_EVENTS", "1000")])).unwrap_err();
        assert!(e.to_string().contains("power of two"), "{e}");
    }
}
