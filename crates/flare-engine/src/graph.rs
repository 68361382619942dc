//! Graph localization after Holmes: from abnormal ops to the device or path that caused
//! them, one iteration at a time.
//!
//! The graph joins each member of a collective or P2P exchange to the instance it belongs
//! to and to the same rank's previous sync op. Abnormal op groups are the symptoms; the
//! search explains each instance that holds abnormal members:
//!
//! - its *transfer* (end minus last arrival) is slow when every member is abnormal and the
//!   transfer is long against the same op on other communicators: the communicator's path
//!   is to blame (NIC, link or switch, told apart across iterations by
//!   [`crate::detectors::graph`]);
//! - its *waiting* (members idle until the last arrival) is explained by the last member
//!   to arrive among the normal ones (Holmes: "one member looks normal, backtrack to that
//!   GPU"). Either that rank was late by its own doing (its time since its previous sync
//!   op), and it is the root; or it was held up in its previous sync op (waiting there, or
//!   a slow transfer there), and the search follows that op to its own instance and cause
//!   (across stages for P2P: the sender of a late activation).
//!
//! Each instance's waiting (summed over its abnormal members) is credited to its root, its
//! excess transfer to its communicator, so a rank's blame is the time it made others wait.
//! A communicator that crosses no fabric element (a job without GPUs exchanging data
//! within a node through host memory, see [`JobContext::fabric`]) has no path to blame:
//! its slow transfers are its members' CPU time, and the search goes on to the late
//! member instead.

use crate::context::JobContext;
pub use crate::digest::{Blame, Root};
use crate::digest::{Instance, Members};

/// A transfer this much slower than the same op elsewhere, with every member abnormal,
/// blames the path; this much slower blames it whatever the members look like.
pub const PATH_RATIO: f32 = 1.2;
pub const STRONG_PATH_RATIO: f32 = 2.0;
/// A late member whose own time since its previous sync op exceeds its peers' by this
/// share of the delay being explained made that delay itself.
const OWN_SHARE: f64 = 0.5;
/// An earlier op where a member was held up by this share of the delay being explained
/// (or more) is where that delay came from.
const HELD_SHARE: f64 = 0.05;
/// How far back along a rank's earlier sync ops the search looks for where it was held.
const LOOK_BACK: usize = 64;
/// Peer communicators consulted for the normal time before an op.
const PEERS: usize = 16;

#[derive(Clone, Copy, PartialEq)]
enum State {
    Unknown,
    Pending,
    Done(Option<Root>),
}

/// Explains one iteration. `instances` and `transfer_ratio` are indexed by instance,
/// `abnormal` by op group. Instances are split over `threads`.
pub fn walk(
    ctx: &JobContext,
    members: &Members,
    instances: &[Instance],
    transfer_ratio: &[f32],
    abnormal: &[bool],
    threads: usize,
) -> Vec<Blame> {
    let threads = if instances.len() < 20_000 {
        1
    } else {
        threads.max(1)
    };
    let hits = members.abnormal_waits(abnormal, instances);
    let parts = crate::par::par_ranges(instances.len(), threads, |range| {
        let lo = hits.partition_point(|h| (h.0 as usize) < range.start);
        let hi = hits.partition_point(|h| (h.0 as usize) < range.end);
        walk_range(ctx, members, instances, transfer_ratio, &hits[lo..hi])
    });
    let mut blame: Vec<Blame> = Vec::new();
    for part in parts {
        for b in part {
            match blame.iter_mut().find(|x| x.root == b.root) {
                Some(x) => {
                    x.ns += b.ns;
                    x.instances += b.instances;
                }
                None => blame.push(b),
            }
        }
    }
    blame.sort_by_key(|b| b.root);
    blame
}

