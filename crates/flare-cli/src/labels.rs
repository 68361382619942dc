//! Labelled op groups for training and evaluating the abnormal-op classifier: a
//! simulated job with a fault walked beside its fault-free twin (same seed, so the same
//! noise), each op group labelled by whether the fault made it longer. Used by
//! `flare train` and `flare bench abnormal` only; diagnosis never labels anything.

use flare_engine::abnormal::{
    detect, features, AbnormalMethod, Classes, Gate, History, N_FEATURES,
};
use flare_engine::context::JobContext;
use flare_engine::digest::Members;
use flare_engine::stats::median;

/// One training row: the features of a gated op group and whether the injected fault made
/// it longer.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LabeledRow {
    pub features: [f32; N_FEATURES],
    pub abnormal: bool,
}

/// The label of a group: the fault made its ops take noticeably longer than in the
/// fault-free twin run (same seed, so the same noise): by 5% of their fault-free time and
/// by 0.2% of the iteration.
pub fn label(fault_total_ns: f64, twin_total_ns: f64, twin_iteration_ns: f64) -> bool {
    let extra = fault_total_ns - twin_total_ns;
    extra >= 0.05 * twin_total_ns && extra >= 0.002 * twin_iteration_ns
}

/// The gated rows of one iteration with their features, for training and evaluation:
/// (global group id, features). Groups are in `Members::groups()` order.
pub fn gated_rows(
    ctx: &JobContext,
    members: &Members,
    history: &History,
    iteration_ratio: f64,
    gate: &Gate,
) -> Vec<(u32, [f32; N_FEATURES])> {
    // Training and evaluation run many jobs side by side: one thread each.
    let classes = Classes::new(ctx, members, 1);
    let mut buf = Vec::new();
    let mut out = Vec::new();
    for (pos, (id, g)) in members.groups().enumerate() {
        if g.n == 0 {
            continue;
        }
        let f = features(
            ctx,
            members,
            &classes,
            history,
            iteration_ratio,
            id,
            pos,
            g,
            &mut buf,
        );
        if gate.passes(&f) {
            out.push((id, f));
        }
    }
    out
}

/// The slices of iteration `it` (the `k`-th) of a trace, given each rank's ranges.
fn slices_at<'a>(
    t: &'a flare_model::Trace,
    ranges: &[Vec<(usize, usize)>],
    k: usize,
    it: u32,
) -> Vec<flare_engine::digest::RankSlice<'a>> {
    t.ranks
        .iter()
        .enumerate()
        .map(|(i, r)| flare_engine::digest::RankSlice {
            rank_index: i,
            ops: &r.ops[ranges[i][k].0..ranges[i][k].1],
            span: r.iterations.iter().find(|s| s.iteration == it).copied(),
        })
        .collect()
}

/// One iteration of a fault/twin pair, as [`walk_pair`] hands it over.
pub struct PairIteration<'a> {
    pub ctx: &'a JobContext,
    /// The faulty run's members and op groups.
    pub members: &'a Members,
    /// Per op group of the faulty run (in `Members::groups()` order): whether the fault
    /// made it abnormal ([`label`]); `None` for groups the twin does not have or without
    /// ended ops.
    pub labels: Vec<Option<bool>>,
    pub history: &'a History,
    pub iteration_ratio: f64,
}

