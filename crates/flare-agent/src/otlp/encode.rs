//! A window summary as an OTLP `ExportMetricsServiceRequest`, in OTLP/HTTP's JSON
//! encoding (the protobuf JSON mapping: lowerCamelCase fields, 64-bit integers as
//! strings, enums as numbers).
//!
//! One window is one export: sums are DELTA over the window (start and end of the
//! window as their interval), gauges are the window's values at its end. Series are per
//! rank, and per op kind for op time, counts and bytes (op names would make cardinality
//! unbounded: the Prometheus endpoint keeps the top K; OTLP backends get the kinds).

use flare_model::{RankSummary, WindowSummary};
use serde_json::{json, Value};
use std::collections::BTreeMap;

/// `AggregationTemporality.AGGREGATION_TEMPORALITY_DELTA`.
const DELTA: u8 = 1;

/// The request body for one window's summary.
pub fn request(s: &WindowSummary) -> Value {
    let (start, end) = (s.start_unix_ns.to_string(), s.end_unix_ns.to_string());
    let job = |rank: u32| {
        vec![
            attr_str("flare.job.id", &s.job_id),
            attr_int("flare.rank", rank.into()),
        ]
    };
    let mut iteration = Vec::new();
    let mut iterations = Vec::new();
    let mut void_share = Vec::new();
    let mut events = Vec::new();
    let mut dropped = Vec::new();
    let mut op_time = Vec::new();
    let mut op_count = Vec::new();
    let mut op_bytes = Vec::new();
    for r in &s.ranks {
        if let Some(median) = median_iteration_ns(r) {
            iteration.push(gauge_point(job(r.rank), &end, median as f64 / 1e9));
        }
        iterations.push(sum_point(
            job(r.rank),
            &start,
            &end,
            r.iterations.len() as u64,
        ));
        if r.observed_ns > 0 {
            void_share.push(gauge_point(job(r.rank), &end, r.void_share()));
        }
        events.push(sum_point(job(r.rank), &start, &end, r.events));
        dropped.push(sum_point(job(r.rank), &start, &end, r.dropped_total));
        let mut by_kind: BTreeMap<&str, (u64, u64, u64)> = BTreeMap::new();
        for op in &r.ops {
            let e = by_kind.entry(op.kind.as_str()).or_default();
            e.0 = e.0.saturating_add(op.total_ns);
            e.1 = e.1.saturating_add(op.count);
            e.2 = e.2.saturating_add(op.bytes);
        }
        for (kind, (ns, count, bytes)) in by_kind {
            let attrs = || {
                let mut a = job(r.rank);
                a.push(attr_str("flare.op.kind", kind));
                a
            };
            op_time.push(sum_point_f(attrs(), &start, &end, ns as f64 / 1e9));
            op_count.push(sum_point(attrs(), &start, &end, count));
            op_bytes.push(sum_point(attrs(), &start, &end, bytes));
        }
    }
    let hangs: Vec<Value> = s
        .hangs
        .iter()
        .fold(BTreeMap::<u32, u64>::new(), |mut m, h| {
            *m.entry(h.rank).or_default() += 1;
            m
        })
        .into_iter()
        .map(|(rank, n)| sum_point(job(rank), &start, &end, n))
        .collect();
    let metrics: Vec<Value> = [
        gauge(
            "flare.iteration.duration",
            "Median iteration duration of the rank in the window",
            "s",
            iteration,
        ),
        sum(
            "flare.iterations",
            "Iterations completed",
            "{iteration}",
            iterations,
        ),
        gauge(
            "flare.void_share",
            "Share of the window with no top-level span open",
            "1",
            void_share,
        ),
        sum(
            "flare.op.duration",
            "Time spent in ops, by kind",
            "s",
            op_time,
        ),
        sum("flare.ops", "Ops completed, by kind", "{op}", op_count),
        sum(
            "flare.op.bytes",
            "Bytes moved by ops, by kind",
            "By",
            op_bytes,
        ),
        sum("flare.events", "Tracer events drained", "{event}", events),
        sum(
            "flare.dropped_events",
            "Tracer events dropped by full rings",
            "{event}",
            dropped,
        ),
        sum(
            "flare.hangs",
            "Ops reported stuck by the watchdog",
            "{hang}",
            hangs,
        ),
    ]
    .into_iter()
    .flatten()
    .collect();
    json!({
        "resourceMetrics": [{
            "resource": {
                "attributes": [
                    attr_str("service.name", "flare-agent"),
                    attr_str("service.version", env!("CARGO_PKG_VERSION")),
                    attr_str("host.name", &s.node),
                    attr_str("flare.job.id", &s.job_id),
                ]
            },
            "scopeMetrics": [{
                "scope": {"name": "flare", "version": env!("CARGO_PKG_VERSION")},
                "metrics": metrics,
            }]
        }]
    })
}

