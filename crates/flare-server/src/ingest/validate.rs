//! What the store and the engine rely on in a summary, checked before anything is
//! stored: names, ranks inside the job, and every time, duration, count and rate inside
//! what a real job can produce. A value outside (u64::MAX from a bug, a negative rate, a
//! window that ends before it starts) is refused with its place in the summary, rather
//! than stored and summed into every later figure of the job.

use super::IngestError;
use flare_model::summary::{LinkStats, NcclProgress, OpStats, RankSummary};
use flare_model::WindowSummary;
use std::collections::HashSet;

/// Largest job the server accepts: it bounds the missing-rank lists it computes.
pub const MAX_WORLD_SIZE: u32 = 1 << 20;
/// Longest job id or node name.
const MAX_NAME_BYTES: usize = 256;
/// Latest time accepted, Unix ns: what SQLite's signed 64-bit integers hold (year 2262).
const MAX_UNIX_NS: u64 = i64::MAX as u64;
/// Longest window: agents send one every few seconds; a day covers any setting.
const MAX_WINDOW_NS: u64 = 24 * 3600 * 1_000_000_000;
/// Longest duration any figure may hold (an op, an iteration, a stall, time summed over a
/// window): 30 days. A job's whole life fits; sums over a million ranks stay far from
/// overflowing 64 bits.
const MAX_DURATION_NS: u64 = 30 * 24 * 3600 * 1_000_000_000;
/// Largest count (ops, events, bytes per window): 2^53, which f64 holds exactly.
const MAX_COUNT: u64 = 1 << 53;
/// Highest rate accepted, TFLOPS or GB/s: a hundred times today's fastest parts.
const MAX_RATE: f64 = 100_000.0;

/// Checks one decoded summary.
pub(super) fn summary(s: &WindowSummary) -> Result<(), IngestError> {
    check_name("job_id", &s.job_id)?;
    check_name("node", &s.node)?;
    if s.window > i64::MAX as u64 {
        return Err(IngestError::Invalid(format!(
            "window {} is out of range (at most {})",
            s.window,
            i64::MAX
        )));
    }
    if s.world_size > MAX_WORLD_SIZE {
        return Err(IngestError::Invalid(format!(
            "world_size {} is larger than this server accepts ({MAX_WORLD_SIZE})",
            s.world_size
        )));
    }
    if let Some(p) = &s.parallel {
        parallel(p, s.world_size)?;
    }
    timestamp("start_unix_ns", s.start_unix_ns)?;
    timestamp("end_unix_ns", s.end_unix_ns)?;
    if s.end_unix_ns < s.start_unix_ns {
        return Err(IngestError::Invalid(format!(
            "the window ends (end_unix_ns {}) before it starts (start_unix_ns {})",
            s.end_unix_ns, s.start_unix_ns
        )));
    }
    if s.window_ns == 0 || s.window_ns > MAX_WINDOW_NS {
        return Err(IngestError::Invalid(format!(
            "window_ns {} is out of range (1 to {MAX_WINDOW_NS}, a day)",
            s.window_ns
        )));
    }
    if s.end_unix_ns - s.start_unix_ns > MAX_WINDOW_NS {
        return Err(IngestError::Invalid(format!(
            "the window spans {} ns, more than a day",
            s.end_unix_ns - s.start_unix_ns
        )));
    }
    let mut seen = HashSet::with_capacity(s.ranks.len());
    for (i, r) in s.ranks.iter().enumerate() {
        if s.world_size > 0 && r.rank >= s.world_size {
            return Err(IngestError::Invalid(format!(
                "rank {} is outside world_size {}",
                r.rank, s.world_size
            )));
        }
        if !seen.insert(r.rank) {
            return Err(IngestError::Invalid(format!(
                "rank {} appears twice in the summary of node {}",
                r.rank, s.node
            )));
        }
        rank(r).map_err(|e| e.at(&format!("ranks[{i}] (rank {})", r.rank)))?;
    }
    for (i, h) in s.hangs.iter().enumerate() {
        if s.world_size > 0 && h.rank >= s.world_size {
            return Err(IngestError::Invalid(format!(
                "hang record of rank {} is outside world_size {}",
                h.rank, s.world_size
            )));
        }
        let at = |e: OutOfRange| e.at(&format!("hangs[{i}] (rank {})", h.rank));
        duration("in_flight_ns", h.in_flight_ns).map_err(at)?;
        timestamp_in("detected_unix_ns", h.detected_unix_ns).map_err(at)?;
    }
    for (i, p) in s.peer_stacks.iter().enumerate() {
        timestamp_in("captured_unix_ns", p.captured_unix_ns)
            .map_err(|e| e.at(&format!("peer_stacks[{i}] (rank {})", p.rank)))?;
    }
    if let Some(x) = &s.logs {
        validate_logs(x)?;
    }
    Ok(())
}

