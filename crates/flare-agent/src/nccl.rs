//! Progress inside NCCL's collectives, from the events of Flare's NCCL profiler plugin
//! (encoding: `flare_tracer::nccl`): per peer and direction, how long the transfers took
//! and where their steps waited (own GPU, peer, network); per communicator, its kernels'
//! GPU time and, with profiler API v7, the sync phases apart from the compute; and the
//! transfers that stopped progressing. Fed every raw event of a process in order; keeps
//! only what is in flight (bounded by the plugin's handle pools).

use flare_model::{KernelStats, LinkStats, StalledLink};
use flare_tracer::nccl::{self, ProxyOp, StepState};
use flare_tracer::{Event, NameId, Tag};
use std::collections::{BTreeMap, HashMap};

/// A transfer in flight for this long without progress is reported as stalled.
pub const STALL_NS: u64 = 1_000_000_000;
/// At most this many stalled transfers per rank and window (the longest stalled).
const MAX_STALLED: usize = 32;
const STATES: usize = StepState::ALL.len();

/// Key of a rank's transfers in a window: communicator, peer, send.
pub type LinkKey = (NameId, u32, bool);

/// A window's transfers with one peer in one direction.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LinkAcc {
    pub self_rank: u32,
    pub ops: u64,
    pub bytes: u64,
    pub op_ns: u64,
    pub steps: u64,
    pub state_ns: [u64; STATES],
    /// Time per channel.
    pub channel_ns: BTreeMap<u8, u64>,
}

impl LinkAcc {
    pub fn merge(&mut self, o: &LinkAcc) {
        self.self_rank = o.self_rank;
        self.ops += o.ops;
        self.bytes += o.bytes;
        self.op_ns += o.op_ns;
        self.steps += o.steps;
        for (a, b) in self.state_ns.iter_mut().zip(o.state_ns) {
            *a += b;
        }
        for (c, ns) in &o.channel_ns {
            *self.channel_ns.entry(*c).or_default() += ns;
        }
    }

    pub fn finish(&self, group: Option<String>, peer: u32, send: bool) -> LinkStats {
        let at = |s: StepState| self.state_ns[s.index()];
        let (slowest_channel, slowest_channel_ns) = self
            .channel_ns
            .iter()
            .max_by_key(|(c, ns)| (**ns, std::cmp::Reverse(**c)))
            .map_or((0, 0), |(c, ns)| (*c, *ns));
        let (gpu_wait_ns, peer_wait_ns, network_ns, flush_ns) = if send {
            (
                at(StepState::SendGpuWait),
                at(StepState::SendPeerWait),
                at(StepState::SendNetwork),
                0,
            )
        } else {
            (
                at(StepState::RecvGpuWait),
                at(StepState::RecvPeerWait),
                0,
                at(StepState::RecvFlush),
            )
        };
        LinkStats {
            group,
            self_rank: self.self_rank,
            peer,
            send,
            ops: self.ops,
            bytes: self.bytes,
            op_ns: self.op_ns,
            steps: self.steps,
            gpu_wait_ns,
            peer_wait_ns,
            network_ns,
            flush_ns,
            slowest_channel,
            slowest_channel_ns,
            channels: self.channel_ns.len() as u32,
        }
    }
}

/// A window's kernels of one communicator.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct KernelAcc {
    pub channels: u64,
    pub gpu_ns: u64,
    pub sync_ns: u64,
    pub compute_ns: u64,
}

impl KernelAcc {
    pub fn merge(&mut self, o: &KernelAcc) {
        self.channels += o.channels;
        self.gpu_ns += o.gpu_ns;
        self.sync_ns += o.sync_ns;
        self.compute_ns += o.compute_ns;
    }

    pub fn finish(&self, group: Option<String>) -> KernelStats {
        KernelStats {
            group,
            channels: self.channels,
            gpu_ns: self.gpu_ns,
            sync_ns: self.sync_ns,
            compute_ns: self.compute_ns,
        }
    }
}

