//! Drain throughput: rings of a real tracer file are filled, then the collector drains,
//! assembles and aggregates them; only the collector's poll is timed. Prints events/s;
//! the assertions are about correctness (no span lost), not speed.

mod common;

use common::*;
use flare_agent::Collector;
use flare_model::OpKind;
use flare_tracer::{Event, SpanArgs, Tag};
use std::time::{Duration, Instant};

#[test]
fn drain_throughput() {
    let dir = tempfile::tempdir().unwrap();
    let rings = 8u32;
    let capacity = 1u32 << 16;
    let mut r = Ring::create_sized(
        dir.path(),
        "tput",
        0,
        8,
        std::process::id(),
        rings,
        capacity,
    );
    let names: Vec<u32> = (0..32).map(|i| r.name(&format!("op_{i}")).0).collect();
    let (_, b, c) = SpanArgs {
        amount: 1 << 20,
        group: r.name("dp"),
        seq: 0,
        group_size: 8,
        issue_latency_ns: 0,
    }
    .pack();
    let mut cfg = config(dir.path(), "tput");
    cfg.scan_interval = Duration::from_secs(3600);
    let mut col = Collector::new(cfg).unwrap();
    let mut all = col.poll();
    let rounds = 4;
    let mut timed = Duration::ZERO;
    let mut spans_written = 0u64;
    for _ in 0..rounds {
        // Fill every ring: nested compute spans with an all-reduce inside (depth 0 and 1).
        for ring in 0..rings {
            let mut t = flare_tracer::clock::now_ns();
            for i in 0..(capacity / 4) as usize {
                let name = names[(i + ring as usize) % names.len()];
                let outer = Event {
                    name,
                    kind: OpKind::Compute as u8,
                    ..Event::default()
                };
                let inner = Event {
                    name: names[0],
                    kind: OpKind::AllReduce as u8,
                    a: 1 << 20,
                    b,
                    c,
                    ..Event::default()
                };
                for ev in [
                    Event {
                        ts_ns: t,
                        tag: Tag::Begin as u8,
                        ..outer
                    },
                    Event {
                        ts_ns: t + 100,
                        tag: Tag::Begin as u8,
                        ..inner
                    },
                    Event {
                        ts_ns: t + 600,
                        tag: Tag::End as u8,
                        ..inner
                    },
                    Event {
                        ts_ns: t + 900,
                        tag: Tag::End as u8,
                        ..outer
                    },
                ] {
                    assert!(r.producer.push(ring, &ev));
                }
                t += 1000;
                spans_written += 2;
            }
        }
        let t0 = Instant::now();
        all.extend(col.poll());
        timed += t0.elapsed();
    }
    let events = col.stats().events;
    assert_eq!(events, rings as u64 * capacity as u64 * rounds);
    all.extend(col.flush());
    let spans: u64 = all
        .iter()
        .flat_map(|s| &s.ranks)
        .flat_map(|r| &r.ops)
        .map(|o| o.count)
        .sum();
    assert_eq!(spans, spans_written);
    let secs = timed.as_secs_f64();
    eprintln!(
        "drain throughput: {events} events ({spans} spans, {rings} rings) in {:.1} ms of polls \
         = {:.2} M events/s (drain + assemble + aggregate, one core)",
        secs * 1e3,
        events as f64 / secs / 1e6
    );
}
