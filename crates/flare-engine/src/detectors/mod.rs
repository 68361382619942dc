//! The detectors, one module each.

pub mod hang;
pub mod imbalance;
pub mod iteration;
pub mod slow_path;
pub mod slow_rank;

use flare_model::{Component, Culprit, Trace};

/// A culprit for one rank, with its place in the cluster and the job.
pub(crate) fn rank_culprit(trace: &Trace, component: Component, rank: u32) -> Culprit {
    let loc = trace.job.cluster.loc(rank);
    let mut c = Culprit::new(component);
    c.rank = Some(rank);
    c.node = Some(loc.node);
    c.local_gpu = Some(loc.local);
    if let Some(p) = &trace.job.parallel {
        let co = p.coords(rank);
        c.stage = Some(co.pp);
        c.dp_rank = Some(co.dp);
    }
    c
}

/// Formats a list of iterations compactly: `3-7, 12`.
pub(crate) fn iteration_ranges(its: &[u32]) -> String {
    let mut out = Vec::new();
    let mut i = 0;
    while i < its.len() {
        let mut j = i;
        while j + 1 < its.len() && its[j + 1] == its[j] + 1 {
            j += 1;
        }
        out.push(if i == j {
            its[i].to_string()
        } else {
            format!("{}-{}", its[i], its[j])
        });
        i = j + 1;
    }
    out.join(", ")
}
