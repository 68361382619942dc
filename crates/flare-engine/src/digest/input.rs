//! What a build reads and carries over: each rank's ops for the iteration, each rank's
//! state from one iteration to the next, and where each iteration lies in a rank's ops.

use flare_model::{IterationSpan, Op};

/// One rank's ops for the iteration being digested: `ops` may hold ops of other
/// iterations too (they are skipped), `span` is its iteration span if it recorded one.
#[derive(Clone, Copy, Debug)]
pub struct RankSlice<'a> {
    pub rank_index: usize,
    pub ops: &'a [Op],
    pub span: Option<IterationSpan>,
}

/// Per-rank state carried from one iteration to the next: when its last sync op ended.
#[derive(Clone, Debug, Default)]
pub struct Carry {
    pub last_sync_end: Vec<Option<i64>>,
}

impl Carry {
    pub fn new(n_ranks: usize) -> Self {
        Carry {
            last_sync_end: vec![None; n_ranks],
        }
    }
}

/// Per rank, the range of its ops holding iteration `it`, for a trace whose ops are
/// (mostly) grouped by iteration: from the first op tagged `it` to the last.
pub fn iteration_ranges(ops: &[Op], iterations: &[u32]) -> Vec<(usize, usize)> {
    // One iteration whose first and last ops are tagged with it (a live or streamed
    // chunk): the range is every op, known without reading the ones in between.
    if let ([it], Some(first), Some(last)) = (iterations, ops.first(), ops.last()) {
        if first.iteration == *it && last.iteration == *it {
            return vec![(0, ops.len())];
        }
    }
    let mut out = vec![(usize::MAX, 0usize); iterations.len()];
    let mut cursor = 0usize;
    for (i, o) in ops.iter().enumerate() {
        // Iterations usually come in order: try the current one first.
        let k = if iterations.get(cursor) == Some(&o.iteration) {
            cursor
        } else {
            match iterations.binary_search(&o.iteration) {
                Ok(k) => {
                    cursor = k;
                    k
                }
                Err(_) => continue,
            }
        };
        let r = &mut out[k];
        r.0 = r.0.min(i);
        r.1 = i + 1;
    }
    out.into_iter()
        .map(|(a, b)| if a == usize::MAX { (0, 0) } else { (a, b) })
        .collect()
}
