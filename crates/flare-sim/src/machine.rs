//! Machine metrics of a simulated job: what node monitoring (DCGM, the node exporter, NIC
//! counters) would have shown over the minutes around the traced iterations, for the
//! injected fault.
//!
//! Every machine reports, per GPU, its utilisation, SM clock, power and temperature, per
//! NIC its transmit rate, and its CPU utilisation, once per `interval_s`. Healthy machines
//! differ by a static offset and noise; now and then one has a short glitch (a temperature
//! spike, a dip in NIC traffic) that lasts well under Minder's four-minute continuity.
//! A fault starts `onset_s` into the series: a throttled GPU (lower clock and power,
//! hotter), a NIC moving less data, a busy or stalled CPU. An intermittent fault comes in
//! bursts shorter than four minutes; structural faults (stage or sequence imbalance) and
//! hangs leave no machine standing out.

use crate::fault::{Fault, FaultKind, StallSource, Truth};
use crate::noise::Noise;
use flare_model::{ClusterTopology, Machine, MachineMetric, MachineMetrics, MetricSeries};

/// Shape of the generated series.
#[derive(Clone, Debug)]
pub struct MachineSimConfig {
    pub duration_s: f64,
    pub interval_s: f64,
    /// When the fault starts.
    pub onset_s: f64,
    /// Probability per machine of one short glitch in the series.
    pub glitch_probability: f64,
}

impl Default for MachineSimConfig {
    fn default() -> Self {
        MachineSimConfig {
            duration_s: 600.0,
            interval_s: 2.0,
            onset_s: 120.0,
            glitch_probability: 0.05,
        }
    }
}

/// The effect of the fault on one series at time `t`: a multiplicative factor.
struct Effect<'a> {
    truth: &'a Truth,
    onset: f64,
    noise: Noise,
}

impl Effect<'_> {
    /// Whether the fault is active at `t` (an intermittent one in bursts of 20-100 s with
    /// longer gaps, never four minutes on end).
    fn active(&self, t: f64) -> bool {
        if t < self.onset {
            return false;
        }
        if self.truth.fault_kind != FaultKind::Intermittent {
            return true;
        }
        // Bursts: 2-minute periods, each on for its first 20-100 s.
        let period = ((t - self.onset) / 120.0) as u64;
        let on = 20.0 + 80.0 * self.noise.uniform(&[70, period]);
        (t - self.onset) - period as f64 * 120.0 < on
    }

    /// (factor on the GPU's clock and power, additive temperature, factor on utilisation)
    /// for GPU `local` of `node`.
    fn gpu(&self, cluster: &ClusterTopology, node: u32, local: u32, t: f64) -> (f64, f64, f64) {
        let Some(spec) = &self.truth.fault else {
            return (1.0, 0.0, 1.0);
        };
        if !self.active(t) {
            return (1.0, 0.0, 1.0);
        }
        match &spec.fault {
            Fault::SlowGpu { rank, factor } => {
                let loc = cluster.loc(*rank);
                if loc.node == node && loc.local == local {
                    // Thermal or power throttling: the clock follows the slowdown.
                    (1.0 / factor, 12.0 * (factor - 1.0).min(1.0), 1.04)
                } else {
                    (1.0, 0.0, 1.0)
                }
            }
            _ => (1.0, 0.0, 1.0),
        }
    }

    /// Factor on NIC `rail` of `node`'s transmit rate.
    fn nic(&self, cluster: &ClusterTopology, node: u32, rail: u32, t: f64) -> f64 {
        let Some(spec) = &self.truth.fault else {
            return 1.0;
        };
        if !self.active(t) {
            return 1.0;
        }
        match &spec.fault {
            Fault::SlowNic {
                node: n,
                rail: r,
                factor,
            } if *n == node && *r == rail => 1.0 / factor,
            Fault::CongestedSwitch {
                pod,
                rail: r,
                factor,
            } if cluster.pod_of(node) == *pod && *r == rail => 1.0 / factor,
            _ => 1.0,
        }
    }

    /// Additive CPU utilisation (points) on `node`.
    fn cpu(&self, cluster: &ClusterTopology, node: u32, t: f64) -> f64 {
        let Some(spec) = &self.truth.fault else {
            return 0.0;
        };
        if !self.active(t) {
            return 0.0;
        }
        match &spec.fault {
            Fault::HostStall {
                rank,
                source,
                probability,
                ..
            } if cluster.loc(*rank).node == node => match source {
                // The collector runs flat out; a starved input pipeline leaves the
                // CPU waiting on I/O.
                StallSource::Gc => 35.0 * probability,
                StallSource::DataLoader => -20.0 * probability,
            },
            // Busy elsewhere on its CPU (what it does is not traced).
            Fault::UntracedStall { rank, .. } if cluster.loc(*rank).node == node => 20.0,
            Fault::LaunchBound { rank, .. } if cluster.loc(*rank).node == node => 25.0,
            _ => 0.0,
        }
    }
}

