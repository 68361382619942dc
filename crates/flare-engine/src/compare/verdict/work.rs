//! A step that does a multiple of its work: most of the op time in classes that all run
//! the same multiple as often per step (gradient accumulation, a larger batch, more
//! layers), which is more work, not slower work.

use flare_model::{Comparison, TimeClassChange, TimeClassKind};

/// How far apart two classes' changes of ops per step may be and still be one multiple.
const SAME_MULTIPLE: f64 = 0.15;
/// The least multiple (or its inverse) that counts as other work per step.
const MIN_MULTIPLE: f64 = 1.25;
/// The least share of the baseline's op time the classes at that multiple hold.
const MIN_SHARE: f64 = 0.6;
/// The fewest classes at that multiple (and at least half of them all).
const MIN_CLASSES: usize = 3;

#[derive(Clone, Debug, PartialEq)]
pub(super) struct WorkScale {
    /// Ops per step, current over baseline, of the classes at the common multiple.
    pub multiple: f64,
    pub classes: usize,
    /// The compute and communication classes both runs ran on every rank.
    pub of: usize,
    /// What those classes changed, ms per step.
    pub delta_ms: f64,
    /// Their time per op, current over baseline.
    pub per_op: f64,
}

/// The common multiple of ops per step (weighted median over the classes, by their
/// baseline time) where the classes near it hold `MIN_SHARE` of the baseline's compute and
/// communication time, are `MIN_CLASSES` or more and half the classes or more, and it is
/// `MIN_MULTIPLE` or more either way.
pub(super) fn work_scale(c: &Comparison) -> Option<WorkScale> {
    let rows: Vec<&TimeClassChange> = c
        .classes
        .iter()
        .filter(|r| {
            matches!(
                r.kind,
                TimeClassKind::Compute | TimeClassKind::Communication
            ) && r.baseline_count > 0.0
                && r.changed_on.is_none()
        })
        .collect();
    let total: f64 = rows.iter().map(|r| r.baseline_ms).sum();
    if total <= 0.0 {
        return None;
    }
    let ratio = |r: &TimeClassChange| r.current_count / r.baseline_count;
    let mut by_ratio: Vec<(f64, f64)> = rows.iter().map(|r| (ratio(r), r.baseline_ms)).collect();
    by_ratio.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut acc = 0.0;
    let multiple = by_ratio.iter().find_map(|&(x, w)| {
        acc += w;
        (acc >= total / 2.0).then_some(x)
    })?;
    if multiple < MIN_MULTIPLE && multiple > 1.0 / MIN_MULTIPLE {
        return None;
    }
    let near: Vec<&&TimeClassChange> = rows
        .iter()
        .filter(|r| (ratio(r) / multiple - 1.0).abs() <= SAME_MULTIPLE)
        .collect();
    let (base_ms, cur_ms): (f64, f64) = near.iter().fold((0.0, 0.0), |(b, c), r| {
        (b + r.baseline_ms, c + r.current_ms)
    });
    // Many classes, most of them: one op run more often is a code path, not a multiple.
    let broad = near.len() >= MIN_CLASSES && 2 * near.len() >= rows.len();
    (broad && base_ms >= MIN_SHARE * total && base_ms > 0.0).then(|| WorkScale {
        multiple,
        classes: near.len(),
        of: rows.len(),
        delta_ms: cur_ms - base_ms,
        per_op: cur_ms / multiple / base_ms,
    })
}

impl WorkScale {
    /// "the step runs 2.00 times its ops: 14 of 20 op classes run 2.0x as often per step,
    /// +120.00 ms per step (80% of the change), each op 0.98x its time".
    pub(super) fn words(&self, step_delta: f64) -> String {
        format!(
            "the step runs {:.2} times its ops: {} of {} op classes run {:.1}x as often per step, {:+.2} ms per step ({:.0}% of the change), each op {:.2}x its time before",
            self.multiple,
            self.classes,
            self.of,
            self.multiple,
            self.delta_ms,
            self.delta_ms / step_delta * 100.0,
            self.per_op
        )
    }

    pub(super) fn action(&self) -> String {
        format!(
            "the step does {} work, not slower work (each op takes {:.2}x its time before): count what a step holds in both runs' configurations (micro-batches per optimizer step in gradient accumulation, batch size and sequence length, layers); compare throughput per sample or token rather than per step",
            if self.multiple > 1.0 {
                format!("{:.1} times the", self.multiple)
            } else {
                format!("{:.2} of the", self.multiple)
            },
            self.per_op
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compare::scale::tests::job_from;

    #[test]
    fn a_common_multiple_of_the_ops_is_more_work() {
        // (what, ops per step of the compute and all-reduce classes, expected multiple)
        let cases: [(&str, [f64; 3], Option<f64>); 4] = [
            ("two micro-batches per step", [2.0, 2.0, 2.0], Some(2.0)),
            ("half the layers", [0.5, 0.5, 0.5], Some(0.5)),
            (
                "smaller buckets: the all-reduce alone",
                [1.0, 1.0, 4.0],
                None,
            ),
            ("one op more often: a code path", [1.0, 3.0, 1.0], None),
        ];
        for (what, counts, want) in cases {
            let mut c = job_from(
                [11.0, 6.6, 12.3, 0.7, 0.7, 1.6],
                [11.0, 6.6, 12.3, 0.7, 0.7, 1.6],
            );
            for (r, n) in c.classes.iter_mut().take(3).zip(counts) {
                r.current_count = n;
                r.current_ms = r.baseline_ms * n;
            }
            let got = work_scale(&c);
            assert_eq!(got.as_ref().map(|w| w.multiple), want, "{what}: {got:?}");
            if let Some(w) = got {
                assert_eq!(w.classes, 3, "{what}");
                assert!((w.per_op - 1.0).abs() < 1e-9, "{what}: {w:?}");
            }
        }
    }
}
