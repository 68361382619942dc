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
        // Tensor-parallel groups: sorting networks (branch-free compare-exchanges).
        [a, b, c, d] => {
            let s = sort_network([a, b, c, d], &NETWORK_4);
            return (s[1] as f64 + s[2] as f64) / 2.0;
        }
        [a, b, c, d, e, f, g, h] => {
            let s = sort_network([a, b, c, d, e, f, g, h], &NETWORK_8);
            return (s[3] as f64 + s[4] as f64) / 2.0;
        }
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

/// Optimal sorting networks (Knuth, TAOCP 5.3.4) for 4 and 8 values.
const NETWORK_4: [(usize, usize); 5] = [(0, 1), (2, 3), (0, 2), (1, 3), (1, 2)];
const NETWORK_8: [(usize, usize); 19] = [
    (0, 2),
    (1, 3),
    (4, 6),
    (5, 7),
    (0, 4),
    (1, 5),
    (2, 6),
    (3, 7),
    (0, 1),
    (2, 3),
    (4, 5),
    (6, 7),
    (2, 4),
    (3, 5),
    (1, 4),
    (3, 6),
    (1, 2),
    (3, 4),
    (5, 6),
];

/// `v` sorted by a sorting network's compare-exchanges.
#[inline]
fn sort_network<const N: usize>(mut v: [i64; N], network: &[(usize, usize)]) -> [i64; N] {
    for &(i, j) in network {
        let (x, y) = (v[i], v[j]);
        v[i] = x.min(y);
        v[j] = x.max(y);
    }
    v
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

/// Student's t at the one-sided level 0.99 with `dof` degrees of freedom (a standard
/// table to 30, then linear in 1/dof to the normal's 2.326); `INFINITY` with none.
pub fn student_t_99(dof: u32) -> f64 {
    // t at 11 degrees of freedom is 2.718, by chance e's first digits.
    #[allow(clippy::approx_constant)]
    const TO_30: [f64; 30] = [
        31.821, 6.965, 4.541, 3.747, 3.365, 3.143, 2.998, 2.896, 2.821, 2.764, 2.718, 2.681, 2.650,
        2.624, 2.602, 2.583, 2.567, 2.552, 2.539, 2.528, 2.518, 2.508, 2.500, 2.492, 2.485, 2.479,
        2.473, 2.467, 2.462, 2.457,
    ];
    const BEYOND: [(f64, f64); 4] = [(30.0, 2.457), (40.0, 2.423), (60.0, 2.390), (120.0, 2.358)];
    match dof {
        0 => f64::INFINITY,
        1..=30 => TO_30[dof as usize - 1],
        _ => {
            let x = 1.0 / f64::from(dof);
            let (mut hi_x, mut hi_t) = (1.0 / 30.0, 2.457);
            for &(d, t) in BEYOND.iter().skip(1).chain(&[(f64::INFINITY, 2.326)]) {
                let (lo_x, lo_t) = (1.0 / d, t);
                if x >= lo_x {
                    return lo_t + (hi_t - lo_t) * (x - lo_x) / (hi_x - lo_x);
                }
                (hi_x, hi_t) = (lo_x, lo_t);
            }
            2.326
        }
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
    fn students_t_at_99_percent() {
        // (dof, t): the table, between its rows past 30, and the normal's limit.
        let cases = [
            (0, f64::INFINITY),
            (1, 31.821),
            (2, 6.965),
            (30, 2.457),
            (40, 2.423),
            (48, 2.4065),
            (120, 2.358),
            (100_000, 2.326),
        ];
        for (dof, want) in cases {
            let t = student_t_99(dof);
            assert!(
                t == want || (t - want).abs() < 2e-3,
                "dof {dof}: {t} against {want}"
            );
        }
    }

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
        // The networks for 4 and 8 values: every 0/1 input (enough for a sorting
        // network), and values with ties and negatives.
        let mut seed = 7u64;
        let mut next = || {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (seed >> 33) as i64 % 21 - 10
        };
        let mut cases: Vec<Vec<i64>> = Vec::new();
        for n in [4usize, 8] {
            for bits in 0..1u32 << n {
                let v: Vec<i64> = (0..n).map(|k| (bits >> k & 1) as i64).collect();
                let sorted = if n == 4 {
                    sort_network::<4>(v.clone().try_into().unwrap(), &NETWORK_4).to_vec()
                } else {
                    sort_network::<8>(v.clone().try_into().unwrap(), &NETWORK_8).to_vec()
                };
                assert!(sorted.windows(2).all(|w| w[0] <= w[1]), "{v:?}");
                cases.push(v);
            }
            for _ in 0..500 {
                cases.push((0..n).map(|_| next()).collect());
            }
        }
        for v in &cases {
            let want = median(&mut v.iter().map(|&x| x as f64).collect::<Vec<_>>());
            assert_eq!(median_i64(&mut v.to_vec()), want, "{v:?}");
        }
        let (m, s) = median_mad(&[1.0, 1.0, 1.0, 1.0, 100.0]);
        assert_eq!((m, s), (1.0, 0.0));
        assert!((confidence(1.0, 1.0) - 0.5).abs() < 1e-12);
    }
}
