//! Bayesian online change-point detection (Adams and MacKay, 2007) on iteration times.
//!
//! Iteration times are modelled in log space (a fail-slow onset multiplies them) as
//! Gaussian segments with unknown mean and variance (a Normal-Gamma prior, Student-t
//! predictive), and a constant hazard of a change per iteration. The run-length posterior
//! is updated one iteration at a time, so the same code serves the streaming engine. A
//! change point is kept only when the segments it separates differ by at least
//! `min_shift` (10% by default) in median: smaller shifts are noise for an operator.
//! A segment that returns to the level before it within `spike_len` iterations is a
//! spike, not an onset.

/// Parameters of the detector.
#[derive(Clone, Debug)]
pub struct ChangeConfig {
    /// Expected iterations between changes (the hazard is its inverse).
    pub expected_run: f64,
    /// Smallest relative shift of the segment median that counts.
    pub min_shift: f64,
    /// Posterior probability of a recent change needed to cut a segment.
    pub min_probability: f64,
    /// A segment this short that returns to the earlier level is a spike.
    pub spike_len: usize,
    /// Iterations a level must have held before a change counts (the first iterations
    /// of a job are warm-up, not a baseline).
    pub min_before: usize,
}

impl Default for ChangeConfig {
    fn default() -> Self {
        ChangeConfig {
            expected_run: 50.0,
            min_shift: 0.10,
            min_probability: 0.5,
            spike_len: 2,
            min_before: 3,
        }
    }
}

/// A shift of the iteration time.
#[derive(Clone, Debug, PartialEq)]
pub struct ChangePoint {
    /// Index (into the series) of the first iteration of the new level.
    pub index: usize,
    /// Median iteration time before (the previous segment) and after (this segment).
    pub before: f64,
    pub after: f64,
    /// Iterations the new level lasted (to the next kept change or the end).
    pub len: usize,
    /// Posterior probability that a change happened here.
    pub probability: f64,
    /// The level came back within `spike_len` iterations.
    pub spike: bool,
}

impl ChangePoint {
    pub fn ratio(&self) -> f64 {
        self.after / self.before
    }
}

/// Sufficient statistics of one run-length hypothesis.
#[derive(Clone, Copy)]
struct Params {
    mu: f64,
    kappa: f64,
    alpha: f64,
    beta: f64,
}

impl Params {
    fn update(self, x: f64) -> Params {
        let kappa = self.kappa + 1.0;
        Params {
            mu: (self.kappa * self.mu + x) / kappa,
            kappa,
            alpha: self.alpha + 0.5,
            beta: self.beta + self.kappa * (x - self.mu) * (x - self.mu) / (2.0 * kappa),
        }
    }

    /// Log predictive density (Student-t) of `x`.
    fn log_pred(&self, x: f64) -> f64 {
        let nu = 2.0 * self.alpha;
        let scale2 = self.beta * (self.kappa + 1.0) / (self.alpha * self.kappa);
        let z = (x - self.mu) * (x - self.mu) / (nu * scale2);
        ln_gamma((nu + 1.0) / 2.0)
            - ln_gamma(nu / 2.0)
            - 0.5 * (nu * std::f64::consts::PI * scale2).ln()
            - (nu + 1.0) / 2.0 * z.ln_1p()
    }
}

/// Lanczos approximation of ln Γ(x) for x > 0.
fn ln_gamma(x: f64) -> f64 {
    const G: [f64; 9] = [
        0.999_999_999_999_809_9,
        676.520_368_121_885_1,
        -1_259.139_216_722_402_8,
        771.323_428_777_653_1,
        -176.615_029_162_140_6,
        12.507_343_278_686_905,
        -0.138_571_095_265_720_12,
        9.984_369_578_019_572e-6,
        1.505_632_735_149_311_6e-7,
    ];
    if x < 0.5 {
        return std::f64::consts::PI.ln()
            - (std::f64::consts::PI * x).sin().abs().ln()
            - ln_gamma(1.0 - x);
    }
    let x = x - 1.0;
    let mut a = G[0];
    let t = x + 7.5;
    for (i, g) in G.iter().enumerate().skip(1) {
        a += g / (x + i as f64);
    }
    0.5 * (2.0 * std::f64::consts::PI).ln() + (x + 0.5) * t.ln() - t + a.ln()
}

