//! Small robust statistics on slices.

/// Median of a slice (reorders it). NaN-free input expected; empty gives NaN.
pub fn median(v: &mut [f64]) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    let mid = v.len() / 2;
    v.select_nth_unstable_by(mid, |a, b| a.total_cmp(b));
    let m = v[mid];
    if v.len() % 2 == 1 {
        m
    } else {
        let lo = v[..mid].iter().copied().fold(f64::NEG_INFINITY, f64::max);
        (lo + m) / 2.0
    }
}

/// Median and scaled median absolute deviation (a robust standard deviation).
pub fn median_mad(v: &[f64]) -> (f64, f64) {
    let mut a = v.to_vec();
    let m = median(&mut a);
    for x in a.iter_mut() {
        *x = (*x - m).abs();
    }
    (m, 1.4826 * median(&mut a))
}

pub fn mean(v: &[f64]) -> f64 {
    if v.is_empty() {
        f64::NAN
    } else {
        v.iter().sum::<f64>() / v.len() as f64
    }
}

/// Maps a score in [0, inf) to a confidence in (0, 1): 0.5 at `half`.
pub fn confidence(score: f64, half: f64) -> f64 {
    let x = (score / half.max(1e-12)).max(0.0);
    (x / (1.0 + x)).clamp(0.0, 0.999)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn robust_statistics() {
        let cases: &[(&[f64], f64)] = &[
            (&[3.0, 1.0, 2.0], 2.0),
            (&[4.0, 1.0, 3.0, 2.0], 2.5),
            (&[], f64::NAN),
        ];
        for (v, want) in cases {
            let got = median(&mut v.to_vec());
            assert!(got == *want || (got.is_nan() && want.is_nan()), "{v:?}");
        }
        let (m, s) = median_mad(&[1.0, 1.0, 1.0, 1.0, 100.0]);
        assert_eq!((m, s), (1.0, 0.0));
        assert!((confidence(1.0, 1.0) - 0.5).abs() < 1e-12);
    }
}