/// A collective or P2P whose kernel channels all stopped on the GPU: what NCCL Inspector
/// writes one record of.
#[derive(Clone, Debug, PartialEq)]
pub struct OpDone {
    pub group: NameId,
    /// The NCCL function (`AllReduce`, `Send`) and its kind.
    pub func: NameId,
    pub kind: flare_model::OpKind,
    /// `<ALGO>/<PROTO>` of a collective (NONE for P2P).
    pub algo_proto: NameId,
    /// A P2P op's peer (rank in the communicator).
    pub peer: Option<u32>,
    pub seq: u32,
    pub bytes: u64,
    /// The longest channel's GPU time (ns).
    pub exec_ns: u64,
    /// This process's rank in the communicator, its size and nodes (u32::MAX: unknown).
    pub comm_rank: u32,
    pub nranks: u32,
    pub nnodes: u32,
    pub comm_hash: u64,
    /// The communicator's user name, where NCCL gave one.
    pub comm_label: NameId,
}

/// Something that ended, to be counted in the window of `end_unix`.
#[derive(Debug, PartialEq)]
pub enum Ended {
    Link {
        key: LinkKey,
        end_unix: u64,
        acc: LinkAcc,
    },
    Kernel {
        group: NameId,
        end_unix: u64,
        acc: KernelAcc,
    },
    Op {
        end_unix: u64,
        op: OpDone,
    },
}

struct OpenOp {
    group: NameId,
    op: ProxyOp,
    /// The collective or P2P it moves data for (low 32 bits of its id).
    parent: u32,
    /// Bytes its finished steps moved (their last transfer size).
    moved: u64,
    start_unix: u64,
    last_progress_unix: u64,
    steps_done: u32,
    state: Option<StepState>,
    steps: u64,
    state_ns: [u64; STATES],
}

struct OpenStep {
    op: u32,
    state: Option<StepState>,
    since_unix: u64,
    /// The largest transfer size its states reported (v4+).
    bytes: u64,
}

struct OpenGpu {
    group: NameId,
    /// GPU timer at the start.
    start: u64,
    /// For a kernel phase: its phase id.
    phase: Option<u64>,
    /// The collective or P2P it runs for (low 32 bits of its id).
    parent: u32,
}

/// A collective or P2P waiting for its kernel channels.
struct OpenColl {
    done: OpDone,
    /// Channels it runs on (from its detail event), and those stopped so far.
    channels: u32,
    stopped: u32,
    /// Whether NCCL stopped it on the host (it does at enqueue, before the kernels).
    ended: bool,
}

/// What NCCL said of a communicator at init.
#[derive(Clone, Copy)]
struct CommInfo {
    rank: u32,
    nranks: u32,
    nnodes: u32,
    hash: u64,
    label: NameId,
}

/// Entries in flight per kind, at most: past it they are forgotten (a job whose mask leaves
/// kernel channels out never completes an operation; ends can be lost).
const MAX_IN_FLIGHT: usize = 16_384;

/// Inserts into a map of things in flight, forgetting them all first when it is full.
fn insert_bounded<V>(m: &mut HashMap<u32, V>, id: u32, v: V) {
    if m.len() >= MAX_IN_FLIGHT {
        m.clear();
    }
    m.insert(id, v);
}

/// One process's NCCL events in flight.
#[derive(Default)]
pub struct NcclTracker {
    /// Communicator name id -> what NCCL said of it at init.
    comms: HashMap<u32, CommInfo>,
    ops: HashMap<u32, OpenOp>,
    steps: HashMap<u32, OpenStep>,
    gpu: HashMap<u32, OpenGpu>,
    colls: HashMap<u32, OpenColl>,
}

impl NcclTracker {
    fn comm_rank(&self, group: NameId) -> u32 {
        self.comms.get(&group.0).map_or(u32::MAX, |c| c.rank)
    }

