//! Small helpers shared by the HTML and SVG writers: escaping, number formatting, axis ticks
//! and the heatmap colour scale.

/// Escapes `s` for use in HTML/SVG text and in double- or single-quoted attribute values.
///
/// Replaces `&`, `<`, `>`, `"` and `'` with character references. Every string that comes
/// from a trace or a finding goes through this before it reaches the output.
pub fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + s.len() / 8);
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            _ => out.push(c),
        }
    }
    out
}

/// A number for people: `n/a` when not finite, otherwise a precision that suits its magnitude.
pub(crate) fn fmt_num(v: f64) -> String {
    if !v.is_finite() {
        return "n/a".to_string();
    }
    let a = v.abs();
    let s = if a == 0.0 {
        "0".to_string()
    } else if a >= 1000.0 {
        format!("{v:.0}")
    } else if a >= 100.0 {
        format!("{v:.1}")
    } else if a >= 1.0 {
        format!("{v:.2}")
    } else if a >= 0.01 {
        format!("{v:.3}")
    } else {
        format!("{v:.2e}")
    };
    if s == "-0" || s == "-0.0" || s == "-0.00" || s == "-0.000" {
        "0".to_string()
    } else {
        s
    }
}

/// `fmt_num(v)` followed by the unit (no space for `%`, a space otherwise). Not escaped.
pub(crate) fn with_unit(v: f64, unit: &str) -> String {
    let n = fmt_num(v);
    if unit.is_empty() || !v.is_finite() {
        n
    } else if unit == "%" {
        format!("{n}%")
    } else {
        format!("{n} {unit}")
    }
}

/// A tick label: like [`fmt_num`] but without trailing zeros (`2.50` → `2.5`, `100.0` → `100`).
pub(crate) fn fmt_tick(v: f64) -> String {
    let s = fmt_num(v);
    if s.contains('.') && !s.contains('e') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    }
}

/// A coordinate for SVG output, at most two decimals and no trailing zeros.
pub(crate) fn c(v: f64) -> String {
    let v = if v.is_finite() { v } else { 0.0 };
    let r = (v * 100.0).round() / 100.0;
    let s = format!("{r:.2}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    if s == "-0" {
        "0".to_string()
    } else {
        s.to_string()
    }
}

/// A "nice" step (1, 2 or 5 times a power of ten) close to `raw`.
fn nice_step(raw: f64) -> f64 {
    if !(raw.is_finite() && raw > 0.0) {
        return 1.0;
    }
    let mag = 10f64.powf(raw.log10().floor());
    let f = raw / mag;
    let nf = if f <= 1.0 {
        1.0
    } else if f <= 2.0 {
        2.0
    } else if f <= 5.0 {
        5.0
    } else {
        10.0
    };
    nf * mag
}

/// A nice axis for `[lo, hi]` with about `target` ticks: returns `(axis_lo, axis_hi, ticks)`,
/// where the axis covers the data and every tick is a multiple of a nice step.
pub(crate) fn nice_axis(lo: f64, hi: f64, target: usize) -> (f64, f64, Vec<f64>) {
    let (mut lo, mut hi) = if lo.is_finite() && hi.is_finite() {
        (lo.min(hi), lo.max(hi))
    } else {
        (0.0, 1.0)
    };
    if hi - lo < 1e-12 * lo.abs().max(1.0) {
        let pad = if lo.abs() > 0.0 { lo.abs() * 0.1 } else { 1.0 };
        lo -= pad;
        hi += pad;
    }
    let step = nice_step((hi - lo) / target.max(1) as f64);
    let a_lo = (lo / step).floor() * step;
    let a_hi = (hi / step).ceil() * step;
    let n = ((a_hi - a_lo) / step).round() as usize;
    let ticks = (0..=n.min(1000)).map(|i| a_lo + i as f64 * step).collect();
    (a_lo, a_hi, ticks)
}

/// Integer ticks for an iteration axis `[lo, hi]`: a nice step of at least 1.
pub(crate) fn int_ticks(lo: u32, hi: u32, target: usize) -> Vec<u32> {
    if hi <= lo {
        return vec![lo];
    }
    let step = nice_step((hi - lo) as f64 / target.max(1) as f64).max(1.0) as u64;
    let first = (lo as u64).div_ceil(step) * step;
    let mut out = Vec::new();
    let mut t = first;
    while t <= hi as u64 {
        out.push(t as u32);
        t += step;
    }
    out
}

/// Stops of the sequential colour scale: white → orange → dark red.
const SCALE: [(f64, [u8; 3]); 5] = [
    (0.0, [0xff, 0xff, 0xff]),
    (0.3, [0xfd, 0xd0, 0x9b]),
    (0.55, [0xfc, 0x8d, 0x3c]),
    (0.8, [0xd7, 0x30, 0x1f]),
    (1.0, [0x7f, 0x00, 0x00]),
];

/// The colour of cells without data.
pub(crate) const NAN_COLOUR: &str = "#c4c4c4";

/// The colour scale is quantised into this many steps (visually continuous, and runs of equal
/// colour can be merged in large heatmaps).
pub(crate) const LEVELS: usize = 32;

