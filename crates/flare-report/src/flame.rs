//! Stacks of many ranks merged into one flame graph: the frames ranks share are one box,
//! as wide as the ranks in it, and the ranks whose stack leaves the common path (the odd
//! ones out, usually the rank the others wait for) are drawn in red.

use crate::util::{c, escape, format_iterations};
use std::collections::BTreeMap;
use std::fmt::Write;

/// One rank's stack, outermost frame first.
#[derive(Clone, Debug, PartialEq)]
pub struct RankStack {
    /// The rank whose stack it is.
    pub rank: u32,
    /// Its frames, outermost (the program's entry) first.
    pub frames: Vec<String>,
}

const W: f64 = 920.0;
const ROW: f64 = 18.0;
/// Frames drawn per stack at most (deeper ones are cut).
const MAX_DEPTH: usize = 40;
const COMMON: &str = "#fdba74";
const ODD: &str = "#dc2626";

struct Node {
    name: String,
    ranks: Vec<u32>,
    children: BTreeMap<String, usize>,
}

/// The merged flame graph of `stacks` as a standalone SVG (an empty string without any
/// frame). Every frame name is escaped.
pub fn flame_svg(stacks: &[RankStack]) -> String {
    let mut sorted: Vec<&RankStack> = stacks.iter().filter(|s| !s.frames.is_empty()).collect();
    if sorted.is_empty() {
        return String::new();
    }
    sorted.sort_by_key(|s| s.rank);
    // A trie of frames; node 0 is the root (all ranks).
    let mut nodes = vec![Node {
        name: String::new(),
        ranks: vec![],
        children: BTreeMap::new(),
    }];
    for s in &sorted {
        let mut at = 0;
        nodes[0].ranks.push(s.rank);
        for f in s.frames.iter().take(MAX_DEPTH) {
            let next = match nodes[at].children.get(f) {
                Some(&i) => i,
                None => {
                    nodes.push(Node {
                        name: f.clone(),
                        ranks: vec![],
                        children: BTreeMap::new(),
                    });
                    let i = nodes.len() - 1;
                    nodes[at].children.insert(f.clone(), i);
                    i
                }
            };
            nodes[next].ranks.push(s.rank);
            at = next;
        }
    }
    let total = nodes[0].ranks.len() as f64;
    let depth = sorted
        .iter()
        .map(|s| s.frames.len().min(MAX_DEPTH))
        .max()
        .unwrap_or(0);
    let h = depth as f64 * ROW + 4.0;
    let mut svg = String::new();
    let _ = write!(
        svg,
        r#"<svg xmlns="http://www.w3.org/2000/svg" class="chart flame" viewBox="0 0 {W} {h}" width="{W}" height="{h}" role="img" aria-label="merged stacks of {n} ranks" font-family="ui-monospace, SFMono-Regular, Menlo, Consolas, monospace" font-size="11">"#,
        h = c(h),
        n = sorted.len()
    );
    // Children drawn left to right, the most ranks first; a child is odd when it is not
    // its parent's largest child (or its parent is odd).
    let mut todo: Vec<(usize, usize, f64, bool)> = vec![(0, 0, 0.0, false)];
    while let Some((i, d, x, odd)) = todo.pop() {
        let mut kids: Vec<usize> = nodes[i].children.values().copied().collect();
        kids.sort_by(|a, b| {
            nodes[*b]
                .ranks
                .len()
                .cmp(&nodes[*a].ranks.len())
                .then(nodes[*a].name.cmp(&nodes[*b].name))
        });
        let mut kx = x;
        for (k, &child) in kids.iter().enumerate() {
            let n = &nodes[child];
            let w = n.ranks.len() as f64 / total * W;
            let child_odd = odd || (k > 0 && kids.len() > 1);
            let y = d as f64 * ROW;
            let _ = write!(
                svg,
                r##"<g><rect x="{x}" y="{y}" width="{w}" height="{hh}" fill="{fill}" stroke="#fff" stroke-width="0.5"><title>{t}</title></rect>"##,
                x = c(kx),
                y = c(y),
                w = c(w.max(0.5)),
                hh = c(ROW - 1.0),
                fill = if child_odd { ODD } else { COMMON },
                t = escape(&format!(
                    "{} — rank{} {} ({} of {})",
                    n.name,
                    if n.ranks.len() == 1 { "" } else { "s" },
                    format_iterations(&n.ranks, 8),
                    n.ranks.len(),
                    total
                ))
            );
            let chars = ((w - 6.0) / 6.6).floor();
            if chars >= 4.0 {
                let label: String = if n.name.chars().count() as f64 > chars {
                    let keep = (chars as usize).saturating_sub(1);
                    n.name
                        .chars()
                        .take(keep)
                        .chain(std::iter::once('…'))
                        .collect()
                } else {
                    n.name.clone()
                };
                let _ = write!(
                    svg,
                    r##"<text x="{tx}" y="{ty}" fill="{tf}">{l}</text>"##,
                    tx = c(kx + 3.0),
                    ty = c(y + ROW - 5.0),
                    tf = if child_odd { "#fff" } else { "#1c1917" },
                    l = escape(&label)
                );
            }
            svg.push_str("</g>");
            todo.push((child, d + 1, kx, child_odd));
            kx += w;
        }
    }
    svg.push_str("</svg>");
    svg
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stack(rank: u32, frames: &[&str]) -> RankStack {
        RankStack {
            rank,
            frames: frames.iter().map(|f| f.to_string()).collect(),
        }
    }

    #[test]
    fn shared_frames_merge_and_the_odd_rank_out_is_red() {
        let mut stacks: Vec<RankStack> = (0..7)
            .map(|r| stack(r, &["main", "train", "allreduce"]))
            .collect();
        stacks.push(stack(7, &["main", "train", "load_batch"]));
        let svg = flame_svg(&stacks);
        // One box for the shared frames (8 ranks), one per branch.
        assert_eq!(svg.matches("main — ranks 0–7 (8 of 8)").count(), 1, "{svg}");
        assert!(svg.contains("allreduce — ranks 0–6 (7 of 8)"));
        assert!(svg.contains("load_batch — rank 7 (1 of 8)"));
        let odd = svg
            .split("<g>")
            .find(|g| g.contains("load_batch — rank 7"))
            .unwrap();
        assert!(odd.contains(ODD), "{odd}");
        let common = svg
            .split("<g>")
            .find(|g| g.contains("allreduce —"))
            .unwrap();
        assert!(common.contains(COMMON));
    }

    #[test]
    fn frame_names_are_escaped_and_no_stack_draws_nothing() {
        let svg = flame_svg(&[stack(0, &["<script>alert(1)</script>"])]);
        assert!(!svg.contains("<script>"), "{svg}");
        assert!(svg.contains("&lt;script&gt;"));
        assert_eq!(flame_svg(&[stack(1, &[])]), "");
    }
}
