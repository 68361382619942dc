//! The per-rank heatmap.

use crate::util::{c, escape, level_colour, level_of, with_unit, LEVELS, NAN_COLOUR};
use crate::Heatmap;
use std::fmt::Write;

/// Total width of the SVG.
const W: f64 = 900.0;
/// The plot aims for this height; rows shrink (down to 1 px) to fit it.
const TARGET_PLOT_H: f64 = 640.0;
const MAX_ROW_H: f64 = 22.0;
const MIN_ROW_H: f64 = 1.0;
/// More rows than this are binned (each displayed row is the maximum over a bin).
const MAX_DISPLAY_ROWS: usize = 1024;
/// More columns than this are binned likewise.
const MAX_DISPLAY_COLS: usize = 300;
/// Up to this many displayed cells, each cell is its own `<rect class="c">` with a hover
/// title; above it, cells of equal colour are merged into one path per colour.
const PER_CELL_LIMIT: usize = 4096;
/// Vertical room one row label needs.
const LABEL_SPACING: f64 = 11.5;
/// Approximate width of one label character at 10–11 px.
const CHAR_W: f64 = 6.2;
const HIGHLIGHT: &str = "#1d4ed8";

/// Consecutive index ranges `[start, end)` covering `0..n` with at most `max` ranges.
fn bins(n: usize, max: usize) -> Vec<(usize, usize)> {
    let k = n.div_ceil(max.max(1)).max(1);
    (0..n).step_by(k).map(|s| (s, (s + k).min(n))).collect()
}

/// Cuts `s` to at most `max` characters, ending in `…` when cut.
fn truncate(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        s.to_string()
    } else {
        let mut t: String = s.chars().take(max.saturating_sub(1)).collect();
        t.push('…');
        t
    }
}

/// `rank 12` for a bare number, the name itself otherwise (`ranks 0-7`).
/// The name of a bin of rows `r0..r1`: one row's name, or the first and last.
fn bin_name(h: &Heatmap, r0: usize, r1: usize) -> String {
    if r1 - r0 == 1 {
        row_name(&h.row_label, &h.rows[r0])
    } else {
        format!(
            "{} … {}",
            row_name(&h.row_label, &h.rows[r0]),
            row_name(&h.row_label, &h.rows[r1 - 1])
        )
    }
}

fn row_name(label: &str, name: &str) -> String {
    if !label.is_empty() && !name.is_empty() && name.chars().all(|ch| ch.is_ascii_digit()) {
        format!("{label} {name}")
    } else {
        name.to_string()
    }
}

