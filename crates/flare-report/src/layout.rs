//! The per-rank metric laid out by the job's parallel groups: one row per pipeline stage
//! and model-parallel position (pipeline stage, then context and tensor rank), one column
//! per data-parallel replica. A row hot in every column is a place in the model's split
//! (a stage with more layers, a tensor shard); a column is one replica (its nodes); a
//! lone cell is one GPU.

use crate::Heatmap;
use flare_model::{ParallelConfig, RankCoords};
use std::collections::{BTreeMap, BTreeSet};

/// A [`Heatmap`] of `values` (per rank) on `parallel`'s grid; ranks without a value are
/// grey, rows holding a rank of `culprits` are outlined. `None` when the layout does not
/// hold the ranks given (a rank beyond its world).
pub fn layout_heatmap(
    parallel: &ParallelConfig,
    values: &BTreeMap<u32, f64>,
    culprits: &BTreeSet<u32>,
    title: &str,
    unit: &str,
) -> Option<Heatmap> {
    let world = parallel.world_size();
    if world == 0 || values.keys().chain(culprits).any(|&r| r >= world) {
        return None;
    }
    let (cp, tp) = (parallel.cp, parallel.tp);
    let rows_n = (parallel.pp * cp * tp) as usize;
    let cols_n = parallel.dp as usize;
    let row_of = |c: RankCoords| ((c.pp * cp + c.cp) * tp + c.tp) as usize;
    let mut cells = vec![f64::NAN; rows_n * cols_n];
    let mut highlight = BTreeSet::new();
    for rank in 0..world {
        let c = parallel.coords(rank);
        let (row, col) = (row_of(c), c.dp as usize);
        if let Some(&v) = values.get(&rank) {
            cells[row * cols_n + col] = v;
        }
        if culprits.contains(&rank) {
            highlight.insert(row);
        }
    }
    let rows = (0..parallel.pp)
        .flat_map(|pp| (0..cp).flat_map(move |c| (0..tp).map(move |t| (pp, c, t))))
        .map(|(pp, c, t)| {
            let mut name = format!("stage {pp}");
            if cp > 1 {
                name.push_str(&format!(" · cp {c}"));
            }
            if tp > 1 {
                name.push_str(&format!(" · tp {t}"));
            }
            name
        })
        .collect();
    Some(Heatmap {
        title: title.to_string(),
        row_label: if cp > 1 {
            "stage · CP · TP rank".into()
        } else {
            "stage · TP rank".into()
        },
        rows,
        columns: (0..parallel.dp).map(|d| d.to_string()).collect(),
        values: cells,
        unit: unit.to_string(),
        highlight_rows: highlight.into_iter().collect(),
        column_label: "DP rank".into(),
    })
}

/// "TP 2 × PP 4 × DP 8" (CP where there is one), for captions.
pub fn layout_text(p: &ParallelConfig) -> String {
    let mut parts = vec![format!("TP {}", p.tp)];
    if p.cp > 1 {
        parts.push(format!("CP {}", p.cp));
    }
    parts.push(format!("PP {}", p.pp));
    parts.push(format!("DP {}", p.dp));
    let mut s = parts.join(" × ");
    if p.ep > 1 {
        s.push_str(&format!(" (EP {})", p.ep));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_rank_lands_at_its_place_in_the_groups() {
        // Megatron's order: TP fastest, then DP, then PP. Rank 13 = tp 1, dp 2, pp 1.
        let p = ParallelConfig::new(2, 1, 1, 4, 2).unwrap();
        let values: BTreeMap<u32, f64> = (0..16).map(|r| (r, r as f64)).collect();
        let culprits = BTreeSet::from([13]);
        let h = layout_heatmap(&p, &values, &culprits, "t", "%").unwrap();
        assert_eq!(
            h.rows,
            [
                "stage 0 · tp 0",
                "stage 0 · tp 1",
                "stage 1 · tp 0",
                "stage 1 · tp 1"
            ]
        );
        assert_eq!(h.columns, ["0", "1", "2", "3"]);
        let at = |row: usize, col: usize| h.values[row * 4 + col];
        assert_eq!(at(3, 2), 13.0);
        assert_eq!(at(0, 1), 2.0, "rank 2 is tp 0 of the second replica");
        assert_eq!(h.highlight_rows, [3]);
        // Ranks without a value are grey; ranks outside the layout refuse it.
        let some: BTreeMap<u32, f64> = [(5, 1.0)].into();
        let h = layout_heatmap(&p, &some, &BTreeSet::new(), "t", "%").unwrap();
        assert_eq!(h.values.iter().filter(|v| v.is_nan()).count(), 15);
        let beyond: BTreeMap<u32, f64> = [(16, 1.0)].into();
        assert!(layout_heatmap(&p, &beyond, &BTreeSet::new(), "t", "%").is_none());
        assert_eq!(layout_text(&p), "TP 2 × PP 2 × DP 4");
    }

    #[test]
    fn pipeline_before_data_and_context_parallel_rows() {
        let order = ParallelConfig::parse_order("tp-cp-pp-dp").unwrap();
        let p = ParallelConfig::with_order(1, 2, 1, 2, 2, &order).unwrap();
        let values: BTreeMap<u32, f64> = (0..8).map(|r| (r, r as f64)).collect();
        let h = layout_heatmap(&p, &values, &BTreeSet::new(), "t", "%").unwrap();
        assert_eq!(
            h.rows,
            [
                "stage 0 · cp 0",
                "stage 0 · cp 1",
                "stage 1 · cp 0",
                "stage 1 · cp 1"
            ]
        );
        // Rank 2: cp 0, pp 1, dp 0 in this order.
        assert_eq!(h.values[2 * 2], 2.0);
        assert_eq!(layout_text(&p), "TP 1 × CP 2 × PP 2 × DP 2");
    }
}
