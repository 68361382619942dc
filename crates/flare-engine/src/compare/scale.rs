//! A change of the step that is the whole step scaled: compute, communication and the
//! host's own time all slower (or faster) by about the same factor, as when the machine
//! itself runs slower (another load on its CPUs, clocks or power limits, another node).
//! No part of the program stands out, and one run of each cannot tell the machine's
//! speed from the program's: two runs of the same job on a shared machine differ so by
//! 10 to 20%.

use flare_model::{Comparison, TimeClassChange, TimeClassKind};

/// Kinds of time that a machine's speed moves together and a change of the program
/// mostly does not.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Part {
    Compute,
    /// Moving data, and waiting for other ranks to arrive.
    Communication,
    /// Host phases, the loop between steps and time no op covers.
    Host,
}

impl Part {
    fn of(kind: TimeClassKind) -> Part {
        match kind {
            TimeClassKind::Compute => Part::Compute,
            TimeClassKind::Communication | TimeClassKind::Waiting => Part::Communication,
            TimeClassKind::Host | TimeClassKind::Untraced | TimeClassKind::BetweenSteps => {
                Part::Host
            }
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Part::Compute => "compute",
            Part::Communication => "communication",
            Part::Host => "host",
        }
    }
}

/// The step scaled as a whole.
#[derive(Clone, Debug, PartialEq)]
pub struct MachineScale {
    /// Current step over baseline step.
    pub factor: f64,
    /// Each part of the step holding at least [`MIN_PART_SHARE`] of it: per step of a
    /// rank, baseline and current, ms.
    pub parts: Vec<(Part, f64, f64)>,
    /// The share of the step's change that is not the step scaled: what classes changed
    /// beyond their share of a uniform change, in its direction, over the change.
    pub concentrated: f64,
}

/// A part of the step this small says nothing about the machine.
const MIN_PART_SHARE: f64 = 0.1;

/// The step's change as the machine's speed: `None` unless most of it is the step scaled
/// (less than half of it lies beyond each class's share of a uniform change), at least
/// two parts holding a tenth of the step or more moved in its direction by at least half
/// its relative change, and none moved against it. A change of the program moves the
/// classes it touches (one part, or a few classes) far beyond their share.
pub fn machine_scale(c: &Comparison) -> Option<MachineScale> {
    let (before, after) = (c.baseline.step_ms, c.current.step_ms);
    let total: f64 = c.classes.iter().map(|r| r.baseline_ms).sum();
    let delta = after - before;
    if !(before > 0.0 && after > 0.0 && total > 0.0) || delta == 0.0 {
        return None;
    }
    let change = delta / before;
    let sign = delta.signum();
    let concentrated = c
        .classes
        .iter()
        .map(|r| (sign * (r.delta_ms() - r.baseline_ms * change)).max(0.0))
        .sum::<f64>()
        / delta.abs();
    if concentrated >= 0.5 {
        return None;
    }
    let mut parts: Vec<(Part, f64, f64)> = Vec::new();
    for r in &c.classes {
        let part = Part::of(r.kind);
        match parts.iter_mut().find(|(p, ..)| *p == part) {
            Some((_, b, cur)) => {
                *b += r.baseline_ms;
                *cur += r.current_ms;
            }
            None => parts.push((part, r.baseline_ms, r.current_ms)),
        }
    }
    parts.retain(|(_, b, _)| *b >= MIN_PART_SHARE * total);
    let moved = |(_, b, cur): &&(Part, f64, f64)| sign * (cur / b - 1.0);
    let with_step = parts
        .iter()
        .filter(|p| moved(p) >= 0.5 * change.abs())
        .count();
    if with_step < 2 || parts.iter().any(|p| moved(&p) < 0.0) {
        return None;
    }
    parts.sort_by(|a, b| b.1.total_cmp(&a.1));
    Some(MachineScale {
        factor: after / before,
        parts,
        concentrated,
    })
}

/// What of a class's change is its own, beyond its share of the machine's: all of it
/// unless the step's change is the machine's speed.
pub fn own_delta_ms(r: &TimeClassChange, scale: Option<&MachineScale>) -> f64 {
    match scale {
        Some(s) => r.delta_ms() - r.baseline_ms * (s.factor - 1.0),
        None => r.delta_ms(),
    }
}

