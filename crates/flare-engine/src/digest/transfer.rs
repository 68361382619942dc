//! Transfer classes and ratios: each instance's transfer time against comparable
//! instances of the iteration (same op kind, bytes and group size on other communicators
//! spanning as many pods), and each communicator's median ratio, for the slow-path
//! detector.

use super::{Instance, SpanTransfer};
use crate::context::JobContext;
use crate::par::par_each;
use crate::stats::{median, median_i64};
use flare_model::OpKind;

/// A class of comparable instances: (op kind, bytes, group size, pods spanned).
type TransferClass = (OpKind, u64, u32, u32);

/// One class of one part: its key, transfer times, how many times its communicator
/// changed from one instance to the next (counting the first), and the first and last
/// communicators.
struct PartClass {
    key: TransferClass,
    times: Vec<i64>,
    comms: u32,
    first_comm: u32,
    last_comm: u32,
}

/// An instance as the transfer ratios see it: its class (`u32::MAX` for none), its
/// communicator, and its transfer time when it has a class.
#[derive(Clone, Copy, Debug)]
struct Classified {
    class: u32,
    comm: u32,
    transfer: i64,
}

/// One part's transfer classes in order of first appearance, and each instance's class
/// (local index): pass 1 of [`comm_transfer`], filled by the instance pass as it makes
/// the instances, so that pass 2 reads these instead of the instances.
#[derive(Default)]
pub(super) struct PartClasses {
    classes: Vec<PartClass>,
    class_of: Vec<Classified>,
    /// The classes used last: a communicator's ops cycle through a few of them (P2P
    /// send, receive, ...).
    recent: [usize; 4],
}

impl PartClasses {
    pub(super) fn clear(&mut self) {
        self.classes.clear();
        self.class_of.clear();
    }

    /// Classifies the part's next instance.
    pub(super) fn add(&mut self, ctx: &JobContext, inst: &Instance) {
        let Some(t) = inst.compared_transfer() else {
            self.class_of.push(Classified {
                class: u32::MAX,
                comm: inst.comm,
                transfer: 0,
            });
            return;
        };
        let pods = ctx.comm_pods.get(inst.comm as usize).copied().unwrap_or(1);
        let key = (inst.kind, inst.bytes, inst.expected, pods);
        // A handful of classes per job: a linear map is faster than hashing.
        let classes = &mut self.classes;
        let c = match self
            .recent
            .iter()
            .copied()
            .find(|&c| c < classes.len() && classes[c].key == key)
        {
            Some(c) => c,
            None => match classes.iter().position(|c| c.key == key) {
                Some(c) => c,
                None => {
                    classes.push(PartClass {
                        key,
                        times: Vec::new(),
                        comms: 0,
                        first_comm: inst.comm,
                        last_comm: u32::MAX,
                    });
                    classes.len() - 1
                }
            },
        };
        if self.recent[0] != c {
            self.recent.rotate_right(1);
            self.recent[0] = c;
        }
        let entry = &mut classes[c];
        entry.times.push(t);
        if entry.last_comm != inst.comm {
            entry.comms += 1;
            entry.last_comm = inst.comm;
        }
        self.class_of.push(Classified {
            class: c as u32,
            comm: inst.comm,
            transfer: t,
        });
    }
}

/// Pass 2 of [`comm_transfer`] over one part: each instance's transfer over its class
/// median (1 where there is none) into `ratios`, and each communicator's median ratio.
fn transfer_ratios(
    instances: &[Classified],
    medians: &[Option<f64>],
    ratios: &mut [f32],
) -> Vec<(u32, f32)> {
    let ratio = |x: &Classified| {
        medians
            .get(x.class as usize)
            .copied()
            .flatten()
            .map(|m| x.transfer as f64 / m)
    };
    for (r, x) in ratios.iter_mut().zip(instances) {
        *r = ratio(x).map_or(1.0, |q| q as f32);
    }
    let mut out = Vec::new();
    let mut of_comm: Vec<f64> = Vec::new();
    for run in instances.chunk_by(|a, b| a.comm == b.comm) {
        of_comm.clear();
        of_comm.extend(run.iter().filter_map(ratio));
        if !of_comm.is_empty() {
            out.push((run[0].comm, median(&mut of_comm) as f32));
        }
    }
    out
}

