//! The iteration-time line chart.

use crate::util::{c, escape, fmt_num, fmt_tick, int_ticks, nice_axis};
use std::collections::BTreeSet;
use std::fmt::Write;

const W: f64 = 900.0;
const H: f64 = 300.0;
const ML: f64 = 72.0;
const MR: f64 = 24.0;
const MT: f64 = 28.0;
const MB: f64 = 46.0;

/// Up to this many points, every point gets a hover target with its value.
const MAX_HOVER_POINTS: usize = 2000;
/// Up to this many points, points are also drawn as visible dots.
const MAX_VISIBLE_POINTS: usize = 150;

const LINE: &str = "#2563eb";
const FLAG: &str = "#dc2626";

/// Renders a standalone SVG line chart of `points` (iteration, value), sorted by iteration.
///
/// Draws axes with tick labels, a grid, the series, a dashed median line, and marks every
/// iteration in `flagged` in red (a vertical band plus a red dot on the series). Each point
/// carries an SVG `<title>` with its value, so hovering shows it (for up to 2,000 points;
/// beyond that only flagged points do). Non-finite values break the line. `y_label` is
/// escaped. An empty series gives a small SVG saying there is no data.
pub fn line_chart_svg(points: &[(u32, f64)], flagged: &[u32], y_label: &str) -> String {
    line_chart_svg_of(points, flagged, y_label, crate::Step::Iteration)
}

