//! Per-rank time breakdown: compute, communication, communication not hidden behind
//! compute (exposed), and idle time (the GPU runs nothing we traced: host stalls, launch
//! gaps, the "void" of XPUTimer).

use flare_model::{OpKind, RankTime, RankTrace, Trace};

fn merge(mut v: Vec<(i64, i64)>) -> Vec<(i64, i64)> {
    v.sort_unstable();
    let mut out: Vec<(i64, i64)> = Vec::with_capacity(v.len());
    for (s, e) in v {
        match out.last_mut() {
            Some(last) if s <= last.1 => last.1 = last.1.max(e),
            _ => out.push((s, e)),
        }
    }
    out
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

/// One rank's breakdown over its whole trace.
pub fn rank_time(r: &RankTrace) -> RankTime {
    let (mut lo, mut hi) = (i64::MAX, i64::MIN);
    let mut compute = Vec::new();
    let mut comm = Vec::new();
    for o in &r.ops {
        let Some(end) = o.end() else { continue };
        lo = lo.min(o.start_ns);
        hi = hi.max(end);
        if o.kind == OpKind::Compute {
            compute.push((o.start_ns, end));
        } else if o.kind.is_sync() {
            comm.push((o.start_ns, end));
        }
    }
    if lo >= hi {
        return RankTime {
            rank: r.rank,
            window_ms: 0.0,
            compute_ms: 0.0,
            communication_ms: 0.0,
            exposed_communication_ms: 0.0,
            idle_ms: 0.0,
        };
    }
    let compute = merge(compute);
    let comm = merge(comm);
    let (c, m) = (total(&compute), total(&comm));
    let both = overlap(&compute, &comm);
    let window = hi - lo;
    let ms = |ns: i64| ns as f64 / 1e6;
    RankTime {
        rank: r.rank,
        window_ms: ms(window),
        compute_ms: ms(c),
        communication_ms: ms(m),
        exposed_communication_ms: ms(m - both),
        idle_ms: ms((window - (c + m - both)).max(0)),
    }
}

/// The ranks that lose the most time (idle plus exposed communication), most first, at
/// most `limit` of them.
pub fn most_idle(t: &Trace, limit: usize) -> Vec<RankTime> {
    let mut v: Vec<RankTime> = t.ranks.iter().map(rank_time).collect();
    v.sort_by(|x, y| {
        (y.idle_ms + y.exposed_communication_ms)
            .total_cmp(&(x.idle_ms + x.exposed_communication_ms))
    });
    v.truncate(limit);
    v
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
}