/// Walks a simulated job with a fault and its fault-free twin (same seed, so the same
/// noise) iteration by iteration, digesting both as the engine does, and hands each
/// iteration's op groups with their labels to `f`.
pub fn walk_pair(
    fault: &flare_model::Trace,
    twin: &flare_model::Trace,
    mut f: impl FnMut(&PairIteration),
) {
    use flare_engine::digest::{build, iteration_ranges, Carry};
    use std::collections::HashMap;
    let ctx = JobContext::from_trace(fault);
    let twin_ctx = JobContext::from_trace(twin);
    let its = fault.iterations_with_ops();
    let ranges_of = |t: &flare_model::Trace| -> Vec<Vec<(usize, usize)>> {
        t.ranks
            .iter()
            .map(|r| iteration_ranges(&r.ops, &its))
            .collect()
    };
    let fr = ranges_of(fault);
    let tr = ranges_of(twin);
    let (mut fc, mut tc) = (Carry::new(ctx.n_ranks()), Carry::new(twin_ctx.n_ranks()));
    let (mut fm, mut tm) = (Members::default(), Members::default());
    let mut history = History::new(ctx.n_ranks());
    let mut recent: Vec<f64> = Vec::new();
    for (k, &it) in its.iter().enumerate() {
        let fd = build(&ctx, it, &slices_at(fault, &fr, k, it), &mut fc, 1, &mut fm);
        let td = build(
            &twin_ctx,
            it,
            &slices_at(twin, &tr, k, it),
            &mut tc,
            1,
            &mut tm,
        );
        let iteration_ratio = match (fd.duration_ns, recent.is_empty()) {
            (Some(t), false) => {
                let mut v = recent.clone();
                t / median(&mut v).max(1.0)
            }
            _ => 1.0,
        };
        let twin_total: HashMap<(u32, u32, u32), f64> = tm
            .groups()
            .map(|(_, g)| ((g.rank_index, g.comm, g.name), g.sum_d))
            .collect();
        let twin_iteration = td.duration_ns.unwrap_or(0.0);
        let labels = fm
            .groups()
            .map(|(_, g)| {
                let t = twin_total.get(&(g.rank_index, g.comm, g.name))?;
                (g.n > 0).then(|| label(g.sum_d, *t, twin_iteration))
            })
            .collect();
        f(&PairIteration {
            ctx: &ctx,
            members: &fm,
            labels,
            history: &history,
            iteration_ratio,
        });
        history.update(&fm);
        if let Some(t) = fd.duration_ns {
            recent.push(t);
        }
    }
}

/// The labelled rows of one training scenario: the features of each gated op group of the
/// faulty run and its label, with how many abnormal groups the gate let through.
pub fn labeled_rows(
    fault: &flare_model::Trace,
    twin: &flare_model::Trace,
    gate: &Gate,
) -> (Vec<LabeledRow>, GateCounts) {
    let mut out = Vec::new();
    let mut counts = GateCounts::default();
    walk_pair(fault, twin, |p| {
        counts.groups += p.labels.iter().filter(|l| l.is_some()).count() as u64;
        counts.abnormal += p.labels.iter().filter(|l| **l == Some(true)).count() as u64;
        let rows = gated_rows(p.ctx, p.members, p.history, p.iteration_ratio, gate);
        for (id, f) in rows {
            let Some(abnormal) = p.labels[id as usize] else {
                continue;
            };
            counts.gated_abnormal += abnormal as u64;
            out.push(LabeledRow {
                features: f,
                abnormal,
            });
        }
    });
    counts.gated = out.len() as u64;
    (out, counts)
}

/// `part / whole`, 0 when `whole` is.
fn share(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        0.0
    } else {
        part as f64 / whole as f64
    }
}

/// Op-level confusion counts of a classifier against the labels.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Confusion {
    pub true_positives: u64,
    pub false_positives: u64,
    pub false_negatives: u64,
    pub true_negatives: u64,
}

impl Confusion {
    pub fn add(&mut self, predicted: bool, truth: bool) {
        match (predicted, truth) {
            (true, true) => self.true_positives += 1,
            (true, false) => self.false_positives += 1,
            (false, true) => self.false_negatives += 1,
            (false, false) => self.true_negatives += 1,
        }
    }
    pub fn merge(&mut self, o: &Confusion) {
        self.true_positives += o.true_positives;
        self.false_positives += o.false_positives;
        self.false_negatives += o.false_negatives;
        self.true_negatives += o.true_negatives;
    }
    pub fn precision(&self) -> f64 {
        share(
            self.true_positives,
            self.true_positives + self.false_positives,
        )
    }
    pub fn recall(&self) -> f64 {
        share(
            self.true_positives,
            self.true_positives + self.false_negatives,
        )
    }
    /// The share of truly normal groups flagged: on a fault-free job, of all groups.
    pub fn false_positive_rate(&self) -> f64 {
        share(
            self.false_positives,
            self.false_positives + self.true_negatives,
        )
    }
    pub fn f1(&self) -> f64 {
        let (p, r) = (self.precision(), self.recall());
        if p + r == 0.0 {
            0.0
        } else {
            2.0 * p * r / (p + r)
        }
    }
}

