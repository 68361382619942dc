//! Each op group's duration against its own history.

use crate::digest::{Members, OpGroup};

/// Per (rank, communicator, name): an exponential average of the group's mean duration
/// over earlier iterations.
#[derive(Clone, Debug, Default)]
pub struct History {
    /// Per rank: (communicator, name, EWMA of the group's mean duration, iterations seen).
    per_rank: Vec<Vec<(u32, u32, f32, u32)>>,
}

impl History {
    const ALPHA: f32 = 0.3;

    pub fn new(n_ranks: usize) -> Self {
        History {
            per_rank: vec![Vec::new(); n_ranks],
        }
    }

    /// The group's typical mean duration, once it has been seen after its first
    /// iteration.
    pub fn get(&self, g: &OpGroup) -> Option<f32> {
        self.per_rank
            .get(g.rank_index as usize)?
            .iter()
            .find(|e| e.0 == g.comm && e.1 == g.name && e.3 >= 2)
            .map(|e| e.2)
    }

    /// Folds in an iteration's groups. A group's first iteration is a warm-up (the
    /// pipeline fills, allocators and autotuners settle): the second replaces it rather
    /// than averaging with it, or the EWMA would carry it for many iterations.
    pub fn update(&mut self, members: &Members) {
        for (_, g) in members.groups() {
            if g.n == 0 {
                continue;
            }
            let m = g.mean_d() as f32;
            let Some(v) = self.per_rank.get_mut(g.rank_index as usize) else {
                continue;
            };
            match v.iter_mut().find(|e| e.0 == g.comm && e.1 == g.name) {
                Some(e) if e.3 == 1 => *e = (e.0, e.1, m, 2),
                Some(e) => {
                    e.2 = (1.0 - Self::ALPHA) * e.2 + Self::ALPHA * m;
                    e.3 = e.3.saturating_add(1);
                }
                None => v.push((g.comm, g.name, m, 1)),
            }
        }
    }
}
