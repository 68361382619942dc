//! PyTorch Flight Recorder dumps as plain data: what the importer fills and the engine's
//! Flight Recorder analysis reads. No I/O here.
//!
//! A dump is one rank's view: its process groups (`pg_config`, keyed by the group's global
//! name such as `"72"`), per-group progress counters (`pg_status`, keyed by the rank-local
//! `pg_id`) and the recorded ops (`entries`). `pg_id` is local to a rank; the group name
//! (`process_group.name`) is what identifies a group across ranks.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// All dumps of one job, by rank.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct FrJob {
    /// One dump per rank that wrote one.
    pub dumps: BTreeMap<u32, FrDump>,
    /// Ranks named in some dump's process groups that have no dump.
    pub missing_ranks: Vec<u32>,
    /// Where each rank's dump came from (a file name), for evidence.
    #[serde(default)]
    pub sources: BTreeMap<u32, String>,
}

impl FrJob {
    /// Every rank named by the dumps: ranks with a dump and ranks in their groups.
    pub fn world(&self) -> Vec<u32> {
        // Every dump usually repeats the same group lists (the default group's is the whole
        // job): a sorted, deduplicated vector is much cheaper than a set insert per rank
        // per dump, and identical lists are skipped.
        let mut all: Vec<u32> = self.dumps.keys().copied().collect();
        let mut seen: std::collections::HashSet<&[u32]> = std::collections::HashSet::new();
        for d in self.dumps.values() {
            for pg in d.pg_config.values() {
                if seen.insert(pg.ranks.as_slice()) {
                    all.extend_from_slice(&pg.ranks);
                }
            }
        }
        all.sort_unstable();
        all.dedup();
        all
    }
}

/// One rank's Flight Recorder dump.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct FrDump {
    pub rank: u32,
    /// Format version, e.g. `"2.9"`.
    pub version: String,
    /// Process groups this rank belongs to, keyed by group name.
    pub pg_config: BTreeMap<String, FrPgConfig>,
    /// Progress counters keyed by the rank-local `pg_id` (as written in the dump).
    pub pg_status: BTreeMap<String, FrPgStatus>,
    pub nccl_version: Option<String>,
    pub entries: Vec<FrEntry>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct FrPgConfig {
    pub name: String,
    pub desc: String,
    /// Global ranks of the members, in group-rank order.
    pub ranks: Vec<u32>,
}

/// `pg_status` counters (-1 where nothing happened yet).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FrPgStatus {
    pub last_enqueued_collective: i64,
    pub last_started_collective: i64,
    pub last_completed_collective: i64,
}

#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum FrState {
    #[default]
    Scheduled,
    Started,
    Completed,
}

impl FrState {
    pub fn as_str(&self) -> &'static str {
        match self {
            FrState::Scheduled => "scheduled",
            FrState::Started => "started",
            FrState::Completed => "completed",
        }
    }
}

/// The group an entry ran on: its global name and its description.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FrPgRef {
    pub name: String,
    pub desc: String,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FrFrame {
    pub name: String,
    pub filename: String,
    pub line: i64,
}

/// One recorded op.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct FrEntry {
    pub record_id: u64,
    /// Rank-local process-group id.
    pub pg_id: u64,
    pub process_group: FrPgRef,
    pub collective_seq_id: u64,
    pub p2p_seq_id: u64,
    pub op_id: u64,
    /// e.g. `nccl:all_to_all`, `nccl:send 9->1`, `nccl:coalesced`.
    pub profiling_name: String,
    pub time_created_ns: u64,
    pub input_sizes: Vec<Vec<i64>>,
    pub input_dtypes: Vec<String>,
    pub output_sizes: Vec<Vec<i64>>,
    pub output_dtypes: Vec<String>,
    pub state: FrState,
    pub time_discovered_started_ns: Option<u64>,
    pub time_discovered_completed_ns: Option<u64>,
    pub retired: bool,
    pub timeout_ms: Option<u64>,
    pub is_p2p: bool,
    pub frames: Vec<FrFrame>,
}

impl FrEntry {
    /// Point-to-point op: flagged as such, or named send/recv (older versions lack `is_p2p`).
    pub fn is_p2p_op(&self) -> bool {
        self.is_p2p || self.p2p_kind().is_some()
    }

    /// For `nccl:send A->B` / `nccl:recv A<-B`: (is_send, self group rank, peer group rank).
    pub fn p2p_kind(&self) -> Option<(bool, u32, u32)> {
        let name = self.profiling_name.rsplit(':').next().unwrap_or("");
        let mut it = name.split_whitespace();
        let op = it.next()?;
        let arg = it.next()?;
        let (is_send, sep) = match op {
            "send" => (true, "->"),
            "recv" => (false, "<-"),
            _ => return None,
        };
        let (a, b) = arg.split_once(sep)?;
        Some((is_send, a.trim().parse().ok()?, b.trim().parse().ok()?))
    }

    /// Input sizes as `2048x5120` (several tensors separated by `, `).
    pub fn input_shape(&self) -> String {
        shapes(&self.input_sizes)
    }
}

/// Sizes as `2048x5120, 16`.
pub fn shapes(sizes: &[Vec<i64>]) -> String {
    sizes
        .iter()
        .map(|s| {
            if s.is_empty() {
                "scalar".to_string()
            } else {
                s.iter()
                    .map(|d| d.to_string())
                    .collect::<Vec<_>>()
                    .join("x")
            }
        })
        .collect::<Vec<_>>()
        .join(", ")
}