/// Walks the instances of `hits` ([`Members::abnormal_waits`] of one range).
fn walk_range(
    ctx: &JobContext,
    members: &Members,
    instances: &[Instance],
    transfer_ratio: &[f32],
    hits: &[(u32, u32, f64)],
) -> Vec<Blame> {
    let mut search = Search {
        ctx,
        members,
        instances,
        transfer_ratio,
        end_root: std::collections::HashMap::new(),
        gaps: Vec::new(),
        arrivals: Vec::new(),
    };
    let fabric = ctx.fabric();
    let has_path = |c: u32| {
        fabric
            .elements
            .get(c as usize)
            .is_some_and(|e| !e.is_empty())
    };
    let mut blame: Vec<Blame> = Vec::new();
    let mut credit = |root: Root, ns: f64| {
        if ns <= 0.0 {
            return;
        }
        match blame.iter_mut().find(|b| b.root == root) {
            Some(b) => {
                b.ns += ns;
                b.instances += 1;
            }
            None => blame.push(Blame {
                root,
                ns,
                instances: 1,
            }),
        }
    };
    for &(i, n_abnormal, wait) in hits {
        let i = i as usize;
        let inst = &instances[i];
        if inst.compared_transfer().is_none() {
            continue;
        }
        let (n, n_abnormal) = (inst.present as usize, n_abnormal as usize);
        let ratio = transfer_ratio.get(i).copied().unwrap_or(1.0);
        // Excess transfer: the path.
        if has_path(inst.comm)
            && ((n_abnormal == n && ratio >= PATH_RATIO) || ratio >= STRONG_PATH_RATIO)
        {
            let t = inst.transfer_ns().unwrap_or(0) as f64;
            let excess = t * (1.0 - 1.0 / ratio as f64) * n as f64;
            credit(Root::Comm(inst.comm), excess);
        }
        let Some((late, lateness)) = search.late_member(i) else {
            continue;
        };
        if wait > 0.0 && lateness > 0.0 {
            if let Some(root) = search.explain(i, late, lateness) {
                credit(root, wait);
            }
        }
    }
    blame
}

struct Search<'a> {
    ctx: &'a JobContext,
    members: &'a Members,
    instances: &'a [Instance],
    transfer_ratio: &'a [f32],
    /// Per instance followed: what made it end late (memoized).
    end_root: std::collections::HashMap<u32, State>,
    gaps: Vec<f64>,
    arrivals: Vec<i64>,
}

/// What the search concluded about one late member.
enum Step {
    Root(Root),
    /// Held up at this earlier instance for this long: follow it.
    Follow(usize, f64),
}

