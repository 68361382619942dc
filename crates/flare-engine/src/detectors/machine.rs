//! Machine metrics after Minder (ByteDance): a faulty machine stays unlike its peers.
//!
//! For every metric and sample, each machine's distance to the others is the largest,
//! over its devices, of the deviation from the median of the same device index on all
//! machines (in log space, so a 10% lower clock and a 10% lower NIC rate weigh alike). The
//! farthest machine is an outlier at that sample when it stands clear of the rest (a
//! robust z-score over machines) and deviates by a minimum amount. An alert needs the same
//! machine to stay the outlier for a continuity time (four minutes by default, allowing a
//! couple of missing samples): short glitches and faults that come and go in bursts are
//! not machine failures to act on.

use crate::stats::{confidence, median};
use crate::{Analysis, Detector, EngineConfig, Outcome};
use flare_model::{
    Component, Culprit, DetectorId, Direction, Evidence, EvidenceKey, Finding, FindingKind,
    MachineMetric, Severity, Unit,
};

/// Minder's thresholds on machine metrics.
#[derive(Clone, Debug)]
pub struct MachineConfig {
    /// A machine is reported when it stays the outlier of a metric this long...
    pub continuity_s: f64,
    /// ...deviating from its peers' median by at least this much (log ratio), and by
    /// this many robust standard deviations of the machines' distances.
    pub min_deviation: f64,
    pub min_z: f64,
}

impl Default for MachineConfig {
    fn default() -> Self {
        MachineConfig {
            continuity_s: 240.0,
            min_deviation: 0.03,
            min_z: 6.0,
        }
    }
}

pub struct MachineDetector;

/// The machine detector alone on a job's machine metrics (for the benchmark's table of
/// what machine metrics find without a trace).
pub fn detect_machines(
    ctx: &crate::JobContext,
    m: &flare_model::MachineMetrics,
    cfg: &EngineConfig,
) -> Vec<Finding> {
    let mut a = Analysis::new(ctx, Vec::new());
    a.machine = Some(m);
    match MachineDetector.detect(&a, cfg) {
        Outcome::Findings(f) => f,
        Outcome::NotEnoughData(_) | Outcome::NotApplicable => Vec::new(),
    }
}

/// One metric's sustained outlier.
#[derive(Clone, Debug)]
struct Alert {
    machine: usize,
    metric: MachineMetric,
    /// The device that deviated most often.
    device: Option<u32>,
    /// First sample of the run and its length in samples.
    start: usize,
    len: usize,
    /// Median signed deviation (log ratio to the peer median) over the run.
    deviation: f64,
    z: f64,
}

impl Detector for MachineDetector {
    fn id(&self) -> DetectorId {
        DetectorId::Machine
    }
    fn summary(&self) -> &'static str {
        "the machine whose GPU, NIC or CPU metrics stay unlike its peers' for minutes (Minder)"
    }
    fn needs(&self) -> &'static str {
        "machine metrics (DCGM, node exporter, NIC counters) of 3 or more machines over several minutes"
    }

    fn detect(&self, a: &Analysis, cfg: &EngineConfig) -> Outcome {
        let Some(m) = a.machine else {
            return Outcome::NotEnoughData(
                "no machine metrics (give --machine-metrics, or put machine.json beside the trace)"
                    .into(),
            );
        };
        if m.machines.len() < 3 {
            return Outcome::NotEnoughData(format!(
                "metrics of {} machines; at least 3 are needed",
                m.machines.len()
            ));
        }
        let continuity = (cfg.machine.continuity_s / m.interval_s.max(1e-9)).ceil() as usize;
        if m.samples < continuity {
            return Outcome::NotEnoughData(format!(
                "{:.0} s of machine metrics; the continuity rule needs {:.0} s",
                m.samples as f64 * m.interval_s,
                cfg.machine.continuity_s
            ));
        }
        let mut alerts = Vec::new();
        for metric in MachineMetric::ALL {
            alerts.extend(metric_alerts(m, metric, continuity, cfg));
        }
        if alerts.is_empty() {
            return Outcome::Findings(vec![]);
        }
        // One finding per machine, its longest alert first.
        alerts.sort_by(|x, y| y.len.cmp(&x.len).then(y.z.total_cmp(&x.z)));
        let mut machines: Vec<usize> = Vec::new();
        for al in &alerts {
            if !machines.contains(&al.machine) {
                machines.push(al.machine);
            }
        }
        let findings = machines
            .into_iter()
            .take(4)
            .map(|mi| {
                let mine: Vec<&Alert> = alerts.iter().filter(|x| x.machine == mi).collect();
                self.finding(a, m, &mine, cfg)
            })
            .collect();
        Outcome::Findings(findings)
    }
}

