//! A random forest of CART trees for Holmes-style abnormal-op detection.
//!
//! Trained offline (`flare train`, whose CART training lives in the CLI: the engine only
//! predicts), stored as JSON in the repository and compiled into the engine. Our own implementation rather than a library's because Holmes adjusts the
//! split thresholds of features whose scale drifts with iteration time
//! ([`Forest::predict_scaled`]), which needs the trees themselves, and because inference
//! runs on tens of thousands of rows per iteration: flat node arrays, no allocation.

use serde::{Deserialize, Serialize};

/// One node: a split on `feature` at `threshold` (go left when `x <= threshold`), or a
/// leaf (`feature == LEAF`) whose `threshold` is the probability of the positive class.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Node(pub u16, pub f32, pub u32, pub u32);

pub const LEAF: u16 = u16::MAX;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Tree {
    pub nodes: Vec<Node>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Forest {
    pub n_features: usize,
    pub trees: Vec<Tree>,
}

/// How many rows [`BatchForest`] walks a tree with at once.
pub const BATCH: usize = 32;

/// A forest laid out for inference on many rows: each tree's nodes as one array whose
/// leaves lead back to themselves, so that every row takes the tree's depth in steps
/// without a branch, and the walks of a batch of rows overlap instead of waiting on
/// each other's loads and mispredicted branches. Gives what [`Forest::predict_scaled`]
/// gives, bit for bit.
#[derive(Clone, Debug)]
pub struct BatchForest {
    n_features: usize,
    trees: Vec<BatchTree>,
}

#[derive(Clone, Debug)]
struct BatchTree {
    /// Steps from the root to the deepest leaf.
    depth: usize,
    /// Per node: (feature, threshold, [left, right]); a leaf splits on feature 0 at
    /// infinity into itself both ways.
    nodes: Vec<(u16, f32, [u32; 2])>,
    /// Per node: the leaf's probability (0 for a split).
    value: Vec<f32>,
}

impl BatchForest {
    pub fn new(forest: &Forest) -> Self {
        let trees = forest
            .trees
            .iter()
            .map(|t| {
                let nodes: Vec<(u16, f32, [u32; 2])> = t
                    .nodes
                    .iter()
                    .enumerate()
                    .map(|(i, n)| match n.0 {
                        LEAF => (0, f32::INFINITY, [i as u32; 2]),
                        f => (f, n.1, [n.2, n.3]),
                    })
                    .collect();
                let value = t
                    .nodes
                    .iter()
                    .map(|n| if n.0 == LEAF { n.1 } else { 0.0 })
                    .collect();
                // Depth by a walk from the root (children come after their parent in
                // training order, but nothing here relies on it).
                let mut depth = 0;
                let mut stack = vec![(0usize, 0usize)];
                while let Some((i, d)) = stack.pop() {
                    match t.nodes.get(i) {
                        Some(n) if n.0 != LEAF && d < t.nodes.len() => {
                            stack.push((n.2 as usize, d + 1));
                            stack.push((n.3 as usize, d + 1));
                        }
                        _ => depth = depth.max(d),
                    }
                }
                BatchTree {
                    depth,
                    nodes,
                    value,
                }
            })
            .collect();
        BatchForest {
            n_features: forest.n_features,
            trees,
        }
    }

    /// [`Forest::predict_scaled`] of each row into `out`, [`BATCH`] rows at a time.
    pub fn predict_scaled<const K: usize>(
        &self,
        rows: &[[f32; K]],
        scale: &[f32],
        out: &mut [f32],
    ) {
        assert!(K >= self.n_features && scale.len() >= self.n_features);
        for (rows, out) in rows.chunks(BATCH).zip(out.chunks_mut(BATCH)) {
            let n = rows.len();
            // Summed in tree order from -0.0, as `Iterator::sum` does.
            let mut acc = [-0.0f32; BATCH];
            for t in &self.trees {
                let mut at = [0u32; BATCH];
                for _ in 0..t.depth {
                    for (a, x) in at[..n].iter_mut().zip(rows) {
                        let (f, threshold, next) = t.nodes[*a as usize];
                        let f = f as usize;
                        // Left when `x <= threshold`, right otherwise (NaN included).
                        let left = x[f] <= threshold * scale[f];
                        *a = next[usize::from(!left)];
                    }
                }
                for (s, a) in acc[..n].iter_mut().zip(&at) {
                    *s += t.value[*a as usize];
                }
            }
            let trees = self.trees.len() as f32;
            for (o, s) in out.iter_mut().zip(&acc) {
                *o = if self.trees.is_empty() {
                    0.0
                } else {
                    s / trees
                };
            }
        }
    }
}

impl Tree {
    #[inline]
    fn predict(&self, x: &[f32], scale: Option<&[f32]>) -> f32 {
        let mut i = 0usize;
        loop {
            let Node(f, t, l, r) = self.nodes[i];
            if f == LEAF {
                return t;
            }
            let t = match scale {
                Some(s) => t * s[f as usize],
                None => t,
            };
            i = if x[f as usize] <= t { l } else { r } as usize;
        }
    }
}

impl Forest {
    /// Probability of the positive class (abnormal): the mean of the trees' leaves.
    pub fn predict(&self, x: &[f32]) -> f32 {
        if self.trees.is_empty() {
            return 0.0;
        }
        self.trees.iter().map(|t| t.predict(x, None)).sum::<f32>() / self.trees.len() as f32
    }

    /// The same with every split threshold on feature `f` multiplied by `scale[f]`:
    /// Holmes' adjustment when the distribution of a time-valued feature drifts.
    pub fn predict_scaled(&self, x: &[f32], scale: &[f32]) -> f32 {
        if self.trees.is_empty() {
            return 0.0;
        }
        self.trees
            .iter()
            .map(|t| t.predict(x, Some(scale)))
            .sum::<f32>()
            / self.trees.len() as f32
    }

    /// How often each feature is split on (for the model's documentation).
    pub fn split_counts(&self) -> Vec<usize> {
        let mut c = vec![0; self.n_features];
        for t in &self.trees {
            for n in &t.nodes {
                if n.0 != LEAF {
                    c[n.0 as usize] += 1;
                }
            }
        }
        c
    }
}
