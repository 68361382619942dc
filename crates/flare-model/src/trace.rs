//! A trace: a window of a job's ops on every rank, with the job's topology and
//! communicators. Importers produce it; the engine reads it.

use crate::comm::Communicator;
use crate::host_calls::HostCalls;
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
    /// The compute ops are CPU work: the trace holds no GPU activity (a CPU-only job, or
    /// a profile taken without the GPU), so a slow rank is not a slow GPU.
    #[serde(default)]
    pub cpu_compute: bool,
    /// What the importer could not read, for the person reading the diagnosis (events of
    /// kinds it skipped that bear on it, groups it had to guess).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
    /// Host calls the ops do not show (syncs, memory calls, GEMM shapes), where the source
    /// records them.
    #[serde(default, skip_serializing_if = "HostCalls::is_empty")]
    pub host_calls: HostCalls,
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

    /// Iterations that some rank recorded a span or an op for, sorted.
    pub fn iterations_with_ops(&self) -> Vec<u32> {
        iterations_with_ops(&self.ranks)
    }

    /// A copy where every collective or P2P instance (the same communicator and sequence
    /// number on each member) carries the iteration of its earliest-tagged member, so
    /// that no instance is split between two iterations.
    pub fn unify_instance_iterations(&self) -> Trace {
        let mut first: std::collections::HashMap<(u32, u32), u32> = Default::default();
        for r in &self.ranks {
            for o in r
                .ops
                .iter()
                .filter(|o| o.kind.is_sync() && o.comm != Op::NO_COMM)
            {
                let e = first.entry((o.comm, o.seq)).or_insert(o.iteration);
                *e = (*e).min(o.iteration);
            }
        }
        let mut t = self.clone();
        for r in &mut t.ranks {
            for o in r
                .ops
                .iter_mut()
                .filter(|o| o.kind.is_sync() && o.comm != Op::NO_COMM)
            {
                o.iteration = first[&(o.comm, o.seq)];
            }
        }
        t
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

/// A range of iterations analysed together (inclusive). The engine diagnoses one window at
/// a time: offline, the whole trace or a user-chosen range; live, the latest iterations.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Window {
    pub first_iteration: u32,
    pub last_iteration: u32,
}

impl Window {
    pub fn contains(&self, it: u32) -> bool {
        (self.first_iteration..=self.last_iteration).contains(&it)
    }

    /// Parses `A..B` or `A..=B` (inclusive) or a single iteration `A`.
    pub fn parse(s: &str) -> Option<Window> {
        let s = s.trim();
        let (a, b) = match s.split_once("..") {
            Some((a, b)) => (a, b.trim_start_matches('=')),
            None => (s, s),
        };
        let w = Window {
            first_iteration: a.trim().parse().ok()?,
            last_iteration: b.trim().parse().ok()?,
        };
        (w.first_iteration <= w.last_iteration).then_some(w)
    }
}

impl Trace {
    /// The part of the trace inside `w`: ops and iteration spans of those iterations.
    pub fn window(&self, w: Window) -> Trace {
        let mut meta = self.meta.clone();
        meta.host_calls.retain_iterations(|i| w.contains(i));
        Trace {
            meta,
            job: self.job.clone(),
            communicators: self.communicators.clone(),
            names: self.names.clone(),
            ranks: self
                .ranks
                .iter()
                .map(|r| RankTrace {
                    rank: r.rank,
                    ops: r
                        .ops
                        .iter()
                        .copied()
                        .filter(|o| w.contains(o.iteration))
                        .collect(),
                    iterations: r
                        .iterations
                        .iter()
                        .copied()
                        .filter(|s| w.contains(s.iteration))
                        .collect(),
                })
                .collect(),
        }
    }
}

/// Every iteration that has a span or an op on any of `ranks`, ascending.
pub fn iterations_with_ops(ranks: &[RankTrace]) -> Vec<u32> {
    let mut its: Vec<u32> = ranks
        .iter()
        .flat_map(|r| r.iterations.iter().map(|s| s.iteration))
        .collect();
    its.sort_unstable();
    its.dedup();
    for r in ranks {
        // Ops of one iteration are (nearly) contiguous: look up only on a change.
        let mut last = None;
        for o in &r.ops {
            if last != Some(o.iteration) {
                last = Some(o.iteration);
                if let Err(pos) = its.binary_search(&o.iteration) {
                    its.insert(pos, o.iteration);
                }
            }
        }
    }
    its
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_parse_and_slice() {
        assert_eq!(
            Window::parse("3..5"),
            Some(Window {
                first_iteration: 3,
                last_iteration: 5
            })
        );
        assert_eq!(Window::parse("4").map(|w| w.last_iteration), Some(4));
        assert_eq!(Window::parse("5..3"), None);
        assert_eq!(Window::parse("x"), None);
    }
}