/// The machine currently the outlier of a metric, since `start`: per sample its signed
/// deviation, most deviant device and robust z.
struct Run {
    machine: usize,
    start: usize,
    deviations: Vec<f64>,
    devices: Vec<Option<u32>>,
    zs: Vec<f64>,
}

/// Sustained outliers of one metric.
fn metric_alerts(
    m: &flare_model::MachineMetrics,
    metric: MachineMetric,
    continuity: usize,
    cfg: &EngineConfig,
) -> Vec<Alert> {
    // Per machine: its series of this metric, by device.
    let per_machine: Vec<Vec<(Option<u32>, &[f64])>> = m
        .machines
        .iter()
        .map(|mc| {
            mc.series
                .iter()
                .filter(|s| s.metric == metric)
                .map(|s| (s.device, s.values.as_slice()))
                .collect()
        })
        .collect();
    let with_data = per_machine.iter().filter(|v| !v.is_empty()).count();
    if with_data < 3 {
        return vec![];
    }
    let devices: Vec<Option<u32>> = {
        let mut d: Vec<Option<u32>> = per_machine.iter().flatten().map(|x| x.0).collect();
        d.sort_unstable();
        d.dedup();
        d
    };
    let mut alerts = Vec::new();
    let mut run: Option<Run> = None;
    let mut gap = 0usize;
    let max_gap = 2usize;
    let mut vals: Vec<f64> = Vec::new();
    let mut medians: Vec<f64> = vec![f64::NAN; devices.len()];
    let mut dist: Vec<(f64, f64, Option<u32>)> = vec![(0.0, 0.0, None); per_machine.len()];
    let close = |run: &mut Option<Run>, alerts: &mut Vec<Alert>| {
        if let Some(Run {
            machine: mi,
            start,
            deviations: devs,
            devices: which,
            zs,
        }) = run.take()
        {
            if devs.len() >= continuity {
                let mut d = devs.clone();
                let mut z = zs.clone();
                let mut counts: Vec<(Option<u32>, usize)> = Vec::new();
                for w in which {
                    match counts.iter_mut().find(|c| c.0 == w) {
                        Some(c) => c.1 += 1,
                        None => counts.push((w, 1)),
                    }
                }
                let device = counts.iter().max_by_key(|c| c.1).and_then(|c| c.0);
                alerts.push(Alert {
                    machine: mi,
                    metric,
                    device,
                    start,
                    len: devs.len(),
                    deviation: median(&mut d),
                    z: median(&mut z),
                });
            }
        }
    };
    for t in 0..m.samples {
        // The median of each device index over machines.
        for (k, dev) in devices.iter().enumerate() {
            vals.clear();
            for s in per_machine.iter().flatten().filter(|x| x.0 == *dev) {
                if let Some(&v) = s.1.get(t) {
                    if v.is_finite() && v > 0.0 {
                        vals.push(v);
                    }
                }
            }
            medians[k] = if vals.len() >= 3 {
                median(&mut vals)
            } else {
                f64::NAN
            };
        }
        // Each machine's distance: its most deviant device.
        for (mi, series) in per_machine.iter().enumerate() {
            let mut best = (0.0f64, 0.0f64, None);
            for &(dev, values) in series {
                let k = devices.binary_search(&dev).expect("collected above");
                let (Some(&v), med) = (values.get(t), medians[k]) else {
                    continue;
                };
                if v.is_finite() && v > 0.0 && med.is_finite() && med > 0.0 {
                    let d = (v / med).ln();
                    if d.abs() > best.0 {
                        best = (d.abs(), d, dev);
                    }
                }
            }
            dist[mi] = best;
        }
        let mut ds: Vec<f64> = dist.iter().map(|d| d.0).collect();
        let (med, mad) = crate::stats::median_mad(&ds);
        let (top, &(d_top, signed, dev)) = dist
            .iter()
            .enumerate()
            .max_by(|x, y| x.1 .0.total_cmp(&y.1 .0).then(y.0.cmp(&x.0)))
            .expect("3 machines");
        ds.clear();
        let z = (d_top - med) / mad.max(0.01 * med.max(1e-3)).max(1e-9);
        let outlier = d_top >= cfg.machine.min_deviation && z >= cfg.machine.min_z;
        match (&mut run, outlier) {
            (Some(r), true) if r.machine == top => {
                r.deviations.push(signed);
                r.devices.push(dev);
                r.zs.push(z);
                gap = 0;
            }
            (Some(_), _) if gap < max_gap && !(outlier) => {
                // A missing sample or two does not break a run.
                gap += 1;
            }
            _ => {
                close(&mut run, &mut alerts);
                gap = 0;
                if outlier {
                    run = Some(Run {
                        machine: top,
                        start: t,
                        deviations: vec![signed],
                        devices: vec![dev],
                        zs: vec![z],
                    });
                }
            }
        }
    }
    close(&mut run, &mut alerts);
    alerts
}

