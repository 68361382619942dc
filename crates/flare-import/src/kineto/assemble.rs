//! Turning the parsed files of a job into one trace: ranks and world size, one name table,
//! communicators deduplicated across files, then each rank's ops and iterations.

use super::names::{self, RankList};
use super::parse::{KernelRec, NcclArgs, ParsedFile, PgConfig, StepIndex};
use super::{KinetoError, KinetoImportStats, KinetoOptions, MAX_WORLD_SIZE};
use flare_model::trace::NameTable;
use flare_model::{
    CallSums, ClusterTopology, Communicator, GroupKind, HostCallCount, HostCallKind, HostCalls,
    IterationSpan, JobInfo, Op, OpKind, RankTrace, Trace, TraceMeta,
};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::Path;

/// Identity of a communicator across files: its process group name and members.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
struct CommKey {
    name: String,
    members: Vec<u32>,
}

/// What the files say about a communicator besides its identity.
#[derive(Debug, Default)]
struct CommInfo {
    desc: Option<String>,
    kind_hint: Option<GroupKind>,
    /// Made up by Flare: the trace did not say which group the kernels ran on.
    synthetic: bool,
    /// One direction of CPU-side P2P messages between two ranks of a group.
    p2p_channel: bool,
}

/// An NCCL kernel's kind and communicator.
struct SyncInfo {
    kind: OpKind,
    key: CommKey,
    /// The global rank of a P2P op's peer, when the importer worked it out.
    peer: Option<u32>,
}

/// The communicators of the job, as they are discovered.
#[derive(Default)]
struct Comms {
    infos: HashMap<CommKey, CommInfo>,
    by_pg_name: HashMap<String, CommKey>,
}

/// The communicators, numbered.
struct NumberedComms {
    list: Vec<Communicator>,
    ids: HashMap<CommKey, u32>,
    infos: HashMap<CommKey, CommInfo>,
}