/// A value out of range, with the field's name; `at` adds where in the summary.
struct OutOfRange(String);

impl OutOfRange {
    fn at(self, place: &str) -> IngestError {
        IngestError::Invalid(format!("{place}: {}", self.0))
    }
}

fn timestamp(field: &str, v: u64) -> Result<(), IngestError> {
    timestamp_in(field, v).map_err(|e| IngestError::Invalid(e.0))
}

fn timestamp_in(field: &str, v: u64) -> Result<(), OutOfRange> {
    if v > MAX_UNIX_NS {
        return Err(OutOfRange(format!(
            "{field} {v} is not a time (at most {MAX_UNIX_NS} ns since 1970)"
        )));
    }
    Ok(())
}

fn duration(field: &str, v: u64) -> Result<(), OutOfRange> {
    if v > MAX_DURATION_NS {
        return Err(OutOfRange(format!("{field} is {v} ns, more than 30 days")));
    }
    Ok(())
}

fn count(field: &str, v: u64) -> Result<(), OutOfRange> {
    if v > MAX_COUNT {
        return Err(OutOfRange(format!("{field} is {v}, more than 2^53")));
    }
    Ok(())
}

fn rate(field: &str, v: Option<f64>) -> Result<(), OutOfRange> {
    match v {
        Some(x) if !(x.is_finite() && (0.0..=MAX_RATE).contains(&x)) => Err(OutOfRange(format!(
            "{field} is {x}; expected 0 to {MAX_RATE}"
        ))),
        _ => Ok(()),
    }
}

fn rank(r: &RankSummary) -> Result<(), OutOfRange> {
    duration("busy_ns", r.busy_ns)?;
    duration("observed_ns", r.observed_ns)?;
    for (field, v) in [
        ("sync_busy_ns", r.sync_busy_ns),
        ("cpu_ns", r.cpu_ns),
        ("runqueue_ns", r.runqueue_ns),
    ] {
        duration(field, v.unwrap_or(0))?;
    }
    count("events", r.events)?;
    count("dropped_total", r.dropped_total)?;
    if let Some(t) = r.stepping {
        duration("stepping.span_ns", t.span_ns)?;
        if t.sync_ns > t.span_ns {
            return Err(OutOfRange(format!(
                "stepping.sync_ns {} is longer than its span_ns {}",
                t.sync_ns, t.span_ns
            )));
        }
    }
    for (i, it) in r.iterations.iter().enumerate() {
        let at = |e: OutOfRange| OutOfRange(format!("iterations[{i}]: {}", e.0));
        timestamp_in("start_unix_ns", it.start_unix_ns).map_err(at)?;
        duration("duration_ns", it.duration_ns).map_err(at)?;
    }
    for (i, op) in r.ops.iter().enumerate() {
        op_stats(op).map_err(|e| OutOfRange(format!("ops[{i}] ({:?}): {}", op.name, e.0)))?;
    }
    if let Some(n) = &r.nccl {
        nccl(n)?;
    }
    if let Some(st) = &r.startup {
        for (i, p) in st.phases.iter().enumerate() {
            let at = |e: OutOfRange| OutOfRange(format!("startup.phases[{i}]: {}", e.0));
            timestamp_in("start_unix_ns", p.start_unix_ns).map_err(at)?;
            if let Some(end) = p.end_unix_ns {
                timestamp_in("end_unix_ns", end).map_err(at)?;
                if end < p.start_unix_ns {
                    return Err(at(OutOfRange(format!(
                        "ends (end_unix_ns {end}) before it starts (start_unix_ns {})",
                        p.start_unix_ns
                    ))));
                }
            }
        }
    }
    Ok(())
}

fn op_stats(op: &OpStats) -> Result<(), OutOfRange> {
    count("count", op.count)?;
    count("bytes", op.bytes)?;
    for (field, v) in [
        ("total_ns", op.total_ns),
        ("p50_ns", op.p50_ns),
        ("p99_ns", op.p99_ns),
        ("max_ns", op.max_ns),
        ("issue_p50_ns", op.issue_p50_ns.unwrap_or(0)),
        ("issue_p99_ns", op.issue_p99_ns.unwrap_or(0)),
    ] {
        duration(field, v)?;
    }
    if op.flops > i64::MAX as u64 {
        return Err(OutOfRange(format!("flops is {}, more than 2^63", op.flops)));
    }
    rate("bus_gbps", op.bus_gbps)?;
    rate("tflops", op.tflops)
}

