//! A step that does a multiple of its work: most of the op time in classes that all run
//! the same multiple as often per step (gradient accumulation, more layers), or the same
//! ops over a multiple of the elements per call (a larger batch, sequence or image),
//! which is more work, not slower work.

use flare_model::host_calls::call_shapes;
use flare_model::{Comparison, TimeClassChange, TimeClassKind};
use std::collections::BTreeMap;

/// How far apart two classes' changes of ops per step may be and still be one multiple.
const SAME_MULTIPLE: f64 = 0.15;
/// The least multiple (or its inverse) that counts as other work per step.
const MIN_MULTIPLE: f64 = 1.25;
/// The least share of the baseline's op time the classes at that multiple hold.
const MIN_SHARE: f64 = 0.6;
/// The fewest classes at that multiple (and at least half of them all).
const MIN_CLASSES: usize = 3;

#[derive(Clone, Debug, PartialEq)]
pub(crate) struct WorkScale {
    /// Current over baseline, at the common multiple: ops per step, or elements per call.
    pub multiple: f64,
    pub classes: usize,
    /// The classes it was looked for in: compute and communication classes both runs ran
    /// on every rank, or ops with recorded shapes that both runs ran.
    pub of: usize,
    /// What those classes changed, ms per step (for larger inputs, all the compute: ops
    /// whose shapes the trace does not record take them too).
    pub delta_ms: f64,
    /// Their time per op (per element), current over baseline.
    pub per_op: f64,
    pub by: ScaledBy,
}

/// What a step does a multiple of.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum ScaledBy {
    /// Ops per step.
    OpsPerStep,
    /// Elements per call of the same ops, with one op's shapes before and after.
    InputSize { example: (String, String) },
    /// Calls per step of the same ops, each on that fraction of the elements (the same
    /// work cut into smaller calls), with one op's shapes before and after.
    Split { example: (String, String) },
}

/// The weighted median of `(value, weight)` (by the weights' half), sorted in place.
fn weighted_median(rows: &mut [(f64, f64)]) -> Option<f64> {
    let total: f64 = rows.iter().map(|r| r.1).sum();
    rows.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut acc = 0.0;
    rows.iter().find_map(|&(x, w)| {
        acc += w;
        (acc >= total / 2.0).then_some(x)
    })
}

/// Whether a multiple is far enough from 1 either way to be other work.
fn other_work(multiple: f64) -> bool {
    multiple >= MIN_MULTIPLE || multiple <= 1.0 / MIN_MULTIPLE
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
    let multiple = weighted_median(&mut by_ratio)?;
    if !other_work(multiple) {
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
        by: ScaledBy::OpsPerStep,
    })
}

/// One op's calls in one run, over its classes (one per input shapes).
#[derive(Default)]
struct OpCalls<'a> {
    calls: f64,
    /// Elements of the first input (the activations, for the ops that take weights too),
    /// summed over the calls.
    elements: f64,
    ms: f64,
    /// Its class of most time: the shapes shown.
    top: Option<(&'a str, f64)>,
}

impl<'a> OpCalls<'a> {
    fn add(&mut self, class: &'a str, calls: f64, elements: f64, ms: f64) {
        self.calls += calls;
        self.elements += calls * elements;
        self.ms += ms;
        if self.top.is_none_or(|t| ms > t.1) {
            self.top = Some((class, ms));
        }
    }

    fn per_call(&self) -> f64 {
        self.elements / self.calls
    }
}

/// Each op with recorded shapes, its calls in each run over its classes (one per shapes).
fn shaped_ops(c: &Comparison) -> BTreeMap<&str, [OpCalls<'_>; 2]> {
    let mut ops: BTreeMap<&str, [OpCalls; 2]> = BTreeMap::new();
    for r in c
        .classes
        .iter()
        .filter(|r| r.kind == TimeClassKind::Compute && r.changed_on.is_none())
    {
        let Some((op, shapes)) = call_shapes(&r.class) else {
            continue;
        };
        let Some(first) = shapes.first().filter(|d| !d.is_empty()) else {
            continue;
        };
        let elements = first.iter().map(|&d| d as f64).product::<f64>();
        let e = ops.entry(op).or_default();
        e[0].add(&r.class, r.baseline_count, elements, r.baseline_ms);
        e[1].add(&r.class, r.current_count, elements, r.current_ms);
    }
    ops
}

