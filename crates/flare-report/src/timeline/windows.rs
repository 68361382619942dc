//! A live job's timeline from its agents' window summaries, in the same format and with
//! the same process names and order as a trace's: each rank's iterations as slices on
//! the wall clock (Unix ns, each node's own clock), each window as a slice with the
//! rank's time per kind of work in it, and the ops the watchdog found stuck as slices
//! from their start to their detection. Summaries hold each op's count and total per
//! window, not the ops, so this is the job's shape over minutes (who is slower, since
//! when, who hung), not a kernel timeline.

use super::{js, process_name, sort_indices, us, TimelineStats};
use flare_model::{RankSummary, WindowSummary};
use std::collections::BTreeMap;
use std::io::{self, Write};

/// A rank's part of one window, with the window it is in.
type RankWindow<'a> = (&'a WindowSummary, &'a RankSummary);

const TRACK_ITERATIONS: u32 = 0;
const TRACK_WINDOWS: u32 = 1;
const TRACK_HANGS: u32 = 2;

/// Writes the window summaries of one job as a Chrome trace-event JSON document,
/// `culprits` (rank -> what a diagnosis says of it) named on their process.
pub fn write_window_timeline(
    summaries: &[WindowSummary],
    culprits: &BTreeMap<u32, String>,
    out: &mut impl Write,
) -> io::Result<TimelineStats> {
    let parallel = summaries.iter().find_map(|s| s.parallel.as_ref());
    // Each rank once, with its node; its parts of every window in window order.
    let mut ranks: BTreeMap<u32, (&str, Vec<RankWindow>)> = BTreeMap::new();
    for s in summaries {
        for r in &s.ranks {
            let e = ranks.entry(r.rank).or_insert((s.node.as_str(), Vec::new()));
            e.1.push((s, r));
        }
    }
    let hangs: Vec<_> = summaries.iter().flat_map(|s| &s.hangs).collect();
    let t0 = summaries
        .iter()
        .map(|s| s.start_unix_ns)
        .chain(
            summaries
                .iter()
                .flat_map(|s| &s.ranks)
                .flat_map(|r| &r.iterations)
                .map(|i| i.start_unix_ns),
        )
        .chain(
            hangs
                .iter()
                .map(|h| h.detected_unix_ns.saturating_sub(h.in_flight_ns)),
        )
        .min()
        .unwrap_or(0);
    let t0 = i64::try_from(t0).unwrap_or(i64::MAX);
    let at = |ns: u64| us(i64::try_from(ns).unwrap_or(i64::MAX), t0);
    let job = summaries.first().map_or("", |s| s.job_id.as_str());
    let sort_index = sort_indices(ranks.keys().copied(), parallel);
    let mut stats = TimelineStats::default();
    writeln!(
        out,
        "{{\"displayTimeUnit\":\"ms\",\"otherData\":{{\"job\":{},\"source\":\"agent summaries\",\"generator\":\"flare\",\"summaries\":{}}},\"traceEvents\":[",
        js(job),
        summaries.len()
    )?;
    let mut first = true;
    let mut event = |out: &mut dyn Write, e: String| -> io::Result<()> {
        if !std::mem::take(&mut first) {
            out.write_all(b",\n")?;
        }
        out.write_all(e.as_bytes())
    };
    for (&rank, (node, parts)) in &ranks {
        stats.ranks += 1;
        let pid = rank;
        let culprit = culprits.get(&rank).map(String::as_str);
        let name = process_name(rank, parallel, node, culprit);
        event(
            out,
            format!(
                "{{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":{pid},\"args\":{{\"name\":{}}}}}",
                js(&name)
            ),
        )?;
        event(out, format!("{{\"ph\":\"M\",\"name\":\"process_sort_index\",\"pid\":{pid},\"args\":{{\"sort_index\":{}}}}}", sort_index.get(&rank).copied().unwrap_or(0)))?;
        for (tid, tname) in [
            (TRACK_ITERATIONS, "iterations"),
            (TRACK_WINDOWS, "windows"),
            (TRACK_HANGS, "stuck ops"),
        ] {
            event(out, format!("{{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":{pid},\"tid\":{tid},\"args\":{{\"name\":{}}}}}", js(tname)))?;
        }
        let mark = if culprit.is_some() {
            ",\"cname\":\"terrible\""
        } else {
            ""
        };
        for (s, r) in parts {
            for i in &r.iterations {
                event(out, format!(
                    "{{\"ph\":\"X\",\"name\":\"step {}\",\"cat\":\"iteration\",\"pid\":{pid},\"tid\":{TRACK_ITERATIONS},\"ts\":{:.3},\"dur\":{:.3}{mark}}}",
                    i.step,
                    at(i.start_unix_ns),
                    i.duration_ns as f64 / 1e3
                ))?;
                stats.ops += 1;
            }
            let ms = |pick: fn(flare_model::OpKind) -> bool| -> f64 {
                r.ops
                    .iter()
                    .filter(|o| pick(o.kind))
                    .map(|o| o.total_ns as f64)
                    .sum::<f64>()
                    / 1e6
            };
            let mut args = format!(
                "\"window\":{},\"iterations\":{},\"compute_ms\":{:.3},\"communication_ms\":{:.3},\"host_ms\":{:.3},\"busy_ms\":{:.3},\"observed_ms\":{:.3},\"events\":{},\"dropped_total\":{}",
                s.window,
                r.iterations.len(),
                ms(|k| !k.is_sync() && !k.is_host()),
                ms(|k| k.is_sync()),
                ms(|k| k.is_host()),
                r.busy_ns as f64 / 1e6,
                r.observed_ns as f64 / 1e6,
                r.events,
                r.dropped_total
            );
            if let Some(cpu) = r.cpu_ns {
                args.push_str(&format!(",\"cpu_ms\":{:.3}", cpu as f64 / 1e6));
            }
            event(out, format!(
                "{{\"ph\":\"X\",\"name\":\"window {}\",\"cat\":\"window\",\"pid\":{pid},\"tid\":{TRACK_WINDOWS},\"ts\":{:.3},\"dur\":{:.3},\"args\":{{{args}}}}}",
                s.window,
                at(s.start_unix_ns),
                s.end_unix_ns.saturating_sub(s.start_unix_ns) as f64 / 1e3
            ))?;
        }
        // A hang is reported in every window it lasts: once, from its longest record.
        let mut stuck: BTreeMap<(&str, u64), &flare_model::HangRecord> = BTreeMap::new();
        for h in hangs.iter().filter(|h| h.rank == rank) {
            let start = h.detected_unix_ns.saturating_sub(h.in_flight_ns);
            let e = stuck
                .entry((h.op.as_str(), start / 1_000_000_000))
                .or_insert(h);
            if h.in_flight_ns > e.in_flight_ns {
                *e = h;
            }
        }
        for h in stuck.values() {
            let start = h.detected_unix_ns.saturating_sub(h.in_flight_ns);
            event(out, format!(
                "{{\"ph\":\"X\",\"name\":{},\"cat\":\"hang\",\"pid\":{pid},\"tid\":{TRACK_HANGS},\"ts\":{:.3},\"dur\":{:.3},\"cname\":\"terrible\",\"args\":{{\"kind\":\"{}\",\"group\":{},\"in_flight_ms\":{:.1}}}}}",
                js(&format!("stuck: {}", h.op)),
                at(start),
                h.in_flight_ns as f64 / 1e3,
                h.kind.as_str(),
                h.group.as_deref().map_or("null".to_string(), js),
                h.in_flight_ns as f64 / 1e6
            ))?;
            stats.ops += 1;
        }
    }
    out.write_all(b"\n]}\n")?;
    Ok(stats)
}

