//! The store's memory: decoded summaries and merged windows kept between posts, each
//! bounded in estimated bytes. A bound in entries let a job of large summaries (10,000
//! ranks in 30 KB of zstd, 10 MB decoded) grow the server by 10 MB a post; in bytes,
//! the server's memory stays flat whatever the posts hold.

use flare_engine::live::{LiveRank, LiveWindow};
use flare_model::summary::{NcclProgress, RankSummary, ThreadStack};
use flare_model::WindowSummary;
use std::collections::HashMap;
use std::mem::size_of;

/// Memory kept between posts by default. Two thirds hold decoded summaries, so that
/// re-analysing a window after each node's post does not decode every stored summary of
/// it again (the current window of a 10,000-GPU job: 1,280 nodes of about 100 KB
/// decoded); one third merged windows, which the next windows' analyses read.
pub const DEFAULT_CACHE_BYTES: usize = 384 << 20;

/// What a window's stored summaries were when a value was made of them (see
/// `window_stamps`): a server sharing its database with others checks it before trusting
/// the value. A single server's values carry the default.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Stamp(pub i64, pub i64);

/// Least-recently-used values per (job, window), bounded in a weight (their estimated
/// bytes): the entry just used stays even when it alone exceeds the bound.
pub(super) struct Lru<V> {
    entries: HashMap<(String, u64), (u64, V, Stamp)>,
    clock: u64,
    weight: usize,
    bound: usize,
    weigh: fn(&V) -> usize,
}

impl<V> Lru<V> {
    pub(super) fn new(bound: usize, weigh: fn(&V) -> usize) -> Self {
        Lru {
            entries: HashMap::new(),
            clock: 0,
            weight: 0,
            bound,
            weigh,
        }
    }

    /// Takes the value out, with its stamp (the caller puts it back once done with it).
    pub(super) fn take(&mut self, key: &(String, u64)) -> Option<(V, Stamp)> {
        let (_, v, stamp) = self.entries.remove(key)?;
        self.weight -= (self.weigh)(&v);
        Some((v, stamp))
    }

    /// The stamp of the value held for `key`, if any.
    pub(super) fn stamp(&self, key: &(String, u64)) -> Option<Stamp> {
        self.entries.get(key).map(|e| e.2)
    }

    /// Drops every entry of a job.
    pub(super) fn forget_job(&mut self, job_id: &str) {
        let weigh = self.weigh;
        let mut freed = 0;
        self.entries.retain(|k, (_, v, _)| {
            let keep = k.0 != job_id;
            if !keep {
                freed += weigh(v);
            }
            keep
        });
        self.weight -= freed;
    }

    /// The value, without marking it used.
    pub(super) fn peek(&self, key: &(String, u64)) -> Option<&V> {
        self.entries.get(key).map(|e| &e.1)
    }

    pub(super) fn get(&mut self, key: &(String, u64)) -> Option<&V> {
        self.clock += 1;
        let e = self.entries.get_mut(key)?;
        e.0 = self.clock;
        Some(&e.1)
    }

    pub(super) fn put(&mut self, key: (String, u64), v: V, stamp: Stamp) {
        self.clock += 1;
        self.weight += (self.weigh)(&v);
        if let Some((_, old, _)) = self.entries.insert(key, (self.clock, v, stamp)) {
            self.weight -= (self.weigh)(&old);
        }
        while self.weight > self.bound && self.entries.len() > 1 {
            let Some(oldest) = self
                .entries
                .iter()
                .min_by_key(|(_, (used, _, _))| *used)
                .map(|(k, _)| k.clone())
            else {
                break;
            };
            if let Some((_, v, _)) = self.entries.remove(&oldest) {
                self.weight -= (self.weigh)(&v);
            }
        }
    }
}

/// Decoded summaries of a window, one per node.
pub(super) type WindowCache = Lru<Vec<WindowSummary>>;
/// Merged windows, one record per rank.
pub(super) type LiveWindowCache = Lru<LiveWindow>;

/// Bytes of resident memory per byte the estimates below count: allocators round up and
/// vectors decoded by serde keep spare capacity. Measured with `scripts/probe_server.py`:
/// the server's resident memory grew 1.5 bytes per estimated byte between a 64 MiB and a
/// 384 MiB bound.
const OVERHEAD: (usize, usize) = (3, 2);

fn resident(estimate: usize) -> usize {
    estimate / OVERHEAD.1 * OVERHEAD.0
}

