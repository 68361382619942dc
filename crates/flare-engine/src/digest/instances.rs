//! Pass 2, per instance: each slot's members (arrivals, ends) made into an
//! [`Instance`], each member's waiting and transfer, and its self time against the other
//! members'; one part (a range of slots) at a time (see `instance_parts`).

use super::members::{Chunk, Member, SlotOp};
use super::slots::SlotMap;
use super::transfer::PartClasses;
use super::Instance;
use crate::context::JobContext;
use crate::stats::median_i64;
use flare_model::Op;

/// One thread's sums over the parts of the instance pass it took; reused from iteration
/// to iteration.
#[derive(Default)]
pub(super) struct InstanceSums {
    /// Per rank index: self excess, self expected, wait, bus bytes, bus time.
    pub(super) per_rank: Vec<[f64; 5]>,
    /// Per op group (global id): waiting, transfer.
    pub(super) per_group: Vec<[f64; 2]>,
}

/// One part of the instance pass: a range of slots, whose instances and slots it writes
/// into its share of the iteration's arrays.
#[derive(Default)]
pub(super) struct InstancePart {
    pub(super) slots: std::ops::Range<usize>,
    /// (index into the part's instances, rank ids that arrived) of instances in flight.
    pub(super) arrived: Vec<(u32, Vec<u32>)>,
    /// The instances' transfer classes.
    pub(super) classes: PartClasses,
    /// Instances complete, with 2+ members and an end.
    pub(super) complete: u32,
}

/// How many slots ahead the instance pass prefetches members.
const PREFETCH_SLOTS: usize = 8;

#[inline(always)]
fn prefetch<T>(x: &T) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        // SAFETY: a prefetch is a hint that never faults; the pointer comes from a
        // reference anyway.
        unsafe { _mm_prefetch::<_MM_HINT_T0>((x as *const T).cast::<i8>()) };
    }
}

/// What every part of the instance pass reads.
#[derive(Clone, Copy)]
pub(super) struct InstanceJob<'a> {
    pub(super) ctx: &'a JobContext,
    pub(super) iteration: u32,
    pub(super) chunks: &'a [Chunk],
    pub(super) map: &'a SlotMap,
}

/// One part of the instance pass: writes the instances of its slots, in slot order, into
/// `instances` and their slots into `slots` (both exactly as long as the part has
/// instances), and adds into `sums`.
pub(super) fn instance_pass(
    job: &InstanceJob,
    out: &mut InstancePart,
    instances: &mut [Instance],
    slots: &mut [u32],
    sums: &mut InstanceSums,
) {
    let InstanceJob {
        ctx,
        iteration,
        chunks,
        map,
    } = *job;
    out.arrived.clear();
    out.classes.clear();
    out.complete = 0;
    let range = out.slots.clone();
    let mut made = 0usize;
    // References into the chunks, not copies: a slot's members are read a few times.
    let mut ms: Vec<(&Member, u32)> = Vec::new();
    // Integer timestamps: sorting them is cheaper than sorting floats.
    let mut ends: Vec<i64> = Vec::new();
    let mut gaps: Vec<i64> = Vec::new();
    let mut keys = map.keys_from(range.start);
    let end_slot = range.end;
    for slot in range {
        let key = keys.next().expect("a key for every slot");
        // Members are read out of order: ask for a later slot's lines ahead of time.
        let ahead = slot + PREFETCH_SLOTS;
        if ahead < end_slot {
            for c in chunks {
                for &k in c.in_slot(ahead) {
                    prefetch(&c.members[k as usize]);
                }
            }
        }
        let Some(op) = slot_members(chunks, slot, &mut ms) else {
            continue;
        };
        let inst = make_instance(ctx, iteration, key, op, &ms, &mut ends);
        if let Some(e) = inst.end {
            add_waits(sums, &ms, &inst, e);
        }
        // Self time against the other members': same work, so the excess is the rank's own.
        if inst.present >= 3 && inst.present == inst.expected_traced {
            add_self_time(sums, &ms, &mut gaps);
        }
        if inst.in_flight > 0 {
            out.arrived.push((
                made as u32,
                ms.iter()
                    .map(|(m, _)| ctx.ranks[m.rank_index as usize])
                    .collect(),
            ));
        }
        out.classes.add(ctx, &inst);
        out.complete += u32::from(inst.compared_transfer().is_some());
        instances[made] = inst;
        slots[made] = slot as u32;
        made += 1;
    }
    debug_assert_eq!(made, instances.len(), "instances counted before the pass");
}

