//! Machine metrics from Prometheus: the JSON a `query_range` request returns
//! (`{"status":"success","data":{"resultType":"matrix","result":[...]}}`), one or more
//! metrics of NVIDIA's DCGM exporter and the node exporter, for every machine of a job.
//!
//! Recognised series (by `__name__`, or by a `metric` label holding one of Flare's names,
//! for recording rules and expressions that drop `__name__`):
//!
//! | Prometheus name | Flare metric |
//! |---|---|
//! | `DCGM_FI_DEV_GPU_UTIL` | `gpu_util` |
//! | `DCGM_FI_DEV_SM_CLOCK` | `sm_clock` |
//! | `DCGM_FI_DEV_POWER_USAGE` | `power` |
//! | `DCGM_FI_DEV_GPU_TEMP` | `gpu_temp` |
//! | `DCGM_FI_PROF_PCIE_TX_BYTES` | `pcie_tx` |
//! | `DCGM_FI_PROF_NVLINK_TX_BYTES` | `nvlink_tx` |
//! | `node_infiniband_port_data_transmitted_bytes_total` (a counter: its rate is taken) | `nic_tx` |
//!
//! The machine is the `Hostname` label (DCGM exporter), else `hostname`, `node`, or
//! `instance` without its port; the device is `gpu` (DCGM), else the trailing number of
//! `device` (`mlx5_3` is NIC 3). A host named `node<N>` is node N of the job's cluster.
//! Samples are placed on one grid whose step is the most common spacing of the
//! timestamps; a missing sample is NaN. Series of other metrics are counted and skipped.

use crate::limits::Limits;
use flare_model::{Machine, MachineMetric, MachineMetrics, MetricSeries};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::path::Path;

#[derive(Debug, thiserror::Error)]
pub enum PrometheusError {
    #[error("{path}: cannot read: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: line {line}, column {column}: malformed JSON: {message}")]
    Json {
        path: String,
        line: usize,
        column: usize,
        message: String,
    },
    #[error("{path}: {what} (expected the JSON of a Prometheus query_range: {{\"data\": {{\"resultType\": \"matrix\", \"result\": [...]}}}})")]
    Shape { path: String, what: String },
    #[error("{path}: series {index} ({name}): {what}")]
    Series {
        path: String,
        index: usize,
        name: String,
        what: String,
    },
    #[error("{path}: no series of a known metric (DCGM GPU metrics, node exporter InfiniBand counters) among {skipped} series")]
    NoKnownSeries { path: String, skipped: usize },
    #[error(transparent)]
    Limit(crate::limits::LimitError),
}

crate::limits::limit_error_into!(PrometheusError, path);

/// What a read kept and skipped.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PrometheusStats {
    pub series: usize,
    /// Series of metrics Flare does not use.
    pub skipped_series: usize,
    /// Samples that were not numbers (`"NaN"`, `"+Inf"`) and are missing.
    pub missing_samples: usize,
}

fn metric_of(name: &str) -> Option<(MachineMetric, bool)> {
    Some(match name {
        "DCGM_FI_DEV_GPU_UTIL" | "gpu_util" => (MachineMetric::GpuUtil, false),
        "DCGM_FI_DEV_SM_CLOCK" | "sm_clock" => (MachineMetric::SmClock, false),
        "DCGM_FI_DEV_POWER_USAGE" | "power" => (MachineMetric::Power, false),
        "DCGM_FI_DEV_GPU_TEMP" | "gpu_temp" => (MachineMetric::GpuTemp, false),
        "DCGM_FI_PROF_PCIE_TX_BYTES" | "pcie_tx" => (MachineMetric::PcieTx, false),
        "DCGM_FI_PROF_NVLINK_TX_BYTES" | "nvlink_tx" => (MachineMetric::NvlinkTx, false),
        "node_infiniband_port_data_transmitted_bytes_total" => (MachineMetric::NicTx, true),
        "nic_tx" => (MachineMetric::NicTx, false),
        "cpu_util" => (MachineMetric::CpuUtil, false),
        _ => return None,
    })
}