impl MachineDetector {
    fn finding(
        &self,
        a: &Analysis,
        m: &flare_model::MachineMetrics,
        alerts: &[&Alert],
        cfg: &EngineConfig,
    ) -> Finding {
        let main = alerts[0];
        let machine = &m.machines[main.machine];
        let gpu_alert = alerts.iter().find(|x| x.metric.per_gpu());
        let nic_alert = alerts.iter().find(|x| x.metric == MachineMetric::NicTx);
        let (kind, component, device, action) = if let Some(g) = gpu_alert {
            (
                FindingKind::SlowGpu,
                Component::Gpu,
                g.device,
                "the GPU stays unlike its peers (clock, power, temperature or utilisation): check its throttling reasons and cooling (nvidia-smi -q -d PERFORMANCE,TEMPERATURE); drain the node and replace the GPU if it persists",
            )
        } else if let Some(n) = nic_alert {
            (
                FindingKind::SlowLink,
                Component::Nic,
                n.device,
                "the NIC moves less data than its peers': check the link and port counters (ibstat, perfquery), the cable and the switch port; drain the node if it persists",
            )
        } else {
            (
                FindingKind::HostStall,
                Component::Host,
                None,
                "the machine's CPU load stays unlike its peers': look for stray processes, the input pipeline and the Python GC on it (top, py-spy); drain the node if it persists",
            )
        };
        let mut culprit = Culprit::new(component);
        culprit.node = machine.node;
        culprit.element = Some(match (component, device) {
            (Component::Nic, Some(d)) => format!("{}/nic{d}", machine.name),
            _ => machine.name.clone(),
        });
        if let (Some(node), Some(dev)) = (machine.node, device) {
            culprit.local_gpu = Some(dev);
            let rank = a.ctx.job.cluster.rank_at(node, dev).unwrap_or(u32::MAX);
            if rank < a.ctx.job.world_size && component != Component::Host {
                culprit.rank = Some(rank);
                if let Some(p) = a.ctx.job.parallel.as_ref() {
                    let co = p.coords(rank);
                    culprit.stage = Some(co.pp);
                    culprit.dp_rank = Some(co.dp);
                }
            }
        }
        let minutes = main.len as f64 * m.interval_s / 60.0;
        let evidence: Vec<Evidence> = alerts
            .iter()
            .map(|al| {
                Evidence::new(
                    EvidenceKey::deviation_of(al.metric),
                    (al.deviation.exp() - 1.0) * 100.0,
                    Some(0.0),
                    Unit::Percent,
                    format!(
                        "{}{} {} the median of the same device on {} machines for {:.1} min from {:.0} s (robust z {:.1}; alerts need {:.0} s)",
                        al.metric.as_str(),
                        al.device.map(|d| format!(" of device {d}")).unwrap_or_default(),
                        Direction::of(al.deviation, 0.0, 0.0).pick("above", "below", "at"),
                        m.machines.len(),
                        al.len as f64 * m.interval_s / 60.0,
                        al.start as f64 * m.interval_s,
                        al.z,
                        cfg.machine.continuity_s
                    ),
                )
            })
            .collect();
        let what = alerts
            .iter()
            .map(|al| {
                format!(
                    "{} {:+.0}%",
                    al.metric.as_str(),
                    (al.deviation.exp() - 1.0) * 100.0
                )
            })
            .collect::<Vec<_>>()
            .join(", ");
        let summary = format!(
            "{} stays unlike its peers for {minutes:.1} min ({what}){}",
            culprit.describe(),
            if alerts.len() > 1 {
                format!(" in {} metrics", alerts.len())
            } else {
                String::new()
            }
        );
        Finding {
            kind,
            severity: Severity::Warning,
            summary,
            confidence: confidence(
                main.z / cfg.machine.min_z
                    * (main.len as f64 * m.interval_s / cfg.machine.continuity_s),
                1.0,
            ),
            culprits: vec![culprit],
            evidence,
            action: action.into(),
            iterations: vec![],
            detector: self.id(),
            corroborated_by: vec![],
            failure: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::{diagnose_with_machine, EngineConfig};
    use flare_model::{Component, DetectorId, Finding};
    use flare_sim::fault::FaultKind;
    use flare_sim::machine::{machine_metrics, MachineSimConfig};
    use flare_sim::{simulate, SimConfig};

    fn machine_findings(kind: FaultKind, seed: u64) -> (Vec<Finding>, flare_sim::fault::Truth) {
        let mut cfg = SimConfig::for_scale(256);
        cfg.iterations = 3;
        cfg.seed = seed;
        cfg.fault = kind;
        let out = simulate(&cfg).unwrap();
        let m = machine_metrics(
            &out.trace.job.cluster,
            out.trace.job.world_size,
            &out.truth,
            seed,
            &MachineSimConfig::default(),
        );
        let d = diagnose_with_machine(&out.trace, Some(&m), &EngineConfig::default());
        assert!(
            d.skipped_reason(DetectorId::Machine).is_none(),
            "{:?}",
            d.skipped
        );
        let f = d
            .findings
            .iter()
            .filter(|f| {
                f.detector == DetectorId::Machine
                    || f.corroborated_by
                        .iter()
                        .any(|c| c.detector == DetectorId::Machine)
                    || f.evidence.iter().any(|e| e.metric.is_machine_deviation())
            })
            .cloned()
            .collect();
        (f, out.truth)
    }

    #[test]
    fn the_faulty_machine_stays_unlike_its_peers_and_glitches_do_not() {
        for seed in [3, 4] {
            // A throttled GPU: its node and GPU.
            let (f, truth) = machine_findings(FaultKind::SlowGpu, seed);
            let want = &truth.culprits[0];
            let c = &f
                .first()
                .expect("a machine finding for a slow GPU")
                .culprits[0];
            assert_eq!((c.node, c.local_gpu), (want.node, want.local_gpu), "{f:#?}");
            // A slow NIC: the NIC.
            let (f, truth) = machine_findings(FaultKind::SlowNic, seed);
            let want = &truth.culprits[0];
            let c = &f
                .first()
                .expect("a machine finding for a slow NIC")
                .culprits[0];
            assert!(
                matches!(c.component, Component::Nic | Component::Gpu),
                "{f:#?}"
            );
            assert_eq!((c.node, c.local_gpu), (want.node, want.local_gpu), "{f:#?}");
            // A fault in bursts shorter than the continuity time, and a healthy job:
            // nothing from the machine metrics.
            for kind in [FaultKind::Intermittent, FaultKind::None] {
                let (f, _) = machine_findings(kind, seed);
                assert!(f.is_empty(), "{kind:?}: {f:#?}");
            }
        }
    }
}