/// Each communicator's transfer times against comparable instances of the iteration (same
/// op kind, bytes and group size on other communicators spanning as many pods): the
/// per-iteration input of the slow-path detector. The instance pass classified the
/// instances part by part (`parts`, in instance order); the classes are merged here in
/// order of first appearance (as one pass would number them), and the ratios computed in
/// `threads` parts cut at communicator boundaries.
pub(super) fn comm_transfer(
    parts: &[&PartClasses],
    per_instance: &mut Vec<f32>,
    class_medians: &mut Vec<SpanTransfer>,
    threads: usize,
) -> Vec<(u32, f32)> {
    let (mut classes, classified) = merge_classes(parts);
    let ranges = comm_bounded_parts(&classified, threads);
    let medians = medians_of(&mut classes, class_medians);
    ratios_in_parts(&classified, &medians, ranges, per_instance)
}

/// A class merged over the parts: its key, transfer times, how many times its
/// communicator changed (counting the first) and its last communicator so far.
type MergedClass = (TransferClass, Vec<i64>, u32, u32);

/// Merges the parts' classes into one class list, each part's classes mapped onto it (a
/// communicator cut between two parts is counted once), and every instance classified
/// by it, in instance order.
fn merge_classes(parts: &[&PartClasses]) -> (Vec<MergedClass>, Vec<Classified>) {
    let mut classes: Vec<MergedClass> = Vec::new();
    let n: usize = parts.iter().map(|p| p.class_of.len()).sum();
    let mut classified: Vec<Classified> = Vec::with_capacity(n);
    let mut global = Vec::new();
    for part in parts {
        global.clear();
        for c in &part.classes {
            let g = match classes.iter().position(|g| g.0 == c.key) {
                Some(g) => {
                    let cut = classes[g].3 == c.first_comm;
                    classes[g].1.extend_from_slice(&c.times);
                    classes[g].2 += c.comms - u32::from(cut);
                    classes[g].3 = c.last_comm;
                    g
                }
                None => {
                    classes.push((c.key, c.times.clone(), c.comms, c.last_comm));
                    classes.len() - 1
                }
            };
            global.push(g as u32);
        }
        classified.extend(part.class_of.iter().map(|&x| Classified {
            class: global.get(x.class as usize).copied().unwrap_or(u32::MAX),
            ..x
        }));
    }
    (classes, classified)
}

/// `threads` ranges of the classified instances cut at communicator boundaries: each
/// communicator's median ratio is taken in one part.
fn comm_bounded_parts(classified: &[Classified], threads: usize) -> Vec<std::ops::Range<usize>> {
    let threads = threads.clamp(1, classified.len().max(1));
    let mut bounds = vec![0usize];
    for t in 1..threads {
        let mut b = (classified.len() * t / threads).max(*bounds.last().unwrap_or(&0));
        while b > 0 && b < classified.len() && classified[b].comm == classified[b - 1].comm {
            b += 1;
        }
        bounds.push(b);
    }
    bounds.push(classified.len());
    bounds.windows(2).map(|w| w[0]..w[1]).collect()
}

/// Each class's median transfer time, where it has one to compare by (3 or more
/// instances on 3 or more communicators); every class with a positive median is added
/// to `class_medians`.
fn medians_of(
    classes: &mut [MergedClass],
    class_medians: &mut Vec<SpanTransfer>,
) -> Vec<Option<f64>> {
    classes
        .iter_mut()
        .map(|(key, v, comms, _)| {
            let n = v.len();
            let m = median_i64(v);
            if m > 0.0 {
                class_medians.push((key.0, key.1, key.2, key.3, m as f32, n as u32));
            }
            (n >= 3 && *comms >= 3 && m > 0.0).then_some(m)
        })
        .collect()
}

/// Pass 2 in `ranges`, one thread each, each writing its own share of `per_instance`;
/// each communicator's median ratio, in instance order.
fn ratios_in_parts(
    classified: &[Classified],
    medians: &[Option<f64>],
    ranges: Vec<std::ops::Range<usize>>,
    per_instance: &mut Vec<f32>,
) -> Vec<(u32, f32)> {
    per_instance.clear();
    per_instance.resize(classified.len(), 1.0);
    let mut work = Vec::new();
    let mut rest: &mut [f32] = per_instance;
    for r in ranges {
        let (mine, others) = rest.split_at_mut(r.len());
        work.push((r, mine, Vec::<(u32, f32)>::new()));
        rest = others;
    }
    par_each(&mut work, |_, (r, ratios, by_comm)| {
        *by_comm = transfer_ratios(&classified[r.clone()], medians, ratios)
    });
    work.into_iter()
        .flat_map(|(_, _, by_comm)| by_comm)
        .collect()
}
