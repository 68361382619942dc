//! Preprocessing shared by the detectors, computed once per window: iteration times,
//! collective instances (the same collective as seen by each member), and each rank's
//! "self time" before every sync op compared with the other members of that op.

use crate::stats::median;
use flare_model::{Op, OpKind, Trace};

/// One collective or P2P exchange: the same (communicator, sequence number) on every member.
#[derive(Clone, Debug)]
pub struct Instance {
    pub comm: u32,
    pub seq: u32,
    pub iteration: u32,
    pub kind: OpKind,
    pub name: u32,
    pub bytes: u64,
    /// Members the communicator has.
    pub expected: u32,
    /// Members the communicator has that the trace holds data for (sampled traces hold
    /// only some ranks; the others cannot be compared).
    pub expected_traced: u32,
    /// Members that recorded the op.
    pub present: u32,
    pub in_flight: u32,
    pub last_arrival: i64,
    pub second_last_arrival: i64,
    pub median_arrival: i64,
    pub last_rank: u32,
    /// Median end over members, when every present member finished.
    pub end: Option<i64>,
    /// Range into [`Analysis::members`].
    pub first_member: u32,
}

impl Instance {
    /// Time from the last arrival to the end: the transfer itself, without waiting.
    pub fn transfer_ns(&self) -> Option<i64> {
        self.end.map(|e| (e - self.last_arrival).max(0))
    }
}

/// A member of an instance: (index into `trace.ranks`, op index).
#[derive(Clone, Copy, Debug)]
pub struct Member {
    pub rank_index: u32,
    pub op: u32,
}

pub struct Analysis<'t> {
    pub trace: &'t Trace,
    /// Iteration numbers present, sorted.
    pub iterations: Vec<u32>,
    /// Duration of each iteration (median over ranks of their own span), ns; `None` when
    /// some rank never finished it.
    pub iteration_ns: Vec<Option<f64>>,
    pub instances: Vec<Instance>,
    pub members: Vec<Member>,
    /// Per (rank index, iteration index): how much longer this rank took, summed over its
    /// sync ops, to get from its previous sync op to this one than the median member. ns.
    pub self_excess_ns: Vec<f64>,
    /// The matching sum of median member times (the expected self time), ns.
    pub self_expected_ns: Vec<f64>,
    /// Per rank index: ops' instance index (u32::MAX for local ops), aligned with ops.
    pub op_instance: Vec<Vec<u32>>,
}

impl<'t> Analysis<'t> {
    pub fn iteration_index(&self, it: u32) -> Option<usize> {
        self.iterations.binary_search(&it).ok()
    }

    pub fn n_its(&self) -> usize {
        self.iterations.len()
    }

    /// Relative self excess of a rank in an iteration (NaN when unknown).
    pub fn relative_excess(&self, rank_index: usize, it_index: usize) -> f64 {
        let k = rank_index * self.n_its() + it_index;
        let e = self.self_expected_ns[k];
        if e > 0.0 {
            self.self_excess_ns[k] / e
        } else {
            f64::NAN
        }
    }

    pub fn instance_members(&self, inst: &Instance) -> &[Member] {
        let s = inst.first_member as usize;
        &self.members[s..s + inst.present as usize]
    }

    pub fn op(&self, m: Member) -> &Op {
        &self.trace.ranks[m.rank_index as usize].ops[m.op as usize]
    }