fn median_of(v: &[f64]) -> f64 {
    let mut w = v.to_vec();
    crate::stats::median(&mut w)
}

/// The change points of a series of iteration times (ns or any positive unit).
pub fn change_points(series: &[f64], cfg: &ChangeConfig) -> Vec<ChangePoint> {
    points_at(series, cuts(series, cfg), cfg)
}

/// As [`change_points`], and again inside each level found, to a few levels deep: the
/// detector's prior is centred on a segment's first iterations, so a large change (a
/// slow warm-up, then the job's level) leaves a smaller one later in the same run
/// unseen; looked for in the new level alone, it stands out.
pub fn change_points_within_levels(series: &[f64], cfg: &ChangeConfig) -> Vec<ChangePoint> {
    // the cuts of `level` (which begins at `offset`), and again inside each of its levels
    fn refine(
        level: &[f64],
        offset: usize,
        depth: u32,
        cfg: &ChangeConfig,
        out: &mut Vec<(usize, f64)>,
    ) {
        let found = cuts(level, cfg);
        out.extend(found.iter().map(|&(t, p)| (offset + t, p)));
        if depth == 0 || found.is_empty() {
            return;
        }
        let bounds: Vec<usize> = std::iter::once(0)
            .chain(found.iter().map(|c| c.0))
            .chain(std::iter::once(level.len()))
            .collect();
        for w in bounds.windows(2) {
            if w[1] - w[0] >= 2 * cfg.min_before.max(2) {
                refine(&level[w[0]..w[1]], offset + w[0], depth - 1, cfg, out);
            }
        }
    }
    let mut all = Vec::new();
    refine(series, 0, 3, cfg, &mut all);
    all.sort_by_key(|c| c.0);
    all.dedup_by_key(|c| c.0);
    points_at(series, all, cfg)
}

/// Candidate cuts of a series (index of a new level's first point, probability): local
/// maxima of the posterior probability of a change, above the threshold.
fn cuts(series: &[f64], cfg: &ChangeConfig) -> Vec<(usize, f64)> {
    let xs: Vec<f64> = series
        .iter()
        .filter(|v| v.is_finite() && **v > 0.0)
        .map(|v| v.ln())
        .collect();
    if xs.len() < 4 || xs.len() != series.len() {
        return vec![];
    }
    // The prior's scale from the typical step between consecutive iterations (robust to
    // the shifts being looked for), floored at 0.5% so that a perfectly steady series
    // does not turn rounding into changes.
    let diffs: Vec<f64> = xs.windows(2).map(|w| (w[1] - w[0]).abs()).collect();
    let sigma = (1.4826 * median_of(&diffs) / std::f64::consts::SQRT_2).max(0.005);
    let prior = Params {
        mu: median_of(&xs[..xs.len().min(3)]),
        kappa: 0.1,
        alpha: 2.0,
        beta: 2.0 * sigma * sigma,
    };
    let hazard = 1.0 / cfg.expected_run.max(1.0);
    let (lh, l1h) = (hazard.ln(), (1.0 - hazard).ln());
    // Log run-length posterior and parameters per run length.
    let mut log_r: Vec<f64> = vec![0.0];
    let mut params: Vec<Params> = vec![prior];
    // Probability that a run started at each index, judged with up to LAG later points
    // (a single point cannot tell an onset from an outlier).
    const LAG: usize = 3;
    let mut p_change = vec![0.0f64; xs.len()];
    for (t, &x) in xs.iter().enumerate() {
        let preds: Vec<f64> = params.iter().map(|p| p.log_pred(x)).collect();
        let mut next = Vec::with_capacity(log_r.len() + 1);
        // A new run that starts with x_t: the hazard times x_t's density under the prior
        // (the run-length posterior sums to one).
        next.push(lh + prior.log_pred(x));
        next.extend(log_r.iter().zip(&preds).map(|(r, p)| r + p + l1h));
        let z = log_sum_exp(&next);
        for v in next.iter_mut() {
            *v -= z;
        }
        // next[k]: the run that includes x_t started at t - k.
        for k in 0..=LAG.min(t) {
            if t - k > 0 {
                if let Some(v) = next.get(k) {
                    p_change[t - k] = p_change[t - k].max(v.exp());
                }
            }
        }
        let mut np = Vec::with_capacity(params.len() + 1);
        np.push(prior.update(x));
        np.extend(params.iter().map(|p| p.update(x)));
        // Prune negligible hypotheses to stay linear in practice.
        let keep: Vec<usize> = (0..next.len()).filter(|&i| next[i] > -30.0).collect();
        log_r = keep.iter().map(|&i| next[i]).collect();
        params = keep.iter().map(|&i| np[i]).collect();
        // Renormalise after pruning.
        let z = log_sum_exp(&log_r);
        for v in log_r.iter_mut() {
            *v -= z;
        }
    }
    // Candidate cuts: local maxima of the change probability above the threshold, where
    // the level actually moves by the minimum shift.
    let mut cuts: Vec<(usize, f64)> = Vec::new();
    let mut run_end = 0usize;
    for (t, &p) in p_change.iter().enumerate().skip(cfg.min_before.max(1)) {
        if p < cfg.min_probability {
            continue;
        }
        if !cuts.is_empty() && t == run_end + 1 {
            // A run of consecutive high probabilities: one cut, at the strongest.
            run_end = t;
            if p > cuts.last().expect("just checked").1 {
                cuts.pop();
            } else {
                continue;
            }
        }
        run_end = t;
        cuts.push((t, p));
    }
    cuts
}

