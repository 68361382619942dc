//! A tracer file written from explicit calls rather than the process-wide tracer: for
//! tools that replay or synthesize events (tests of consumers, converters), and for
//! writing several ranks' files from one process.

use crate::layout::*;
use crate::shm::{Identity, Mapping};
use crate::{Config, TracerError};
use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::Ordering;

pub struct FileProducer {
    map: Mapping,
    names: HashMap<String, NameId>,
}

impl FileProducer {
    /// Creates `path` for the identity in `config` (its `pid` is the given one, so a
    /// consumer's liveness check sees that process), with the clock anchored now.
    pub fn create(path: &Path, config: &Config, pid: u32) -> Result<FileProducer, TracerError> {
        config.validate()?;
        let (mono, unix) = crate::clock::anchor();
        let map = Mapping::create(
            path,
            config.geometry(),
            &Identity {
                job_id: &config.job_id,
                rank: config.rank,
                local_rank: config.local_rank,
                world_size: config.world_size,
                pid,
                anchor_mono_ns: mono,
                anchor_unix_ns: unix,
            },
        )?;
        Ok(FileProducer {
            map,
            names: HashMap::new(),
        })
    }

    pub fn intern(&mut self, name: &str) -> NameId {
        if let Some(&id) = self.names.get(name) {
            return id;
        }
        let id = crate::writer::intern_into(&self.map, name);
        if id != NameId::OVERFLOW {
            self.names.insert(name.to_string(), id);
        }
        id
    }

    /// Pushes into ring `ring` (claiming it on first use); false when the ring is full
    /// (the drop is counted, as for a live thread).
    pub fn push(&mut self, ring: u32, ev: &Event) -> bool {
        let r = self.map.ring(ring);
        if r.header.owner.load(Ordering::Relaxed) == RING_FREE {
            r.header.owner.store(RING_OWNED, Ordering::Release);
        }
        r.push(ev)
    }

    /// Marks the process exited (as `shutdown` does).
    pub fn mark_exited(&self) {
        self.map
            .header()
            .state
            .store(STATE_EXITED, Ordering::Release);
    }

    pub fn path(&self) -> &Path {
        self.map.path()
    }
}