#[cfg(test)]
mod tests {
    use super::*;
    use flare_model::{HangRecord, IterationSample, OpKind, ParallelConfig};

    fn rank(r: u32, step_ms: u64, window: u64) -> RankSummary {
        let s = 1_700_000_000_000_000_000 + window * 2_000_000_000;
        serde_json::from_value(serde_json::json!({
            "rank": r, "local_rank": r, "pid": 100 + r,
            "iterations": (0..2).map(|i| IterationSample {
                step: window * 2 + i,
                start_unix_ns: s + i * step_ms * 1_000_000,
                duration_ns: step_ms * 1_000_000,
            }).collect::<Vec<_>>(),
            "ops": [{"name": "allreduce", "kind": "all_reduce", "count": 2, "total_ns": 30_000_000,
                     "p50_ns": 0, "p99_ns": 0, "max_ns": 0}],
            "busy_ns": 2_000_000_000, "observed_ns": 2_000_000_000, "events": 10, "dropped_total": 0,
        }))
        .unwrap()
    }

    fn window(w: u64, hang: bool) -> WindowSummary {
        let s = 1_700_000_000_000_000_000 + w * 2_000_000_000;
        WindowSummary {
            version: 1,
            job_id: "j\"1".into(),
            node: "n0".into(),
            window: w,
            window_ns: 2_000_000_000,
            start_unix_ns: s,
            end_unix_ns: s + 2_000_000_000,
            world_size: 4,
            ranks: (0..4)
                .map(|r| rank(r, if r == 3 { 140 } else { 100 }, w))
                .collect(),
            hangs: if hang {
                vec![HangRecord {
                    rank: 1,
                    pid: 101,
                    op: "allreduce".into(),
                    kind: OpKind::AllReduce,
                    group: Some("dp".into()),
                    in_flight_ns: 1_500_000_000,
                    detected_unix_ns: s + 1_900_000_000,
                    stacks: vec![],
                    stack_source: String::new(),
                }]
            } else {
                vec![]
            },
            peer_stacks: vec![],
            logs: None,
            parallel: ParallelConfig::new(2, 1, 1, 2, 1).ok(),
        }
    }

