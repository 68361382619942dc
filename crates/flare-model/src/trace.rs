//! A trace: a window of a job's ops on every rank, with the job's topology and
//! communicators. Importers produce it; the engine reads it.

use crate::comm::Communicator;
use crate::op::Op;
use crate::parallel::ParallelConfig;
use crate::topology::ClusterTopology;
use serde::{Deserialize, Serialize};

/// Where and how the job ran.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct JobInfo {
    pub job_id: String,
    pub world_size: u32,
    pub cluster: ClusterTopology,
    /// Known when the job is Megatron-style (simulator, or given by the user).
    pub parallel: Option<ParallelConfig>,
    /// Microbatches per iteration, when known.
    pub microbatches: Option<u32>,
}

/// Where the trace came from.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct TraceMeta {
    /// `simulator`, `kineto`, `native`, ...
    pub source: String,
    /// Free-form provenance (seed, file names).
    pub detail: String,
    /// Ranks the job has but the trace holds nothing for.
    pub missing_ranks: Vec<u32>,
}

/// One iteration on one rank.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct IterationSpan {
    pub iteration: u32,
    pub start_ns: i64,
    /// `None` when the iteration never finished (hang, end of trace).
    pub end_ns: Option<i64>,
}

/// Everything recorded on one rank, ops sorted by start time.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RankTrace {
    pub rank: u32,
    pub ops: Vec<Op>,
    pub iterations: Vec<IterationSpan>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Trace {
    pub meta: TraceMeta,
    pub job: JobInfo,
    pub communicators: Vec<Communicator>,
    /// Interned op names.
    pub names: Vec<String>,
    /// Indexed by rank where present; ranks with no data are absent (see `meta.missing_ranks`).
    pub ranks: Vec<RankTrace>,
}

impl Trace {
    pub fn name(&self, id: u32) -> &str {
        self.names
            .get(id as usize)
            .map(String::as_str)
            .unwrap_or("?")
    }

    pub fn op_count(&self) -> usize {
        self.ranks.iter().map(|r| r.ops.len()).sum()
    }

    /// Iterations present on at least one rank, sorted.
    pub fn iterations(&self) -> Vec<u32> {
        let mut its: Vec<u32> = self
            .ranks
            .iter()
            .flat_map(|r| r.iterations.iter().map(|s| s.iteration))
            .collect();
        its.sort_unstable();
        its.dedup();
        its
    }
}

/// Interns names into a table.
#[derive(Default, Debug, Clone)]
pub struct NameTable {
    pub names: Vec<String>,
    index: std::collections::HashMap<String, u32>,
}

impl NameTable {
    pub fn intern(&mut self, name: &str) -> u32 {
        if let Some(&id) = self.index.get(name) {
            return id;
        }
        let id = self.names.len() as u32;
        self.names.push(name.to_string());
        self.index.insert(name.to_string(), id);
        id
    }

    pub fn from_names(names: Vec<String>) -> Self {
        let index = names
            .iter()
            .enumerate()
            .map(|(i, n)| (n.clone(), i as u32))
            .collect();
        NameTable { names, index }
    }
}