fn nccl(n: &NcclProgress) -> Result<(), OutOfRange> {
    for (i, l) in n.links.iter().enumerate() {
        link(l).map_err(|e| OutOfRange(format!("nccl.links[{i}]: {}", e.0)))?;
    }
    for (i, k) in n.kernels.iter().enumerate() {
        let at = |e: OutOfRange| OutOfRange(format!("nccl.kernels[{i}]: {}", e.0));
        count("channels", k.channels).map_err(at)?;
        for (field, v) in [
            ("gpu_ns", k.gpu_ns),
            ("sync_ns", k.sync_ns),
            ("compute_ns", k.compute_ns),
        ] {
            duration(field, v).map_err(at)?;
        }
    }
    for (i, s) in n.stalled.iter().enumerate() {
        duration("stalled_ns", s.stalled_ns)
            .map_err(|e| OutOfRange(format!("nccl.stalled[{i}]: {}", e.0)))?;
    }
    Ok(())
}

fn link(l: &LinkStats) -> Result<(), OutOfRange> {
    count("ops", l.ops)?;
    count("bytes", l.bytes)?;
    count("steps", l.steps)?;
    for (field, v) in [
        ("op_ns", l.op_ns),
        ("gpu_wait_ns", l.gpu_wait_ns),
        ("peer_wait_ns", l.peer_wait_ns),
        ("network_ns", l.network_ns),
        ("flush_ns", l.flush_ns),
        ("slowest_channel_ns", l.slowest_channel_ns),
    ] {
        duration(field, v)?;
    }
    Ok(())
}

fn check_name(what: &str, v: &str) -> Result<(), IngestError> {
    if v.trim().is_empty() {
        return Err(IngestError::Invalid(format!("{what} is empty")));
    }
    if v.len() > MAX_NAME_BYTES {
        return Err(IngestError::Invalid(format!(
            "{what} is {} bytes long (at most {MAX_NAME_BYTES})",
            v.len()
        )));
    }
    if v.chars().any(char::is_control) {
        return Err(IngestError::Invalid(format!(
            "{what} {v:?} contains control characters"
        )));
    }
    Ok(())
}

/// Longest log file path accepted.
const MAX_PATH_BYTES: usize = 4096;

/// A stated layout must be one (sizes of at least 1, each dimension once in its order)
/// and hold the job's ranks: the dashboard lays ranks out by it.
fn parallel(p: &flare_model::ParallelConfig, world_size: u32) -> Result<(), IngestError> {
    let invalid = |why: String| IngestError::Invalid(format!("parallel: {why}"));
    flare_model::ParallelConfig::with_order(p.tp, p.cp, p.ep, p.dp, p.pp, &p.order)
        .map_err(|e| invalid(e.0))?;
    let total = [p.tp, p.cp, p.dp, p.pp]
        .iter()
        .map(|&v| u64::from(v))
        .product::<u64>();
    if world_size > 0 && total != u64::from(world_size) {
        return Err(invalid(format!(
            "tp x cp x dp x pp = {total}, but world_size is {world_size}"
        )));
    }
    Ok(())
}