/// The members of slot `slot` (with their global op group) into `ms`, in rank order, and
/// the op that stands for its instance; `None` when the slot has no member.
#[inline(always)]
fn slot_members<'c>(
    chunks: &'c [Chunk],
    slot: usize,
    ms: &mut Vec<(&'c Member, u32)>,
) -> Option<SlotOp> {
    ms.clear();
    let mut first_op = None;
    for c in chunks {
        let in_slot = c.in_slot(slot);
        if first_op.is_none() && !in_slot.is_empty() {
            first_op = Some(c.slot_op[slot]);
        }
        ms.extend(in_slot.iter().map(|&k| {
            let m = &c.members[k as usize];
            (m, c.group_base + m.group)
        }));
    }
    first_op
}

/// The instance of key (communicator, sequence) from its members `ms` and its op:
/// arrivals, members in flight, and the median end when every member ended.
#[inline(always)]
fn make_instance(
    ctx: &JobContext,
    iteration: u32,
    (comm, seq): (u32, u32),
    op: SlotOp,
    ms: &[(&Member, u32)],
    ends: &mut Vec<i64>,
) -> Instance {
    ends.clear();
    let (mut last, mut second, mut last_rank, mut in_flight) = (i64::MIN, i64::MIN, 0u32, 0u32);
    for (m, _) in ms {
        if m.arrival > last {
            second = last;
            last = m.arrival;
            last_rank = ctx.ranks[m.rank_index as usize];
        } else if m.arrival > second {
            second = m.arrival;
        }
        if m.end == Op::IN_FLIGHT {
            in_flight += 1;
        } else {
            ends.push(m.end);
        }
    }
    let n = ms.len() as u32;
    let end = (in_flight == 0).then(|| median_i64(ends) as i64);
    let known = (comm as usize) < ctx.communicators.len();
    let expected = if known { ctx.comm_size(comm) } else { n };
    let expected_traced = if known {
        ctx.comm_traced[comm as usize]
    } else {
        n
    };
    Instance {
        comm,
        seq,
        iteration,
        kind: op.kind,
        name: op.name,
        bytes: op.bytes,
        expected,
        expected_traced,
        present: n,
        in_flight,
        last_arrival: last,
        second_last_arrival: if n > 1 { second } else { last },
        last_rank,
        end,
    }
}

/// Waiting and bandwidth per member of an instance that ended at `end`.
#[inline(always)]
fn add_waits(sums: &mut InstanceSums, ms: &[(&Member, u32)], inst: &Instance, end: i64) {
    let last = inst.last_arrival;
    let transfer = (end - last).max(0) as f64;
    // Whole bytes: sums of integers come out the same in any order, and threads take
    // parts of the pass in no fixed order.
    let bus_bytes = (inst.bytes as f64 * inst.kind.bus_factor(inst.expected)).round();
    for (m, g) in ms {
        let wait = (last - m.arrival).max(0) as f64;
        let acc = &mut sums.per_rank[m.rank_index as usize];
        acc[2] += wait;
        if inst.bytes > 0 && transfer > 0.0 {
            acc[3] += bus_bytes;
            acc[4] += transfer;
        }
        let ga = &mut sums.per_group[*g as usize];
        ga[0] += wait;
        ga[1] += (m.end - last).max(0) as f64;
    }
}

/// Each member's self time (since its previous sync op of 3+ members) against the
/// median of the instance's members, when every member's is known.
#[inline(always)]
fn add_self_time(sums: &mut InstanceSums, ms: &[(&Member, u32)], gaps: &mut Vec<i64>) {
    gaps.clear();
    gaps.extend(ms.iter().map(|(m, _)| m.gap3).filter(|&g| g != i64::MIN));
    if gaps.len() == ms.len() {
        let med = median_i64(gaps);
        for (m, _) in ms {
            let acc = &mut sums.per_rank[m.rank_index as usize];
            acc[0] += m.gap3 as f64 - med;
            acc[1] += med;
        }
    }
}