/// Turns parsed files into one trace.
pub(super) fn assemble(
    files: Vec<ParsedFile>,
    opts: &KinetoOptions,
    job_id: String,
) -> Result<(Trace, KinetoImportStats), KinetoError> {
    let mut stats = KinetoImportStats {
        files: files.len(),
        ..Default::default()
    };
    let (ranks, world_size) = ranks_and_world(&files)?;
    let mut present = ranks.clone();
    present.sort_unstable();

    let mut names = NameTable::default();
    let name_maps: Vec<Vec<u32>> = files
        .iter()
        .map(|f| f.names.names.iter().map(|n| names.intern(n)).collect())
        .collect();

    let mut comms = Comms::default();
    comms.add_pg_configs(&files, world_size)?;
    let sync_infos: Vec<Vec<Option<SyncInfo>>> = files
        .iter()
        .zip(&ranks)
        .map(|(f, &rank)| comms.add_kernels(f, rank, world_size, &present, &mut stats))
        .collect::<Result<_, _>>()?;
    let comms = comms.number(world_size, &mut stats);

    let mut rank_traces = Vec::with_capacity(files.len());
    for (fi, f) in files.iter().enumerate() {
        add_file_stats(&mut stats, f);
        rank_traces.push(rank_trace(
            f,
            ranks[fi],
            &name_maps[fi],
            &sync_infos[fi],
            &comms,
            &mut stats,
        )?);
    }
    rank_traces.sort_by_key(|r| r.rank);
    end_sends_at_receipt(&mut rank_traces, &comms);

    let present_set: BTreeSet<u32> = present.iter().copied().collect();
    let missing_ranks: Vec<u32> = (0..world_size)
        .filter(|r| !present_set.contains(r))
        .collect();
    let detail = if files.len() <= 8 {
        files
            .iter()
            .map(|f| f.path.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    } else {
        format!("{} files, first {}", files.len(), files[0].path)
    };
    // No file had a GPU kernel: its compute is CPU work.
    let cpu_compute = files.iter().all(|f| f.kernels.iter().all(|k| k.cpu_side))
        && files.iter().any(|f| !f.kernels.is_empty());
    let trace = Trace {
        meta: TraceMeta {
            source: "kineto".into(),
            detail,
            missing_ranks,
            cpu_compute,
            notes: Vec::new(),
            host_calls: Default::default(),
        },
        job: JobInfo {
            job_id,
            world_size,
            cluster: ClusterTopology::for_world(world_size, opts.gpus_per_node, opts.nodes_per_pod),
            parallel: None,
            microbatches: None,
        },
        communicators: comms.list,
        names: names.names,
        ranks: rank_traces,
    };
    let mut trace = trace;
    trace.meta.notes = stats.notes();
    trace.meta.host_calls = host_calls(&files);
    Ok((trace, stats))
}

/// The files' host calls (each file's counted per name and iteration by its own steps)
/// and where they were made, summed over the files.
fn host_calls(files: &[ParsedFile]) -> HostCalls {
    type Key<'a> = (HostCallKind, &'a str, u32, Option<&'a str>);
    let mut counts: BTreeMap<Key, CallSums> = BTreeMap::new();
    let mut sites: BTreeMap<&str, BTreeMap<&str, u64>> = BTreeMap::new();
    for f in files {
        for c in &f.host_calls {
            let key = (c.kind, c.name.as_str(), c.iteration, c.dtype.as_deref());
            counts.entry(key).or_default().add(c.sums());
        }
        for s in &f.call_sites {
            let into = sites.entry(s.name.as_str()).or_default();
            for (site, n) in &s.sites {
                *into.entry(site.as_str()).or_default() += n;
            }
        }
    }
    HostCalls {
        counts: counts
            .into_iter()
            .map(|((kind, name, iteration, dtype), sums)| {
                HostCallCount::new(
                    kind,
                    name.to_string(),
                    iteration,
                    dtype.map(str::to_string),
                    sums,
                )
            })
            .collect(),
        sites: sites
            .into_iter()
            .map(|(name, by_site)| {
                super::host_calls::call_sites(
                    name,
                    by_site.into_iter().map(|(s, n)| (s.to_string(), n)),
                )
            })
            .collect(),
    }
}

/// Each file's rank (from `distributedInfo.rank`, else the file name) and the world size
/// (from `distributedInfo.world_size`, which the files must agree on, else inferred).
fn ranks_and_world(files: &[ParsedFile]) -> Result<(Vec<u32>, u32), KinetoError> {
    let mut ranks: Vec<u32> = Vec::with_capacity(files.len());
    let mut by_rank: HashMap<u32, usize> = HashMap::new();
    for (i, f) in files.iter().enumerate() {
        let rank = match f.rank {
            Some(r) => u32::try_from(r).map_err(|_| KinetoError::Invalid {
                path: f.path.clone(),
                what: format!("distributedInfo.rank is {r}, expected a rank below 2^32"),
            })?,
            None => {
                let file_name = Path::new(&f.path)
                    .file_name()
                    .map(|s| s.to_string_lossy().to_string())
                    .unwrap_or_default();
                names::rank_from_file_name(&file_name).map_err(|detail| KinetoError::NoRank {
                    path: f.path.clone(),
                    detail,
                })?
            }
        };
        if let Some(&j) = by_rank.get(&rank) {
            return Err(KinetoError::DuplicateRank {
                rank,
                first: files[j].path.clone(),
                second: f.path.clone(),
            });
        }
        by_rank.insert(rank, i);
        ranks.push(rank);
    }

    let mut stated: Option<(u64, usize)> = None;
    for (i, f) in files.iter().enumerate() {
        if let Some(w) = f.world_size {
            match stated {
                Some((w0, j)) if w0 != w => {
                    return Err(KinetoError::WorldSizeMismatch {
                        path: f.path.clone(),
                        found: w,
                        other_path: files[j].path.clone(),
                        other: w0,
                    })
                }
                None => stated = Some((w, i)),
                _ => {}
            }
        }
    }
    let max_rank = ranks.iter().copied().max().unwrap_or(0) as u64;
    let world = match stated {
        Some((w, j)) => {
            if w == 0 || w > MAX_WORLD_SIZE {
                return Err(KinetoError::Invalid {
                    path: files[j].path.clone(),
                    what: format!(
                        "distributedInfo.world_size is {w}, expected 1 to {MAX_WORLD_SIZE}"
                    ),
                });
            }
            w
        }
        None => {
            let w = inferred_world(files, max_rank);
            if w > MAX_WORLD_SIZE {
                return Err(KinetoError::Invalid {
                    path: files[0].path.clone(),
                    what: format!(
                        "the files imply a world of {w} ranks (no distributedInfo.world_size), more than the {MAX_WORLD_SIZE} supported"
                    ),
                });
            }
            w
        }
    };
    for (f, &r) in files.iter().zip(&ranks) {
        if r as u64 >= world {
            return Err(KinetoError::Invalid {
                path: f.path.clone(),
                what: format!("rank {r} is not below the world size {world}"),
            });
        }
    }
    Ok((ranks, world as u32))
}

impl Comms {
    /// The groups `distributedInfo.pg_config` lists with their members.
    fn add_pg_configs(&mut self, files: &[ParsedFile], world: u32) -> Result<(), KinetoError> {
        for f in files {
            for pg in &f.pg_config {
                let Some(members) = pg_members(pg, world) else {
                    continue;
                };
                check_members(&members, world, &f.path, "distributedInfo.pg_config")?;
                let key = CommKey {
                    name: pg.name.clone(),
                    members,
                };
                let info = self.infos.entry(key.clone()).or_default();
                if info.desc.is_none() {
                    info.desc = pg.desc.clone();
                }
                if info.kind_hint.is_none() {
                    info.kind_hint = pg
                        .kind_hint
                        .as_deref()
                        .and_then(names::group_kind_from_text)
                        .or_else(|| pg.desc.as_deref().and_then(names::group_kind_from_text));
                }
                self.by_pg_name.entry(pg.name.clone()).or_insert(key);
            }
        }
        Ok(())
    }

    /// The kind and communicator of each NCCL kernel of `f` (`None` for other kernels and
    /// for NCCL kernels whose kind cannot be told), registering new communicators.
    fn add_kernels(
        &mut self,
        f: &ParsedFile,
        rank: u32,
        world: u32,
        present: &[u32],
        stats: &mut KinetoImportStats,
    ) -> Result<Vec<Option<SyncInfo>>, KinetoError> {
        let mut out = Vec::with_capacity(f.kernels.len());
        for k in &f.kernels {
            let Some(args) = k.nccl.as_deref() else {
                out.push(None);
                continue;
            };
            let kernel_name = &f.names.names[k.name as usize];
            let kind = args
                .collective
                .as_deref()
                .and_then(names::kind_from_collective)
                .or_else(|| names::kind_from_kernel(kernel_name));
            let Some(kind) = kind else {
                stats.nccl_unrecognised += 1;
                out.push(None);
                continue;
            };
            let (key, synthetic) = match known_comm(args, f, &self.by_pg_name, world) {
                Some(key) => (key, false),
                // A CPU-side collective of a rank in several groups that does not say
                // which: guessing would mix instances of different groups.
                None if k.cpu_side => {
                    stats.cpu_collectives_unattributed += 1;
                    out.push(None);
                    continue;
                }
                None => (
                    CommKey {
                        name: format!("unknown:{}", kind.as_str()),
                        members: present.to_vec(),
                    },
                    true,
                ),
            };
            let place = format!("traceEvents[{}] (\"{kernel_name}\")", k.index);
            check_members(&key.members, world, &f.path, &place)?;
            let mut peer = None;
            let key = if k.cpu_side && kind.is_p2p() {
                // A CPU-side send or receive (Gloo) is one message between two ranks of the
                // group; messages from one rank to another arrive in the order they were
                // sent. Each direction is its own channel, the k-th send matching the k-th
                // receive, whatever the other direction does meanwhile (1F1B interleaves
                // them differently on the two sides).
                let Some(p) = args
                    .group_peer
                    .and_then(|p| key.members.get(usize::try_from(p).ok()?).copied())
                    .filter(|&p| p != rank)
                else {
                    stats.cpu_p2p_without_peer += 1;
                    out.push(None);
                    continue;
                };
                peer = Some(p);
                let (src, dst) = if kind == OpKind::Send {
                    (rank, p)
                } else {
                    (p, rank)
                };
                let group = match self.infos.get(&key).and_then(|i| i.desc.as_deref()) {
                    Some(d) if !d.is_empty() && d != "undefined" => d.to_string(),
                    _ => format!("pg {}", key.name),
                };
                let channel = CommKey {
                    name: format!("{}:p2p:{src}->{dst}", key.name),
                    members: vec![src, dst],
                };
                let info = self.infos.entry(channel.clone()).or_default();
                info.p2p_channel = true;
                if info.desc.is_none() {
                    info.desc = Some(format!("{group}: p2p {src}->{dst}"));
                }
                channel
            } else {
                key
            };
            let info = self.infos.entry(key.clone()).or_default();
            info.synthetic |= synthetic;
            if info.desc.is_none() {
                info.desc = args.pg_desc.clone();
            }
            if info.kind_hint.is_none() {
                info.kind_hint = args
                    .pg_desc
                    .as_deref()
                    .and_then(names::group_kind_from_text);
            }
            out.push(Some(SyncInfo { kind, key, peer }));
        }
        Ok(out)
    }

    /// Numbers the communicators: numeric process group names in order (so that Flare's
    /// own files, which name groups by id, keep their ids), then other names, then
    /// synthetic ones; ties by member list.
    fn number(self, world: u32, stats: &mut KinetoImportStats) -> NumberedComms {
        let mut keys: Vec<&CommKey> = self.infos.keys().collect();
        keys.sort_by(|a, b| comm_order(a).cmp(&comm_order(b)));
        let mut list = Vec::with_capacity(keys.len());
        let mut ids: HashMap<CommKey, u32> = HashMap::with_capacity(keys.len());
        for key in keys {
            let info = &self.infos[key];
            let id = list.len() as u32;
            let kind = if is_world(&key.members, world) {
                GroupKind::World
            } else {
                info.kind_hint.unwrap_or(GroupKind::Other)
            };
            let label = match info.desc.as_deref() {
                Some(d) if !d.is_empty() && d != "undefined" => d.to_string(),
                _ if key.name.is_empty() => "unnamed process group".to_string(),
                _ if key.name.starts_with("unknown:") => key.name.clone(),
                _ => format!("pg {}", key.name),
            };
            if info.synthetic {
                stats.synthetic_communicators += 1;
            }
            list.push(Communicator {
                id,
                kind,
                members: key.members.clone(),
                label,
            });
            ids.insert(key.clone(), id);
        }
        NumberedComms {
            list,
            ids,
            infos: self.infos,
        }
    }
}

fn add_file_stats(stats: &mut KinetoImportStats, f: &ParsedFile) {
    stats.events += f.stats.events;
    stats.kernels += f.stats.kernels;
    stats.nccl_kernels += f.stats.nccl_kernels;
    stats.kernels_without_duration += f.stats.kernels_without_duration;
    stats.profiler_steps += f.stats.profiler_steps;
    stats.launch_calls += f.stats.launches;
    stats.runtime_host_calls += f.stats.runtime_host_calls;
    stats.nccl_args_from_param_comms += f.stats.args_from_param_comms;
    stats.kernel_flops_from_gemm_ops += f.stats.flops_from_gemm_ops;
    stats.other_comm_kernels += f.stats.other_comm_kernels;
    stats.other_comm_kernels_unknown += f.stats.other_comm_kernels_unknown;
    stats.cpu_collectives += f.stats.cpu_collectives;
    stats.cpu_compute_spans += f.stats.cpu_compute_spans;
    stats.cpu_launches_without_work += f.stats.cpu_launches_without_work;
    for (cat, n) in &f.stats.skipped {
        *stats.skipped.entry(cat.clone()).or_insert(0) += n;
    }
}

/// One rank's ops and iterations.
fn rank_trace(
    f: &ParsedFile,
    rank: u32,
    name_map: &[u32],
    sync_infos: &[Option<SyncInfo>],
    comms: &NumberedComms,
    stats: &mut KinetoImportStats,
) -> Result<RankTrace, KinetoError> {
    let mut steps = f.steps.clone();
    steps.sort_by_key(|s| s.start);
    let index = StepIndex { steps: &steps };

    let mut ops: Vec<Op> = Vec::with_capacity(f.kernels.len() + f.hosts.len());
    let mut order: Vec<usize> = (0..f.kernels.len()).collect();
    order.sort_by_key(|&i| f.kernels[i].start);
    let mut ordinals: HashMap<u32, u32> = HashMap::new();
    for i in order {
        let k = &f.kernels[i];
        let sync = sync_infos.get(i).and_then(Option::as_ref);
        if k.cpu_side && k.nccl.is_some() && sync.is_none() {
            // A CPU-side collective of an unknown group (counted): not an op.
            continue;
        }
        ops.push(kernel_op(
            f,
            k,
            rank,
            name_map,
            sync,
            comms,
            &index,
            &mut ordinals,
            stats,
        )?);
    }

    // Host phases, with nested spans of the same kind merged into their parent.
    let mut hosts = f.hosts.clone();
    hosts.sort_by(|a, b| a.start.cmp(&b.start).then(b.end.cmp(&a.end)));
    let mut open_end: HashMap<OpKind, i64> = HashMap::new();
    for h in hosts {
        if open_end.get(&h.kind).is_some_and(|&end| h.end <= end) {
            stats.nested_host_spans += 1;
            continue;
        }
        open_end.insert(h.kind, h.end);
        stats.host_ops += 1;
        ops.push(Op {
            kind: h.kind,
            name: name_map[h.name as usize],
            iteration: index.iteration_at(h.start),
            comm: Op::NO_COMM,
            seq: 0,
            peer: Op::NO_PEER,
            start_ns: h.start,
            end_ns: h.end,
            // The CPU runs a host phase itself: it is issued when it starts.
            issue_ns: h.start,
            amount: 0,
        });
    }
    ops.sort_by_key(|o| o.start_ns);

    let iterations: Vec<IterationSpan> = if steps.is_empty() {
        stats.ranks_without_steps += 1;
        match (ops.first(), ops.iter().filter_map(Op::end).max()) {
            (Some(first), end) => vec![IterationSpan {
                iteration: 0,
                start_ns: first.start_ns,
                end_ns: end,
            }],
            (None, _) => Vec::new(),
        }
    } else {
        steps
            .iter()
            .map(|s| IterationSpan {
                iteration: s.iteration,
                start_ns: s.start,
                end_ns: s.end,
            })
            .collect()
    };
    Ok(RankTrace {
        rank,
        ops,
        iterations,
    })
}

/// The op of one kernel: compute, or a sync op when `sync` says which.
#[allow(clippy::too_many_arguments)]
fn kernel_op(
    f: &ParsedFile,
    k: &KernelRec,
    rank: u32,
    name_map: &[u32],
    sync: Option<&SyncInfo>,
    comms: &NumberedComms,
    index: &StepIndex<'_>,
    ordinals: &mut HashMap<u32, u32>,
    stats: &mut KinetoImportStats,
) -> Result<Op, KinetoError> {
    let issue = k
        .issue
        .or_else(|| k.correlation.and_then(|c| f.launches.get(&c)).map(|l| l.ts));
    if issue.is_none() {
        stats.kernels_without_launch += 1;
    }
    let mut op = Op {
        kind: OpKind::Compute,
        name: name_map[k.name as usize],
        iteration: index.iteration_at(issue.unwrap_or(k.start)),
        comm: Op::NO_COMM,
        seq: 0,
        peer: Op::NO_PEER,
        start_ns: k.start,
        end_ns: k.end.unwrap_or(Op::IN_FLIGHT),
        issue_ns: issue.unwrap_or(Op::UNKNOWN),
        amount: k.flops,
    };
    if let (Some(args), Some(sync)) = (k.nccl.as_deref(), sync) {
        let comm = comms.ids[&sync.key];
        let ordinal = ordinals.entry(comm).or_insert(0);
        op.seq = match args.seq {
            Some(s) => u32::try_from(s).map_err(|_| KinetoError::Invalid {
                path: f.path.clone(),
                what: format!(
                    "traceEvents[{}]: Seq is {s}, expected a sequence number below 2^32",
                    k.index
                ),
            })?,
            None => *ordinal,
        };
        *ordinal += 1;
        op.kind = sync.kind;
        op.comm = comm;
        op.amount = nccl_bytes(args);
        op.peer = sync.peer.unwrap_or_else(|| {
            peer_of(
                args,
                sync.kind,
                &comms.list[comm as usize],
                rank,
                &comms.infos[&sync.key],
            )
        });
    }
    Ok(op)
}

/// A CPU-side send (Gloo) is buffered: its span closes when the sender's program waits for
/// it, which may be long after the receiver got the data (pipelining waits for its sends
/// in batches). The exchange itself ended when the receiver's receive did: a send ends
/// then at the latest, so that its span does not stretch the transfer by the sender's
/// own later work.
fn end_sends_at_receipt(ranks: &mut [RankTrace], comms: &NumberedComms) {
    let channels: BTreeSet<u32> = comms
        .ids
        .iter()
        .filter(|(key, _)| comms.infos.get(*key).is_some_and(|i| i.p2p_channel))
        .map(|(_, &id)| id)
        .collect();
    if channels.is_empty() {
        return;
    }
    let mut receipt: HashMap<(u32, u32), i64> = HashMap::new();
    for r in ranks.iter() {
        for o in &r.ops {
            if o.kind == OpKind::Recv && channels.contains(&o.comm) {
                if let Some(end) = o.end() {
                    receipt.insert((o.comm, o.seq), end);
                }
            }
        }
    }
    for r in ranks.iter_mut() {
        for o in &mut r.ops {
            if o.kind == OpKind::Send && channels.contains(&o.comm) {
                if let Some(&end) = receipt.get(&(o.comm, o.seq)) {
                    if o.end_ns == Op::IN_FLIGHT || end < o.end_ns {
                        o.end_ns = end.max(o.start_ns);
                    }
                }
            }
        }
    }
}

/// A world size for traces that do not state one: large enough for every rank, every
/// process group member and every group size the files mention.
fn inferred_world(files: &[ParsedFile], max_rank: u64) -> u64 {
    let mut w = max_rank + 1;
    let list_max = |l: &Option<RankList>| match l {
        Some(RankList::Complete(m)) => m.iter().map(|&r| r as u64 + 1).max().unwrap_or(0),
        _ => 0,
    };
    for f in files {
        for pg in &f.pg_config {
            w = w.max(list_max(&pg.ranks)).max(pg.size.unwrap_or(0));
        }
        for a in f.kernels.iter().filter_map(|k| k.nccl.as_deref()) {
            w = w.max(list_max(&a.pg_ranks)).max(a.group_size.unwrap_or(0));
            if let (Some(start), Some(stride), Some(size)) =
                (a.global_start, a.global_stride, a.group_size)
            {
                let last = stride
                    .checked_mul(size.saturating_sub(1))
                    .and_then(|x| x.checked_add(start));
                w = w.max(last.map_or(0, |l| l.saturating_add(1)));
            }
        }
    }
    w
}

/// Whether `members` is every rank of the world, in any order.
fn is_world(members: &[u32], world: u32) -> bool {
    if members.len() != world as usize {
        return false;
    }
    let mut seen = vec![false; world as usize];
    for &m in members {
        match seen.get_mut(m as usize) {
            Some(s) if !*s => *s = true,
            _ => return false,
        }
    }
    true
}

/// Sort key of communicators: numeric names by value, then other names, then synthetic.
fn comm_order(k: &CommKey) -> (u8, u64, &str, &[u32]) {
    if k.name.starts_with("unknown:") {
        (2, 0, &k.name, &k.members)
    } else if let Ok(n) = k.name.parse::<u64>() {
        (0, n, "", &k.members)
    } else {
        (1, 0, &k.name, &k.members)
    }
}

/// The members `pg_config` gives for a group, when it gives them all.
fn pg_members(pg: &PgConfig, world: u32) -> Option<Vec<u32>> {
    match &pg.ranks {
        Some(RankList::Complete(m)) if !m.is_empty() => Some(m.clone()),
        // The default group is sometimes listed with no ranks: a group as large as the
        // world holds every rank.
        _ if pg.size == Some(world as u64) => Some((0..world).collect()),
        _ => None,
    }
}

/// The communicator the kernel's arguments or `pg_config` identify, if any.
fn known_comm(
    args: &NcclArgs,
    f: &ParsedFile,
    pg_by_name: &HashMap<String, CommKey>,
    world: u32,
) -> Option<CommKey> {
    let name = args.pg_name.clone().unwrap_or_default();
    // 1. The full rank list on the kernel.
    if let Some(RankList::Complete(m)) = &args.pg_ranks {
        if !m.is_empty() {
            return Some(CommKey {
                name,
                members: m.clone(),
            });
        }
    }
    // 2. The group of that name in pg_config (this file's, then any file's).
    if let Some(n) = &args.pg_name {
        let here = f
            .pg_config
            .iter()
            .find(|p| &p.name == n)
            .and_then(|p| pg_members(p, world))
            .map(|members| CommKey {
                name: n.clone(),
                members,
            });
        if let Some(key) = here.or_else(|| pg_by_name.get(n).cloned()) {
            return Some(key);
        }
    }
    // 3. A strided group: start, stride and size.
    if let (Some(start), Some(stride), Some(size)) =
        (args.global_start, args.global_stride, args.group_size)
    {
        if size >= 1 && size <= world as u64 && stride >= 1 {
            let last = stride
                .checked_mul(size - 1)
                .and_then(|x| x.checked_add(start));
            if last.is_some_and(|l| l < world as u64) {
                return Some(CommKey {
                    name,
                    members: (0..size).map(|i| (start + i * stride) as u32).collect(),
                });
            }
        }
    }
    // 4. A group as large as the world holds every rank.
    if args.group_size == Some(world as u64) {
        return Some(CommKey {
            name,
            members: (0..world).collect(),
        });
    }
    // 5. The only group of pg_config with that size (or the only group, size unknown).
    let candidates: Vec<&PgConfig> = match args.group_size {
        Some(size) => f
            .pg_config
            .iter()
            .filter(|p| p.size == Some(size))
            .collect(),
        None => f.pg_config.iter().collect(),
    };
    if let [only] = candidates.as_slice() {
        if let Some(members) = pg_members(only, world) {
            return Some(CommKey {
                name: only.name.clone(),
                members,
            });
        }
    }
    None
}

fn check_members(members: &[u32], world: u32, path: &str, place: &str) -> Result<(), KinetoError> {
    let mut seen = BTreeSet::new();
    for &m in members {
        if m >= world {
            return Err(KinetoError::Invalid {
                path: path.to_string(),
                what: format!(
                    "{place}: process group lists rank {m}, but the world size is {world}"
                ),
            });
        }
        if !seen.insert(m) {
            return Err(KinetoError::Invalid {
                path: path.to_string(),
                what: format!("{place}: process group lists rank {m} twice"),
            });
        }
    }
    Ok(())
}

/// Bytes this rank sends: input elements times the element size, when both are known.
fn nccl_bytes(args: &NcclArgs) -> u64 {
    match (
        args.in_nelems,
        args.dtype.as_deref().and_then(names::dtype_bytes),
    ) {
        (Some(n), Some(b)) => n.saturating_mul(b),
        _ => 0,
    }
}

fn peer_of(args: &NcclArgs, kind: OpKind, comm: &Communicator, rank: u32, info: &CommInfo) -> u32 {
    if !kind.is_p2p() {
        return Op::NO_PEER;
    }
    let explicit = match kind {
        OpKind::Send => args.dst_rank.or(args.src_rank),
        _ => args.src_rank.or(args.dst_rank),
    };
    if let Some(p) = explicit.and_then(|p| u32::try_from(p).ok()) {
        if p != Op::NO_PEER {
            return p;
        }
    }
    if !info.synthetic && comm.members.len() == 2 && comm.members.contains(&rank) {
        return comm
            .members
            .iter()
            .copied()
            .find(|&m| m != rank)
            .unwrap_or(Op::NO_PEER);
    }
    Op::NO_PEER
}