/// The hex colour of step `level` (0..LEVELS) of the sequential scale.
pub(crate) fn level_colour(level: usize) -> String {
    let t = level.min(LEVELS - 1) as f64 / (LEVELS - 1) as f64;
    let mut rgb = SCALE[SCALE.len() - 1].1;
    for w in SCALE.windows(2) {
        let (t0, c0) = w[0];
        let (t1, c1) = w[1];
        if t <= t1 {
            let f = if t1 > t0 { (t - t0) / (t1 - t0) } else { 0.0 };
            for i in 0..3 {
                rgb[i] = (c0[i] as f64 + (c1[i] as f64 - c0[i] as f64) * f).round() as u8;
            }
            break;
        }
    }
    format!("#{:02x}{:02x}{:02x}", rgb[0], rgb[1], rgb[2])
}

/// The step of the colour scale for `v` in the domain `[lo, hi]`; `None` for NaN.
pub(crate) fn level_of(v: f64, lo: f64, hi: f64) -> Option<usize> {
    if !v.is_finite() {
        return None;
    }
    let span = hi - lo;
    let t = if span > 0.0 {
        ((v - lo) / span).clamp(0.0, 1.0)
    } else {
        0.0
    };
    Some(((t * LEVELS as f64) as usize).min(LEVELS - 1))
}

/// Sorted, deduplicated iterations written as ranges: `3-5, 9, 12-14`. At most `max_ranges`
/// ranges are written, then `… (+N more)`.
pub(crate) fn format_iterations(its: &[u32], max_ranges: usize) -> String {
    let mut v = its.to_vec();
    v.sort_unstable();
    v.dedup();
    let mut ranges: Vec<(u32, u32)> = Vec::new();
    for i in v {
        match ranges.last_mut() {
            Some((_, e)) if i == *e + 1 => *e = i,
            _ => ranges.push((i, i)),
        }
    }
    let mut parts: Vec<String> = ranges
        .iter()
        .take(max_ranges)
        .map(|&(a, b)| {
            if a == b {
                a.to_string()
            } else {
                format!("{a}–{b}")
            }
        })
        .collect();
    if ranges.len() > max_ranges {
        parts.push(format!("… (+{} more)", ranges.len() - max_ranges));
    }
    parts.join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escape_handles_all_five() {
        assert_eq!(
            escape(r#"<a href="x">'&'</a>"#),
            "&lt;a href=&quot;x&quot;&gt;&#39;&amp;&#39;&lt;/a&gt;"
        );
        assert_eq!(escape("plain ünïcode"), "plain ünïcode");
    }

    #[test]
    fn numbers() {
        assert_eq!(fmt_num(f64::NAN), "n/a");
        assert_eq!(fmt_num(f64::INFINITY), "n/a");
        assert_eq!(fmt_num(0.0), "0");
        assert_eq!(fmt_num(1234.6), "1235");
        assert_eq!(fmt_num(123.45), "123.5");
        assert_eq!(fmt_num(1.5), "1.50");
        assert_eq!(fmt_num(-0.0001), "-1.00e-4");
        assert_eq!(with_unit(12.0, "%"), "12.00%");
        assert_eq!(with_unit(12.0, "ms"), "12.00 ms");
        assert_eq!(fmt_tick(2.5), "2.5");
        assert_eq!(fmt_tick(100.0), "100");
        assert_eq!(c(1.0 / 3.0), "0.33");
        assert_eq!(c(2.0), "2");
        assert_eq!(c(f64::NAN), "0");
    }

    #[test]
    fn axes() {
        let (lo, hi, t) = nice_axis(3.0, 97.0, 5);
        assert!(lo <= 3.0 && hi >= 97.0);
        assert_eq!(t.first().copied(), Some(lo));
        assert_eq!(t.last().copied(), Some(hi));
        let (lo, hi, t) = nice_axis(5.0, 5.0, 5);
        assert!(lo < 5.0 && hi > 5.0 && t.len() >= 2);
        let (_, _, t) = nice_axis(f64::NAN, f64::NAN, 5);
        assert!(!t.is_empty());
        assert_eq!(int_ticks(0, 100, 5), vec![0, 20, 40, 60, 80, 100]);
        assert_eq!(int_ticks(7, 7, 5), vec![7]);
        assert_eq!(int_ticks(1, 3, 10), vec![1, 2, 3]);
    }

    #[test]
    fn colours() {
        assert_eq!(level_colour(0), "#ffffff");
        assert_eq!(level_colour(LEVELS - 1), "#7f0000");
        assert_eq!(level_of(f64::NAN, 0.0, 1.0), None);
        assert_eq!(level_of(0.0, 0.0, 1.0), Some(0));
        assert_eq!(level_of(1.0, 0.0, 1.0), Some(LEVELS - 1));
        assert_eq!(level_of(5.0, 5.0, 5.0), Some(0));
    }

    #[test]
    fn iteration_ranges() {
        assert_eq!(
            format_iterations(&[5, 3, 4, 9, 12, 13, 14, 9], 10),
            "3–5, 9, 12–14"
        );
        assert_eq!(format_iterations(&[1, 3, 5], 2), "1, 3, … (+1 more)");
        assert_eq!(format_iterations(&[], 2), "");
    }
}