/// The change points at `cuts` (sorted): those whose segments differ by the minimum
/// shift, the others merged, each told a spike or a level.
fn points_at(series: &[f64], mut cuts: Vec<(usize, f64)>, cfg: &ChangeConfig) -> Vec<ChangePoint> {
    // Keep cuts whose segments differ by the minimum shift, merging the others.
    let mut kept: Vec<(usize, f64)> = Vec::new();
    loop {
        let mut changed = false;
        let bounds: Vec<usize> = std::iter::once(0)
            .chain(cuts.iter().map(|c| c.0))
            .chain(std::iter::once(series.len()))
            .collect();
        kept.clear();
        for (k, &(t, p)) in cuts.iter().enumerate() {
            let before = median_of(&series[bounds[k]..t]);
            let after = median_of(&series[t..bounds[k + 2]]);
            if (after / before - 1.0).abs() >= cfg.min_shift {
                kept.push((t, p));
            } else {
                changed = true;
            }
        }
        if !changed {
            break;
        }
        cuts = kept.clone();
    }
    let bounds: Vec<usize> = std::iter::once(0)
        .chain(kept.iter().map(|c| c.0))
        .chain(std::iter::once(series.len()))
        .collect();
    let mut out = Vec::new();
    for (k, &(t, p)) in kept.iter().enumerate() {
        let prev = &series[bounds[k]..t];
        let seg = &series[t..bounds[k + 2]];
        let before = median_of(prev);
        let after = median_of(seg);
        // A spike: short, and the level after it is back near the level before it; at
        // the series' end, short and its own last iteration back there already (one long
        // pause then a normal step: their median is no level at all).
        let back_near = |x: f64| (x / before - 1.0).abs() < cfg.min_shift;
        let spike = seg.len() <= cfg.spike_len
            && if bounds[k + 2] < series.len() {
                let next_end = bounds.get(k + 3).copied().unwrap_or(series.len());
                back_near(median_of(&series[bounds[k + 2]..next_end]))
            } else {
                seg.len() > 1 && seg.last().is_some_and(|&x| back_near(x))
            };
        out.push(ChangePoint {
            index: t,
            before,
            after,
            len: seg.len(),
            probability: p.min(1.0),
            spike,
        });
    }
    out
}

fn log_sum_exp(v: &[f64]) -> f64 {
    let m = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    if !m.is_finite() {
        return m;
    }
    m + v.iter().map(|x| (x - m).exp()).sum::<f64>().ln()
}