    /// Folds one event (`unix` is its time); pushes what it ended onto `out`.
    pub fn feed(&mut self, ev: &Event, unix: u64, out: &mut Vec<Ended>) {
        // A kernel channel's end may also complete the operation it ran for.
        let kernel_of = (nccl::event_type(ev) == Some(nccl::TYPE_KERNEL_CH)
            && ev.tag == Tag::AsyncEnd as u8)
            .then(|| self.gpu.get(&(ev.id as u32)).map(|g| g.parent))
            .flatten();
        out.extend(self.apply(ev, unix));
        if let Some(parent) = kernel_of {
            out.extend(self.complete(parent, unix));
        }
    }

    fn apply(&mut self, ev: &Event, unix: u64) -> Option<Ended> {
        if ev.flags & nccl::FLAG_NCCL == 0 {
            return None;
        }
        if ev.flags == nccl::FLAG_NCCL | nccl::TYPE_COMM {
            // a: commHash; b: group name id << 32 | rank; c: nranks << 32 | nNodes.
            let info = CommInfo {
                rank: ev.b as u32,
                nranks: (ev.c >> 32) as u32,
                nnodes: ev.c as u32,
                hash: ev.a,
                label: NameId(ev.name),
            };
            self.comms.insert((ev.b >> 32) as u32, info);
            return None;
        }
        if ev.flags & nccl::FLAG_DETAIL != 0 {
            // After a Coll or P2p begin: a = nChannels | ... | peer << 32; name ALGO/PROTO.
            if let Some(c) = self.colls.get_mut(&(ev.id as u32)) {
                c.channels = (ev.a & 0xFF) as u32;
                if c.done.peer.is_some() {
                    c.done.peer = Some((ev.a >> 32) as u32);
                } else {
                    c.done.algo_proto = NameId(ev.name);
                }
            }
            return None;
        }
        let ty = nccl::event_type(ev)?;
        let id = ev.id as u32;
        let tag = Tag::from_u8(ev.tag)?;
        match (ty, tag) {
            (nccl::TYPE_COLL | nccl::TYPE_P2P, Tag::AsyncBegin) => {
                let group = nccl::group(ev);
                let comm = self.comms.get(&group.0).copied();
                let kind =
                    flare_model::OpKind::from_u8(ev.kind).unwrap_or(flare_model::OpKind::HostOther);
                let done = OpDone {
                    group,
                    func: NameId(ev.name),
                    kind,
                    algo_proto: NameId::NONE,
                    peer: (ty == nccl::TYPE_P2P).then_some(u32::MAX),
                    seq: ev.b as u32,
                    bytes: ev.a,
                    exec_ns: 0,
                    comm_rank: comm.map_or(u32::MAX, |c| c.rank),
                    // The event's size (v4+), else what init said.
                    nranks: match (ev.c >> 32) as u32 {
                        0 => comm.map_or(0, |c| c.nranks),
                        n => n,
                    },
                    nnodes: comm.map_or(0, |c| c.nnodes),
                    comm_hash: comm.map_or(0, |c| c.hash),
                    comm_label: comm.map_or(NameId::NONE, |c| c.label),
                };
                insert_bounded(
                    &mut self.colls,
                    id,
                    OpenColl {
                        done,
                        channels: 0,
                        stopped: 0,
                        ended: false,
                    },
                );
                None
            }
            (nccl::TYPE_COLL | nccl::TYPE_P2P, Tag::AsyncEnd) => {
                if let Some(c) = self.colls.get_mut(&id) {
                    c.ended = true;
                }
                self.complete(id, unix)
            }
            (nccl::TYPE_PROXY_OP, Tag::AsyncBegin) => {
                insert_bounded(
                    &mut self.ops,
                    id,
                    OpenOp {
                        group: nccl::group(ev),
                        op: ProxyOp::unpack(ev),
                        parent: nccl::parent(ev),
                        moved: 0,
                        start_unix: unix,
                        last_progress_unix: unix,
                        steps_done: 0,
                        state: None,
                        steps: 0,
                        state_ns: [0; STATES],
                    },
                );
                None
            }
            (nccl::TYPE_PROXY_OP, Tag::AsyncState) => {
                if let Some(o) = self.ops.get_mut(&id) {
                    o.last_progress_unix = unix;
                }
                None
            }
            (nccl::TYPE_PROXY_OP, Tag::AsyncEnd) => {
                let o = self.ops.remove(&id)?;
                let op_ns = unix.saturating_sub(o.start_unix);
                let acc = LinkAcc {
                    self_rank: self.comm_rank(o.group),
                    ops: 1,
                    // What the steps moved; without step sizes, steps x chunk size (the
                    // most the op could move).
                    bytes: if o.moved > 0 { o.moved } else { o.op.bytes },
                    op_ns,
                    steps: o.steps,
                    state_ns: o.state_ns,
                    channel_ns: BTreeMap::from([(o.op.channel, op_ns)]),
                };
                Some(Ended::Link {
                    key: (o.group, o.op.peer, o.op.send),
                    end_unix: unix,
                    acc,
                })
            }
            (nccl::TYPE_PROXY_STEP, Tag::AsyncBegin) => {
                let op = nccl::parent(ev);
                if let Some(o) = self.ops.get_mut(&op) {
                    o.last_progress_unix = unix;
                }
                insert_bounded(
                    &mut self.steps,
                    id,
                    OpenStep {
                        op,
                        state: None,
                        since_unix: unix,
                        bytes: 0,
                    },
                );
                None
            }
            (nccl::TYPE_PROXY_STEP, Tag::AsyncState) => {
                let st = self.steps.get_mut(&id)?;
                st.bytes = st.bytes.max(ev.b);
                let prev = std::mem::replace(&mut st.state, StepState::from_code(ev.a));
                let since = std::mem::replace(&mut st.since_unix, unix);
                let op = st.op;
                if let Some(o) = self.ops.get_mut(&op) {
                    if let Some(p) = prev {
                        o.state_ns[p.index()] += unix.saturating_sub(since);
                    }
                    o.state = StepState::from_code(ev.a).or(o.state);
                    o.last_progress_unix = unix;
                }
                None
            }
            (nccl::TYPE_PROXY_STEP, Tag::AsyncEnd) => {
                let st = self.steps.remove(&id)?;
                if let Some(o) = self.ops.get_mut(&st.op) {
                    if let Some(p) = st.state {
                        o.state_ns[p.index()] += unix.saturating_sub(st.since_unix);
                    }
                    o.steps += 1;
                    o.steps_done += 1;
                    o.moved += st.bytes;
                    o.last_progress_unix = unix;
                }
                None
            }
            (nccl::TYPE_KERNEL_CH | nccl::TYPE_KERNEL_PHASE, Tag::AsyncBegin) => {
                insert_bounded(
                    &mut self.gpu,
                    id,
                    OpenGpu {
                        group: nccl::group(ev),
                        start: ev.a,
                        phase: (ty == nccl::TYPE_KERNEL_PHASE).then_some(ev.c >> 32),
                        parent: nccl::parent(ev),
                    },
                );
                None
            }
            (nccl::TYPE_KERNEL_CH | nccl::TYPE_KERNEL_PHASE, Tag::AsyncEnd) => {
                let g = self.gpu.remove(&id)?;
                // The end repeats the GPU stop timer in `a` (0: never stopped on the GPU).
                if g.start == 0 || ev.a < g.start {
                    return None;
                }
                let ns = ev.a - g.start;
                if g.phase.is_none() {
                    if let Some(c) = self.colls.get_mut(&g.parent) {
                        c.stopped += 1;
                        c.done.exec_ns = c.done.exec_ns.max(ns);
                    }
                }
                let mut acc = KernelAcc::default();
                match g.phase {
                    None => {
                        acc.channels = 1;
                        acc.gpu_ns = ns;
                    }
                    // 1: compute; 0 and 2: the initial and final syncs.
                    Some(1) => acc.compute_ns = ns,
                    Some(0 | 2) => acc.sync_ns = ns,
                    Some(_) => return None,
                }
                Some(Ended::Kernel {
                    group: g.group,
                    end_unix: unix,
                    acc,
                })
            }
            _ => None,
        }
    }