/// The same ops over a common multiple of the elements per call (from the input shapes
/// the class names carry): per op, the elements of its first input per call, current over
/// baseline; the multiple where ops holding `MIN_SHARE` of the shaped ops' baseline time,
/// `MIN_CLASSES` of them and half or more, agree, `MIN_MULTIPLE` or more either way, with
/// each op run about as often per step as before.
pub(crate) fn input_scale(c: &Comparison) -> Option<WorkScale> {
    shaped_scale(
        c,
        |[b, c]| (c.calls / b.calls - 1.0).abs() <= SAME_MULTIPLE,
        |[b, c]| c.per_call() / b.per_call(),
        |multiple, _| multiple,
        |example| ScaledBy::InputSize { example },
    )
}

/// The same work cut into a common multiple of the calls, each on that fraction of the
/// elements (a micro-batch cut in two for gradient accumulation), the elements per step
/// unchanged: as [`input_scale`], over the calls' multiple.
pub(crate) fn split_scale(c: &Comparison) -> Option<WorkScale> {
    shaped_scale(
        c,
        |[b, c]| {
            other_work(c.calls / b.calls) && (c.elements / b.elements - 1.0).abs() <= SAME_MULTIPLE
        },
        |[b, c]| c.calls / b.calls,
        |_, elements| elements,
        |example| ScaledBy::Split { example },
    )
}

/// The common multiple `ratio` gives the ops that `fit` (both runs ran with shapes), where
/// those near it hold `MIN_SHARE` of those ops' baseline time and are `MIN_CLASSES` or
/// more and half of them or more, and it is `MIN_MULTIPLE` or more either way; each op's
/// time over the `work` (from the multiple and their elements per step, current over
/// baseline) it did.
fn shaped_scale(
    c: &Comparison,
    fit: impl Fn(&[OpCalls; 2]) -> bool,
    ratio: impl Fn(&[OpCalls; 2]) -> f64,
    work: impl Fn(f64, f64) -> f64,
    by: impl FnOnce((String, String)) -> ScaledBy,
) -> Option<WorkScale> {
    let ops = shaped_ops(c);
    let fitting: Vec<&[OpCalls; 2]> = ops
        .values()
        .filter(|[b, c]| b.calls > 0.0 && c.calls > 0.0 && b.elements > 0.0 && c.elements > 0.0)
        .filter(|v| fit(v))
        .collect();
    let total: f64 = fitting.iter().map(|[b, _]| b.ms).sum();
    let mut by_ratio: Vec<(f64, f64)> = fitting.iter().map(|v| (ratio(v), v[0].ms)).collect();
    let multiple = weighted_median(&mut by_ratio)?;
    if total <= 0.0 || !other_work(multiple) {
        return None;
    }
    let near: Vec<&&[OpCalls; 2]> = fitting
        .iter()
        .filter(|v| (ratio(v) / multiple - 1.0).abs() <= SAME_MULTIPLE)
        .collect();
    let (base_ms, cur_ms) = near
        .iter()
        .fold((0.0, 0.0), |(b, c), v| (b + v[0].ms, c + v[1].ms));
    let broad = near.len() >= MIN_CLASSES && 2 * near.len() >= fitting.len();
    if !broad || base_ms < MIN_SHARE * total || base_ms <= 0.0 {
        return None;
    }
    let [b, cur] = near.iter().max_by(|x, y| x[0].ms.total_cmp(&y[0].ms))?;
    let example = (b.top?.0.to_string(), cur.top?.0.to_string());
    // their elements per step, current over baseline
    let elements = near.iter().map(|v| v[1].elements).sum::<f64>()
        / near.iter().map(|v| v[0].elements).sum::<f64>();
    let compute_delta: f64 = c
        .classes
        .iter()
        .filter(|r| r.kind == TimeClassKind::Compute)
        .map(TimeClassChange::delta_ms)
        .sum();
    Some(WorkScale {
        multiple,
        classes: near.len(),
        of: fitting.len(),
        delta_ms: compute_delta,
        per_op: cur_ms / work(multiple, elements) / base_ms,
        by: by(example),
    })
}

