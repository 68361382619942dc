//! The classes op groups are compared within, and each group's features against its
//! class.

use super::{History, N_FEATURES};
use crate::context::JobContext;
use crate::digest::{Members, OpGroup};
use crate::stats::median;
use flare_model::OpKind;

/// Key of a group's class: the same op (kind, name, bytes) on a communicator of the same
/// size, on ranks of the same peer group (pipeline stage): a stage's receives wait for
/// its upstream stages by design, so they are compared with the same stage's only.
type ClassKey = (OpKind, u32, u64, u32, u32);

/// Below this many op groups the class figures are computed on one thread.
const PARALLEL_GROUPS: usize = 4096;

/// Per class in one iteration: median and robust deviation of group mean durations,
/// plain mean and standard deviation (for the 3-sigma rule), median mean transfer.
#[derive(Clone, Copy, Debug)]
pub(super) struct ClassRef {
    pub median: f64,
    pub mad: f64,
    pub mean: f64,
    pub std: f64,
    pub transfer: f64,
}

/// The classes of an iteration's groups and their references.
pub struct Classes {
    keys: Vec<ClassKey>,
    pub(super) refs: Vec<ClassRef>,
    /// Per group (by position in `Members::groups()` order): its class index.
    pub(super) of_group: Vec<u32>,
}

impl Classes {
    pub fn new(ctx: &JobContext, members: &Members, threads: usize) -> Self {
        let mut keys: Vec<ClassKey> = Vec::new();
        let mut index: std::collections::HashMap<ClassKey, usize> = Default::default();
        let mut means: Vec<Vec<f64>> = Vec::new();
        let mut transfers: Vec<Vec<f64>> = Vec::new();
        let mut of_group = Vec::with_capacity(members.n_groups());
        // Ranks of one peer group have the same few classes in turn: the recently used
        // ones are checked before the map.
        const RECENT: usize = 16;
        let mut recent = [usize::MAX; RECENT];
        let mut next_slot = 0;
        for (_, g) in members.groups() {
            let peers = ctx
                .peer_group
                .get(g.rank_index as usize)
                .copied()
                .unwrap_or(0);
            let key = (g.kind, g.name, g.bytes, ctx.comm_size(g.comm), peers);
            let c = match recent.iter().find(|&&c| c < keys.len() && keys[c] == key) {
                Some(&c) => c,
                None => {
                    let c = *index.entry(key).or_insert_with(|| {
                        keys.push(key);
                        means.push(Vec::new());
                        transfers.push(Vec::new());
                        keys.len() - 1
                    });
                    recent[next_slot] = c;
                    next_slot = (next_slot + 1) % RECENT;
                    c
                }
            };
            of_group.push(c as u32);
            if g.n > 0 {
                means[c].push(g.mean_d());
                transfers[c].push(g.sum_transfer / g.n as f64);
            }
        }
        // Each class's reference figures, the classes split between the threads.
        let mut work: Vec<(&mut Vec<f64>, &mut Vec<f64>)> =
            means.iter_mut().zip(transfers.iter_mut()).collect();
        let reference = |(m, t): &mut (&mut Vec<f64>, &mut Vec<f64>)| {
            let n = m.len().max(1) as f64;
            let mean = m.iter().sum::<f64>() / n;
            let std = (m.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>() / n).sqrt();
            let (median_v, mad) = crate::stats::median_mad(m);
            ClassRef {
                median: median_v,
                mad,
                mean,
                std,
                transfer: if t.is_empty() { f64::NAN } else { median(t) },
            }
        };
        let parts = if members.n_groups() >= PARALLEL_GROUPS {
            threads.max(1)
        } else {
            1
        };
        let per_part = work.len().div_ceil(parts).max(1);
        let mut parts: Vec<_> = work
            .chunks_mut(per_part)
            .map(|c| (c, Vec::<ClassRef>::new()))
            .collect();
        crate::par::par_each(&mut parts, |_, (classes, refs)| {
            *refs = classes.iter_mut().map(reference).collect()
        });
        let refs: Vec<ClassRef> = parts.into_iter().flat_map(|(_, refs)| refs).collect();
        Classes {
            keys,
            refs,
            of_group,
        }
    }

    pub fn len(&self) -> usize {
        self.keys.len()
    }

    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }
}

/// The features of one group. `pos` is its position in `Members::groups()` order,
/// `durations` a scratch buffer.
#[allow(clippy::too_many_arguments)]
pub fn features(
    ctx: &JobContext,
    members: &Members,
    classes: &Classes,
    history: &History,
    iteration_ratio: f64,
    id: u32,
    pos: usize,
    g: &OpGroup,
    durations: &mut Vec<f64>,
) -> [f32; N_FEATURES] {
    let r = classes.refs[classes.of_group[pos] as usize];
    let refd = r.median.max(1.0);
    let mean = g.mean_d();
    members.durations(id, durations);
    let (q1, q2, q3) = quartiles(durations);
    let n = g.n.max(1) as f64;
    let history_ratio = history
        .get(g)
        .filter(|h| *h > 0.0)
        .map_or(1.0, |h| mean / h as f64);
    let transfer = g.sum_transfer / n;
    [
        (mean / refd) as f32,
        (g.std_d() / refd) as f32,
        ((mean - r.median) / r.mad.max(0.02 * refd)) as f32,
        (q1 / refd) as f32,
        (q2 / refd) as f32,
        (q3 / refd) as f32,
        ((q3 - q1) / refd) as f32,
        (g.max_d / refd) as f32,
        (1.0 + g.bytes as f64).log2() as f32,
        (ctx.comm_size(g.comm).max(1) as f64).log2() as f32,
        g.kind.is_p2p() as u8 as f32,
        (1.0 + g.n as f64).log2() as f32,
        ((g.sum_wait / n) / refd) as f32,
        if r.transfer > 0.0 {
            (transfer / r.transfer) as f32
        } else {
            1.0
        },
        history_ratio as f32,
        iteration_ratio as f32,
    ]
}

/// Quartiles (linear interpolation) of a set; zeros when empty. Reorders it.
pub(super) fn quartiles(v: &mut [f64]) -> (f64, f64, f64) {
    if v.is_empty() {
        return (0.0, 0.0, 0.0);
    }
    v.sort_unstable_by(|a, b| a.total_cmp(b));
    let q = |p: f64| {
        let x = p * (v.len() - 1) as f64;
        let (lo, hi) = (x.floor() as usize, x.ceil() as usize);
        v[lo] + (v[hi] - v[lo]) * (x - lo as f64)
    };
    (q(0.25), q(0.5), q(0.75))
}