    /// Forgets everything in flight (after the ring dropped events: their ends may be
    /// among the lost). Communicators are kept.
    pub fn forget_in_flight(&mut self) {
        self.ops.clear();
        self.steps.clear();
        self.gpu.clear();
        self.colls.clear();
    }

    /// For an async span of the plugin's (a kernel channel, proxy op or step): the
    /// collective or P2P it runs for, while that one waits for its kernels: (function,
    /// kind, communicator).
    pub fn collective_of(&self, async_id: u64) -> Option<(NameId, flare_model::OpKind, NameId)> {
        if async_id & !((1 << 48) - 1) != nccl::ID_TAG {
            return None;
        }
        let id = async_id as u32;
        let parent = if let Some(g) = self.gpu.get(&id) {
            g.parent
        } else if let Some(o) = self.ops.get(&id) {
            o.parent
        } else {
            self.ops.get(&self.steps.get(&id)?.op)?.parent
        };
        let c = &self.colls.get(&parent)?.done;
        Some((c.func, c.kind, c.group))
    }

    /// The communicators this process belongs to, with its rank in each: (name id, rank,
    /// size).
    pub fn memberships(&self) -> Vec<(NameId, u32, u32)> {
        let mut v: Vec<(NameId, u32, u32)> = self
            .comms
            .iter()
            .map(|(g, c)| (NameId(*g), c.rank, c.nranks))
            .collect();
        v.sort_by_key(|m| m.0 .0);
        v
    }

