//! What stays the same for every iteration of a job: where ranks run, which communicators
//! exist, op names, and which ranks the trace holds data for. Built once per job; each
//! iteration's digest is indexed by the rank indices defined here.

use crate::pipeline::Stages;
use flare_model::{Communicator, Component, Culprit, JobInfo, PathElement, Trace, TraceMeta};
use std::collections::HashMap;
use std::sync::OnceLock;

/// The job-level context of a diagnosis.
#[derive(Clone, Debug)]
pub struct JobContext {
    pub job: JobInfo,
    pub meta: TraceMeta,
    pub communicators: Vec<Communicator>,
    pub names: Vec<String>,
    /// Rank ids with data, in the order their digests index them (rank index -> rank).
    pub ranks: Vec<u32>,
    /// Rank id -> rank index, `u32::MAX` for ranks without data.
    index_of: Vec<u32>,
    /// Per communicator: how many of its members have data (sampled traces hold only some
    /// ranks; the others cannot be compared).
    pub comm_traced: Vec<u32>,
    /// Per rank index: the peer group ranks are compared within (the pipeline stage when
    /// the layout is known, else 0).
    pub peer_group: Vec<u32>,
    /// Per rank index: its data-parallel replica (dp rank) when the layout is known,
    /// else 0.
    pub replica: Vec<u32>,
    /// Per communicator: its size (a flat table for the digest's hot loop).
    pub comm_sizes: Vec<u32>,
    /// Per communicator: how many pods its members span. Transfers are compared only
    /// with communicators of the same span (crossing the spine is slower by design).
    pub comm_pods: Vec<u32>,
    /// Per communicator: the fabric elements its ring crosses (computed on first use).
    fabric: OnceLock<Fabric>,
    /// Communicators grouped by role (computed on first use).
    roles: OnceLock<Roles>,
    /// Where each rank runs by host name, when the source says so (live summaries); the
    /// cluster topology's dense placement otherwise.
    pub hosts: Option<RankHosts>,
    /// Each rank's pipeline stage: stated by the layout, or read from a trace's
    /// transfers when it states none.
    pub stages: Option<Stages>,
}

/// Each rank's host and local rank, by rank id, as the node agents reported them.
#[derive(Clone, Debug, Default)]
pub struct RankHosts {
    pub of_rank: HashMap<u32, (String, u32)>,
}

/// Communicators that play the same role in the job: the same kind and size, between the
/// same peer groups (stages). Their ops at the same point of an iteration are the same
/// work on different ranks.
#[derive(Clone, Debug, Default)]
pub struct Roles {
    /// Per communicator: its role.
    pub of: Vec<u32>,
    /// Per role: its communicators, by id.
    pub members: Vec<Vec<u32>>,
}

/// Where each communicator's traffic goes through the fabric.
#[derive(Clone, Debug)]
pub struct Fabric {
    /// Per communicator: the elements its ring crosses, sorted.
    pub elements: Vec<Vec<PathElement>>,
    /// Per element: the communicators that cross it, ascending.
    pub crossing: HashMap<PathElement, Vec<u32>>,
}

impl JobContext {
    /// The context of a trace: its job, communicators, names and the ranks it holds.
    pub fn from_trace(trace: &Trace) -> Self {
        let ranks: Vec<u32> = trace.ranks.iter().map(|r| r.rank).collect();
        let mut ctx = Self::new(
            trace.job.clone(),
            trace.meta.clone(),
            trace.communicators.clone(),
            trace.names.clone(),
            ranks,
        );
        if ctx.stages.is_none() && trace.job.parallel.is_none() {
            ctx.stages = crate::pipeline::infer(&ctx.ranks, &crate::pipeline::links_of(trace));
        }
        ctx
    }

    pub fn new(
        job: JobInfo,
        meta: TraceMeta,
        communicators: Vec<Communicator>,
        names: Vec<String>,
        ranks: Vec<u32>,
    ) -> Self {
        let top = ranks
            .iter()
            .copied()
            .max()
            .map_or(0, |m| m as usize + 1)
            .max(job.world_size as usize);
        let mut index_of = vec![u32::MAX; top];
        for (i, &r) in ranks.iter().enumerate() {
            // A rank listed twice keeps its first index; the importers never emit that.
            if index_of[r as usize] == u32::MAX {
                index_of[r as usize] = i as u32;
            }
        }
        let comm_traced = communicators
            .iter()
            .map(|c| {
                c.members
                    .iter()
                    .filter(|&&m| index_of.get(m as usize).is_some_and(|&i| i != u32::MAX))
                    .count() as u32
            })
            .collect();
        let coords = |f: fn(flare_model::RankCoords) -> u32| -> Vec<u32> {
            ranks
                .iter()
                .map(|&r| job.parallel.as_ref().map_or(0, |p| f(p.coords(r))))
                .collect()
        };
        let (peer_group, replica) = (coords(|c| c.pp), coords(|c| c.dp));
        let stages = job
            .parallel
            .as_ref()
            .and_then(|p| Stages::from_layout(p, &ranks));
        let comm_sizes = communicators
            .iter()
            .map(|c| c.members.len() as u32)
            .collect();
        let comm_pods = communicators
            .iter()
            .map(|c| {
                let mut pods: Vec<u32> = c
                    .members
                    .iter()
                    .map(|&m| job.cluster.pod_of(job.cluster.loc(m).node))
                    .collect();
                pods.sort_unstable();
                pods.dedup();
                pods.len() as u32
            })
            .collect();
        JobContext {
            job,
            meta,
            communicators,
            names,
            ranks,
            index_of,
            comm_traced,
            peer_group,
            replica,
            comm_sizes,
            comm_pods,
            fabric: OnceLock::new(),
            roles: OnceLock::new(),
            hosts: None,
            stages,
        }
    }