/// [`line_chart_svg`] over `step`s (a live job's windows, say).
pub fn line_chart_svg_of(
    points: &[(u32, f64)],
    flagged: &[u32],
    y_label: &str,
    step: crate::Step,
) -> String {
    let word = step.word();
    let y_label_e = escape(y_label);
    let mut pts: Vec<(u32, f64)> = points.to_vec();
    pts.sort_by_key(|p| p.0);
    let finite: Vec<f64> = pts.iter().map(|p| p.1).filter(|v| v.is_finite()).collect();
    if pts.is_empty() || finite.is_empty() {
        return format!(
            r##"<svg xmlns="http://www.w3.org/2000/svg" class="chart line-chart" viewBox="0 0 {W} 80" width="{W}" height="80" role="img" aria-label="{y_label_e}: no data"><rect x="0.5" y="0.5" width="{w}" height="79" fill="#fafafa" stroke="#ddd"/><text x="{cx}" y="45" text-anchor="middle" font-size="14" fill="#666">No {word} data</text></svg>"##,
            w = W - 1.0,
            cx = W / 2.0
        );
    }

    let ymin = finite.iter().copied().fold(f64::INFINITY, f64::min);
    let ymax = finite.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let span = (ymax - ymin).max(ymax.abs() * 1e-3);
    let mut lo = ymin - 0.05 * span;
    if ymin >= 0.0 {
        lo = lo.max(0.0);
    }
    let (y0, y1, yticks) = nice_axis(lo, ymax + 0.05 * span, 5);
    let (xmin, xmax) = (pts[0].0, pts[pts.len() - 1].0);
    let (x0, x1) = if xmax > xmin {
        (xmin as f64, xmax as f64)
    } else {
        (xmin as f64 - 1.0, xmin as f64 + 1.0)
    };
    let pw = W - ML - MR;
    let ph = H - MT - MB;
    let xp = |i: f64| ML + (i - x0) / (x1 - x0) * pw;
    let yp = |v: f64| MT + ph - (v - y0) / (y1 - y0) * ph;

    let mut s = String::with_capacity(8192 + pts.len() * 96);
    let _ = write!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" class="chart line-chart" viewBox="0 0 {W} {H}" width="{W}" height="{H}" role="img" aria-label="{y_label_e} per {word}" font-family="system-ui, -apple-system, Segoe UI, Roboto, sans-serif" font-size="11">"#
    );
    let _ = write!(
        s,
        r##"<rect x="{ML}" y="{MT}" width="{pw}" height="{ph}" fill="#ffffff" stroke="#d4d4d8"/>"##
    );

    // Grid and y ticks.
    s.push_str(r##"<g class="y-axis" fill="#52525b">"##);
    for &t in &yticks {
        let y = c(yp(t));
        let _ = write!(
            s,
            r##"<line x1="{ML}" x2="{x2}" y1="{y}" y2="{y}" stroke="#ececef"/><text x="{tx}" y="{y}" dy="0.32em" text-anchor="end">{lab}</text>"##,
            x2 = ML + pw,
            tx = ML - 6.0,
            lab = escape(&fmt_tick(t))
        );
    }
    s.push_str("</g>");

    // X ticks.
    let xt = int_ticks(xmin, xmax.max(xmin), 10);
    s.push_str(r##"<g class="x-axis" fill="#52525b">"##);
    for t in xt {
        let x = c(xp(t as f64));
        let _ = write!(
            s,
            r##"<line x1="{x}" x2="{x}" y1="{yb}" y2="{yb2}" stroke="#71717a"/><text x="{x}" y="{ty}" text-anchor="middle">{t}</text>"##,
            yb = MT + ph,
            yb2 = MT + ph + 4.0,
            ty = MT + ph + 16.0
        );
    }
    s.push_str("</g>");

    // Axis titles.
    let _ = write!(
        s,
        r##"<text x="{x}" y="{y}" text-anchor="middle" fill="#3f3f46" font-size="12">{word}</text>"##,
        x = ML + pw / 2.0,
        y = H - 8.0
    );
    let _ = write!(
        s,
        r##"<text transform="translate(16 {y}) rotate(-90)" text-anchor="middle" fill="#3f3f46" font-size="12">{y_label_e}</text>"##,
        y = MT + ph / 2.0
    );

    // Flagged bands (behind the series).
    let flagged_set: BTreeSet<u32> = flagged
        .iter()
        .copied()
        .filter(|&f| (f as f64) >= x0 && (f as f64) <= x1)
        .collect();
    if !flagged_set.is_empty() {
        let bw = (pw / (x1 - x0)).clamp(1.5, 12.0);
        s.push_str(r#"<g class="flagged-bands">"#);
        for &f in &flagged_set {
            let _ = write!(
                s,
                r#"<rect x="{x}" y="{MT}" width="{w}" height="{ph}" fill="{FLAG}" fill-opacity="0.12"><title>{word} {f}: flagged</title></rect>"#,
                x = c(xp(f as f64) - bw / 2.0),
                w = c(bw)
            );
        }
        s.push_str("</g>");
    }

    // Median line.
    let mut sorted = finite.clone();
    sorted.sort_by(f64::total_cmp);
    let median = sorted[sorted.len() / 2];
    let my = c(yp(median));
    let _ = write!(
        s,
        r##"<line class="median" x1="{ML}" x2="{x2}" y1="{my}" y2="{my}" stroke="#a1a1aa" stroke-dasharray="4 3"><title>median: {m}</title></line><text x="{tx}" y="{ty}" fill="#71717a" stroke="#ffffff" stroke-width="3" paint-order="stroke">median {m}</text>"##,
        x2 = ML + pw,
        tx = ML + 4.0,
        ty = c(yp(median) - 4.0),
        m = escape(&fmt_num(median))
    );

    // Series, broken at non-finite values.
    let mut d = String::with_capacity(pts.len() * 16);
    let mut pen_down = false;
    for &(i, v) in &pts {
        if v.is_finite() {
            let _ = write!(
                d,
                "{}{} {}",
                if pen_down { "L" } else { "M" },
                c(xp(i as f64)),
                c(yp(v))
            );
            pen_down = true;
        } else {
            pen_down = false;
        }
    }
    let _ = write!(
        s,
        r#"<path class="series" d="{d}" fill="none" stroke="{LINE}" stroke-width="1.5" stroke-linejoin="round"/>"#
    );

    // Points with hover titles.
    let hover_all = pts.len() <= MAX_HOVER_POINTS;
    let visible = pts.len() <= MAX_VISIBLE_POINTS;
    s.push_str(r#"<g class="points">"#);
    for &(i, v) in &pts {
        if !v.is_finite() {
            continue;
        }
        let is_flagged = flagged_set.contains(&i);
        if !is_flagged && !hover_all {
            continue;
        }
        let (r, style) = if is_flagged {
            (
                "4",
                format!(r##"fill="{FLAG}" stroke="#ffffff" stroke-width="1""##),
            )
        } else if visible {
            ("2.5", format!(r#"fill="{LINE}""#))
        } else {
            ("3", format!(r#"fill="{LINE}" fill-opacity="0""#))
        };
        let _ = write!(
            s,
            r#"<circle cx="{x}" cy="{y}" r="{r}" {style}><title>{word} {i}: {val}{flag}</title></circle>"#,
            x = c(xp(i as f64)),
            y = c(yp(v)),
            val = escape(&fmt_num(v)),
            flag = if is_flagged { " (flagged)" } else { "" }
        );
    }
    s.push_str("</g>");

    // Legend.
    let lx = ML + 4.0;
    let _ = write!(
        s,
        r##"<g class="legend" fill="#3f3f46"><line x1="{lx}" x2="{lx2}" y1="14" y2="14" stroke="{LINE}" stroke-width="2"/><text x="{tx}" y="14" dy="0.32em">{y_label_e}</text>"##,
        lx2 = lx + 18.0,
        tx = lx + 24.0
    );
    if !flagged_set.is_empty() {
        let fx = ML + pw - 150.0;
        let _ = write!(
            s,
            r##"<circle cx="{fx}" cy="14" r="4" fill="{FLAG}"/><text x="{tx}" y="14" dy="0.32em">flagged {word}s ({n})</text>"##,
            tx = fx + 9.0,
            n = flagged_set.len()
        );
    }
    s.push_str("</g></svg>");
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_and_nan_series_render() {
        let s = line_chart_svg(&[], &[], "ms");
        assert!(s.starts_with("<svg") && s.ends_with("</svg>"));
        assert!(s.contains("No iteration data"));
        let s = line_chart_svg(&[(1, f64::NAN)], &[1], "ms");
        assert!(s.contains("No iteration data"));
        let s = line_chart_svg(&[(1, 10.0), (2, f64::NAN), (3, 12.0)], &[3], "ms");
        assert!(!s.contains("NaN"));
        assert_eq!(s.matches("<circle").count(), 3); // 2 points + legend dot
        assert!(s.contains("iteration 3: 12.00 (flagged)"));
        // The NaN breaks the line: two "M" moves.
        let d = s.split(r#"class="series" d=""#).nth(1).unwrap();
        let d = &d[..d.find('"').unwrap()];
        assert_eq!(d.matches('M').count(), 2);
    }

    #[test]
    fn single_point_and_flagged_out_of_range() {
        let s = line_chart_svg(&[(5, 100.0)], &[99], "iteration time (ms)");
        assert!(s.contains("iteration 5: 100.0"));
        assert!(!s.contains("flagged iterations"));
    }

    #[test]
    fn many_points_keep_flagged_hover_targets() {
        let pts: Vec<(u32, f64)> = (0..5000).map(|i| (i, 100.0 + (i % 7) as f64)).collect();
        let s = line_chart_svg(&pts, &[1234], "ms");
        assert!(s.contains("iteration 1234: 102.0 (flagged)"));
        assert!(s.matches("<circle").count() <= 3);
    }
}