/// Renders a standalone SVG heatmap, 900 px wide.
///
/// Colours follow a sequential scale (white → orange → dark red) between the minimum and the
/// maximum of the finite values; cells without data (NaN, infinite, or missing because
/// `values` is short) are grey. Rows shrink from 22 px down to 1 px so that up to 1,024 rows
/// keep the chart around 640–1,024 px tall; row labels are thinned to every k-th row when rows
/// are short, but rows in `highlight_rows` are always labelled and are outlined in blue.
/// Column labels are thinned likewise. Heatmaps with more than 1,024 rows or 300 columns are
/// binned, each displayed cell showing the maximum of its bin. Small heatmaps (up to 4,096
/// cells) draw one `<rect class="c">` per cell with a hover `<title>`; larger ones merge cells
/// of equal colour and give each row a hover title instead. A legend shows the min and max.
/// Every string of `h` is escaped.
pub fn heatmap_svg(h: &Heatmap) -> String {
    let nr = h.rows.len();
    let nc = h.columns.len();
    let title_e = escape(&h.title);
    if nr == 0 || nc == 0 {
        return format!(
            r##"<svg xmlns="http://www.w3.org/2000/svg" class="chart heatmap" viewBox="0 0 {W} 80" width="{W}" height="80" role="img" aria-label="{title_e}: no data" font-family="system-ui, -apple-system, Segoe UI, Roboto, sans-serif"><text x="8" y="18" font-size="13" font-weight="600" fill="#18181b">{title_e}</text><rect x="0.5" y="28.5" width="{w}" height="50" fill="#fafafa" stroke="#ddd"/><text x="{cx}" y="58" text-anchor="middle" font-size="14" fill="#666">No data</text></svg>"##,
            w = W - 1.0,
            cx = W / 2.0
        );
    }
    let raw = |r: usize, col: usize| -> f64 {
        let v = h.values.get(r * nc + col).copied().unwrap_or(f64::NAN);
        if v.is_finite() {
            v
        } else {
            f64::NAN
        }
    };

    // Display grid (binned when too large): maximum over each bin.
    let rbins = bins(nr, MAX_DISPLAY_ROWS);
    let cbins = bins(nc, MAX_DISPLAY_COLS);
    let (ndr, ndc) = (rbins.len(), cbins.len());
    let binned = ndr < nr || ndc < nc;
    let mut grid = vec![f64::NAN; ndr * ndc];
    for (dr, &(r0, r1)) in rbins.iter().enumerate() {
        for (dc, &(c0, c1)) in cbins.iter().enumerate() {
            let mut m = f64::NAN;
            for r in r0..r1 {
                for col in c0..c1 {
                    let v = raw(r, col);
                    if v.is_finite() && (m.is_nan() || v > m) {
                        m = v;
                    }
                }
            }
            grid[dr * ndc + dc] = m;
        }
    }
    let (mut lo, mut hi) = (f64::INFINITY, f64::NEG_INFINITY);
    for &v in grid.iter().filter(|v| v.is_finite()) {
        lo = lo.min(v);
        hi = hi.max(v);
    }
    let has_data = lo.is_finite();

    // Highlighted display rows.
    let mut hl = vec![false; ndr];
    let rows_per_bin = rbins[0].1 - rbins[0].0;
    for &r in &h.highlight_rows {
        if r < nr {
            hl[r / rows_per_bin] = true;
        }
    }

    // Geometry.
    let row_h = (TARGET_PLOT_H / ndr as f64).clamp(MIN_ROW_H, MAX_ROW_H);
    let plot_h = row_h * ndr as f64;
    let font = if row_h >= 11.0 { 11.0 } else { 10.0 };
    let step = ((LABEL_SPACING / row_h).ceil() as usize).max(1);
    let max_label_chars = 30usize;

    // Which rows get a label: highlighted ones (thinned among themselves), then every
    // `step`-th row not too close to a highlighted label.
    let mut labelled = vec![false; ndr];
    let mut hl_labelled: Vec<usize> = Vec::new();
    for dr in (0..ndr).filter(|&dr| hl[dr]) {
        if hl_labelled.last().is_none_or(|&l| dr - l >= step) {
            hl_labelled.push(dr);
            labelled[dr] = true;
        }
    }
    for dr in (0..ndr).step_by(step) {
        let near = hl_labelled
            .binary_search(&dr)
            .map(|_| true)
            .unwrap_or_else(|i| {
                (i > 0 && dr - hl_labelled[i - 1] < step)
                    || (i < hl_labelled.len() && hl_labelled[i] - dr < step)
            });
        if !near {
            labelled[dr] = true;
        }
    }
    let label_of = |dr: usize| truncate(&h.rows[rbins[dr].0], max_label_chars);
    let longest = (0..ndr)
        .filter(|&dr| labelled[dr])
        .map(|dr| label_of(dr).chars().count())
        .max()
        .unwrap_or(0)
        .max(h.row_label.chars().count().min(max_label_chars));
    let left = (longest as f64 * CHAR_W + 14.0).clamp(40.0, 200.0);
    let right = 22.0;
    let top = 36.0;
    let plot_w = W - left - right;
    let cw = plot_w / ndc as f64;
    let xe: Vec<f64> = (0..=ndc)
        .map(|i| left + (i as f64 * cw * 100.0).round() / 100.0)
        .collect();
    let ye: Vec<f64> = (0..=ndr)
        .map(|i| top + (i as f64 * row_h * 100.0).round() / 100.0)
        .collect();
    let legend_y = top + plot_h + 44.0;
    let total_h = legend_y + if binned { 40.0 } else { 24.0 };

    let mut s = String::with_capacity(16384 + ndr * ndc * 24);
    let _ = write!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" class="chart heatmap" viewBox="0 0 {W} {th}" width="{W}" height="{th}" role="img" aria-label="{title_e}" font-family="system-ui, -apple-system, Segoe UI, Roboto, sans-serif" font-size="{font}">"#,
        th = c(total_h)
    );
    let _ = write!(
        s,
        r##"<text x="8" y="18" font-size="13" font-weight="600" fill="#18181b">{title_e}</text><text x="{x}" y="{y}" text-anchor="end" font-style="italic" fill="#52525b">{rl}</text>"##,
        x = c(left - 6.0),
        y = c(top - 6.0),
        rl = escape(&truncate(&h.row_label, max_label_chars))
    );

    // Cells.
    let cell_title = |dr: usize, dc: usize, v: f64| -> String {
        let (r0, r1) = rbins[dr];
        let (c0, c1) = cbins[dc];
        let rn = bin_name(h, r0, r1);
        let cn = if c1 - c0 == 1 {
            format!("{} {}", h.column_word(), h.columns[c0])
        } else {
            format!(
                "{}s {} … {}",
                h.column_word(),
                h.columns[c0],
                h.columns[c1 - 1]
            )
        };
        let val = if v.is_finite() {
            with_unit(v, &h.unit)
        } else {
            "no data".to_string()
        };
        escape(&format!("{rn}, {cn}: {val}"))
    };
    let colour = |v: f64| match level_of(v, lo, hi) {
        Some(l) => level_colour(l),
        None => NAN_COLOUR.to_string(),
    };
    s.push_str(r#"<g class="cells" shape-rendering="crispEdges">"#);
    if ndr * ndc <= PER_CELL_LIMIT {
        for dr in 0..ndr {
            for dc in 0..ndc {
                let v = grid[dr * ndc + dc];
                let _ = write!(
                    s,
                    r#"<rect class="c" x="{x}" y="{y}" width="{w}" height="{hh}" fill="{f}"><title>{t}</title></rect>"#,
                    x = c(xe[dc]),
                    y = c(ye[dr]),
                    w = c(xe[dc + 1] - xe[dc]),
                    hh = c(ye[dr + 1] - ye[dr]),
                    f = colour(v),
                    t = cell_title(dr, dc, v)
                );
            }
        }
    } else {
        // Level index per cell, LEVELS meaning "no data"; the most common level is painted
        // as the background, every other run of equal level goes into that level's path.
        let levels: Vec<usize> = grid
            .iter()
            .map(|&v| level_of(v, lo, hi).unwrap_or(LEVELS))
            .collect();
        let mut counts = [0usize; LEVELS + 1];
        for &l in &levels {
            counts[l] += 1;
        }
        let bg = (0..=LEVELS).max_by_key(|&l| counts[l]).unwrap_or(0);
        let fill_of = |l: usize| {
            if l == LEVELS {
                NAN_COLOUR.to_string()
            } else {
                level_colour(l)
            }
        };
        let _ = write!(
            s,
            r#"<rect x="{x}" y="{y}" width="{w}" height="{hh}" fill="{f}"/>"#,
            x = c(left),
            y = c(top),
            w = c(xe[ndc] - left),
            hh = c(ye[ndr] - top),
            f = fill_of(bg)
        );
        let mut paths: Vec<String> = vec![String::new(); LEVELS + 1];
        for dr in 0..ndr {
            let (y0, hh) = (ye[dr], ye[dr + 1] - ye[dr]);
            let mut dc = 0;
            while dc < ndc {
                let l = levels[dr * ndc + dc];
                let mut end = dc + 1;
                while end < ndc && levels[dr * ndc + end] == l {
                    end += 1;
                }
                if l != bg {
                    let w = xe[end] - xe[dc];
                    let _ = write!(
                        paths[l],
                        "M{} {}h{}v{}h-{}z",
                        c(xe[dc]),
                        c(y0),
                        c(w),
                        c(hh),
                        c(w)
                    );
                }
                dc = end;
            }
        }
        for (l, d) in paths.iter().enumerate() {
            if !d.is_empty() {
                let _ = write!(s, r#"<path fill="{}" d="{d}"/>"#, fill_of(l));
            }
        }
        // Row hover targets.
        s.push_str(r##"<g class="row-hover" fill="#000000" fill-opacity="0">"##);
        for dr in 0..ndr {
            let row = &grid[dr * ndc..(dr + 1) * ndc];
            let fin: Vec<f64> = row.iter().copied().filter(|v| v.is_finite()).collect();
            let (r0, r1) = rbins[dr];
            let rn = bin_name(h, r0, r1);
            let t = if fin.is_empty() {
                format!("{rn}: no data")
            } else {
                let mx = fin.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                let mean = fin.iter().sum::<f64>() / fin.len() as f64;
                format!(
                    "{rn}: max {}, mean {} over {} columns",
                    with_unit(mx, &h.unit),
                    with_unit(mean, &h.unit),
                    fin.len()
                )
            };
            let _ = write!(
                s,
                r#"<rect x="{x}" y="{y}" width="{w}" height="{hh}"><title>{t}</title></rect>"#,
                x = c(left),
                y = c(ye[dr]),
                w = c(plot_w),
                hh = c(ye[dr + 1] - ye[dr]),
                t = escape(&t)
            );
        }
        s.push_str("</g>");
    }
    s.push_str("</g>");
    let _ = write!(
        s,
        r##"<rect x="{x}" y="{y}" width="{w}" height="{hh}" fill="none" stroke="#a1a1aa" stroke-width="0.5"/>"##,
        x = c(left),
        y = c(top),
        w = c(plot_w),
        hh = c(plot_h)
    );

    // Highlighted rows: one outline per run of consecutive highlighted rows, plus a marker.
    s.push_str(r#"<g class="highlights" fill="none">"#);
    let mut dr = 0;
    while dr < ndr {
        if !hl[dr] {
            dr += 1;
            continue;
        }
        let mut end = dr + 1;
        while end < ndr && hl[end] {
            end += 1;
        }
        let (y0, y1) = (ye[dr], ye[end]);
        // Thin rows keep a gap between the outline and the row so its colour stays visible.
        let gap = if row_h < 4.0 { 2.0 } else { 0.75 };
        let _ = write!(
            s,
            r#"<rect x="{x}" y="{y}" width="{w}" height="{hh}" stroke="{HIGHLIGHT}" stroke-width="{sw}"/>"#,
            x = c(left - 1.0),
            y = c(y0 - gap),
            w = c(plot_w + 2.0),
            hh = c(y1 - y0 + 2.0 * gap),
            sw = if row_h >= 4.0 { "1.5" } else { "1" }
        );
        let my = (y0 + y1) / 2.0;
        let mx = left + plot_w + 4.0;
        let _ = write!(
            s,
            r#"<path d="M{} {}l8 -5v10z" fill="{HIGHLIGHT}" stroke="none"><title>contains a culprit</title></path>"#,
            c(mx),
            c(my)
        );
        dr = end;
    }
    s.push_str("</g>");

    // Row labels.
    s.push_str(r##"<g class="row-labels" text-anchor="end" fill="#3f3f46">"##);
    for dr in (0..ndr).filter(|&dr| labelled[dr]) {
        let y = (ye[dr] + ye[dr + 1]) / 2.0;
        let style = if hl[dr] {
            format!(r#" fill="{HIGHLIGHT}" font-weight="700""#)
        } else {
            String::new()
        };
        let _ = write!(
            s,
            r#"<text x="{x}" y="{y}" dy="0.35em"{style}>{t}</text>"#,
            x = c(left - 5.0),
            y = c(y),
            t = escape(&label_of(dr))
        );
    }
    s.push_str("</g>");

    // Column labels.
    let col_label = |dc: usize| truncate(&h.columns[cbins[dc].0], 12);
    let longest_col = (0..ndc)
        .map(|dc| col_label(dc).chars().count())
        .max()
        .unwrap_or(1);
    let col_step = (((longest_col as f64 * CHAR_W + 8.0) / cw).ceil() as usize).max(1);
    let yb = top + plot_h;
    s.push_str(r##"<g class="col-labels" text-anchor="middle" fill="#3f3f46">"##);
    for dc in (0..ndc).step_by(col_step) {
        let x = (xe[dc] + xe[dc + 1]) / 2.0;
        let _ = write!(
            s,
            r##"<line x1="{x}" x2="{x}" y1="{y1}" y2="{y2}" stroke="#71717a"/><text x="{x}" y="{ty}">{t}</text>"##,
            x = c(x),
            y1 = c(yb),
            y2 = c(yb + 3.0),
            ty = c(yb + 14.0),
            t = escape(&col_label(dc))
        );
    }
    s.push_str("</g>");
    let _ = write!(
        s,
        r##"<text x="{x}" y="{y}" text-anchor="middle" fill="#3f3f46" font-size="12">{word}</text>"##,
        word = h.column_word(),
        x = c(left + plot_w / 2.0),
        y = c(yb + 30.0)
    );

    // Legend: the scale between min and max, no-data swatch, highlight swatch. Values that
    // are tiny next to the range (1.2e-6 when the max is 33) are written as 0.
    let legend_text = |v: f64| {
        if !has_data {
            return "n/a".to_string();
        }
        let v = if v.abs() < (hi - lo) * 1e-3 { 0.0 } else { v };
        with_unit(v, &h.unit)
    };
    let (min_t, max_t) = (legend_text(lo), legend_text(hi));
    let sw = 6.0;
    let lx = left.max(8.0 + (min_t.chars().count() + 4) as f64 * CHAR_W + 6.0);
    let ly = legend_y;
    s.push_str(r##"<g class="legend" fill="#3f3f46" font-size="11">"##);
    let _ = write!(
        s,
        r#"<text x="{x}" y="{y}" dy="0.35em" text-anchor="end">min {t}</text>"#,
        x = c(lx - 6.0),
        y = c(ly + 5.0),
        t = escape(&min_t)
    );
    for l in 0..LEVELS {
        let _ = write!(
            s,
            r#"<rect x="{x}" y="{ly}" width="{sw}" height="10" fill="{f}"/>"#,
            x = c(lx + l as f64 * sw),
            f = level_colour(l)
        );
    }
    let bar_end = lx + LEVELS as f64 * sw;
    let _ = write!(
        s,
        r##"<rect x="{lx}" y="{ly}" width="{w}" height="10" fill="none" stroke="#a1a1aa" stroke-width="0.5"/><text x="{x}" y="{y}" dy="0.35em">max {t}</text>"##,
        w = c(bar_end - lx),
        x = c(bar_end + 6.0),
        y = c(ly + 5.0),
        t = escape(&max_t)
    );
    let nx = bar_end + 50.0 + (max_t.chars().count() as f64 * CHAR_W).max(90.0);
    let _ = write!(
        s,
        r#"<rect x="{nx}" y="{ly}" width="10" height="10" fill="{NAN_COLOUR}"/><text x="{x}" y="{y}" dy="0.35em">no data</text>"#,
        nx = c(nx),
        x = c(nx + 15.0),
        y = c(ly + 5.0)
    );
    if hl.iter().any(|&b| b) {
        let hx = nx + 80.0;
        let _ = write!(
            s,
            r#"<rect x="{hx}" y="{ly}" width="10" height="10" fill="none" stroke="{HIGHLIGHT}" stroke-width="1.5"/><text x="{x}" y="{y}" dy="0.35em">contains a culprit</text>"#,
            hx = c(hx),
            x = c(hx + 15.0),
            y = c(ly + 5.0)
        );
    }
    if binned {
        let _ = write!(
            s,
            r##"<text x="{x}" y="{y}" fill="#71717a">Binned for display: each cell is the maximum over {rb} row(s) × {cb} column(s).</text>"##,
            x = c(left),
            y = c(ly + 28.0),
            rb = rows_per_bin,
            cb = cbins[0].1 - cbins[0].0
        );
    }
    s.push_str("</g></svg>");
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hm(rows: usize, cols: usize, f: impl Fn(usize, usize) -> f64) -> Heatmap {
        Heatmap {
            title: "Self time excess per rank and iteration (%)".into(),
            row_label: "rank".into(),
            rows: (0..rows).map(|r| r.to_string()).collect(),
            columns: (0..cols).map(|c| (c + 10).to_string()).collect(),
            values: (0..rows * cols).map(|i| f(i / cols, i % cols)).collect(),
            unit: "%".into(),
            highlight_rows: vec![],
            column_label: "iteration".into(),
        }
    }

    #[test]
    fn small_heatmap_has_one_rect_per_cell() {
        let mut h = hm(4, 6, |r, c| (r * c) as f64);
        h.values[3] = f64::NAN;
        h.highlight_rows = vec![2, 99];
        let s = heatmap_svg(&h);
        assert_eq!(s.matches(r#"<rect class="c""#).count(), 24);
        assert_eq!(s.matches("<title>").count(), s.matches("</title>").count());
        assert!(s.contains("rank 0, iteration 13: no data"));
        assert!(s.contains(&format!(r#"fill="{NAN_COLOUR}"><title>"#)));
        assert!(s.contains("rank 3, iteration 15: 15.00%"));
        assert!(s.contains("min 0%") && s.contains("max 15.00%"));
        assert!(s.contains("contains a culprit"));
        assert_eq!(s.matches("<svg").count(), 1);
        assert!(s.ends_with("</svg>"));
        assert!(!s.contains("NaN"));
    }

    #[test]
    fn short_values_and_all_nan_do_not_panic() {
        let mut h = hm(3, 3, |_, _| f64::NAN);
        h.values.truncate(2);
        let s = heatmap_svg(&h);
        assert_eq!(s.matches(r#"<rect class="c""#).count(), 9);
        assert!(s.contains("min n/a"));
        let empty = Heatmap {
            title: "t".into(),
            row_label: "rank".into(),
            rows: vec![],
            columns: vec![],
            values: vec![],
            unit: String::new(),
            highlight_rows: vec![3],
            column_label: "iteration".into(),
        };
        assert!(heatmap_svg(&empty).contains("No data"));
    }

    #[test]
    fn large_heatmap_stays_reasonable() {
        let mut h = hm(1024, 200, |r, c| {
            if r == 139 {
                40.0 + c as f64 * 0.1
            } else {
                ((r * 31 + c * 17) % 5) as f64 * 0.5
            }
        });
        h.highlight_rows = vec![139];
        let s = heatmap_svg(&h);
        assert!(s.len() < 3_000_000, "size {}", s.len());
        assert!(!s.contains(r#"<rect class="c""#));
        // Height: 1 px rows.
        assert!(s.contains(r#"height="1024""#));
        // Every row has a hover title; labels are thinned.
        assert!(s.contains("rank 139: max"));
        let labels = s.split(r#"class="row-labels""#).nth(1).unwrap();
        let labels = &labels[..labels.find("</g>").unwrap()];
        let n = labels.matches("<text").count();
        assert!(n > 50 && n < 120, "{n} labels");
        assert!(labels.contains(">139</text>"));
    }

    #[test]
    fn huge_heatmap_is_binned() {
        let h = hm(4096, 1000, |r, _| r as f64);
        let s = heatmap_svg(&h);
        assert!(s.contains("Binned for display"));
        assert!(s.contains("max 4095"));
        assert!(s.len() < 3_000_000, "size {}", s.len());
    }

    #[test]
    fn strings_are_escaped() {
        let mut h = hm(2, 2, |_, _| 1.0);
        h.title = "<script>x</script>".into();
        h.rows[0] = "<b>".into();
        h.columns[1] = "\"'".into();
        h.unit = "<u>".into();
        let s = heatmap_svg(&h);
        assert!(!s.contains("<script") && !s.contains("<b>") && !s.contains("<u>"));
        assert!(s.contains("&lt;script&gt;"));
    }
}