/// The drift of iteration time at the end of a series: the ratio of the current level to
/// the level before the last sustained change (1.0 without one). Holmes shifts the
/// thresholds of time-valued features by it so that a job whose every iteration got
/// slower (new data, a longer sequence length) does not flag every op.
pub fn drift_factor(series: &[f64], cfg: &ChangeConfig) -> f64 {
    change_points(series, cfg)
        .iter()
        .rev()
        .find(|c| !c.spike && c.len > cfg.spike_len)
        .map_or(1.0, |c| c.ratio())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn noisy(levels: &[(usize, f64)], noise: f64, seed: u64) -> Vec<f64> {
        let mut s = seed;
        let mut out = Vec::new();
        for &(n, level) in levels {
            for _ in 0..n {
                s = s
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                let u = (s >> 11) as f64 / (1u64 << 53) as f64 - 0.5;
                out.push(level * (1.0 + noise * u));
            }
        }
        out
    }

    #[test]
    fn onsets_spikes_and_small_shifts() {
        let cfg = ChangeConfig::default();
        type Case = (&'static str, Vec<f64>, Vec<(usize, bool)>);
        let cases: &[Case] = &[
            ("steady", noisy(&[(30, 100.0)], 0.02, 1), vec![]),
            (
                "onset x1.2 at 12",
                noisy(&[(12, 100.0), (18, 120.0)], 0.02, 2),
                vec![(12, false)],
            ),
            (
                "onset x1.12 at 20",
                noisy(&[(20, 100.0), (10, 112.0)], 0.01, 3),
                vec![(20, false)],
            ),
            (
                "5% shift is not kept",
                noisy(&[(15, 100.0), (15, 105.0)], 0.01, 4),
                vec![],
            ),
            (
                "spike of 2 iterations",
                noisy(&[(10, 100.0), (2, 150.0), (10, 100.0)], 0.02, 5),
                vec![(10, false), (12, false)],
            ),
        ];
        for (name, series, want) in cases {
            // searching again inside each level finds nothing more in these
            for got in [
                change_points(series, &cfg),
                change_points_within_levels(series, &cfg),
            ] {
                let idx: Vec<usize> = got.iter().map(|c| c.index).collect();
                let want_idx: Vec<usize> = want.iter().map(|w| w.0).collect();
                assert_eq!(idx, want_idx, "{name}: {got:?}");
                if *name == "spike of 2 iterations" {
                    assert!(got[0].spike, "{name}: {got:?}");
                }
            }
        }
        // Three slow warm-up iterations (x3), then an onset x1.3 at 15: the prior, centred
        // on the warm-up, hides the onset from one pass; searched for inside the level
        // after the warm-up, it is found.
        let warm = noisy(&[(3, 300.0), (12, 100.0), (15, 130.0)], 0.01, 7);
        let idx = |v: Vec<ChangePoint>| v.iter().map(|c| c.index).collect::<Vec<_>>();
        assert_eq!(idx(change_points(&warm, &cfg)), [3]);
        assert_eq!(idx(change_points_within_levels(&warm, &cfg)), [3, 15]);
        // The series' last two iterations: one long pause (a full GC, 238 ms against
        // 13.5), then a step at the old level: a spike, not a new level (the H200 GC run).
        let mut pause = noisy(&[(8, 13.5)], 0.03, 6);
        pause.extend([238.4, 14.2]);
        let got = change_points(&pause, &cfg);
        assert!(!got.is_empty() && got.iter().all(|c| c.spike), "{got:?}");
        // Two slow last iterations: the job may have just slowed down, an onset.
        let mut slowed = noisy(&[(8, 13.5)], 0.03, 6);
        slowed.extend([238.4, 240.0]);
        let got = change_points(&slowed, &cfg);
        assert!(got.iter().any(|c| !c.spike && c.index == 8), "{got:?}");
        let d = drift_factor(&noisy(&[(12, 100.0), (18, 120.0)], 0.02, 2), &cfg);
        assert!((d - 1.2).abs() < 0.03, "{d}");
        assert_eq!(drift_factor(&noisy(&[(30, 100.0)], 0.02, 1), &cfg), 1.0);
    }
}