    #[test]
    fn a_live_jobs_ranks_iterations_windows_and_hangs_are_placed_on_one_clock() {
        let summaries = [window(0, false), window(1, true)];
        let culprits = BTreeMap::from([(3, "slow GPU".to_string())]);
        let mut out = Vec::new();
        let stats = write_window_timeline(&summaries, &culprits, &mut out).unwrap();
        let doc: serde_json::Value = serde_json::from_slice(&out).expect("valid JSON");
        assert_eq!(stats.ranks, 4);
        assert_eq!(doc["otherData"]["job"], "j\"1");
        let events = doc["traceEvents"].as_array().unwrap();
        let named = |pid: u64| {
            events
                .iter()
                .find(|e| e["name"] == "process_name" && e["pid"] == pid)
                .unwrap()["args"]["name"]
                .as_str()
                .unwrap()
                .to_string()
        };
        assert_eq!(
            named(3),
            "rank 3 · stage 0 · dp 1 · tp 1 · node n0 ◀ culprit: slow GPU"
        );
        // Two steps per rank and window, on the clock of the first window's start.
        let steps: Vec<&serde_json::Value> = events
            .iter()
            .filter(|e| e["cat"] == "iteration" && e["pid"] == 3)
            .collect();
        assert_eq!(steps.len(), 4);
        assert_eq!(steps[0]["ts"], 0.0);
        assert_eq!(steps[1]["ts"], 140_000.0);
        assert_eq!(steps[1]["dur"], 140_000.0);
        assert_eq!(steps[0]["cname"], "terrible");
        // Each window with the rank's time in it.
        let w1 = events
            .iter()
            .find(|e| e["cat"] == "window" && e["pid"] == 0 && e["args"]["window"] == 1)
            .unwrap();
        assert_eq!(w1["ts"], 2_000_000.0);
        assert_eq!(w1["args"]["communication_ms"], 30.0);
        // The stuck op from its start to its detection, on its rank.
        let hang: Vec<_> = events.iter().filter(|e| e["cat"] == "hang").collect();
        assert_eq!(hang.len(), 1);
        assert_eq!(
            (&hang[0]["pid"], &hang[0]["name"]),
            (&1.into(), &"stuck: allreduce".into())
        );
        assert_eq!(hang[0]["ts"], 2_400_000.0);
        assert_eq!(hang[0]["dur"], 1_500_000.0);
    }
}
