//! The consumer: the node agent (or a tool reading a dump) opens a process's tracer file,
//! drains its rings and resolves names.

use crate::layout::*;
use crate::shm::Mapping;
use crate::TracerError;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;

/// Who wrote a tracer file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProcessInfo {
    pub job_id: String,
    pub rank: u32,
    pub local_rank: u32,
    pub world_size: u32,
    pub pid: u32,
    pub anchor_mono_ns: u64,
    pub anchor_unix_ns: u64,
    pub max_rings: u32,
    pub ring_capacity: u32,
}

impl ProcessInfo {
    /// An event time as Unix nanoseconds.
    pub fn to_unix_ns(&self, mono_ns: u64) -> u64 {
        (self.anchor_unix_ns as i128 + mono_ns as i128 - self.anchor_mono_ns as i128).max(0) as u64
    }
}

/// An event and the ring (thread) it came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RingEvent {
    pub ring: u32,
    pub event: Event,
}

/// Drop counters of a file.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Drops {
    pub ring_full: u64,
    pub no_ring: u64,
}

impl Drops {
    pub fn total(&self) -> u64 {
        self.ring_full + self.no_ring
    }
}

pub struct RingFile {
    map: Mapping,
    info: ProcessInfo,
    scratch: Vec<Event>,
}

impl RingFile {
    pub fn open(path: &Path) -> Result<RingFile, TracerError> {
        let map = Mapping::open(path)?;
        let h = map.header();
        let info = ProcessInfo {
            job_id: read_fixed(&h.job_id),
            rank: h.rank,
            local_rank: h.local_rank,
            world_size: h.world_size,
            pid: h.pid,
            anchor_mono_ns: h.anchor_mono_ns,
            anchor_unix_ns: h.anchor_unix_ns,
            max_rings: h.max_rings,
            ring_capacity: h.ring_capacity,
        };
        Ok(RingFile {
            map,
            info,
            scratch: Vec::new(),
        })
    }

    pub fn path(&self) -> &Path {
        self.map.path()
    }

    pub fn info(&self) -> &ProcessInfo {
        &self.info
    }

    /// Moves every published event of every ring into `out`; returns how many.
    pub fn drain(&mut self, out: &mut Vec<RingEvent>) -> usize {
        let mut n = 0;
        for i in 0..self.info.max_rings {
            let r = self.map.ring(i);
            if r.header.owner.load(Ordering::Acquire) == RING_FREE {
                continue;
            }
            self.scratch.clear();
            n += r.drain_into(&mut self.scratch);
            out.extend(
                self.scratch
                    .iter()
                    .map(|&event| RingEvent { ring: i, event }),
            );
        }
        n
    }

    pub fn name(&self, id: NameId) -> Option<&str> {
        self.map.name(id)
    }

    /// The name, or a placeholder that says why there is none.
    pub fn name_or(&self, id: NameId) -> String {
        match self.map.name(id) {
            Some(s) => s.to_string(),
            None if id == NameId::NONE => String::new(),
            None if id == NameId::OVERFLOW => "<name table full>".into(),
            None => format!("<name {}>", id.0),
        }
    }

    pub fn drops(&self) -> Drops {
        let mut d = Drops {
            no_ring: self.map.header().dropped_no_ring.load(Ordering::Relaxed),
            ..Drops::default()
        };
        for i in 0..self.info.max_rings {
            let r = self.map.ring(i);
            if r.header.owner.load(Ordering::Relaxed) != RING_FREE {
                d.ring_full += r.header.dropped.load(Ordering::Relaxed);
            }
        }
        d
    }

    /// The OS thread id and name of a ring's current owner.
    pub fn thread(&self, ring: u32) -> (u32, String) {
        let r = self.map.ring(ring);
        (
            r.header.tid.load(Ordering::Relaxed),
            read_fixed(&r.header.thread_name),
        )
    }

    /// Tells the producer an agent collects its rings (it then leaves the file for the
    /// agent at exit instead of removing it).
    pub fn heartbeat(&self, unix_ns: u64) {
        self.map
            .header()
            .agent_heartbeat_unix_ns
            .store(unix_ns, Ordering::Release);
    }

    /// The process called shutdown.
    pub fn exited(&self) -> bool {
        self.map.header().state.load(Ordering::Acquire) == STATE_EXITED
    }

    /// Whether the writing process still runs (it may have died without shutdown).
    pub fn process_alive(&self) -> bool {
        // SAFETY: signal 0 only checks for existence and permission.
        let r = unsafe { libc::kill(self.info.pid as libc::pid_t, 0) };
        r == 0 || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
    }
}

/// Tracer files in `dir`, optionally of one job only (by its file-name form).
pub fn discover(dir: &Path, job: Option<&str>) -> std::io::Result<Vec<PathBuf>> {
    let prefix = match job {
        Some(j) => format!("flare-{}-r", crate::Config::file_job_id(j)),
        None => "flare-".to_string(),
    };
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir)? {
        let e = e?;
        let name = e.file_name();
        let name = name.to_string_lossy();
        if name.starts_with(&prefix) && name.ends_with(".ring") {
            out.push(e.path());
        }
    }
    out.sort();
    Ok(out)
}