impl Search<'_> {
    /// The last member to arrive at an instance, with its lateness against the median
    /// member. Holmes backtracks on the member whose op "looks normal" (short: it did not
    /// wait), a proxy for the last arriver; with arrival times in the trace the search
    /// uses the last arriver itself. The median arrival is taken here, for the few
    /// instances searched, rather than for every instance when it is digested.
    fn late_member(&mut self, i: usize) -> Option<(u32, f64)> {
        let mut best: Option<(u32, i64)> = None;
        self.arrivals.clear();
        for m in self.members.of_instance(i) {
            let a = self.members.get(m).arrival;
            self.arrivals.push(a);
            if best.is_none_or(|b| a > b.1) {
                best = Some((m, a));
            }
        }
        let (m, a) = best?;
        // The upper median; of a pair (a P2P exchange), the other member: the upper
        // median of two is the last arrival itself, which would leave every P2P wait
        // unexplained.
        let mid = match self.arrivals.len() {
            2 => 0,
            n => n / 2,
        };
        let (_, &mut median, _) = self.arrivals.select_nth_unstable(mid);
        Some((m, (a - median).max(0) as f64))
    }

    /// How much longer member `id` (of instance `i`) took since its previous sync op than
    /// its peers took at the same point: the ranks of its peer group doing the same op on
    /// communicators of the same role. `None` without enough peers.
    fn own_excess(&mut self, i: usize, id: u32) -> Option<f64> {
        let m = *self.members.get(id);
        let gap = self.members.gap(id)?;
        let inst = &self.instances[i];
        let group = self.ctx.peer_group.get(m.rank_index as usize).copied()?;
        let roles = self.ctx.roles();
        let role = *roles.of.get(inst.comm as usize)?;
        let peers = &roles.members[role as usize];
        let offset = self.members.offset_of(inst.comm, inst.seq);
        let start = peers.partition_point(|&c| c <= inst.comm);
        self.gaps.clear();
        for k in 0..peers.len().min(PEERS + 1) {
            let c = peers[(start + k) % peers.len()];
            if c == inst.comm {
                continue;
            }
            let Some(j) = self.members.instance_at(c, offset) else {
                continue;
            };
            for x in self.members.of_instance(j) {
                let p = self.members.get(x);
                if self.ctx.peer_group[p.rank_index as usize] == group {
                    if let Some(g) = self.members.gap(x) {
                        self.gaps.push(g as f64);
                    }
                }
            }
        }
        // Without peer communicators, the other members of a collective do the same work.
        if self.gaps.len() < 3 && inst.present >= 3 {
            self.gaps.clear();
            for x in self.members.of_instance(i) {
                if let Some(g) = self.members.gap(x).filter(|_| x != id) {
                    self.gaps.push(g as f64);
                }
            }
        }
        if self.gaps.len() < 2 {
            return None;
        }
        Some(gap as f64 - crate::stats::median(&mut self.gaps))
    }

    /// Why member `late` of instance `i` arrived `delay` later than the members it made
    /// wait: its own work, or an earlier op where it was held up.
    fn step(&mut self, i: usize, late: u32, delay: f64) -> Step {
        let m = *self.members.get(late);
        if self
            .own_excess(i, late)
            .is_some_and(|o| o >= OWN_SHARE * delay)
        {
            return Step::Root(Root::Rank(m.rank_index));
        }
        // A rank that waited at a sync op is aligned with that op's last arrival: what
        // came before is absorbed, so the most recent op where it was held up is the one
        // its delay came from.
        let significant = (HELD_SHARE * delay).max(1e3);
        let mut k = self.members.prev(late);
        let mut steps = 0;
        while let Some(id) = k.filter(|_| steps < LOOK_BACK) {
            let p = self.members.get(id);
            let j = self.members.instance_of(id) as usize;
            if let Some(pj) = self.instances.get(j) {
                let waited = (pj.last_arrival - p.arrival).max(0) as f64;
                let ratio = self.transfer_ratio.get(j).copied().unwrap_or(1.0).max(1.0) as f64;
                let slow = pj.transfer_ns().unwrap_or(0) as f64 * (1.0 - 1.0 / ratio);
                if waited + slow >= significant {
                    return Step::Follow(j, (waited + slow).min(delay));
                }
            }
            k = self.members.prev(id);
            steps += 1;
        }
        Step::Root(Root::Rank(m.rank_index))
    }

    /// The root of a late member's delay, following held-up ops back through the graph.
    /// Iterative, so that long chains cannot exhaust the stack; what made each followed
    /// instance end late is memoized.
    fn explain(&mut self, i: usize, late: u32, delay: f64) -> Option<Root> {
        let (mut j, mut held) = match self.step(i, late, delay) {
            Step::Root(r) => return Some(r),
            Step::Follow(j, h) => (j, h),
        };
        let mut chain: Vec<usize> = Vec::new();
        let result = loop {
            match self
                .end_root
                .get(&(j as u32))
                .copied()
                .unwrap_or(State::Unknown)
            {
                State::Done(r) => break r,
                // Instances are held up only by earlier ones; a cycle ends the chain.
                State::Pending => break None,
                State::Unknown => {}
            }
            self.end_root.insert(j as u32, State::Pending);
            chain.push(j);
            let inst = &self.instances[j];
            let ratio = self.transfer_ratio.get(j).copied().unwrap_or(1.0).max(1.0) as f64;
            let excess = inst.transfer_ns().unwrap_or(0) as f64 * (1.0 - 1.0 / ratio);
            let has_path = self
                .ctx
                .fabric()
                .elements
                .get(inst.comm as usize)
                .is_some_and(|e| !e.is_empty());
            if has_path && ratio >= PATH_RATIO as f64 && excess >= OWN_SHARE * held {
                break Some(Root::Comm(inst.comm));
            }
            let Some((late, _)) = self.late_member(j) else {
                break None;
            };
            match self.step(j, late, held) {
                Step::Root(r) => break Some(r),
                Step::Follow(k, h) => {
                    j = k;
                    held = h;
                }
            }
        };
        for c in chain {
            self.end_root.insert(c as u32, State::Done(result));
        }
        result
    }
}
