//! Per-rank time breakdown: compute, communication, communication not hidden behind
//! compute (exposed), and idle time (the GPU runs nothing we traced: host stalls, launch
//! gaps, the "void" of XPUTimer).

use flare_model::{OpKind, RankTime, RankTrace, Trace};

/// Sorts and merges overlapping intervals in place.
fn merge(v: &mut Vec<(i64, i64)>) {
    // A stream's ops usually come in start order already.
    if !v.is_sorted() {
        v.sort_unstable();
    }
    let mut n = 0;
    for k in 0..v.len() {
        let (s, e) = v[k];
        if n > 0 && s <= v[n - 1].1 {
            v[n - 1].1 = v[n - 1].1.max(e);
        } else {
            v[n] = (s, e);
            n += 1;
        }
    }
    v.truncate(n);
}

fn total(v: &[(i64, i64)]) -> i64 {
    v.iter().map(|(s, e)| e - s).sum()
}

/// Length of the intersection of two sorted, merged interval lists.
fn overlap(a: &[(i64, i64)], b: &[(i64, i64)]) -> i64 {
    let (mut i, mut j, mut sum) = (0, 0, 0);
    while i < a.len() && j < b.len() {
        let lo = a[i].0.max(b[j].0);
        let hi = a[i].1.min(b[j].1);
        if hi > lo {
            sum += hi - lo;
        }
        if a[i].1 < b[j].1 {
            i += 1;
        } else {
            j += 1;
        }
    }
    sum
}

/// One rank's time, summed over iterations as they are added.
#[derive(Clone, Copy, Debug)]
struct Sums {
    rank: u32,
    lo: i64,
    hi: i64,
    compute: i64,
    comm: i64,
    both: i64,
}

/// Per-rank time breakdowns built iteration by iteration, so that a trace read in chunks
/// of iterations gets the same figures as one held whole. Within an iteration, compute and
/// communication are each merged (overlapping ops count once) and their overlap is the
/// hidden communication; the iterations' figures are summed; the window is from the
/// rank's first op to its last, and what no op covers is idle.
pub struct Breakdown {
    sums: Vec<Sums>,
    compute: Vec<(i64, i64)>,
    comm: Vec<(i64, i64)>,
}

impl Breakdown {
    /// An empty breakdown of `ranks` (in the order chunks will hold them).
    pub fn new(ranks: impl IntoIterator<Item = u32>) -> Self {
        Breakdown {
            sums: ranks
                .into_iter()
                .map(|rank| Sums {
                    rank,
                    lo: i64::MAX,
                    hi: i64::MIN,
                    compute: 0,
                    comm: 0,
                    both: 0,
                })
                .collect(),
            compute: Vec::new(),
            comm: Vec::new(),
        }
    }

    /// Adds the ops of `iterations` (sorted; every op of `ranks` belongs to one of them),
    /// `ranks` in the order given to [`Breakdown::new`].
    pub fn add(&mut self, ranks: &[RankTrace], iterations: &[u32]) {
        for (sum, r) in self.sums.iter_mut().zip(ranks) {
            debug_assert_eq!(sum.rank, r.rank);
            if let [_] = iterations {
                add_iteration(sum, r.ops.iter(), &mut self.compute, &mut self.comm);
                continue;
            }
            let ranges = crate::digest::iteration_ranges(&r.ops, iterations);
            for (&it, &(a, b)) in iterations.iter().zip(&ranges) {
                let ops = r.ops[a..b].iter().filter(|o| o.iteration == it);
                add_iteration(sum, ops, &mut self.compute, &mut self.comm);
            }
        }
    }

    /// The ranks that lose the most time (idle plus exposed communication), most first,
    /// at most `limit` of them.
    pub fn most_idle(&self, limit: usize) -> Vec<RankTime> {
        let mut v: Vec<RankTime> = self.sums.iter().map(rank_time_of).collect();
        v.sort_by(|x, y| {
            (y.idle_ms + y.exposed_communication_ms)
                .total_cmp(&(x.idle_ms + x.exposed_communication_ms))
        });
        v.truncate(limit);
        v
    }
}

fn add_iteration<'a>(
    sum: &mut Sums,
    ops: impl Iterator<Item = &'a flare_model::Op>,
    compute: &mut Vec<(i64, i64)>,
    comm: &mut Vec<(i64, i64)>,
) {
    compute.clear();
    comm.clear();
    for o in ops {
        let Some(end) = o.end() else { continue };
        sum.lo = sum.lo.min(o.start_ns);
        sum.hi = sum.hi.max(end);
        if o.kind == OpKind::Compute {
            compute.push((o.start_ns, end));
        } else if o.kind.is_sync() {
            comm.push((o.start_ns, end));
        }
    }
    merge(compute);
    merge(comm);
    sum.compute += total(compute);
    sum.comm += total(comm);
    sum.both += overlap(compute, comm);
}