fn prometheus_name(m: MachineMetric) -> &'static str {
    match m {
        MachineMetric::GpuUtil => "DCGM_FI_DEV_GPU_UTIL",
        MachineMetric::SmClock => "DCGM_FI_DEV_SM_CLOCK",
        MachineMetric::Power => "DCGM_FI_DEV_POWER_USAGE",
        MachineMetric::GpuTemp => "DCGM_FI_DEV_GPU_TEMP",
        MachineMetric::PcieTx => "DCGM_FI_PROF_PCIE_TX_BYTES",
        MachineMetric::NvlinkTx => "DCGM_FI_PROF_NVLINK_TX_BYTES",
        // Rates and CPU utilisation are written under Flare's names with a `metric` label.
        MachineMetric::NicTx | MachineMetric::CpuUtil => "",
    }
}

fn trailing_number(s: &str) -> Option<u32> {
    let digits: String = s
        .chars()
        .rev()
        .take_while(|c| c.is_ascii_digit())
        .collect::<Vec<_>>()
        .into_iter()
        .rev()
        .collect();
    digits.parse().ok()
}

/// Reads a Prometheus `query_range` JSON file. The default [`Limits`] apply.
pub fn read_machine_metrics(
    path: &Path,
) -> Result<(MachineMetrics, PrometheusStats), PrometheusError> {
    read_machine_metrics_with_limits(path, &Limits::default())
}

/// [`read_machine_metrics`] with the given limits; special files are refused unopened.
pub fn read_machine_metrics_with_limits(
    path: &Path,
    limits: &Limits,
) -> Result<(MachineMetrics, PrometheusStats), PrometheusError> {
    let shown = path.display().to_string();
    let bytes = crate::limits::read_file(path, limits)?;
    read_machine_metrics_bytes(&bytes, &shown)
}