    pub fn new(trace: &'t Trace) -> Self {
        let iterations = trace.iterations();
        let n_its = iterations.len();
        let it_index = |it: u32| iterations.binary_search(&it).ok();

        // An iteration's duration is the median over ranks of each rank's own span: stages
        // overlap consecutive iterations, so first-start-to-last-end would overstate it.
        let mut durations: Vec<Vec<f64>> = vec![Vec::new(); n_its];
        let mut unfinished = vec![false; n_its];
        for r in &trace.ranks {
            for span in &r.iterations {
                let Some(i) = it_index(span.iteration) else {
                    continue;
                };
                match span.end_ns {
                    Some(e) if e > span.start_ns => durations[i].push((e - span.start_ns) as f64),
                    Some(_) => {}
                    None => unfinished[i] = true,
                }
            }
        }
        let iteration_ns: Vec<Option<f64>> = durations
            .iter_mut()
            .zip(&unfinished)
            .map(|(d, &u)| (!u && !d.is_empty()).then(|| median(d)))
            .collect();

        let mut traced = vec![false; trace.job.world_size as usize];
        for r in &trace.ranks {
            if let Some(t) = traced.get_mut(r.rank as usize) {
                *t = true;
            }
        }
        let traced_members: Vec<u32> = trace
            .communicators
            .iter()
            .map(|c| {
                c.members
                    .iter()
                    .filter(|&&m| traced.get(m as usize).copied().unwrap_or(false))
                    .count() as u32
            })
            .collect();
        // Group sync ops into instances by (communicator, sequence number).
        let mut keys: Vec<(u64, u32, u32)> = Vec::new();
        for (ri, r) in trace.ranks.iter().enumerate() {
            for (oi, o) in r.ops.iter().enumerate() {
                if o.kind.is_sync() && o.comm != Op::NO_COMM {
                    keys.push((((o.comm as u64) << 32) | o.seq as u64, ri as u32, oi as u32));
                }
            }
        }
        keys.sort_unstable();
        let mut op_instance: Vec<Vec<u32>> = trace
            .ranks
            .iter()
            .map(|r| vec![u32::MAX; r.ops.len()])
            .collect();
        let mut instances = Vec::new();
        let mut members = Vec::with_capacity(keys.len());
        let mut arrivals: Vec<i64> = Vec::new();
        let mut ends: Vec<f64> = Vec::new();
        let mut i = 0;
        while i < keys.len() {
            let mut j = i;
            while j < keys.len() && keys[j].0 == keys[i].0 {
                j += 1;
            }
            let first_member = members.len() as u32;
            arrivals.clear();
            ends.clear();
            let (mut last, mut second, mut last_rank, mut in_flight) = (i64::MIN, i64::MIN, 0, 0);
            let op0 = trace.ranks[keys[i].1 as usize].ops[keys[i].2 as usize];
            for &(_, ri, oi) in &keys[i..j] {
                let o = &trace.ranks[ri as usize].ops[oi as usize];
                op_instance[ri as usize][oi as usize] = instances.len() as u32;
                members.push(Member {
                    rank_index: ri,
                    op: oi,
                });
                arrivals.push(o.start_ns);
                if o.start_ns > last {
                    second = last;
                    last = o.start_ns;
                    last_rank = trace.ranks[ri as usize].rank;
                } else if o.start_ns > second {
                    second = o.start_ns;
                }
                match o.end() {
                    Some(e) => ends.push(e as f64),
                    None => in_flight += 1,
                }
            }
            let n = (j - i) as u32;
            arrivals.sort_unstable();
            let median_arrival = arrivals[arrivals.len() / 2];
            let end = (in_flight == 0).then(|| median(&mut ends) as i64);
            let expected = trace
                .communicators
                .get(op0.comm as usize)
                .map(|c| c.members.len() as u32)
                .unwrap_or(n);
            instances.push(Instance {
                comm: op0.comm,
                seq: op0.seq,
                iteration: op0.iteration,
                kind: op0.kind,
                name: op0.name,
                bytes: op0.amount,
                expected,
                expected_traced: traced_members.get(op0.comm as usize).copied().unwrap_or(n),
                present: n,
                in_flight,
                last_arrival: last,
                second_last_arrival: if n > 1 { second } else { last },
                median_arrival,
                last_rank,
                end,
                first_member,
            });
            i = j;
        }

        // Self time before each sync op of 3+ members: the time since this rank's previous
        // such op that it spent outside any sync op (compute, host work, launches), from the
        // start of its iteration for the first one. Waiting inside a P2P exchange in between
        // is excluded, but being late to it is not. Compared across the members of the same
        // instance, the excess is delay the rank made itself, not waiting it inherited.
        let comm_size = |c: u32| {
            trace
                .communicators
                .get(c as usize)
                .map_or(0, |c| c.members.len())
        };
        let mut gaps: Vec<Vec<i64>> = Vec::with_capacity(trace.ranks.len());
        for r in &trace.ranks {
            let mut g = vec![i64::MIN; r.ops.len()];
            let mut prev_end: Option<i64> = None;
            let mut acc: Option<i64> = None;
            let mut prev_it = u32::MAX;
            for (oi, o) in r.ops.iter().enumerate() {
                if !(o.kind.is_sync() && o.comm != Op::NO_COMM) {
                    continue;
                }
                if o.iteration != prev_it {
                    if let Some(span) = r.iterations.iter().find(|s| s.iteration == o.iteration) {
                        prev_end = Some(span.start_ns.max(prev_end.unwrap_or(i64::MIN)));
                        acc = Some(0);
                    }
                    prev_it = o.iteration;
                }
                if let (Some(p), Some(a)) = (prev_end, acc) {
                    acc = Some(a + (o.start_ns - p).max(0));
                } else {
                    acc = None;
                }
                if comm_size(o.comm) >= 3 {
                    if let Some(a) = acc {
                        g[oi] = a;
                    }
                    acc = Some(0);
                }
                prev_end = o.end();
                if prev_end.is_none() {
                    acc = None;
                }
            }
            gaps.push(g);
        }
        let mut self_excess_ns = vec![0.0; trace.ranks.len() * n_its];
        let mut self_expected_ns = vec![0.0; trace.ranks.len() * n_its];
        let mut buf: Vec<f64> = Vec::new();
        for inst in &instances {
            if inst.present < 3 || inst.present != inst.expected_traced {
                continue;
            }
            let ms = &members[inst.first_member as usize..][..inst.present as usize];
            buf.clear();
            buf.extend(
                ms.iter()
                    .map(|m| gaps[m.rank_index as usize][m.op as usize])
                    .filter(|&g| g != i64::MIN)
                    .map(|g| g as f64),
            );
            if buf.len() != ms.len() {
                continue;
            }
            let med = median(&mut buf);
            let Some(iti) = it_index(inst.iteration) else {
                continue;
            };
            for m in ms {
                let g = gaps[m.rank_index as usize][m.op as usize] as f64;
                let k = m.rank_index as usize * n_its + iti;
                self_excess_ns[k] += g - med;
                self_expected_ns[k] += med;
            }
        }

        Analysis {
            trace,
            iterations,
            iteration_ns,
            instances,
            members,
            self_excess_ns,
            self_expected_ns,
            op_instance,
        }
    }
}
