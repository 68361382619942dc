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
}

struct OpenOp {
    group: NameId,
    op: ProxyOp,
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
}

struct OpenGpu {
    group: NameId,
    /// GPU timer at the start.
    start: u64,
    /// For a kernel phase: its phase id.
    phase: Option<u64>,
}

/// One process's NCCL events in flight.
#[derive(Default)]
pub struct NcclTracker {
    /// Communicator name id -> this process's rank in it.
    comm_rank: HashMap<u32, u32>,
    ops: HashMap<u32, OpenOp>,
    steps: HashMap<u32, OpenStep>,
    gpu: HashMap<u32, OpenGpu>,
}

impl NcclTracker {
    /// Folds one event (`unix` is its time); returns what it ended, if anything.
    pub fn feed(&mut self, ev: &Event, unix: u64) -> Option<Ended> {
        if ev.flags & nccl::FLAG_NCCL == 0 {
            return None;
        }
        if ev.flags == nccl::FLAG_NCCL | nccl::TYPE_COMM {
            // b: group name id << 32 | rank in the communicator.
            self.comm_rank.insert((ev.b >> 32) as u32, ev.b as u32);
            return None;
        }
        let ty = nccl::event_type(ev)?;
        let id = ev.id as u32;
        let tag = Tag::from_u8(ev.tag)?;
        match (ty, tag) {
            (nccl::TYPE_PROXY_OP, Tag::AsyncBegin) => {
                self.ops.insert(
                    id,
                    OpenOp {
                        group: nccl::group(ev),
                        op: ProxyOp::unpack(ev),
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
                    self_rank: self.comm_rank.get(&o.group.0).copied().unwrap_or(u32::MAX),
                    ops: 1,
                    bytes: o.op.bytes,
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
                self.steps.insert(
                    id,
                    OpenStep {
                        op,
                        state: None,
                        since_unix: unix,
                    },
                );
                None
            }
            (nccl::TYPE_PROXY_STEP, Tag::AsyncState) => {
                let st = self.steps.get_mut(&id)?;
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
                    o.last_progress_unix = unix;
                }
                None
            }
            (nccl::TYPE_KERNEL_CH | nccl::TYPE_KERNEL_PHASE, Tag::AsyncBegin) => {
                self.gpu.insert(
                    id,
                    OpenGpu {
                        group: nccl::group(ev),
                        start: ev.a,
                        phase: (ty == nccl::TYPE_KERNEL_PHASE).then_some(ev.c >> 32),
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
                self_rank: self.comm_rank.get(&o.group.0).copied().unwrap_or(u32::MAX),
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

    #[test]
    fn steps_split_a_transfer_by_state_and_the_op_ends_in_its_window() {
        let mut t = NcclTracker::default();
        // This process is rank 3 of communicator 7.
        let comm = Event {
            flags: nccl::FLAG_NCCL | nccl::TYPE_COMM,
            b: G | 3,
            ..ev(Tag::Instant, 0, 0, 0, 0, 0)
        };
        assert_eq!(t.feed(&comm, 0), None);
        let c_hi = ProxyOp::pack_c_hi(5, true, 2) as u64;
        let op = ev(
            Tag::AsyncBegin,
            nccl::TYPE_PROXY_OP,
            10,
            4096,
            G | 1,
            c_hi << 32,
        );
        assert_eq!(t.feed(&op, 100), None);
        for (k, step) in [11u32, 12].into_iter().enumerate() {
            let t0 = 200 + k as u64 * 1000;
            t.feed(
                &ev(Tag::AsyncBegin, nccl::TYPE_PROXY_STEP, step, 0, G, 10),
                t0,
            );
            let states = [(8, 0), (20, 100), (9, 400)];
            for (code, at) in states {
                let s = ev(Tag::AsyncState, nccl::TYPE_PROXY_STEP, step, code, G, 0);
                t.feed(&s, t0 + at);
            }
            t.feed(
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
        let end = t.feed(&ev(Tag::AsyncEnd, nccl::TYPE_PROXY_OP, 10, 0, G, 0), 3_000);
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
        t.feed(
            &ev(Tag::AsyncBegin, nccl::TYPE_KERNEL_CH, 1, 5_000, G, 0),
            0,
        );
        let end = t.feed(&ev(Tag::AsyncEnd, nccl::TYPE_KERNEL_CH, 1, 7_500, G, 0), 9);
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
            t.feed(&b, 0);
            let e = ev(
                Tag::AsyncEnd,
                nccl::TYPE_KERNEL_PHASE,
                2 + phase as u32,
                1_000 + ns,
                G,
                0,
            );
            let Some(Ended::Kernel { acc, .. }) = t.feed(&e, 1) else {
                panic!()
            };
            let expect = if phase == 1 { (0, ns) } else { (ns, 0) };
            assert_eq!((acc.sync_ns, acc.compute_ns), expect);
        }
        // A channel the GPU never stopped says nothing.
        t.feed(
            &ev(Tag::AsyncBegin, nccl::TYPE_KERNEL_CH, 9, 5_000, G, 0),
            0,
        );
        assert_eq!(
            t.feed(&ev(Tag::AsyncEnd, nccl::TYPE_KERNEL_CH, 9, 0, G, 0), 1),
            None
        );
    }
}