impl WorkScale {
    /// "the step runs 2.00 times its ops: 14 of 20 op classes run 2.0x as often per step,
    /// +120.00 ms per step (80% of the change), each op 0.98x its time"; or "the ops take
    /// 2.00 times the inputs: ...".
    pub(super) fn words(&self, step_delta: f64) -> String {
        let share = self.delta_ms / step_delta * 100.0;
        match &self.by {
            ScaledBy::OpsPerStep => format!(
                "the step runs {:.2} times its ops: {} of {} op classes run {:.1}x as often per step, {:+.2} ms per step ({share:.0}% of the change), each op {:.2}x its time before",
                self.multiple, self.classes, self.of, self.multiple, self.delta_ms, self.per_op
            ),
            ScaledBy::InputSize { example } => format!(
                "the ops take {:.2} times the inputs: {} of {} ops with recorded shapes run on {:.1}x the elements per call, as often per step ({} -> {}); compute {:+.2} ms per step ({share:.0}% of the change), each element {:.2}x its time before",
                self.multiple,
                self.classes,
                self.of,
                self.multiple,
                example.0,
                example.1,
                self.delta_ms,
                self.per_op
            ),
            ScaledBy::Split { example } => format!(
                "the same work in {:.2} times the calls: {} of {} ops with recorded shapes run {:.1}x as often per step on {:.2}x the elements per call, the elements per step unchanged ({} -> {}); compute {:+.2} ms per step ({share:.0}% of the change), each element {:.2}x its time before",
                self.multiple,
                self.classes,
                self.of,
                self.multiple,
                1.0 / self.multiple,
                example.0,
                example.1,
                self.delta_ms,
                self.per_op
            ),
        }
    }

