//! The detectors, one module each.

pub mod hang;
pub mod imbalance;
pub mod iteration;
pub mod slow_path;
pub mod slow_rank;

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
