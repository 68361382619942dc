//! The window the detectors look at: the job context and the digests of the window's
//! iterations, in order.

use crate::context::JobContext;
use crate::digest::{IterationDigest, RankIteration};

pub struct Analysis<'a> {
    pub ctx: &'a JobContext,
    pub digests: Vec<&'a IterationDigest>,
    /// Iteration numbers, one per digest.
    pub iterations: Vec<u32>,
    /// Duration of each iteration (median over ranks of their own span), ns.
    pub iteration_ns: Vec<Option<f64>>,
    /// The job's machine metrics, when given.
    pub machine: Option<&'a flare_model::MachineMetrics>,
    /// The live window being diagnosed, when the digests come from agent summaries (its
    /// watchdog records are read directly).
    pub live: Option<&'a crate::live::LiveWindow>,
    /// The ranks' start-up phases, when the live window (or one shortly before) carries
    /// them.
    pub startup: Option<&'a crate::detectors::startup::StartupView>,
    /// Per-rank metrics, computed on first use (several detectors and the diagnosis read
    /// them).
    metrics: std::sync::OnceLock<Vec<crate::detectors::metrics::RankMetrics>>,
    replica_loads: std::sync::OnceLock<crate::detectors::imbalance::ReplicaLoads>,
    transfers: std::sync::OnceLock<CommTransfers>,
}

/// Each communicator's transfer ratios over the window (see
/// [`IterationDigest::comm_transfer`]), communicator by communicator: the path detectors
/// read them per communicator, the digests hold them per iteration.
#[derive(Debug, Default)]
pub struct CommTransfers {
    /// Per known communicator, where its entries start in `entries`; one more at the end.
    start: Vec<u32>,
    /// (iteration index, ratio), in iteration order within a communicator.
    entries: Vec<(u32, f32)>,
}

impl CommTransfers {
    fn new(n_comms: usize, digests: &[&IterationDigest]) -> Self {
        let mut start = vec![0u32; n_comms + 1];
        for d in digests {
            for &(c, _) in d
                .comm_transfer
                .iter()
                .filter(|(c, _)| (*c as usize) < n_comms)
            {
                start[c as usize + 1] += 1;
            }
        }
        for c in 1..start.len() {
            start[c] += start[c - 1];
        }
        let mut fill = start.clone();
        let mut entries = vec![(0u32, 0f32); start[n_comms] as usize];
        for (i, d) in digests.iter().enumerate() {
            for &(c, r) in d
                .comm_transfer
                .iter()
                .filter(|(c, _)| (*c as usize) < n_comms)
            {
                let k = &mut fill[c as usize];
                entries[*k as usize] = (i as u32, r);
                *k += 1;
            }
        }
        CommTransfers { start, entries }
    }

    /// One communicator's (iteration index, ratio) entries; empty when it has none or is
    /// not one of the job's.
    pub fn of(&self, comm: u32) -> &[(u32, f32)] {
        match (
            self.start.get(comm as usize),
            self.start.get(comm as usize + 1),
        ) {
            (Some(&a), Some(&b)) => &self.entries[a as usize..b as usize],
            _ => &[],
        }
    }

    /// Communicators with entries, ascending.
    pub fn comms(&self) -> impl Iterator<Item = u32> + '_ {
        self.start
            .windows(2)
            .enumerate()
            .filter(|(_, w)| w[1] > w[0])
            .map(|(c, _)| c as u32)
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

impl<'a> Analysis<'a> {
    pub fn new(ctx: &'a JobContext, digests: Vec<&'a IterationDigest>) -> Self {
        let iterations = digests.iter().map(|d| d.iteration).collect();
        let iteration_ns = digests.iter().map(|d| d.duration_ns).collect();
        Analysis {
            ctx,
            digests,
            iterations,
            iteration_ns,
            machine: None,
            live: None,
            startup: None,
            metrics: std::sync::OnceLock::new(),
            replica_loads: std::sync::OnceLock::new(),
            transfers: std::sync::OnceLock::new(),
        }
    }

    /// Every rank's metrics over the window (see [`crate::detectors::metrics`]).
    pub fn rank_metrics(&self) -> &[crate::detectors::metrics::RankMetrics] {
        self.metrics
            .get_or_init(|| crate::detectors::metrics::rank_metrics(self))
    }

    /// Per iteration, each data-parallel replica's compute load, computed on first use.
    pub fn replica_loads(&self) -> &crate::detectors::imbalance::ReplicaLoads {
        self.replica_loads
            .get_or_init(|| crate::detectors::imbalance::ReplicaLoads::compute(self))
    }

    /// Each communicator's transfer ratios over the window, gathered on first use.
    pub fn comm_transfers(&self) -> &CommTransfers {
        self.transfers
            .get_or_init(|| CommTransfers::new(self.ctx.communicators.len(), &self.digests))
    }

    pub fn n_its(&self) -> usize {
        self.digests.len()
    }

    pub fn n_ranks(&self) -> usize {
        self.ctx.n_ranks()
    }

    pub fn iteration_index(&self, it: u32) -> Option<usize> {
        self.iterations.binary_search(&it).ok()
    }

    /// One rank's figures in one iteration (by indices).
    pub fn rank(&self, rank_index: usize, it_index: usize) -> &RankIteration {
        &self.digests[it_index].ranks[rank_index]
    }

    /// Relative self excess of a rank in an iteration (NaN when unknown).
    pub fn relative_excess(&self, rank_index: usize, it_index: usize) -> f64 {
        self.digests[it_index].self_time[rank_index].relative()
    }

    /// Rank id of a rank index.
    pub fn rank_id(&self, rank_index: usize) -> u32 {
        self.ctx.ranks[rank_index]
    }
}
