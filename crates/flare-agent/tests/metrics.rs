//! `/metrics` over real HTTP: valid exposition text, and op-name labels bounded to the
//! top K per rank plus "other" however many ops a rank runs.

use flare_agent::{Metrics, MetricsServer, CONTENT_TYPE, OTHER};
use flare_model::summary::SUMMARY_VERSION;
use flare_model::{HangRecord, IterationSample, OpKind, OpStats, RankSummary, WindowSummary};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

fn op(name: &str, kind: OpKind, total_ns: u64) -> OpStats {
    OpStats {
        name: name.into(),
        kind,
        group: None,
        group_size: None,
        count: 10,
        total_ns,
        p50_ns: total_ns / 10,
        p99_ns: total_ns / 5,
        max_ns: total_ns / 5,
        bytes: 1000,
        flops: 0,
        bus_gbps: kind.is_collective().then_some(12.5),
        tflops: None,
        issue_p50_ns: None,
        issue_p99_ns: None,
    }
}

fn summary(window: u64, names: impl Fn(usize) -> String) -> WindowSummary {
    let ops: Vec<OpStats> = (0..100)
        .map(|i| {
            let kind = if i % 2 == 0 {
                OpKind::Compute
            } else {
                OpKind::AllReduce
            };
            op(&names(i), kind, (i as u64 + 1) * 1_000_000)
        })
        .collect();
    WindowSummary {
        parallel: None,
        version: SUMMARY_VERSION,
        job_id: "m".into(),
        node: "n".into(),
        window,
        window_ns: 10_000_000_000,
        start_unix_ns: 0,
        end_unix_ns: 0,
        world_size: 2,
        ranks: vec![
            RankSummary {
                iterations: vec![IterationSample {
                    step: 1,
                    start_unix_ns: 0,
                    duration_ns: 1_500_000_000,
                }],
                ops,
                busy_ns: 6_000_000_000,
                observed_ns: 10_000_000_000,
                events: 5000,
                dropped_total: 7,
                ..RankSummary::empty(0, 0, 10)
            },
            RankSummary {
                ops: vec![op("fwd", OpKind::Compute, 5_000_000)],
                observed_ns: 10_000_000_000,
                events: 2,
                ..RankSummary::empty(1, 1, 11)
            },
        ],
        hangs: vec![HangRecord {
            rank: 1,
            pid: 11,
            op: "fwd".into(),
            kind: OpKind::Compute,
            group: None,
            in_flight_ns: 1,
            detected_unix_ns: 1,
            stacks: vec![],
            stack_source: "native".into(),
        }],
        peer_stacks: Vec::new(),
        logs: None,
    }
}

/// Parses exposition text into (metric, labels, value), checking the syntax.
fn parse(text: &str) -> Vec<(String, BTreeMap<String, String>, f64)> {
    assert!(text.ends_with("# EOF\n"), "no EOF marker");
    let mut out = Vec::new();
    for line in text.lines() {
        if line.starts_with('#') {
            assert!(
                line.starts_with("# HELP ")
                    || line.starts_with("# TYPE ")
                    || line.starts_with("# UNIT ")
                    || line == "# EOF",
                "bad comment line {line:?}"
            );
            continue;
        }
        let (series, value) = line.rsplit_once(' ').expect("a value");
        let value: f64 = value
            .parse()
            .unwrap_or_else(|_| panic!("bad value in {line:?}"));
        let (name, labels) = match series.split_once('{') {
            Some((n, rest)) => (n, rest.strip_suffix('}').expect("closing brace")),
            None => (series, ""),
        };
        assert!(
            !name.is_empty()
                && name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':'),
            "bad metric name in {line:?}"
        );
        let mut map = BTreeMap::new();
        for kv in labels.split(',').filter(|s| !s.is_empty()) {
            let (k, v) = kv.split_once('=').expect("label=value");
            let v = v
                .strip_prefix('"')
                .and_then(|v| v.strip_suffix('"'))
                .expect("quoted value");
            map.insert(k.to_string(), v.to_string());
        }
        out.push((name.to_string(), map, value));
    }
    out
}