    /// The communicators grouped by role.
    pub fn roles(&self) -> &Roles {
        self.roles.get_or_init(|| {
            let mut keys: HashMap<(u8, usize, u32, u32), u32> = HashMap::new();
            let mut roles = Roles::default();
            let group_of = |r: u32| {
                self.job.parallel.as_ref().map_or(0, |p| {
                    if r < p.world_size() {
                        p.coords(r).pp
                    } else {
                        0
                    }
                })
            };
            for (id, c) in self.communicators.iter().enumerate() {
                let first = c.members.first().map_or(0, |&r| group_of(r));
                let last = c.members.last().map_or(0, |&r| group_of(r));
                let key = (c.kind as u8, c.members.len(), first, last);
                let next = keys.len() as u32;
                let role = *keys.entry(key).or_insert(next);
                if role as usize == roles.members.len() {
                    roles.members.push(Vec::new());
                }
                roles.members[role as usize].push(id as u32);
                roles.of.push(role);
            }
            roles
        })
    }

    /// The fabric elements each communicator crosses (its ring, both directions), and
    /// the communicators crossing each element. A job without GPUs (its communication
    /// read from the CPU side, Gloo) moves data within a node through host memory (shared
    /// memory or loopback TCP), not NVLink: it crosses no NVLink.
    pub fn fabric(&self) -> &Fabric {
        self.fabric.get_or_init(|| {
            let cluster = &self.job.cluster;
            let mut buf = Vec::new();
            let mut crossing: HashMap<PathElement, Vec<u32>> = HashMap::new();
            let elements = self
                .communicators
                .iter()
                .enumerate()
                .map(|(id, c)| {
                    let mut set: Vec<PathElement> = Vec::new();
                    let n = c.members.len();
                    for i in 0..n {
                        let (x, y) = (
                            cluster.loc(c.members[i]),
                            cluster.loc(c.members[(i + 1) % n]),
                        );
                        cluster.path(x, y, &mut buf);
                        set.extend(buf.iter().copied());
                        cluster.path(y, x, &mut buf);
                        set.extend(buf.iter().copied());
                    }
                    if self.meta.cpu_compute {
                        set.retain(|e| !matches!(e, PathElement::NvLink { .. }));
                    }
                    set.sort_unstable();
                    set.dedup();
                    for e in &set {
                        crossing.entry(*e).or_default().push(id as u32);
                    }
                    set
                })
                .collect();
            Fabric { elements, crossing }
        })
    }

    pub fn n_ranks(&self) -> usize {
        self.ranks.len()
    }

    /// The rank index of a rank id, when the trace holds data for it.
    pub fn rank_index(&self, rank: u32) -> Option<usize> {
        self.index_of
            .get(rank as usize)
            .filter(|&&i| i != u32::MAX)
            .map(|&i| i as usize)
    }

    pub fn name(&self, id: u32) -> &str {
        self.names
            .get(id as usize)
            .map(String::as_str)
            .unwrap_or("?")
    }

    /// Members a communicator has (0 for an unknown id).
    pub fn comm_size(&self, comm: u32) -> u32 {
        self.communicators
            .get(comm as usize)
            .map_or(0, |c| c.members.len() as u32)
    }

    /// A culprit for one rank, with its place in the cluster and the job.
    pub fn rank_culprit(&self, component: Component, rank: u32) -> Culprit {
        if let Some((host, local)) = self.hosts.as_ref().and_then(|h| h.of_rank.get(&rank)) {
            let mut c = Culprit::new(component);
            c.rank = Some(rank);
            // A local rank is a GPU slot only where the job runs on GPUs.
            c.local_gpu = (!self.meta.cpu_compute).then_some(*local);
            c.element = Some(host.clone());
            return c;
        }
        let mut c = Culprit::at_rank(
            component,
            rank,
            &self.job.cluster,
            self.job.parallel.as_ref(),
        );
        if self.meta.cpu_compute {
            // No GPU: the rank's slot on its node is not a GPU.
            c.local_gpu = None;
        }
        c
    }
}
