//! Machine metrics: per-machine time series from node monitoring (NVIDIA DCGM, the
//! Prometheus node exporter, InfiniBand port counters), sampled at a fixed interval over
//! minutes, as Minder (ByteDance) uses them to find the machine that stays unlike its
//! peers.

use serde::{Deserialize, Serialize};

/// What a series measures, normalised across sources.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MachineMetric {
    /// GPU utilisation, percent (DCGM_FI_DEV_GPU_UTIL).
    GpuUtil,
    /// SM clock, MHz (DCGM_FI_DEV_SM_CLOCK).
    SmClock,
    /// Power draw, W (DCGM_FI_DEV_POWER_USAGE).
    Power,
    /// GPU temperature, C (DCGM_FI_DEV_GPU_TEMP).
    GpuTemp,
    /// PCIe transmit, bytes/s (DCGM_FI_PROF_PCIE_TX_BYTES).
    PcieTx,
    /// NVLink transmit, bytes/s (DCGM_FI_PROF_NVLINK_TX_BYTES).
    NvlinkTx,
    /// NIC transmit, bytes/s (rate of node_infiniband_port_data_transmitted_bytes_total).
    NicTx,
    /// CPU utilisation of the machine, percent (from node_cpu_seconds_total).
    CpuUtil,
}

impl MachineMetric {
    pub const ALL: [MachineMetric; 8] = [
        MachineMetric::GpuUtil,
        MachineMetric::SmClock,
        MachineMetric::Power,
        MachineMetric::GpuTemp,
        MachineMetric::PcieTx,
        MachineMetric::NvlinkTx,
        MachineMetric::NicTx,
        MachineMetric::CpuUtil,
    ];

    pub fn as_str(&self) -> &'static str {
        match self {
            MachineMetric::GpuUtil => "gpu_util",
            MachineMetric::SmClock => "sm_clock",
            MachineMetric::Power => "power",
            MachineMetric::GpuTemp => "gpu_temp",
            MachineMetric::PcieTx => "pcie_tx",
            MachineMetric::NvlinkTx => "nvlink_tx",
            MachineMetric::NicTx => "nic_tx",
            MachineMetric::CpuUtil => "cpu_util",
        }
    }

    /// Whether the metric belongs to one GPU of the machine.
    pub fn per_gpu(&self) -> bool {
        !matches!(self, MachineMetric::NicTx | MachineMetric::CpuUtil)
    }
}

/// One device's (or the machine's) series of one metric.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MetricSeries {
    pub metric: MachineMetric,
    /// GPU or NIC index inside the machine; `None` for machine-wide metrics.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub device: Option<u32>,
    /// One value per sample; NaN where the sample is missing.
    pub values: Vec<f64>,
}

/// One machine's series.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Machine {
    /// Host name as the monitoring system labels it.
    pub name: String,
    /// Its node index in the job's cluster, when known.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub node: Option<u32>,
    pub series: Vec<MetricSeries>,
}

/// Every machine's series on one time grid.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MachineMetrics {
    /// Unix time of the first sample, s.
    pub start_unix_s: f64,
    /// Seconds between samples.
    pub interval_s: f64,
    /// Samples per series.
    pub samples: usize,
    pub machines: Vec<Machine>,
}

impl MachineMetrics {
    /// The series of one metric and device of a machine.
    pub fn series(
        &self,
        machine: usize,
        metric: MachineMetric,
        device: Option<u32>,
    ) -> Option<&[f64]> {
        self.machines
            .get(machine)?
            .series
            .iter()
            .find(|s| s.metric == metric && s.device == device)
            .map(|s| s.values.as_slice())
    }
}