fn names_of(
    samples: &[(String, BTreeMap<String, String>, f64)],
    metric: &str,
    rank: &str,
) -> BTreeSet<String> {
    samples
        .iter()
        .filter(|(n, l, _)| n == metric && l.get("rank").map(String::as_str) == Some(rank))
        .map(|(_, l, _)| l["name"].clone())
        .collect()
}

fn scrape(addr: std::net::SocketAddr) -> String {
    let mut resp = ureq::get(&format!("http://{addr}/metrics")).call().unwrap();
    let ct = resp
        .headers()
        .get("content-type")
        .unwrap()
        .to_str()
        .unwrap()
        .to_string();
    assert_eq!(ct, CONTENT_TYPE);
    resp.body_mut().read_to_string().unwrap()
}

#[test]
fn metrics_are_valid_exposition_with_bounded_op_labels() {
    let metrics = Arc::new(Metrics::new(16));
    let server = MetricsServer::start("127.0.0.1:0".parse().unwrap(), metrics.clone()).unwrap();
    metrics.observe(&summary(7, |i| format!("op_{i}")));
    let text = scrape(server.addr());
    let samples = parse(&text);

    let names = names_of(&samples, "flare_ops_total", "0");
    assert_eq!(names.len(), 17, "{names:?}");
    assert!(names.contains(OTHER));
    // The top 16 by time are ops 84..=99.
    for i in 84..100 {
        assert!(names.contains(&format!("op_{i}")), "{names:?}");
    }
    let value = |metric: &str, labels: &[(&str, &str)]| {
        samples
            .iter()
            .filter(|(n, l, _)| {
                n == metric
                    && labels
                        .iter()
                        .all(|(k, v)| l.get(*k).map(String::as_str) == Some(*v))
            })
            .map(|(_, _, v)| *v)
            .sum::<f64>()
    };
    // 84 ops aggregated into "other": 42 compute and 42 all-reduce, 10 each.
    assert_eq!(
        value(
            "flare_ops_total",
            &[("rank", "0"), ("name", OTHER), ("kind", "compute")]
        ),
        420.0
    );
    assert_eq!(value("flare_ops_total", &[("rank", "0")]), 1000.0);
    assert_eq!(value("flare_op_bytes_total", &[("rank", "0")]), 100_000.0);
    assert_eq!(
        value(
            "flare_op_duration_p50_seconds",
            &[("rank", "0"), ("name", "op_99")]
        ),
        0.01
    );
    assert_eq!(
        value(
            "flare_op_bus_bandwidth_gbps",
            &[("rank", "0"), ("name", "op_99")]
        ),
        12.5
    );
    assert_eq!(
        names_of(&samples, "flare_op_duration_p99_seconds", "0").len(),
        16,
        "no percentiles for other"
    );
    assert_eq!(value("flare_iteration_seconds", &[("rank", "0")]), 1.5);
    assert!((value("flare_void_share", &[("rank", "0")]) - 0.4).abs() < 1e-12);
    assert_eq!(value("flare_events_total", &[("rank", "0")]), 5000.0);
    assert_eq!(value("flare_dropped_events_total", &[("rank", "0")]), 7.0);
    assert_eq!(value("flare_hangs_total", &[("rank", "1")]), 1.0);
    assert_eq!(value("flare_last_window", &[]), 7.0);

    // A new window with 100 other names: old seats are released, the bound holds.
    metrics.observe(&summary(8, |i| format!("next_{i}")));
    let samples = parse(&scrape(server.addr()));
    for metric in [
        "flare_ops_total",
        "flare_op_bytes_total",
        "flare_op_seconds_total",
    ] {
        let names = names_of(&samples, metric, "0");
        assert_eq!(names.len(), 17, "{metric}: {names:?}");
        assert!(
            names.iter().all(|n| n == OTHER || n.starts_with("next_")),
            "{names:?}"
        );
    }
    let gauges = names_of(&samples, "flare_op_duration_p50_seconds", "0");
    assert!(gauges.len() == 16 && gauges.iter().all(|n| n.starts_with("next_")));
    // Same process: drops count only what is new.
    assert_eq!(
        samples
            .iter()
            .filter(|(n, l, _)| n == "flare_dropped_events_total" && l["rank"] == "0")
            .map(|s| s.2)
            .sum::<f64>(),
        7.0
    );
    // A window without rank 1 (its process ended): its gauges go, its counters stay.
    let mut only0 = summary(9, |i| format!("next_{i}"));
    only0.ranks.truncate(1);
    only0.hangs.clear();
    metrics.observe(&only0);
    let samples = parse(&scrape(server.addr()));
    let has = |metric: &str, rank: &str| {
        samples
            .iter()
            .any(|(n, l, _)| n == metric && l.get("rank").map(String::as_str) == Some(rank))
    };
    assert!(!has("flare_op_duration_p50_seconds", "1") && !has("flare_void_share", "1"));
    assert!(has("flare_ops_total", "1") && has("flare_hangs_total", "1"));
    assert!(has("flare_op_duration_p50_seconds", "0") && has("flare_void_share", "0"));
    let health = ureq::get(&format!("http://{}/healthz", server.addr()))
        .call()
        .unwrap()
        .body_mut()
        .read_to_string()
        .unwrap();
    assert_eq!(health.trim(), "ok");
}