/// The machine metrics of a simulated job with ground truth `truth`, seeded by `seed`.
pub fn machine_metrics(
    cluster: &ClusterTopology,
    world: u32,
    truth: &Truth,
    seed: u64,
    cfg: &MachineSimConfig,
) -> MachineMetrics {
    let noise = Noise::new(seed ^ 0x4D41_4348);
    let samples = (cfg.duration_s / cfg.interval_s).round().max(1.0) as usize;
    // The job's machines, where the scheduler put them.
    let gpn = cluster.gpus_per_node.max(1);
    let nodes: Vec<u32> = (0..world.div_ceil(gpn))
        .map(|b| cluster.loc(b * gpn).node)
        .collect();
    let effect = Effect {
        truth,
        onset: cfg.onset_s,
        noise,
    };
    let machines = nodes
        .into_iter()
        .map(|node| {
            let n = node as u64;
            // A short glitch on some healthy machines: one metric, one device, 30-120 s.
            let glitch = (noise.uniform(&[80, n]) < cfg.glitch_probability).then(|| {
                let start = noise.uniform(&[81, n]) * cfg.duration_s;
                let len = 30.0 + 90.0 * noise.uniform(&[82, n]);
                let which = (noise.uniform(&[83, n]) * 3.0) as u32;
                let dev = (noise.uniform(&[84, n]) * cluster.gpus_per_node as f64) as u32;
                (start, start + len, which, dev)
            });
            let in_glitch = |t: f64, which: u32, dev: u32| {
                glitch.is_some_and(|g| t >= g.0 && t < g.1 && g.2 == which && g.3 == dev)
            };
            let mut series = Vec::new();
            for local in 0..cluster.gpus_per_node {
                let d = local as u64;
                let off = |tag: u64| noise.normal(&[90, tag, n, d]);
                let (mut util, mut clock, mut power, mut temp) = (
                    Vec::with_capacity(samples),
                    Vec::with_capacity(samples),
                    Vec::with_capacity(samples),
                    Vec::with_capacity(samples),
                );
                for k in 0..samples {
                    let t = k as f64 * cfg.interval_s;
                    let kk = k as u64;
                    let e = |tag: u64| noise.normal(&[91, tag, n, d, kk]);
                    let (cf, dt, uf) = effect.gpu(cluster, node, local, t);
                    let glitch_temp = if in_glitch(t, 0, local) { 8.0 } else { 0.0 };
                    util.push((92.0 + off(1) + 1.5 * e(1)) * uf);
                    clock.push((1980.0 + 12.0 * off(2) + 8.0 * e(2)) * cf);
                    power.push((640.0 + 15.0 * off(3) + 10.0 * e(3)) * cf.powf(0.8));
                    temp.push(64.0 + 2.5 * off(4) + 0.6 * e(4) + dt + glitch_temp);
                }
                for (metric, values) in [
                    (MachineMetric::GpuUtil, util),
                    (MachineMetric::SmClock, clock),
                    (MachineMetric::Power, power),
                    (MachineMetric::GpuTemp, temp),
                ] {
                    series.push(MetricSeries {
                        metric,
                        device: Some(local),
                        values,
                    });
                }
            }
            for rail in 0..cluster.gpus_per_node {
                let d = rail as u64;
                let off = noise.normal(&[92, n, d]);
                let values = (0..samples)
                    .map(|k| {
                        let t = k as f64 * cfg.interval_s;
                        let glitch = if in_glitch(t, 1, rail) { 0.7 } else { 1.0 };
                        (20e9
                            * (1.0 + 0.02 * off)
                            * (1.0 + 0.04 * noise.normal(&[93, n, d, k as u64])))
                            * effect.nic(cluster, node, rail, t)
                            * glitch
                    })
                    .collect();
                series.push(MetricSeries {
                    metric: MachineMetric::NicTx,
                    device: Some(rail),
                    values,
                });
            }
            let off = noise.normal(&[94, n]);
            let values = (0..samples)
                .map(|k| {
                    let t = k as f64 * cfg.interval_s;
                    let glitch = if in_glitch(t, 2, 0) { 20.0 } else { 0.0 };
                    (30.0
                        + 3.0 * off
                        + 2.0 * noise.normal(&[95, n, k as u64])
                        + effect.cpu(cluster, node, t)
                        + glitch)
                        .clamp(0.0, 100.0)
                })
                .collect();
            series.push(MetricSeries {
                metric: MachineMetric::CpuUtil,
                device: None,
                values,
            });
            Machine {
                name: format!("node{node}"),
                node: Some(node),
                series,
            }
        })
        .collect();
    MachineMetrics {
        start_unix_s: 1.7e9,
        interval_s: cfg.interval_s,
        samples,
        machines,
    }
}