/// Each method's abnormal-op verdicts on a fault/twin pair against the labels: every op
/// group of every iteration (the forest's gate included, no drift adjustment: a fault is
/// not drift).
pub fn evaluate(
    fault: &flare_model::Trace,
    twin: &flare_model::Trace,
) -> [(AbnormalMethod, Confusion); 2] {
    let mut forest = Confusion::default();
    let mut sigma = Confusion::default();
    walk_pair(fault, twin, |p| {
        let f = detect(
            p.ctx,
            p.members,
            p.history,
            p.iteration_ratio,
            1.0,
            AbnormalMethod::Forest,
        );
        let s = detect(
            p.ctx,
            p.members,
            p.history,
            p.iteration_ratio,
            1.0,
            AbnormalMethod::ThreeSigma,
        );
        for (id, l) in p.labels.iter().enumerate() {
            if let Some(truth) = *l {
                forest.add(f.abnormal[id], truth);
                sigma.add(s.abnormal[id], truth);
            }
        }
    });
    [
        (AbnormalMethod::Forest, forest),
        (AbnormalMethod::ThreeSigma, sigma),
    ]
}

/// How many op groups a scenario had, how many the gate let through, and how many of
/// each were abnormal: the gate's cost in recall.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct GateCounts {
    pub groups: u64,
    pub gated: u64,
    pub abnormal: u64,
    pub gated_abnormal: u64,
}

impl GateCounts {
    pub fn merge(&mut self, o: &GateCounts) {
        self.groups += o.groups;
        self.gated += o.gated;
        self.abnormal += o.abnormal;
        self.gated_abnormal += o.gated_abnormal;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels() {
        assert!(label(110.0, 100.0, 1000.0));
        assert!(!label(104.0, 100.0, 1000.0), "under 5% of its own time");
        assert!(
            !label(110.0, 100.0, 10_000.0),
            "under 0.2% of the iteration"
        );
    }

    /// Holmes' claim, on jobs the model never saw: the forest finds far more of the op
    /// groups a fault slowed than the 3-sigma rule, at similar precision.
    #[test]
    fn forest_beats_three_sigma_on_a_slow_nic() {
        use flare_sim::{fault::FaultKind, simulate, SimConfig};
        let mut cfg = SimConfig::for_scale(64);
        cfg.iterations = 8;
        cfg.seed = 41;
        cfg.fault = FaultKind::SlowNic;
        let fault = simulate(&cfg).unwrap();
        cfg.fault = FaultKind::None;
        let twin = simulate(&cfg).unwrap();
        let [(m0, forest), (m1, sigma)] = evaluate(&fault.trace, &twin.trace);
        assert_eq!(
            (m0, m1),
            (AbnormalMethod::Forest, AbnormalMethod::ThreeSigma)
        );
        eprintln!("forest {forest:?}\n3-sigma {sigma:?}");
        assert!(
            forest.true_positives + forest.false_negatives > 100,
            "{forest:?}"
        );
        assert!(forest.precision() > 0.9, "{forest:?}");
        assert!(forest.recall() > 0.15, "{forest:?}");
        assert!(
            forest.f1() > 2.0 * sigma.f1(),
            "forest {forest:?} 3-sigma {sigma:?}"
        );
        // Twin against itself: nothing is truly abnormal, and the forest hardly flags
        // (measured 1.5%: pipeline receives of a whole stage that wait longer for one
        // iteration, which look like the victims of a fault; the graph search wants a rank
        // abnormal over iterations, so they make no finding).
        let [(_, clean), _] = evaluate(&twin.trace, &twin.trace);
        assert_eq!(clean.true_positives + clean.false_negatives, 0);
        assert!(
            (clean.false_positives as f64) < 0.02 * clean.true_negatives as f64,
            "{clean:?}"
        );
    }

    #[test]
    fn confusion_rates() {
        let mut c = Confusion::default();
        for (p, t) in [
            (true, true),
            (true, true),
            (true, false),
            (false, true),
            (false, false),
        ] {
            c.add(p, t);
        }
        assert_eq!(
            (
                c.true_positives,
                c.false_positives,
                c.false_negatives,
                c.true_negatives
            ),
            (2, 1, 1, 1)
        );
        assert!((c.precision() - 2.0 / 3.0).abs() < 1e-12);
        assert!((c.recall() - 2.0 / 3.0).abs() < 1e-12);
        assert!((c.f1() - 2.0 / 3.0).abs() < 1e-12);
        assert_eq!(
            Confusion::default().f1(),
            0.0,
            "no positives: zero, not NaN"
        );
    }
}