/// Reads the bytes of a Prometheus `query_range` JSON document; `path` names it in errors.
pub fn read_machine_metrics_bytes(
    bytes: &[u8],
    path: &str,
) -> Result<(MachineMetrics, PrometheusStats), PrometheusError> {
    let doc: Value = serde_json::from_slice(bytes).map_err(|e| PrometheusError::Json {
        path: path.into(),
        line: e.line(),
        column: e.column(),
        message: e.to_string(),
    })?;
    let shape = |what: &str| PrometheusError::Shape {
        path: path.into(),
        what: what.into(),
    };
    let data = doc.get("data").ok_or_else(|| shape("no \"data\""))?;
    match data.get("resultType").and_then(Value::as_str) {
        Some("matrix") => {}
        Some(other) => return Err(shape(&format!("resultType is \"{other}\", not \"matrix\""))),
        None => return Err(shape("no \"data.resultType\"")),
    }
    let result = data
        .get("result")
        .and_then(Value::as_array)
        .ok_or_else(|| shape("no \"data.result\" array"))?;
    let mut stats = PrometheusStats::default();
    // (host, metric, device) -> samples (ts, value)
    type Key = (String, MachineMetric, Option<u32>);
    let mut raw: BTreeMap<Key, Vec<(f64, f64)>> = BTreeMap::new();
    let mut counters: Vec<Key> = Vec::new();
    for (index, s) in result.iter().enumerate() {
        let labels = s.get("metric").and_then(Value::as_object);
        let label = |k: &str| labels.and_then(|l| l.get(k)).and_then(Value::as_str);
        let name = label("__name__").or_else(|| label("metric")).unwrap_or("");
        let err = |what: String| PrometheusError::Series {
            path: path.into(),
            index,
            name: name.to_string(),
            what,
        };
        let Some((metric, counter)) = metric_of(name) else {
            stats.skipped_series += 1;
            continue;
        };
        let host = label("Hostname")
            .or_else(|| label("hostname"))
            .or_else(|| label("node"))
            .map(str::to_string)
            .or_else(|| {
                label("instance").map(|i| i.rsplit_once(':').map_or(i, |x| x.0).to_string())
            })
            .ok_or_else(|| err("no machine label (Hostname, hostname, node or instance)".into()))?;
        let device = match (label("gpu"), label("device"), label("port")) {
            (Some(g), _, _) => Some(
                g.parse::<u32>()
                    .map_err(|_| err(format!("gpu label \"{g}\" is not a number")))?,
            ),
            (None, Some(d), _) => trailing_number(d),
            (None, None, Some(p)) => trailing_number(p),
            _ => None,
        };
        let values = s
            .get("values")
            .and_then(Value::as_array)
            .ok_or_else(|| err("no \"values\" array of [timestamp, \"value\"] pairs".into()))?;
        let mut samples = Vec::with_capacity(values.len());
        for (k, v) in values.iter().enumerate() {
            let pair = v
                .as_array()
                .filter(|p| p.len() == 2)
                .ok_or_else(|| err(format!("sample {k}: expected [timestamp, \"value\"]")))?;
            let ts = pair[0]
                .as_f64()
                .ok_or_else(|| err(format!("sample {k}: timestamp is not a number")))?;
            let value = match &pair[1] {
                Value::String(x) => x.parse::<f64>().ok(),
                Value::Number(n) => n.as_f64(),
                _ => None,
            };
            match value.filter(|v| v.is_finite()) {
                Some(v) => samples.push((ts, v)),
                None => stats.missing_samples += 1,
            }
        }
        stats.series += 1;
        let key = (
            host,
            metric,
            if metric.per_gpu() || metric == MachineMetric::NicTx {
                device
            } else {
                None
            },
        );
        if counter {
            counters.push(key.clone());
        }
        raw.entry(key).or_default().extend(samples);
    }
    if raw.is_empty() {
        return Err(PrometheusError::NoKnownSeries {
            path: path.into(),
            skipped: stats.skipped_series,
        });
    }
    // The grid: the most common spacing of consecutive timestamps.
    let mut steps: BTreeMap<i64, usize> = BTreeMap::new();
    let (mut t0, mut t1) = (f64::INFINITY, f64::NEG_INFINITY);
    for v in raw.values_mut() {
        v.sort_by(|a, b| a.0.total_cmp(&b.0));
        for w in v.windows(2) {
            *steps
                .entry(((w[1].0 - w[0].0) * 1000.0).round() as i64)
                .or_default() += 1;
        }
        if let (Some(a), Some(b)) = (v.first(), v.last()) {
            t0 = t0.min(a.0);
            t1 = t1.max(b.0);
        }
    }
    let step_ms = steps
        .iter()
        .filter(|(s, _)| **s > 0)
        .max_by_key(|(s, c)| (**c, std::cmp::Reverse(**s)))
        .map(|(s, _)| *s)
        .ok_or_else(|| {
            shape("every series has a single sample: no time step to build a grid on")
        })?;
    let interval = step_ms as f64 / 1000.0;
    let span = (t1 - t0) / interval;
    // A grid of ten million samples is months of per-second data: anything longer is a
    // timestamp gone wrong, not monitoring data.
    const MAX_SAMPLES: f64 = 1e7;
    if !span.is_finite() || span >= MAX_SAMPLES {
        return Err(shape(&format!(
            "timestamps span {:.0} s at a {interval} s step: more than {MAX_SAMPLES:.0} samples",
            t1 - t0
        )));
    }
    let samples = span.round() as usize + 1;
    let mut machines: BTreeMap<String, Machine> = BTreeMap::new();
    for ((host, metric, device), v) in raw {
        let mut values = vec![f64::NAN; samples];
        for &(ts, x) in &v {
            let k = ((ts - t0) / interval).round() as usize;
            if k < samples {
                values[k] = x;
            }
        }
        if counters.contains(&(host.clone(), metric, device)) {
            // A counter: bytes per second between consecutive samples.
            let mut rate = vec![f64::NAN; samples];
            for k in 1..samples {
                let d = values[k] - values[k - 1];
                if d.is_finite() && d >= 0.0 {
                    rate[k] = d / interval;
                }
            }
            values = rate;
        }
        let node = host
            .strip_prefix("node")
            .and_then(|n| n.parse::<u32>().ok());
        machines
            .entry(host.clone())
            .or_insert_with(|| Machine {
                name: host.clone(),
                node,
                series: Vec::new(),
            })
            .series
            .push(MetricSeries {
                metric,
                device,
                values,
            });
    }
    Ok((
        MachineMetrics {
            start_unix_s: t0,
            interval_s: interval,
            samples,
            machines: machines.into_values().collect(),
        },
        stats,
    ))
}

