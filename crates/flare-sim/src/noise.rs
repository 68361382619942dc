//! Order-independent randomness: every draw is a hash of the seed and a key saying what
//! it is for, so the simulation gives the same result whatever order ranks run in.

use rand::SeedableRng;
use rand_xoshiro::Xoshiro256PlusPlus;

#[derive(Clone, Copy, Debug)]
pub struct Noise {
    seed: u64,
}

fn splitmix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

impl Noise {
    pub fn new(seed: u64) -> Self {
        Noise { seed }
    }

    fn hash(&self, key: &[u64]) -> u64 {
        let mut h = splitmix(self.seed);
        for &k in key {
            h = splitmix(h ^ k);
        }
        h
    }

    /// Uniform in [0, 1).
    pub fn uniform(&self, key: &[u64]) -> f64 {
        (self.hash(key) >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// Standard normal (Box-Muller).
    pub fn normal(&self, key: &[u64]) -> f64 {
        let h = self.hash(key);
        let u1 = ((h >> 11) as f64 + 0.5) * (1.0 / (1u64 << 53) as f64);
        let u2 = (splitmix(h) >> 11) as f64 * (1.0 / (1u64 << 53) as f64);
        (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
    }

    /// A seeded generator for sequential draws (fault parameters).
    pub fn rng(&self, tag: u64) -> Xoshiro256PlusPlus {
        Xoshiro256PlusPlus::seed_from_u64(self.hash(&[tag]))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::Rng;

    #[test]
    fn different_seeds_draw_different_faults() {
        let draws: Vec<u32> = (0..64u64)
            .map(|s| Noise::new(s).rng(0xFA17).random_range(0..1024))
            .collect();
        let mut uniq = draws.clone();
        uniq.sort_unstable();
        uniq.dedup();
        assert!(uniq.len() > 50, "{draws:?}");
    }
}