impl MachineScale {
    /// "compute +7%, communication +14%".
    pub fn parts_text(&self) -> String {
        self.parts
            .iter()
            .map(|(p, b, c)| format!("{} {:+.0}%", p.as_str(), (c / b - 1.0) * 100.0))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::compare::causes::tests::{class, run};

    /// A CPU job's step (ms): GEMMs, the rest of compute, the all-reduce, waiting, the
    /// dataloader and the loop between steps; `cur` the current run's, in that order.
    fn job(cur: [f64; 6]) -> Comparison {
        job_from([11.0, 6.6, 12.3, 0.7, 0.7, 1.6], cur)
    }

    /// A CPU job of 2 ranks x 10 iterations from its classes' times, baseline and current
    /// (see [`job`]).
    pub(in crate::compare) fn job_from(base: [f64; 6], cur: [f64; 6]) -> Comparison {
        use TimeClassKind::*;
        let names = [
            (Compute, "AddmmBackward0"),
            (Compute, "DistributedDataParallel.forward"),
            (Communication, "all_reduce 16.0 MiB"),
            (Waiting, "waiting for other ranks"),
            (Host, "dataloader"),
            (BetweenSteps, "host time between steps"),
        ];
        let classes = names
            .iter()
            .zip(base.iter().zip(cur))
            .map(|(&(k, n), (&b, c))| class(k, n, (b, 1.0), (c, 1.0)))
            .collect();
        Comparison {
            baseline: run(base.iter().sum(), vec![]),
            current: run(cur.iter().sum(), vec![]),
            classes,
            sequence: None,
            causes: vec![],
            waited_for: None,
            reruns: None,
        }
    }

    #[test]
    fn the_machine_is_told_from_the_program() {
        let cases: Vec<(&str, [f64; 6], bool)> = vec![
            (
                "everything 15% slower (another load on the machine)",
                [12.65, 7.6, 14.15, 0.8, 0.8, 1.85],
                true,
            ),
            (
                "everything 15% faster",
                [9.35, 5.6, 10.45, 0.6, 0.6, 1.35],
                true,
            ),
            (
                "contention: compute and the all-reduce slower, one rank preempted (waiting)",
                [16.7, 10.2, 15.4, 6.1, 1.9, 2.7],
                true,
            ),
            (
                "the noise of two runs: compute +7%, communication +14%",
                [11.6, 7.2, 14.0, 0.8, 0.7, 1.9],
                true,
            ),
            (
                "the GEMMs 60% slower, nothing else: the program (or its kernels)",
                [17.6, 6.6, 12.3, 0.7, 0.7, 1.6],
                false,
            ),
            (
                "compute 30% slower, communication as before: the GPU's clocks or its kernels",
                [14.3, 8.6, 12.3, 0.7, 0.7, 1.6],
                false,
            ),
            (
                "the dataloader 10 ms slower: the program",
                [11.0, 6.6, 12.3, 0.7, 10.7, 1.6],
                false,
            ),
            (
                "a slower loop on a slower machine: mostly the loop",
                [12.1, 7.3, 13.5, 0.8, 0.8, 11.6],
                false,
            ),
            (
                "communication 40% slower and compute 5%: the network",
                [11.5, 6.9, 17.2, 1.0, 0.7, 1.6],
                false,
            ),
            (
                "compute and communication 20% slower, the host (7% of the step) 10% faster: too small a part to say",
                [13.2, 7.9, 14.8, 0.8, 0.6, 1.45],
                true,
            ),
            (
                "compute and communication 20% faster, the host a little: the machine",
                [8.8, 5.3, 9.8, 0.6, 0.7, 1.55],
                true,
            ),
        ];
        for (what, cur, machine) in cases {
            let c = job(cur);
            let s = machine_scale(&c);
            assert_eq!(s.is_some(), machine, "{what}: {s:?}");
            if let Some(s) = s {
                assert!(
                    (s.factor - c.current.step_ms / c.baseline.step_ms).abs() < 1e-9,
                    "{what}"
                );
                assert!(s.concentrated < 0.5, "{what}: {s:?}");
            }
        }
        // A heavier dataloader (18% of the step with the loop) that got faster while
        // compute and communication got 20% slower: not one speed.
        let base = [11.0, 6.6, 12.3, 0.7, 5.0, 1.6];
        let mixed = job_from(base, [13.2, 7.92, 14.76, 0.84, 4.67, 1.6]);
        assert_eq!(machine_scale(&mixed), None);
        let scaled = job_from(base, base.map(|ms| ms * 1.2));
        assert!(machine_scale(&scaled).is_some());
        let same = job([11.0, 6.6, 12.3, 0.7, 0.7, 1.6]);
        assert_eq!(machine_scale(&same), None, "no change");
    }

    #[test]
    fn the_machines_speed_is_said_and_names_no_cause() {
        use crate::compare::{regression_findings, CompareConfig};
        use flare_model::Severity;
        // Everything 40% slower: the loop between steps grew by 0.64 ms (2% of the
        // step, 29% of its own time), which alone would name it.
        let base = [11.0, 6.6, 12.3, 0.7, 0.7, 1.6];
        let mut c = job(base.map(|ms| ms * 1.4));
        let f = regression_findings(&mut c, &CompareConfig::default());
        assert!(c.causes.is_empty(), "{:?}", c.causes);
        assert_eq!(f.len(), 1, "{f:#?}");
        assert_eq!(f[0].severity, Severity::Info);
        assert!(
            f[0].summary.contains("every part of the step alike")
                && f[0].summary.contains("compute +40%, communication +40%"),
            "{}",
            f[0].summary
        );
        assert!(
            f[0].action.contains("one run of each cannot tell"),
            "{}",
            f[0].action
        );
        // Within one run, the machine slowing down is an event of the job.
        let within = CompareConfig {
            within_one_run: true,
            ..CompareConfig::default()
        };
        let f = regression_findings(&mut job(base.map(|ms| ms * 1.4)), &within);
        assert_eq!(f[0].severity, Severity::Warning);
        assert!(
            f[0].action.contains("look at its machines"),
            "{}",
            f[0].action
        );
        // The loop 10 ms slower on the same machine: named, and not the machine's.
        let mut c = job([11.0, 6.6, 12.3, 0.7, 0.7, 11.6]);
        let f = regression_findings(&mut c, &CompareConfig::default());
        assert_eq!(c.causes, [flare_model::RegressionCause::HostBetweenSteps]);
        assert_eq!(f[0].severity, Severity::Warning);
    }

    #[test]
    fn a_class_is_judged_beyond_the_machines_share() {
        let c = job([12.65, 7.6, 14.15, 0.8, 0.8, 1.85]);
        let s = machine_scale(&c).unwrap();
        assert_eq!(s.parts_text(), "compute +15%, communication +15%");
        let gemm = &c.classes[0];
        assert!((gemm.delta_ms() - 1.65).abs() < 1e-9);
        assert!(own_delta_ms(gemm, Some(&s)).abs() < 0.01, "{s:?}");
        assert_eq!(own_delta_ms(gemm, None), gemm.delta_ms());
    }
}