fn median_iteration_ns(r: &RankSummary) -> Option<u64> {
    let mut d: Vec<u64> = r.iterations.iter().map(|i| i.duration_ns).collect();
    if d.is_empty() {
        return None;
    }
    d.sort_unstable();
    Some(d[d.len() / 2])
}

fn attr_str(key: &str, v: &str) -> Value {
    json!({"key": key, "value": {"stringValue": v}})
}

fn attr_int(key: &str, v: i64) -> Value {
    json!({"key": key, "value": {"intValue": v.to_string()}})
}

fn gauge_point(attributes: Vec<Value>, end: &str, v: f64) -> Value {
    json!({"attributes": attributes, "timeUnixNano": end, "asDouble": v})
}

fn sum_point(attributes: Vec<Value>, start: &str, end: &str, v: u64) -> Value {
    json!({"attributes": attributes, "startTimeUnixNano": start, "timeUnixNano": end, "asInt": v.min(i64::MAX as u64).to_string()})
}

fn sum_point_f(attributes: Vec<Value>, start: &str, end: &str, v: f64) -> Value {
    json!({"attributes": attributes, "startTimeUnixNano": start, "timeUnixNano": end, "asDouble": v})
}

/// A gauge metric, or nothing without points (an empty metric is not valid OTLP).
fn gauge(name: &str, description: &str, unit: &str, points: Vec<Value>) -> Option<Value> {
    (!points.is_empty()).then(|| {
        json!({"name": name, "description": description, "unit": unit, "gauge": {"dataPoints": points}})
    })
}

