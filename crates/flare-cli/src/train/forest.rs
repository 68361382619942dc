//! Training the abnormal-op classifier's random forest (CART trees on Gini impurity,
//! bootstrap samples, random candidate features per split). Only `flare train` trains;
//! the engine holds the model's types and predicts ([`flare_engine::forest`]).
//!
//! Training is reproducible: every tree draws its bootstrap sample and its candidate
//! features from a generator seeded by (seed, tree index), and trees are collected in
//! index order whatever the number of threads.

use flare_engine::forest::{Forest, Node, Tree, LEAF};
use serde::{Deserialize, Serialize};

/// Training parameters.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TrainConfig {
    pub trees: usize,
    pub max_depth: usize,
    pub min_leaf: usize,
    /// Candidate features per split (0: the square root of the feature count).
    pub mtry: usize,
    /// Bootstrap sample size as a fraction of the rows.
    pub sample_fraction: f64,
    pub seed: u64,
}

impl Default for TrainConfig {
    fn default() -> Self {
        TrainConfig {
            trees: 40,
            max_depth: 12,
            min_leaf: 20,
            mtry: 0,
            sample_fraction: 1.0,
            seed: 1,
        }
    }
}

/// SplitMix64: small, fast and good enough for sampling.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Self {
        Rng(seed)
    }
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

/// Trains a forest on `x` (row-major, `n_features` per row) with labels `y` (0 or 1),
/// using up to `threads` threads.
pub fn train(x: &[f32], y: &[u8], n_features: usize, cfg: &TrainConfig, threads: usize) -> Forest {
    assert!(
        n_features > 0 && x.len() == y.len() * n_features,
        "rows and labels disagree"
    );
    let n = y.len();
    let mtry = if cfg.mtry == 0 {
        ((n_features as f64).sqrt().round() as usize).max(1)
    } else {
        cfg.mtry.min(n_features)
    };
    let threads = threads.clamp(1, cfg.trees.max(1));
    let mut trees: Vec<Option<Tree>> = vec![None; cfg.trees];
    std::thread::scope(|s| {
        let chunks: Vec<&mut [Option<Tree>]> = trees
            .chunks_mut(cfg.trees.div_ceil(threads).max(1))
            .collect();
        let mut start = 0;
        for chunk in chunks {
            let first = start;
            start += chunk.len();
            s.spawn(move || {
                for (k, slot) in chunk.iter_mut().enumerate() {
                    let index = (first + k) as u64;
                    let mut rng = Rng::new(cfg.seed ^ index.wrapping_mul(0xD1B5_4A32_D192_ED03));
                    let m = ((n as f64 * cfg.sample_fraction).round() as usize).max(1);
                    let sample: Vec<u32> = (0..m).map(|_| rng.below(n) as u32).collect();
                    *slot = Some(grow(x, y, n_features, sample, mtry, cfg, &mut rng));
                }
            });
        }
    });
    Forest {
        n_features,
        trees: trees
            .into_iter()
            .map(|t| t.expect("every tree grown"))
            .collect(),
    }
}

fn leaf(y: &[u8], rows: &[u32]) -> Node {
    let pos = rows.iter().filter(|&&r| y[r as usize] == 1).count();
    Node(LEAF, pos as f32 / rows.len().max(1) as f32, 0, 0)
}

fn gini(pos: usize, n: usize) -> f64 {
    if n == 0 {
        return 0.0;
    }
    let p = pos as f64 / n as f64;
    2.0 * p * (1.0 - p)
}