/// Writes machine metrics as a Prometheus `query_range` JSON document, as DCGM and node
/// exporter series would come back (rates and CPU utilisation under Flare's names in a
/// `metric` label).
pub fn write_machine_metrics(m: &MachineMetrics, path: &Path) -> std::io::Result<()> {
    let mut result = Vec::new();
    for mc in &m.machines {
        for s in &mc.series {
            let mut labels = serde_json::Map::new();
            let name = prometheus_name(s.metric);
            if name.is_empty() {
                labels.insert("metric".into(), json!(s.metric.as_str()));
            } else {
                labels.insert("__name__".into(), json!(name));
            }
            labels.insert("Hostname".into(), json!(mc.name));
            if let Some(d) = s.device {
                let key = if s.metric == MachineMetric::NicTx {
                    "device"
                } else {
                    "gpu"
                };
                let value = if s.metric == MachineMetric::NicTx {
                    format!("mlx5_{d}")
                } else {
                    d.to_string()
                };
                labels.insert(key.into(), json!(value));
            }
            let values: Vec<Value> = s
                .values
                .iter()
                .enumerate()
                .filter(|(_, v)| v.is_finite())
                .map(|(k, v)| json!([m.start_unix_s + k as f64 * m.interval_s, format!("{v}")]))
                .collect();
            result.push(json!({"metric": labels, "values": values}));
        }
    }
    let doc = json!({"status": "success", "data": {"resultType": "matrix", "result": result}});
    let file = std::fs::File::create(path)?;
    serde_json::to_writer(std::io::BufWriter::new(file), &doc)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dcgm_and_node_exporter_series_round_trip_and_bad_input_is_named() {
        let doc = br#"{"status":"success","data":{"resultType":"matrix","result":[
          {"metric":{"__name__":"DCGM_FI_DEV_SM_CLOCK","Hostname":"node3","gpu":"2"},
           "values":[[100,"1980"],[102,"1975"],[106,"1970"]]},
          {"metric":{"__name__":"node_infiniband_port_data_transmitted_bytes_total","instance":"node4:9100","device":"mlx5_1"},
           "values":[[100,"1000"],[102,"5000"],[104,"9000"]]},
          {"metric":{"__name__":"up","instance":"x"},"values":[[100,"1"]]}
        ]}}"#;
        let (m, stats) = read_machine_metrics_bytes(doc, "q.json").unwrap();
        assert_eq!((m.interval_s, m.samples), (2.0, 4));
        assert_eq!(stats.skipped_series, 1);
        let clock = m.series(0, MachineMetric::SmClock, Some(2)).unwrap();
        assert_eq!(clock[0], 1980.0);
        assert!(clock[2].is_nan(), "a missing sample is NaN");
        assert_eq!(m.machines[0].node, Some(3));
        let nic = m.series(1, MachineMetric::NicTx, Some(1)).unwrap();
        assert_eq!(nic[1], 2000.0, "counter turned into a rate");
        // Round trip through the writer.
        let dir = std::env::temp_dir().join(format!("flare-prom-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("m.json");
        write_machine_metrics(&m, &p).unwrap();
        let (back, _) = read_machine_metrics(&p).unwrap();
        assert_eq!(back.machines.len(), 2);
        assert_eq!(
            back.series(0, MachineMetric::SmClock, Some(2)).unwrap()[3],
            1970.0
        );
        std::fs::remove_dir_all(&dir).ok();
        for (bad, want) in [
            (&b"{"[..], "line 1"),
            (&br#"{"data":{"resultType":"vector","result":[]}}"#[..], "not \"matrix\""),
            (
                &br#"{"data":{"resultType":"matrix","result":[{"metric":{"__name__":"DCGM_FI_DEV_GPU_TEMP"},"values":[]}]}}"#[..],
                "no machine label",
            ),
            (
                &br#"{"data":{"resultType":"matrix","result":[{"metric":{"__name__":"DCGM_FI_DEV_GPU_TEMP","Hostname":"h"},"values":[[1]]}]}}"#[..],
                "sample 0",
            ),
        ] {
            let e = read_machine_metrics_bytes(bad, "bad.json").unwrap_err().to_string();
            assert!(e.contains("bad.json") && e.contains(want), "{e}");
        }
    }
}
