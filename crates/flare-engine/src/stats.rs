//! Small robust statistics on slices.

/// Median of a slice (reorders it). NaN-free input expected; empty gives NaN.
pub fn median(v: &mut [f64]) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    let mid = v.len() / 2;
    if v.len() <= 16 {
        // Most medians are over a collective's few members: sorting them is cheaper than
        // a selection's setup.
        for i in 1..v.len() {
            let x = v[i];
            let mut j = i;
            while j > 0 && v[j - 1].total_cmp(&x).is_gt() {
                v[j] = v[j - 1];
                j -= 1;
            }
            v[j] = x;
        }
        return if v.len() % 2 == 1 {
            v[mid]
        } else {
            (v[mid - 1] + v[mid]) / 2.0
        };
    }
    v.select_nth_unstable_by(mid, |a, b| a.total_cmp(b));
    let m = v[mid];
    if v.len() % 2 == 1 {
        m
    } else {
        let lo = v[..mid].iter().copied().fold(f64::NEG_INFINITY, f64::max);
        (lo + m) / 2.0
    }
}

/// Median of integers (reorders them), as [`median`] of the same values as floats gives.
pub fn median_i64(v: &mut [i64]) -> f64 {
    // Most instances have two or three members (P2P exchanges, small groups).
    match *v {
        [] => return f64::NAN,
        [a] => return a as f64,
        [a, b] => return (a.min(b) as f64 + a.max(b) as f64) / 2.0,
        [a, b, c] => return a.min(b).max(a.max(b).min(c)) as f64,
        _ => {}
    }
    let mid = v.len() / 2;
    if v.len() <= 32 {
        v.sort_unstable();
    } else {
        v.select_nth_unstable(mid);
    }
    let m = v[mid] as f64;
    if v.len() % 2 == 1 {
        m
    } else {
        let lo = v[..mid].iter().copied().max().unwrap_or(v[mid]) as f64;
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
            // Past the small-slice sort: the selection path.
            (
                &[
                    9.0, 1.0, 8.0, 2.0, 7.0, 3.0, 6.0, 4.0, 5.0, 0.0, 17.0, 16.0, 15.0, 14.0, 13.0,
                    12.0, 11.0, 10.0,
                ],
                8.5,
            ),
            (&[], f64::NAN),
        ];
        for (v, want) in cases {
            let got = median(&mut v.to_vec());
            assert!(got == *want || (got.is_nan() && want.is_nan()), "{v:?}");
        }
        for v in [
            &[5i64, -3, 9, 1][..],
            &[7, 7, 1],
            &(0..40).rev().collect::<Vec<i64>>(),
            &[4, -2],
            &[9, 1, 5, 3, 3, 8],
            &[6, 2, 7, 1, 5, 3, 8, 4],
            &[1; 11],
            // The fixed small cases, in every order.
            &[42],
            &[9, -4],
            &[2, 9, 4],
            &[2, 4, 9],
            &[4, 2, 9],
            &[4, 9, 2],
            &[9, 2, 4],
            &[9, 4, 2],
            &[3, 3, 1],
            &[1, 3, 3],
        ] {
            let want = median(&mut v.iter().map(|&x| x as f64).collect::<Vec<_>>());
            assert_eq!(median_i64(&mut v.to_vec()), want, "{v:?}");
        }
        let (m, s) = median_mad(&[1.0, 1.0, 1.0, 1.0, 100.0]);
        assert_eq!((m, s), (1.0, 0.0));
        assert!((confidence(1.0, 1.0) - 0.5).abs() < 1e-12);
    }
}