    pub(super) fn action(&self) -> String {
        let times = if self.multiple > 1.0 {
            format!("{:.1} times the", self.multiple)
        } else {
            format!("{:.2} of the", self.multiple)
        };
        match self.by {
            ScaledBy::OpsPerStep => format!(
                "the step does {times} work, not slower work (each op takes {:.2}x its time before): count what a step holds in both runs' configurations (micro-batches per optimizer step in gradient accumulation, batch size and sequence length, layers); compare throughput per sample or token rather than per step",
                self.per_op
            ),
            ScaledBy::InputSize { .. } => format!(
                "the step does {times} work in the same ops, not slower work (each element takes {:.2}x its time before): the inputs grew or shrank, so compare both runs' batch size, sequence length, image size or padding (a collate that pads to the longest sample); compare throughput per sample or token rather than per step",
                self.per_op
            ),
            ScaledBy::Split { .. } => format!(
                "the step does the same work in {} calls ({:.1} times as many, each on {:.2} of the elements): the micro-batch was cut (more, smaller micro-batches of gradient accumulation, or inputs processed in chunks) or merged; smaller calls cost more per element where they leave the cores or the GPU underused (each element takes {:.2}x its time before): compare the micro-batch size and the micro-batches per step in both runs' configurations",
                if self.multiple > 1.0 { "more, smaller" } else { "fewer, larger" },
                self.multiple,
                1.0 / self.multiple,
                self.per_op
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compare::causes::tests::class;
    use crate::compare::scale::tests::job_from;

    #[test]
    fn the_same_ops_over_a_multiple_of_their_inputs_are_more_work() {
        // (op, its input shapes with the batch as `{b}`, calls per step, ms per call at batch 16)
        let ops = [
            ("aten::conv2d", "[[{b},16,32,32],[32,16,3,3],[]]", 2.0, 3.0),
            ("aten::batch_norm", "[[{b},32,32,32],[32],[32]]", 2.0, 1.0),
            ("aten::relu", "[[{b},32,32,32]]", 2.0, 0.5),
            ("aten::linear", "[[{b},512],[10,512],[10]]", 1.0, 0.4),
        ];
        // (what, batch of each op in the current run, calls per step x, expected multiple)
        let cases: [(&str, [u64; 4], f64, Option<f64>); 4] = [
            ("a doubled batch", [32, 32, 32, 32], 1.0, Some(2.0)),
            ("half the batch", [8, 8, 8, 8], 1.0, Some(0.5)),
            (
                "one op's inputs grew: not the step's",
                [16, 16, 16, 64],
                1.0,
                None,
            ),
            (
                "the same shapes twice as often: more ops, not larger",
                [16; 4],
                2.0,
                None,
            ),
        ];
        for (what, batches, calls, want) in cases {
            let mut classes = Vec::new();
            for (&(op, shapes, n, ms), b) in ops.iter().zip(batches) {
                let name = |b: u64| format!("{op} {}", shapes.replace("{b}", &b.to_string()));
                let cur_ms = n * calls * ms * b as f64 / 16.0;
                if b == 16 {
                    classes.push(class(
                        TimeClassKind::Compute,
                        &name(16),
                        (n * ms, n),
                        (cur_ms, n * calls),
                    ));
                } else {
                    classes.push(class(
                        TimeClassKind::Compute,
                        &name(16),
                        (n * ms, n),
                        (0.0, 0.0),
                    ));
                    classes.push(class(
                        TimeClassKind::Compute,
                        &name(b),
                        (0.0, 0.0),
                        (cur_ms, n * calls),
                    ));
                }
            }
            // an op the trace records no shapes of
            classes.push(class(
                TimeClassKind::Compute,
                "ConvolutionBackward0",
                (8.0, 2.0),
                (16.0, 2.0),
            ));
            let mut c = job_from([0.0; 6], [0.0; 6]);
            c.classes = classes;
            let got = input_scale(&c);
            assert_eq!(got.as_ref().map(|w| w.multiple), want, "{what}: {got:?}");
            if let Some(w) = got {
                assert_eq!((w.classes, w.of), (4, 4), "{what}");
                assert!((w.per_op - 1.0).abs() < 1e-9, "{what}: {w:?}");
                let ScaledBy::InputSize { example } = &w.by else {
                    panic!("{what}: {w:?}")
                };
                assert!(
                    example.0.starts_with("aten::conv2d [[16,"),
                    "{what}: {example:?}"
                );
            }
        }
    }

    #[test]
    fn the_same_work_in_more_calls_on_fewer_elements_is_a_split() {
        // (op, its input shapes with the batch as `{b}`, calls per step at batch 16, ms per
        // call at batch 16)
        let ops = [
            (
                "aten::linear",
                "[[{b},128,256],[1024,256],[1024]]",
                4.0,
                4.0,
            ),
            (
                "aten::layer_norm",
                "[[{b},128,256],[],[256],[256]]",
                8.0,
                0.5,
            ),
            ("aten::gelu", "[[{b},128,1024]]", 4.0, 1.0),
        ];
        // (what, the current batch, its calls' multiple, the split's multiple)
        let cases: [(&str, u64, f64, Option<f64>); 4] = [
            ("two micro-batches of 8", 8, 2.0, Some(2.0)),
            ("one batch of 32 in place of two of 16", 32, 0.5, Some(0.5)),
            ("half the batch, as often: less work", 8, 1.0, None),
            ("the same batch twice as often: more work", 16, 2.0, None),
        ];
        for (what, batch, calls, want) in cases {
            let mut classes = Vec::new();
            for &(op, shapes, n, ms) in &ops {
                let name = |b: u64| format!("{op} {}", shapes.replace("{b}", &b.to_string()));
                // 1.1x the time per element in smaller calls
                let cur = (n * ms * calls * batch as f64 / 16.0 * 1.1, n * calls);
                if batch == 16 {
                    classes.push(class(TimeClassKind::Compute, &name(16), (n * ms, n), cur));
                } else {
                    classes.push(class(
                        TimeClassKind::Compute,
                        &name(16),
                        (n * ms, n),
                        (0.0, 0.0),
                    ));
                    classes.push(class(TimeClassKind::Compute, &name(batch), (0.0, 0.0), cur));
                }
            }
            let mut c = job_from([0.0; 6], [0.0; 6]);
            c.classes = classes;
            let got = split_scale(&c);
            assert_eq!(got.as_ref().map(|w| w.multiple), want, "{what}: {got:?}");
            if let Some(w) = got {
                assert_eq!((w.classes, w.of), (3, 3), "{what}");
                assert!((w.per_op - 1.1).abs() < 1e-9, "{what}: {w:?}");
                assert!(w.words(1.0).starts_with("the same work in"), "{what}");
            }
        }
    }

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