    /// The operation `id` if NCCL stopped it and all its channels stopped on the GPU.
    fn complete(&mut self, id: u32, unix: u64) -> Option<Ended> {
        let c = self.colls.get(&id)?;
        if !c.ended || c.channels == 0 || c.stopped < c.channels {
            return None;
        }
        let c = self.colls.remove(&id)?;
        Some(Ended::Op {
            end_unix: unix,
            op: c.done,
        })
    }

    /// Transfers in flight without progress for [`STALL_NS`] at `now_unix`, longest
    /// stalled first; `name` resolves communicator names.
    pub fn stalled(
        &self,
        now_unix: u64,
        mut name: impl FnMut(NameId) -> Option<String>,
    ) -> Vec<StalledLink> {
        let mut v: Vec<(u64, &OpenOp)> = self
            .ops
            .values()
            .map(|o| (now_unix.saturating_sub(o.last_progress_unix), o))
            .filter(|(ns, _)| *ns >= STALL_NS)
            .collect();
        v.sort_by_key(|(ns, o)| (std::cmp::Reverse(*ns), o.op.peer, o.op.channel));
        v.truncate(MAX_STALLED);
        v.into_iter()
            .map(|(ns, o)| StalledLink {
                group: name(o.group),
                self_rank: self.comm_rank(o.group),
                peer: o.op.peer,
                send: o.op.send,
                channel: o.op.channel,
                state: o.state.map(|s| state_name(s).to_string()),
                steps_done: o.steps_done,
                steps: o.op.n_steps,
                stalled_ns: ns,
            })
            .collect()
    }
}

