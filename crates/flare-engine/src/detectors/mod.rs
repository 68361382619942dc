//! The detectors, one module each.

pub(crate) mod cause;
pub mod extra_work;
pub mod graph;
pub mod hang;
pub mod imbalance;
pub mod in_collective;
pub mod iteration;
pub mod machine;
pub mod metrics;
pub mod slow_path;
pub mod slow_rank;
pub mod startup;
pub mod topology;
pub mod watchdog;

/// Whether a delay shared evenly by these ranks (rank indices) is structural (a whole
/// stage or data-parallel replica doing more work) rather than a device: more ranks than a
/// device fault would involve, spread over more than one node (a slow node is a device).
pub(crate) fn structural(a: &crate::Analysis, ranks: &[usize]) -> bool {
    let limit = (a.n_ranks() / 64).max(4);
    if ranks.len() <= limit {
        return false;
    }
    let cluster = &a.ctx.job.cluster;
    let first = ranks.first().map(|&r| cluster.loc(a.rank_id(r)).node);
    ranks
        .iter()
        .any(|&r| Some(cluster.loc(a.rank_id(r)).node) != first)
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