/// A monotonic DELTA sum, or nothing without points.
fn sum(name: &str, description: &str, unit: &str, points: Vec<Value>) -> Option<Value> {
    (!points.is_empty()).then(|| {
        json!({"name": name, "description": description, "unit": unit,
               "sum": {"dataPoints": points, "aggregationTemporality": DELTA, "isMonotonic": true}})
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use flare_model::summary::SUMMARY_VERSION;
    use flare_model::{HangRecord, IterationSample, OpKind, OpStats};

    fn op(kind: OpKind, total_ns: u64) -> OpStats {
        OpStats {
            name: format!("{kind:?}"),
            kind,
            group: None,
            group_size: None,
            count: 4,
            total_ns,
            p50_ns: total_ns / 4,
            p99_ns: total_ns / 4,
            max_ns: total_ns / 4,
            bytes: 100,
            flops: 0,
            bus_gbps: None,
            tflops: None,
            issue_p50_ns: None,
            issue_p99_ns: None,
        }
    }

    fn rank(rank: u32, iterations: &[u64]) -> RankSummary {
        RankSummary {
            iterations: iterations
                .iter()
                .enumerate()
                .map(|(i, &d)| IterationSample {
                    step: i as u64,
                    start_unix_ns: 0,
                    duration_ns: d,
                })
                .collect(),
            ops: vec![
                op(OpKind::Compute, 2_000_000_000),
                op(OpKind::Compute, 500_000_000),
                op(OpKind::AllReduce, 1_000_000_000),
            ],
            busy_ns: 7_500_000_000,
            observed_ns: 10_000_000_000,
            events: 12,
            dropped_total: 1,
            ..RankSummary::empty(rank, rank, 10 + rank)
        }
    }

    #[test]
    fn a_window_is_one_request_of_delta_sums_and_gauges() {
        let s = WindowSummary {
            parallel: None,
            version: SUMMARY_VERSION,
            job_id: "job-7".into(),
            node: "gpu-3".into(),
            window: 5,
            window_ns: 10_000_000_000,
            start_unix_ns: 1_700_000_000_000_000_000,
            end_unix_ns: 1_700_000_010_000_000_000,
            world_size: 2,
            ranks: vec![
                rank(0, &[1_000_000_000, 3_000_000_000, 2_000_000_000]),
                rank(1, &[]),
            ],
            hangs: vec![HangRecord {
                rank: 1,
                pid: 11,
                op: "allreduce".into(),
                kind: OpKind::AllReduce,
                group: None,
                in_flight_ns: 1,
                detected_unix_ns: 1,
                stacks: vec![],
                stack_source: String::new(),
            }],
            peer_stacks: vec![],
            logs: None,
        };
        let r = request(&s);
        let rm = &r["resourceMetrics"][0];
        let res: Vec<(&str, &str)> = rm["resource"]["attributes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| {
                (
                    a["key"].as_str().unwrap(),
                    a["value"]["stringValue"].as_str().unwrap(),
                )
            })
            .collect();
        assert!(
            res.contains(&("host.name", "gpu-3")) && res.contains(&("service.name", "flare-agent"))
        );
        let metrics = rm["scopeMetrics"][0]["metrics"].as_array().unwrap();
        let by_name = |n: &str| {
            metrics
                .iter()
                .find(|m| m["name"] == n)
                .unwrap_or_else(|| panic!("{n}"))
        };
        // The median of rank 0's iterations; rank 1 has none, so no point.
        let it = &by_name("flare.iteration.duration")["gauge"]["dataPoints"];
        assert_eq!(it.as_array().unwrap().len(), 1);
        assert_eq!(it[0]["asDouble"], 2.0);
        assert_eq!(it[0]["timeUnixNano"], "1700000010000000000");
        assert_eq!(
            it[0]["attributes"][1],
            serde_json::json!({"key": "flare.rank", "value": {"intValue": "0"}})
        );
        // Op time summed per kind, as a monotonic delta over the window.
        let ops = &by_name("flare.op.duration")["sum"];
        assert_eq!(ops["aggregationTemporality"], 1);
        assert_eq!(ops["isMonotonic"], true);
        let compute: Vec<f64> = ops["dataPoints"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|p| p["attributes"][2]["value"]["stringValue"] == "compute")
            .map(|p| p["asDouble"].as_f64().unwrap())
            .collect();
        assert_eq!(compute, vec![2.5, 2.5]);
        // Kinds in order: all_reduce (4 calls), then compute (two ops of 4).
        assert_eq!(by_name("flare.ops")["sum"]["dataPoints"][0]["asInt"], "4");
        assert_eq!(by_name("flare.ops")["sum"]["dataPoints"][1]["asInt"], "8");
        assert_eq!(
            by_name("flare.ops")["sum"]["dataPoints"][0]["startTimeUnixNano"],
            "1700000000000000000"
        );
        assert_eq!(by_name("flare.hangs")["sum"]["dataPoints"][0]["asInt"], "1");
        assert_eq!(
            by_name("flare.void_share")["gauge"]["dataPoints"][0]["asDouble"],
            0.25
        );
        // No metric without points (OTLP rejects empty ones).
        assert!(metrics.iter().all(|m| {
            let data = m.get("gauge").or_else(|| m.get("sum")).unwrap();
            !data["dataPoints"].as_array().unwrap().is_empty()
        }));
    }
}