fn grow(
    x: &[f32],
    y: &[u8],
    nf: usize,
    rows: Vec<u32>,
    mtry: usize,
    cfg: &TrainConfig,
    rng: &mut Rng,
) -> Tree {
    let mut nodes: Vec<Node> = vec![Node(LEAF, 0.0, 0, 0)];
    // (node index, rows, depth)
    let mut stack: Vec<(usize, Vec<u32>, usize)> = vec![(0, rows, 0)];
    let mut pairs: Vec<(f32, u8)> = Vec::new();
    let mut features: Vec<usize> = (0..nf).collect();
    while let Some((at, rows, depth)) = stack.pop() {
        let n = rows.len();
        let pos = rows.iter().filter(|&&r| y[r as usize] == 1).count();
        if depth >= cfg.max_depth || n < 2 * cfg.min_leaf || pos == 0 || pos == n {
            nodes[at] = leaf(y, &rows);
            continue;
        }
        let parent = gini(pos, n);
        // Candidate features: a partial Fisher-Yates shuffle.
        for i in 0..mtry {
            let j = i + rng.below(nf - i);
            features.swap(i, j);
        }
        let mut best: Option<(f64, usize, f32)> = None;
        for &f in &features[..mtry] {
            pairs.clear();
            pairs.extend(
                rows.iter()
                    .map(|&r| (x[r as usize * nf + f], y[r as usize])),
            );
            pairs.sort_unstable_by(|a, b| a.0.total_cmp(&b.0));
            let mut left_pos = 0usize;
            for i in 0..n - 1 {
                left_pos += pairs[i].1 as usize;
                let left = i + 1;
                if left < cfg.min_leaf || n - left < cfg.min_leaf || pairs[i].0 == pairs[i + 1].0 {
                    continue;
                }
                let g = (left as f64 * gini(left_pos, left)
                    + (n - left) as f64 * gini(pos - left_pos, n - left))
                    / n as f64;
                let gain = parent - g;
                if gain > 1e-12 && best.is_none_or(|b| gain > b.0) {
                    // The midpoint, rounded into f32 so that it separates the two values.
                    let mut t = (pairs[i].0 + pairs[i + 1].0) / 2.0;
                    if t >= pairs[i + 1].0 {
                        t = pairs[i].0;
                    }
                    best = Some((gain, f, t));
                }
            }
        }
        let Some((_, f, t)) = best else {
            nodes[at] = leaf(y, &rows);
            continue;
        };
        let (left, right): (Vec<u32>, Vec<u32>) =
            rows.into_iter().partition(|&r| x[r as usize * nf + f] <= t);
        let l = nodes.len();
        nodes.push(Node(LEAF, 0.0, 0, 0));
        nodes.push(Node(LEAF, 0.0, 0, 0));
        nodes[at] = Node(f as u16, t, l as u32, (l + 1) as u32);
        stack.push((l + 1, right, depth + 1));
        stack.push((l, left, depth + 1));
    }
    Tree { nodes }
}

#[cfg(test)]
mod tests {
    use super::*;
    use flare_engine::forest::BatchForest;

    /// Two noisy features; the label is x0 > 0.6 unless x1 is large.
    fn data(n: usize, seed: u64) -> (Vec<f32>, Vec<u8>) {
        let mut rng = Rng::new(seed);
        let mut x = Vec::new();
        let mut y = Vec::new();
        for _ in 0..n {
            let a = (rng.next() % 1000) as f32 / 1000.0;
            let b = (rng.next() % 1000) as f32 / 1000.0;
            x.extend([a, b, (rng.next() % 7) as f32]);
            y.push((a > 0.6 && b < 0.8) as u8);
        }
        (x, y)
    }

    #[test]
    fn learns_a_rule_reproducibly_and_thresholds_scale() {
        let (x, y) = data(4000, 7);
        let cfg = TrainConfig {
            trees: 12,
            max_depth: 8,
            min_leaf: 5,
            seed: 42,
            ..TrainConfig::default()
        };
        let f1 = train(&x, &y, 3, &cfg, 1);
        let f2 = train(&x, &y, 3, &cfg, 3);
        assert_eq!(
            f1, f2,
            "the same seed gives the same forest whatever the threads"
        );
        let f3 = train(
            &x,
            &y,
            3,
            &TrainConfig {
                seed: 43,
                ..cfg.clone()
            },
            2,
        );
        assert_ne!(f1, f3);
        let (xt, yt) = data(2000, 8);
        let correct = (0..yt.len())
            .filter(|&i| (f1.predict(&xt[i * 3..i * 3 + 3]) > 0.5) == (yt[i] == 1))
            .count();
        assert!(correct as f64 / yt.len() as f64 > 0.97, "{correct}");
        // Doubling feature 0 and its thresholds gives the same answers.
        let scale = [2.0, 1.0, 1.0];
        for i in 0..200 {
            let row = &xt[i * 3..i * 3 + 3];
            let doubled = [row[0] * 2.0, row[1], row[2]];
            assert_eq!(f1.predict(row), f1.predict_scaled(&doubled, &scale));
        }
        // The batched walk gives the same probabilities, bit for bit, NaN rows included,
        // for a row count that is not a multiple of the batch.
        let batch = BatchForest::new(&f1);
        let scale = [2.0, 1.0, 0.5];
        let mut rows: Vec<[f32; 3]> = (0..77)
            .map(|i| [xt[i * 3], xt[i * 3 + 1], xt[i * 3 + 2]])
            .collect();
        rows[5][1] = f32::NAN;
        let mut out = vec![0.0; rows.len()];
        batch.predict_scaled(&rows, &scale, &mut out);
        for (row, p) in rows.iter().zip(&out) {
            assert_eq!(p.to_bits(), f1.predict_scaled(row, &scale).to_bits());
        }
        let json = serde_json::to_string(&f1).unwrap();
        let back: Forest = serde_json::from_str(&json).unwrap();
        assert_eq!(back, f1, "thresholds survive JSON exactly");
    }
}