/// The wire name of a step state.
pub fn state_name(s: StepState) -> &'static str {
    match s {
        StepState::SendGpuWait => "send_gpu_wait",
        StepState::SendPeerWait => "send_peer_wait",
        StepState::SendNetwork => "send_network",
        StepState::RecvPeerWait => "recv_peer_wait",
        StepState::RecvFlush => "recv_flush",
        StepState::RecvGpuWait => "recv_gpu_wait",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(tag: Tag, ty: u16, id: u32, a: u64, b: u64, c: u64) -> Event {
        Event {
            ts_ns: 0,
            name: 0,
            tag: tag as u8,
            kind: 0,
            flags: nccl::FLAG_NCCL | ty,
            id: nccl::ID_TAG | id as u64,
            a,
            b,
            c,
        }
    }

    const G: u64 = 7 << 32;

    /// Feeds one event that ends at most one thing.
    fn one(t: &mut NcclTracker, e: &Event, unix: u64) -> Option<Ended> {
        let mut v = Vec::new();
        t.feed(e, unix, &mut v);
        assert!(v.len() <= 1, "{v:?}");
        v.pop()
    }

    #[test]
    fn steps_split_a_transfer_by_state_and_the_op_ends_in_its_window() {
        let mut t = NcclTracker::default();
        // This process is rank 3 of communicator 7.
        let comm = Event {
            flags: nccl::FLAG_NCCL | nccl::TYPE_COMM,
            b: G | 3,
            ..ev(Tag::Instant, 0, 0, 0, 0, 0)
        };
        assert_eq!(one(&mut t, &comm, 0), None);
        let c_hi = ProxyOp::pack_c_hi(5, true, 2) as u64;
        let op = ev(
            Tag::AsyncBegin,
            nccl::TYPE_PROXY_OP,
            10,
            4096,
            G | 1,
            c_hi << 32,
        );
        assert_eq!(one(&mut t, &op, 100), None);
        for (k, step) in [11u32, 12].into_iter().enumerate() {
            let t0 = 200 + k as u64 * 1000;
            one(
                &mut t,
                &ev(Tag::AsyncBegin, nccl::TYPE_PROXY_STEP, step, 0, G, 10),
                t0,
            );
            let states = [(8, 0), (20, 100), (9, 400)];
            for (code, at) in states {
                // b: the transfer size so far.
                let s = ev(Tag::AsyncState, nccl::TYPE_PROXY_STEP, step, code, 2048, 0);
                one(&mut t, &s, t0 + at);
            }
            one(
                &mut t,
                &ev(Tag::AsyncEnd, nccl::TYPE_PROXY_STEP, step, 0, G, 0),
                t0 + 900,
            );
        }
        // In flight: stalled only once its last progress is STALL_NS old.
        assert!(t.stalled(2_200, |_| None).is_empty());
        let s = t.stalled(2_100 + STALL_NS, |_| Some("g".into()));
        assert_eq!(s.len(), 1);
        assert_eq!(
            (
                s[0].peer,
                s[0].channel,
                s[0].send,
                s[0].steps_done,
                s[0].steps
            ),
            (1, 5, true, 2, 2)
        );
        assert_eq!(s[0].state.as_deref(), Some("send_network"));
        let end = one(
            &mut t,
            &ev(Tag::AsyncEnd, nccl::TYPE_PROXY_OP, 10, 0, G, 0),
            3_000,
        );
        let Some(Ended::Link { key, end_unix, acc }) = end else {
            panic!("{end:?}")
        };
        assert_eq!((key, end_unix), ((NameId(7), 1, true), 3_000));
        let stats = acc.finish(Some("g".into()), 1, true);
        assert_eq!((stats.self_rank, stats.ops, stats.bytes), (3, 1, 4096));
        assert_eq!(stats.op_ns, 2_900);
        assert_eq!(stats.steps, 2);
        assert_eq!(
            (stats.gpu_wait_ns, stats.peer_wait_ns, stats.network_ns),
            (200, 600, 1000)
        );
        assert_eq!((stats.slowest_channel, stats.channels), (5, 1));
    }

    #[test]
    fn kernel_channels_and_phases_are_timed_on_the_gpu_clock() {
        let mut t = NcclTracker::default();
        one(
            &mut t,
            &ev(Tag::AsyncBegin, nccl::TYPE_KERNEL_CH, 1, 5_000, G, 0),
            0,
        );
        let end = one(
            &mut t,
            &ev(Tag::AsyncEnd, nccl::TYPE_KERNEL_CH, 1, 7_500, G, 0),
            9,
        );
        let Some(Ended::Kernel { acc, .. }) = end else {
            panic!()
        };
        assert_eq!((acc.channels, acc.gpu_ns), (1, 2_500));
        for (phase, ns) in [(0u64, 300u64), (1, 2_000), (2, 200)] {
            let b = ev(
                Tag::AsyncBegin,
                nccl::TYPE_KERNEL_PHASE,
                2 + phase as u32,
                1_000,
                G,
                phase << 32,
            );
            one(&mut t, &b, 0);
            let e = ev(
                Tag::AsyncEnd,
                nccl::TYPE_KERNEL_PHASE,
                2 + phase as u32,
                1_000 + ns,
                G,
                0,
            );
            let Some(Ended::Kernel { acc, .. }) = one(&mut t, &e, 1) else {
                panic!()
            };
            let expect = if phase == 1 { (0, ns) } else { (ns, 0) };
            assert_eq!((acc.sync_ns, acc.compute_ns), expect);
        }
        // A channel the GPU never stopped says nothing.
        one(
            &mut t,
            &ev(Tag::AsyncBegin, nccl::TYPE_KERNEL_CH, 9, 5_000, G, 0),
            0,
        );
        assert_eq!(
            one(
                &mut t,
                &ev(Tag::AsyncEnd, nccl::TYPE_KERNEL_CH, 9, 0, G, 0),
                1
            ),
            None
        );
    }

    #[test]
    fn an_operation_completes_when_its_last_kernel_channel_stops() {
        let mut t = NcclTracker::default();
        let comm = Event {
            flags: nccl::FLAG_NCCL | nccl::TYPE_COMM,
            name: 9,
            a: 0xabc,
            b: G | 1,
            c: 4 << 32 | 2,
            ..ev(Tag::Instant, 0, 0, 0, 0, 0)
        };
        one(&mut t, &comm, 0);
        let begin = Event {
            name: 3,
            kind: flare_model::OpKind::AllReduce as u8,
            ..ev(
                Tag::AsyncBegin,
                nccl::TYPE_COLL,
                20,
                1 << 20,
                G | 17,
                4 << 32,
            )
        };
        one(&mut t, &begin, 10);
        // Its detail: two channels, algorithm RING/SIMPLE (name 5).
        let detail = Event {
            flags: nccl::FLAG_NCCL | nccl::FLAG_DETAIL | nccl::TYPE_COLL,
            name: 5,
            ..ev(Tag::Instant, 0, 20, 2 | 16 << 8, 0, 0)
        };
        one(&mut t, &detail, 10);
        assert_eq!(
            one(&mut t, &ev(Tag::AsyncEnd, nccl::TYPE_COLL, 20, 0, G, 0), 11),
            None
        );
        for (k, (start, stop)) in [(1_000u64, 4_000u64), (1_100, 3_100)]
            .into_iter()
            .enumerate()
        {
            let id = 30 + k as u32;
            one(
                &mut t,
                &ev(Tag::AsyncBegin, nccl::TYPE_KERNEL_CH, id, start, G, 20),
                12,
            );
            let mut out = Vec::new();
            t.feed(
                &ev(Tag::AsyncEnd, nccl::TYPE_KERNEL_CH, id, stop, G, 0),
                13,
                &mut out,
            );
            // The channel's own time, then (after the second) the whole operation.
            assert_eq!(out.len(), 1 + k, "{out:?}");
        }
        let mut out = Vec::new();
        one(
            &mut t,
            &ev(Tag::AsyncBegin, nccl::TYPE_KERNEL_CH, 40, 1, G, 20),
            12,
        );
        t.feed(
            &ev(Tag::AsyncEnd, nccl::TYPE_KERNEL_CH, 40, 2, G, 0),
            13,
            &mut out,
        );
        assert_eq!(out.len(), 1, "a channel of an operation already complete");
        // The completed one, checked through a fresh run.
        let mut t = NcclTracker::default();
        let mut all = Vec::new();
        for (e, u) in [(&comm, 0), (&begin, 10), (&detail, 10)] {
            t.feed(e, u, &mut all);
        }
        t.feed(
            &ev(Tag::AsyncEnd, nccl::TYPE_COLL, 20, 0, G, 0),
            11,
            &mut all,
        );
        for (id, start, stop) in [(30, 1_000, 4_000), (31, 1_100, 3_100)] {
            t.feed(
                &ev(Tag::AsyncBegin, nccl::TYPE_KERNEL_CH, id, start, G, 20),
                12,
                &mut all,
            );
            t.feed(
                &ev(Tag::AsyncEnd, nccl::TYPE_KERNEL_CH, id, stop, G, 0),
                13,
                &mut all,
            );
        }
        let ops: Vec<&OpDone> = all
            .iter()
            .filter_map(|e| match e {
                Ended::Op { op, .. } => Some(op),
                _ => None,
            })
            .collect();
        assert_eq!(ops.len(), 1);
        let o = ops[0];
        assert_eq!(
            (o.func, o.algo_proto, o.kind),
            (NameId(3), NameId(5), flare_model::OpKind::AllReduce)
        );
        assert_eq!((o.seq, o.bytes, o.exec_ns), (17, 1 << 20, 3_000));
        assert_eq!(
            (o.comm_rank, o.nranks, o.nnodes, o.comm_hash),
            (1, 4, 2, 0xabc)
        );
        assert_eq!((o.comm_label, o.peer), (NameId(9), None));
    }

    #[test]
    fn a_stuck_channel_op_or_step_is_reported_as_its_collective() {
        let mut t = NcclTracker::default();
        let begin = Event {
            name: 3,
            kind: flare_model::OpKind::AllGather as u8,
            ..ev(Tag::AsyncBegin, nccl::TYPE_COLL, 20, 1 << 20, G | 5, 0)
        };
        one(&mut t, &begin, 0);
        one(&mut t, &ev(Tag::AsyncEnd, nccl::TYPE_COLL, 20, 0, G, 0), 1);
        // A kernel channel and a proxy op of the collective (20), a step of the op (31).
        for (ty, id, parent) in [
            (nccl::TYPE_KERNEL_CH, 30, 20),
            (nccl::TYPE_PROXY_OP, 31, 20),
            (nccl::TYPE_PROXY_STEP, 32, 31),
        ] {
            one(&mut t, &ev(Tag::AsyncBegin, ty, id, 9, G, parent), 2);
        }
        let expect = Some((NameId(3), flare_model::OpKind::AllGather, NameId(7)));
        for id in [30u64, 31, 32] {
            assert_eq!(t.collective_of(nccl::ID_TAG | id), expect, "span {id}");
        }
        // Not the plugin's, or not known: none.
        assert_eq!(t.collective_of(30), None);
        assert_eq!(t.collective_of(nccl::ID_TAG | 99), None);
    }

    #[test]
    fn after_lost_events_nothing_in_flight_is_called_stalled() {
        let mut t = NcclTracker::default();
        one(
            &mut t,
            &ev(Tag::AsyncBegin, nccl::TYPE_PROXY_OP, 10, 0, G | 1, 0),
            0,
        );
        assert_eq!(t.stalled(STALL_NS * 2, |_| None).len(), 1);
        // Its end may have been among the events the ring dropped.
        t.forget_in_flight();
        assert!(t.stalled(STALL_NS * 2, |_| None).is_empty());
        // An end whose begin was forgotten is ignored.
        assert_eq!(
            one(
                &mut t,
                &ev(Tag::AsyncEnd, nccl::TYPE_PROXY_OP, 10, 0, G, 0),
                5
            ),
            None
        );
    }
}