/// A cache of decoded summaries holding at most `bound` bytes of memory.
pub(super) fn summaries_cache(bound: usize) -> WindowCache {
    Lru::new(bound, |v| resident(summaries_bytes(v)))
}

/// A cache of merged windows holding at most `bound` bytes of memory.
pub(super) fn windows_cache(bound: usize) -> LiveWindowCache {
    Lru::new(bound, |w| resident(live_window_bytes(w)))
}

/// Estimated heap bytes of a window's decoded summaries: the structs and what they own.
/// An estimate (allocators round up, vectors keep spare capacity), close enough to bound.
pub(super) fn summaries_bytes(v: &[WindowSummary]) -> usize {
    v.iter().map(summary_bytes).sum::<usize>() + size_of::<Vec<WindowSummary>>()
}

fn summary_bytes(s: &WindowSummary) -> usize {
    let hangs: usize = s
        .hangs
        .iter()
        .map(|h| opt_len(&h.group) + h.op.len() + stacks_bytes(&h.stacks))
        .sum();
    let peers: usize = s
        .peer_stacks
        .iter()
        .map(|p| opt_len(&p.open_op) + p.stack_source.len() + stacks_bytes(&p.stacks))
        .sum();
    let logs = s.logs.as_ref().map_or(0, |x| {
        x.lines
            .iter()
            .map(|l| size_of_val(l) + l.file.len() + l.text.len())
            .sum::<usize>()
            + x.progress
                .iter()
                .map(|p| size_of_val(p) + p.file.len() + p.writer.len() + p.text.len())
                .sum::<usize>()
            + x.templates
                .iter()
                .map(|t| size_of_val(t) + t.template.len())
                .sum::<usize>()
    });
    size_of::<WindowSummary>()
        + s.job_id.len()
        + s.node.len()
        + s.ranks.iter().map(rank_bytes).sum::<usize>()
        + s.hangs.len() * size_of::<flare_model::HangRecord>()
        + hangs
        + s.peer_stacks.len() * size_of::<flare_model::summary::PeerStacks>()
        + peers
        + logs
}

fn rank_bytes(r: &RankSummary) -> usize {
    size_of::<RankSummary>()
        + size_of_val(r.iterations.as_slice())
        + r.ops
            .iter()
            .map(|o| size_of_val(o) + o.name.len() + opt_len(&o.group))
            .sum::<usize>()
        + r.nccl.as_ref().map_or(0, nccl_bytes)
        + startup_bytes(r.startup.as_ref())
}

fn nccl_bytes(n: &NcclProgress) -> usize {
    size_of::<NcclProgress>()
        + n.links
            .iter()
            .map(|l| size_of_val(l) + opt_len(&l.group))
            .sum::<usize>()
        + n.kernels
            .iter()
            .map(|k| size_of_val(k) + opt_len(&k.group))
            .sum::<usize>()
        + n.stalled
            .iter()
            .map(|s| size_of_val(s) + opt_len(&s.group) + opt_len(&s.state))
            .sum::<usize>()
        + n.comms
            .iter()
            .map(|c| size_of_val(c) + opt_len(&c.group))
            .sum::<usize>()
}

fn stacks_bytes(stacks: &[ThreadStack]) -> usize {
    stacks
        .iter()
        .map(|t| {
            size_of_val(t)
                + t.thread.len()
                + t.frames
                    .iter()
                    .map(|f| size_of::<String>() + f.len())
                    .sum::<usize>()
        })
        .sum()
}

/// Estimated heap bytes of a merged window.
pub(super) fn live_window_bytes(w: &LiveWindow) -> usize {
    size_of::<LiveWindow>()
        + w.ranks.iter().map(live_rank_bytes).sum::<usize>()
        + w.hangs
            .iter()
            .map(|(h, host)| {
                size_of::<(flare_model::HangRecord, String)>()
                    + host.len()
                    + h.op.len()
                    + opt_len(&h.group)
                    + stacks_bytes(&h.stacks)
            })
            .sum::<usize>()
        + w.peer_stacks
            .iter()
            .map(|(p, host)| {
                size_of::<(flare_model::summary::PeerStacks, String)>()
                    + host.len()
                    + opt_len(&p.open_op)
                    + p.stack_source.len()
                    + stacks_bytes(&p.stacks)
            })
            .sum::<usize>()
        + w.notes
            .iter()
            .map(|n| size_of::<String>() + n.len())
            .sum::<usize>()
}