fn rank_time_of(s: &Sums) -> RankTime {
    let ms = |ns: i64| ns as f64 / 1e6;
    if s.lo >= s.hi {
        return RankTime {
            rank: s.rank,
            window_ms: 0.0,
            compute_ms: 0.0,
            communication_ms: 0.0,
            exposed_communication_ms: 0.0,
            idle_ms: 0.0,
        };
    }
    let window = s.hi - s.lo;
    RankTime {
        rank: s.rank,
        window_ms: ms(window),
        compute_ms: ms(s.compute),
        communication_ms: ms(s.comm),
        exposed_communication_ms: ms(s.comm - s.both),
        idle_ms: ms((window - (s.compute + s.comm - s.both)).max(0)),
    }
}

/// One rank's breakdown over its whole trace (see [`Breakdown`]).
pub fn rank_time(r: &RankTrace) -> RankTime {
    let mut b = Breakdown::new([r.rank]);
    b.add(
        std::slice::from_ref(r),
        &flare_model::iterations_with_ops(std::slice::from_ref(r)),
    );
    rank_time_of(&b.sums[0])
}

/// The ranks of a whole trace that lose the most time, most first, at most `limit`.
pub fn most_idle(t: &Trace, limit: usize) -> Vec<RankTime> {
    let mut b = Breakdown::new(t.ranks.iter().map(|r| r.rank));
    b.add(&t.ranks, &t.iterations_with_ops());
    b.most_idle(limit)
}

#[cfg(test)]
mod tests {
    use super::*;
    use flare_model::Op;

    fn op(kind: OpKind, s: i64, e: i64) -> Op {
        Op {
            kind,
            name: 0,
            iteration: 0,
            comm: if kind.is_sync() { 0 } else { Op::NO_COMM },
            seq: 0,
            peer: Op::NO_PEER,
            start_ns: s,
            end_ns: e,
            issue_ns: Op::UNKNOWN,
            amount: 0,
        }
    }

    #[test]
    fn overlapping_communication_is_not_exposed() {
        let r = RankTrace {
            rank: 3,
            ops: vec![
                op(OpKind::Compute, 0, 10),
                op(OpKind::AllReduce, 5, 15),
                op(OpKind::Compute, 20, 30),
            ],
            iterations: vec![],
        };
        let t = rank_time(&r);
        assert_eq!(t.window_ms, 30.0 / 1e6);
        assert_eq!(t.compute_ms, 20.0 / 1e6);
        assert_eq!(t.communication_ms, 10.0 / 1e6);
        assert_eq!(t.exposed_communication_ms, 5.0 / 1e6);
        assert_eq!(t.idle_ms, 5.0 / 1e6);
    }

    #[test]
    fn chunks_of_iterations_give_the_whole_traces_figures() {
        let at = |it: u32, kind, s, e| Op {
            iteration: it,
            ..op(kind, s, e)
        };
        // Iteration 1's ops come after some of iteration 2's: the whole trace is not in
        // iteration order, so it is one chunk; each iteration is merged on its own.
        let ranks = vec![
            RankTrace {
                rank: 0,
                ops: vec![
                    at(1, OpKind::Compute, 0, 10),
                    at(2, OpKind::Compute, 8, 20),
                    at(1, OpKind::AllReduce, 10, 14),
                    at(2, OpKind::AllReduce, 30, 40),
                ],
                iterations: vec![],
            },
            RankTrace {
                rank: 1,
                ops: vec![at(2, OpKind::Compute, 100, 160)],
                iterations: vec![],
            },
        ];
        let mut whole = Breakdown::new([0, 1]);
        whole.add(&ranks, &[1, 2]);
        let mut chunked = Breakdown::new([0, 1]);
        for it in [1, 2] {
            let chunk: Vec<RankTrace> = ranks
                .iter()
                .map(|r| RankTrace {
                    rank: r.rank,
                    ops: r
                        .ops
                        .iter()
                        .copied()
                        .filter(|o| o.iteration == it)
                        .collect(),
                    iterations: vec![],
                })
                .collect();
            chunked.add(&chunk, &[it]);
        }
        assert_eq!(whole.most_idle(2), chunked.most_idle(2));
        let r0 = whole
            .most_idle(2)
            .into_iter()
            .find(|t| t.rank == 0)
            .unwrap();
        // Compute 10 + 12 (iterations apart), communication 4 + 10, none hidden; window 40.
        assert_eq!(r0.compute_ms, 22.0 / 1e6);
        assert_eq!(r0.exposed_communication_ms, 14.0 / 1e6);
        assert_eq!(r0.idle_ms, 4.0 / 1e6);
    }
}
