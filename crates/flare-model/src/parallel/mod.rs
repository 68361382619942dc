//! Parallel decomposition of a job into TP, CP, EP, DP and PP groups, in Megatron-LM's rank
//! order (`tp-cp-ep-dp-pp`: TP varies fastest) unless another order is configured.

mod launch;

pub use launch::PARALLEL_ENV;

use serde::{Deserialize, Serialize};
use std::fmt;

/// One dimension of the rank grid. Expert parallelism is carved out of data parallelism
/// (as in Megatron's expert-data-parallel groups), so it is not a grid dimension of its own.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Dim {
    Tp,
    Cp,
    Dp,
    Pp,
}

/// Sizes of the parallel groups and the order in which they vary across ranks.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ParallelConfig {
    pub tp: u32,
    pub cp: u32,
    /// Expert-parallel size; must divide `dp`. 1 means no MoE all-to-all.
    pub ep: u32,
    pub dp: u32,
    pub pp: u32,
    /// Fastest-varying dimension first.
    pub order: Vec<Dim>,
}

/// A rank's position in the grid.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct RankCoords {
    pub tp: u32,
    pub cp: u32,
    pub dp: u32,
    pub pp: u32,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParallelConfigError(pub String);

impl fmt::Display for ParallelConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}
impl std::error::Error for ParallelConfigError {}

impl ParallelConfig {
    pub const MEGATRON_ORDER: [Dim; 4] = [Dim::Tp, Dim::Cp, Dim::Dp, Dim::Pp];

    pub fn new(tp: u32, cp: u32, ep: u32, dp: u32, pp: u32) -> Result<Self, ParallelConfigError> {
        Self::with_order(tp, cp, ep, dp, pp, &Self::MEGATRON_ORDER)
    }

    pub fn with_order(
        tp: u32,
        cp: u32,
        ep: u32,
        dp: u32,
        pp: u32,
        order: &[Dim],
    ) -> Result<Self, ParallelConfigError> {
        for (name, v) in [("tp", tp), ("cp", cp), ("ep", ep), ("dp", dp), ("pp", pp)] {
            if v == 0 {
                return Err(ParallelConfigError(format!(
                    "{name} size must be at least 1"
                )));
            }
        }
        if !dp.is_multiple_of(ep) {
            return Err(ParallelConfigError(format!(
                "ep size {ep} must divide dp size {dp} (experts are sharded across data-parallel ranks)"
            )));
        }
        let mut seen = Vec::new();
        for d in order {
            if seen.contains(d) {
                return Err(ParallelConfigError(format!(
                    "dimension {d:?} repeats in the order"
                )));
            }
            seen.push(*d);
        }
        if seen.len() != 4 {
            return Err(ParallelConfigError(
                "the order must name each of tp, cp, dp and pp once".into(),
            ));
        }
        Ok(ParallelConfig {
            tp,
            cp,
            ep,
            dp,
            pp,
            order: order.to_vec(),
        })
    }

    /// Parse an order like `tp-cp-ep-dp-pp` (`ep` is accepted and ignored, see [`Dim`]).
    pub fn parse_order(s: &str) -> Result<Vec<Dim>, ParallelConfigError> {
        let mut out = Vec::new();
        for part in s.split('-') {
            match part.trim().to_ascii_lowercase().as_str() {
                "tp" => out.push(Dim::Tp),
                "cp" => out.push(Dim::Cp),
                "dp" => out.push(Dim::Dp),
                "pp" => out.push(Dim::Pp),
                "ep" => {}
                other => {
                    return Err(ParallelConfigError(format!(
                        "unknown parallel dimension '{other}' in order '{s}' (expected tp, cp, ep, dp, pp)"
                    )))
                }
            }
        }
        Ok(out)
    }

    pub fn world_size(&self) -> u32 {
        self.tp * self.cp * self.dp * self.pp
    }

    fn size(&self, d: Dim) -> u32 {
        match d {
            Dim::Tp => self.tp,
            Dim::Cp => self.cp,
            Dim::Dp => self.dp,
            Dim::Pp => self.pp,
        }
    }

    pub fn coords(&self, rank: u32) -> RankCoords {
        let mut c = RankCoords {
            tp: 0,
            cp: 0,
            dp: 0,
            pp: 0,
        };
        let mut r = rank;
        for &d in &self.order {
            let s = self.size(d);
            let v = r % s;
            r /= s;
            match d {
                Dim::Tp => c.tp = v,
                Dim::Cp => c.cp = v,
                Dim::Dp => c.dp = v,
                Dim::Pp => c.pp = v,
            }
        }
        c
    }

    pub fn rank_of(&self, c: RankCoords) -> u32 {
        let mut rank = 0;
        let mut stride = 1;
        for &d in &self.order {
            let v = match d {
                Dim::Tp => c.tp,
                Dim::Cp => c.cp,
                Dim::Dp => c.dp,
                Dim::Pp => c.pp,
            };
            rank += v * stride;
            stride *= self.size(d);
        }
        rank
    }

    /// All groups along dimension `d`: ranks that differ only in that coordinate.
    pub fn groups(&self, d: Dim) -> Vec<Vec<u32>> {
        let mut out = Vec::new();
        for rank in 0..self.world_size() {
            let c = self.coords(rank);
            let v = match d {
                Dim::Tp => c.tp,
                Dim::Cp => c.cp,
                Dim::Dp => c.dp,
                Dim::Pp => c.pp,
            };
            if v != 0 {
                continue;
            }
            let members = (0..self.size(d))
                .map(|i| {
                    let mut m = c;
                    match d {
                        Dim::Tp => m.tp = i,
                        Dim::Cp => m.cp = i,
                        Dim::Dp => m.dp = i,
                        Dim::Pp => m.pp = i,
                    }
                    self.rank_of(m)
                })
                .collect();
            out.push(members);
        }
        out
    }

    /// Expert-parallel groups: within each DP group, consecutive blocks of `ep` DP ranks.
    pub fn ep_groups(&self) -> Vec<Vec<u32>> {
        let mut out = Vec::new();
        for dp_group in self.groups(Dim::Dp) {
            for block in dp_group.chunks(self.ep as usize) {
                out.push(block.to_vec());
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn megatron_order_puts_tp_fastest() {
        let p = ParallelConfig::new(8, 1, 1, 4, 2).unwrap();
        assert_eq!(p.world_size(), 64);
        let c = p.coords(8 * 4 + 3);
        assert_eq!((c.tp, c.dp, c.pp), (3, 0, 1));
        for r in 0..64 {
            assert_eq!(p.rank_of(p.coords(r)), r);
        }
        let tp = p.groups(Dim::Tp);
        assert_eq!(tp.len(), 8);
        assert_eq!(tp[0], (0..8).collect::<Vec<_>>());
        let dp = p.groups(Dim::Dp);
        assert_eq!(dp[0], vec![0, 8, 16, 24]);
        let pp = p.groups(Dim::Pp);
        assert_eq!(pp[0], vec![0, 32]);
    }

    #[test]
    fn custom_order_and_errors() {
        let order = ParallelConfig::parse_order("tp-pp-dp-cp").unwrap();
        let p = ParallelConfig::with_order(2, 1, 1, 2, 2, &order).unwrap();
        assert_eq!(p.coords(2).pp, 1);
        assert!(ParallelConfig::new(2, 1, 3, 4, 1).is_err());
        assert!(ParallelConfig::parse_order("tp-xx").is_err());
        let moe = ParallelConfig::new(2, 1, 2, 4, 1).unwrap();
        assert_eq!(moe.ep_groups().len(), 4);
    }
}