#[test]
fn a_taken_port_fails_at_start() {
    let metrics = Arc::new(Metrics::new(4));
    let first = MetricsServer::start("127.0.0.1:0".parse().unwrap(), metrics.clone()).unwrap();
    let e = MetricsServer::start(first.addr(), metrics)
        .err()
        .expect("the port is taken");
    assert!(e.to_string().contains("cannot listen for metrics"), "{e}");
}

/// The Grafana dashboard in `deploy/grafana` queries only series the agent exports, with
/// the labels it gives them: a renamed metric must not leave a panel silently empty.
#[test]
fn the_grafana_dashboard_queries_what_the_agent_exports() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../deploy/grafana/flare-agents.json"
    );
    let dash: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let m = Metrics::new(20);
    m.observe(&summary(1, |i| format!("op{i}")));
    let push = flare_agent::PushStats {
        sent: 1,
        ..Default::default()
    };
    m.update_agent(&flare_agent::CollectorStats::default(), Some(&push));
    let samples = parse(&m.encode());
    let exported: BTreeMap<&str, BTreeSet<&str>> =
        samples.iter().fold(BTreeMap::new(), |mut acc, (n, l, _)| {
            acc.entry(n.as_str())
                .or_default()
                .extend(l.keys().map(String::as_str));
            acc
        });
    let mut ids = BTreeSet::new();
    let mut queried = 0;
    for panel in dash["panels"].as_array().unwrap() {
        assert!(
            ids.insert(panel["id"].as_u64().unwrap()),
            "duplicate panel id"
        );
        assert_eq!(panel["datasource"]["uid"], "${datasource}");
        for target in panel["targets"].as_array().unwrap() {
            let expr = target["expr"].as_str().unwrap();
            let metrics: Vec<&str> = expr
                .match_indices("flare_")
                .map(|(i, _)| {
                    let rest = &expr[i..];
                    let end = rest
                        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                        .unwrap_or(rest.len());
                    &rest[..end]
                })
                .collect();
            assert!(!metrics.is_empty(), "{expr}");
            for name in metrics {
                let labels = exported.get(name).unwrap_or_else(|| {
                    panic!(
                        "panel {:?} queries {name}, which the agent does not export",
                        panel["title"]
                    )
                });
                queried += 1;
                // Labels the legend or a `by` clause names must be the metric's own (or
                // Prometheus' instance).
                let legend = target["legendFormat"].as_str().unwrap_or("");
                for label in ["rank", "name", "kind"] {
                    let used = legend.contains(&format!("{{{{{label}}}}}"))
                        || expr.contains(&format!("by ({label})"));
                    assert!(
                        !used || labels.contains(label),
                        "{name} has no label {label} ({expr})"
                    );
                }
            }
        }
    }
    assert!(queried >= 14, "{queried}");
}