fn validate_logs(x: &flare_model::LogExcerpt) -> Result<(), IngestError> {
    let big = |v: u64| v > i64::MAX as u64;
    if big(x.lines_read) || big(x.lines_dropped) {
        return Err(IngestError::Invalid(
            "log line counts are out of range".into(),
        ));
    }
    let lines = x.lines.iter().map(|l| (&l.file, l.line));
    let progress = x.progress.iter().map(|p| (&p.file, p.line));
    for (file, line) in lines.chain(progress) {
        if file.is_empty() || file.len() > MAX_PATH_BYTES || file.chars().any(char::is_control) {
            return Err(IngestError::Invalid(format!(
                "log file path {:?} is empty, longer than {MAX_PATH_BYTES} bytes or holds control characters",
                file.chars().take(80).collect::<String>()
            )));
        }
        if line == 0 || big(line) {
            return Err(IngestError::Invalid(format!(
                "log line number {line} of {file} is out of range (1 to {})",
                i64::MAX
            )));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use flare_model::{IterationSample, OpKind};

    fn valid() -> WindowSummary {
        serde_json::from_str(
            r#"{"version":1,"job_id":"j","node":"n0","window":3,"window_ns":10000000000,
               "start_unix_ns":1700000000000000000,"end_unix_ns":1700000010000000000,"world_size":4,
               "ranks":[{"rank":1,"local_rank":1,"pid":7,
                          "iterations":[{"step":5,"start_unix_ns":1700000001000000000,"duration_ns":900000000}],
                          "ops":[{"name":"ncclAllReduce","kind":"all_reduce","count":10,"total_ns":5000000,
                                  "p50_ns":400000,"p99_ns":900000,"max_ns":1000000,"bytes":1048576,"flops":0,
                                  "bus_gbps":180.5}],
                          "busy_ns":9000000000,"observed_ns":10000000000,"events":20,"dropped_total":0}]}"#,
        )
        .unwrap()
    }

    #[test]
    fn a_real_summary_passes() {
        summary(&valid()).unwrap();
        let mut laid_out = valid();
        laid_out.parallel = flare_model::ParallelConfig::new(2, 1, 1, 1, 2).ok();
        summary(&laid_out).unwrap();
    }

    #[test]
    fn absurd_values_are_refused_with_their_place() {
        type Edit = fn(&mut WindowSummary);
        let cases: &[(&str, Edit, &str)] = &[
            (
                "u64::MAX duration",
                |s| s.ranks[0].ops[0].total_ns = u64::MAX,
                "ranks[0] (rank 1): ops[0] (\"ncclAllReduce\"): total_ns is 18446744073709551615 ns, more than 30 days",
            ),
            (
                "negative throughput",
                |s| s.ranks[0].ops[0].bus_gbps = Some(-3.0),
                "bus_gbps is -3; expected 0 to",
            ),
            (
                "window ends before it starts",
                |s| s.end_unix_ns = s.start_unix_ns - 1,
                "ends (end_unix_ns 1699999999999999999) before it starts",
            ),
            (
                "no window length",
                |s| s.window_ns = 0,
                "window_ns 0 is out of range",
            ),
            (
                "a time past 2262",
                |s| s.start_unix_ns = u64::MAX,
                "start_unix_ns 18446744073709551615 is not a time",
            ),
            (
                "an iteration of u64::MAX",
                |s| {
                    s.ranks[0].iterations.push(IterationSample {
                        step: 6,
                        start_unix_ns: 1,
                        duration_ns: u64::MAX,
                    })
                },
                "ranks[0] (rank 1): iterations[1]: duration_ns is",
            ),
            (
                "more time in collectives than in the span they lie in",
                |s| {
                    s.ranks[0].stepping = Some(flare_model::SteppingTime {
                        span_ns: 10,
                        sync_ns: 11,
                    })
                },
                "ranks[0] (rank 1): stepping.sync_ns 11 is longer than its span_ns 10",
            ),
            (
                "a count past 2^53",
                |s| s.ranks[0].events = u64::MAX,
                "events is 18446744073709551615, more than 2^53",
            ),
            (
                "a rate of a million TFLOPS",
                |s| {
                    let mut op = s.ranks[0].ops[0].clone();
                    op.kind = OpKind::Compute;
                    op.tflops = Some(1e6);
                    s.ranks[0].ops.push(op);
                },
                "ops[1] (\"ncclAllReduce\"): tflops is 1000000",
            ),
            (
                "a rank outside the job",
                |s| s.ranks[0].rank = 4,
                "rank 4 is outside world_size 4",
            ),
            (
                "a layout of more ranks than the job",
                |s| s.parallel = flare_model::ParallelConfig::new(2, 1, 1, 4, 1).ok(),
                "parallel: tp x cp x dp x pp = 8, but world_size is 4",
            ),
            (
                "a layout with a size of 0",
                |s| {
                    let mut p = flare_model::ParallelConfig::new(2, 1, 1, 2, 1).unwrap();
                    p.pp = 0;
                    s.parallel = Some(p);
                },
                "parallel: pp size must be at least 1",
            ),
            (
                "a layout whose order repeats a dimension",
                |s| {
                    let mut p = flare_model::ParallelConfig::new(2, 1, 1, 2, 1).unwrap();
                    p.order = vec![flare_model::Dim::Tp; 4];
                    s.parallel = Some(p);
                },
                "parallel: dimension Tp repeats in the order",
            ),
        ];
        for (what, edit, expected) in cases {
            let mut s = valid();
            edit(&mut s);
            let err = summary(&s).expect_err(what).to_string();
            assert!(err.contains(expected), "{what}: {err}");
        }
    }
}