fn live_rank_bytes(r: &LiveRank) -> usize {
    // A BTreeSet entry costs about its value plus a share of a node's bookkeeping.
    const SET_ENTRY: usize = size_of::<String>() + 16;
    size_of::<LiveRank>()
        + r.node.len()
        + r.host_ops
            .iter()
            .map(|(name, ..)| size_of::<(String, u8, f64)>() + name.len())
            .sum::<usize>()
        + r.compute
            .iter()
            .map(|(name, ..)| size_of::<(String, f64, u64)>() + name.len())
            .sum::<usize>()
        + r.groups.iter().map(|g| SET_ENTRY + g.len()).sum::<usize>()
        + r.nccl.as_ref().map_or(0, nccl_bytes)
        + startup_bytes(r.startup.as_ref())
}

fn startup_bytes(s: Option<&flare_model::StartupRecord>) -> usize {
    s.map_or(0, |s| {
        s.phases
            .iter()
            .map(|p| size_of_val(p) + opt_len(&p.name))
            .sum()
    })
}

fn opt_len(s: &Option<String>) -> usize {
    s.as_ref().map_or(0, String::len)
}

#[cfg(test)]
mod tests {
    use super::*;
    use flare_model::summary::SUMMARY_VERSION;
    use flare_model::{OpKind, OpStats};

    fn summary(node: &str, window: u64, ranks: u32, ops: usize) -> WindowSummary {
        WindowSummary {
            parallel: None,
            version: SUMMARY_VERSION,
            job_id: "j".into(),
            node: node.into(),
            window,
            window_ns: 1_000_000_000,
            start_unix_ns: 0,
            end_unix_ns: 1_000_000_000,
            world_size: ranks,
            ranks: (0..ranks)
                .map(|rank| RankSummary {
                    ops: (0..ops)
                        .map(|i| OpStats {
                            name: format!("op_{i}_with_a_name_of_some_length"),
                            kind: OpKind::Compute,
                            group: None,
                            group_size: None,
                            count: 1,
                            total_ns: 1,
                            p50_ns: 1,
                            p99_ns: 1,
                            max_ns: 1,
                            bytes: 0,
                            flops: 0,
                            bus_gbps: None,
                            tflops: None,
                            issue_p50_ns: None,
                            issue_p99_ns: None,
                        })
                        .collect(),
                    observed_ns: 1_000_000_000,
                    ..RankSummary::empty(rank, rank % 8, 100 + rank)
                })
                .collect(),
            hangs: vec![],
            peer_stacks: vec![],
            logs: None,
        }
    }

    #[test]
    fn weights_grow_with_what_a_summary_holds() {
        let small = summaries_bytes(&[summary("a", 0, 8, 10)]);
        let big = summaries_bytes(&[summary("a", 0, 10_000, 10)]);
        // 10,000 ranks of 10 ops: megabytes, as serde_json's decoding makes them.
        assert!(big > 1000 * small, "{small} {big}");
        assert!(big > 5 << 20, "{big}");
        let lw = LiveWindow::from_summaries(&[summary("a", 0, 10_000, 10)]);
        assert!(live_window_bytes(&lw) > 10_000 * size_of::<LiveRank>());
    }

    #[test]
    fn the_cache_stays_within_its_bytes() {
        let one = resident(summaries_bytes(&[summary("a", 0, 64, 10)]));
        let bound = 50 * one;
        let mut c = summaries_cache(bound);
        for w in 0..200 {
            c.put(
                ("j".into(), w),
                vec![summary("a", w, 64, 10)],
                Stamp::default(),
            );
            assert!(c.weight <= bound);
        }
        assert_eq!(c.entries.len(), 50);
        assert!(c.take(&("j".into(), 0)).is_none(), "oldest evicted");
        // A window analysed again replaces its entry, and its weight.
        let key = ("j".to_string(), 199);
        c.put(
            key.clone(),
            vec![summary("a", 199, 64, 10), summary("b", 199, 64, 10)],
            Stamp(2, 7),
        );
        assert_eq!(c.stamp(&key), Some(Stamp(2, 7)));
        assert!(c.weight <= bound);
        assert_eq!(c.get(&key).map(Vec::len), Some(2));
        // One entry larger than the bound stays while it is the one in use.
        c.put(
            ("j".into(), 500),
            vec![summary("a", 500, 64 * 60, 10)],
            Stamp::default(),
        );
        assert_eq!(c.entries.len(), 1);
        assert!(c.take(&("j".into(), 500)).is_some());
        assert_eq!(c.weight, 0);
    }
}
