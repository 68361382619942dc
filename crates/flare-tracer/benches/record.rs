//! The tracer's hot path: what one event costs the training thread.
//!
//! Criterion reports the mean per call; the p50/p99 figures come from timing batches of
//! events with the monotonic clock (a single event is below the clock's resolution).
//! Rings are drained by a consumer thread, as the agent does, so the producer never sees
//! a full ring.

use criterion::{criterion_group, criterion_main, Criterion};
use flare_model::OpKind;
use flare_tracer::{Config, SpanArgs};
use std::hint::black_box;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

static DRAINED: AtomicU64 = AtomicU64::new(0);

fn setup() -> (Arc<AtomicBool>, std::thread::JoinHandle<u64>) {
    let dir = std::env::temp_dir().join(format!("flare-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = flare_tracer::init(Config {
        job_id: "bench".into(),
        shm_dir: dir,
        ring_capacity: 1 << 16,
        ..Config::default()
    })
    .unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let s = stop.clone();
    let consumer = std::thread::spawn(move || {
        let mut f = flare_tracer::RingFile::open(&path).unwrap();
        let mut buf = Vec::with_capacity(1 << 16);
        let mut n = 0u64;
        while !s.load(Ordering::Relaxed) {
            buf.clear();
            n += f.drain(&mut buf) as u64;
            DRAINED.store(n, Ordering::Release);
            std::thread::sleep(std::time::Duration::from_micros(50));
        }
        n
    });
    (stop, consumer)
}

fn percentiles(c: &mut Criterion) {
    let name = flare_tracer::intern("matmul");
    let args = SpanArgs::default();
    // Batches of 64 begin/end pairs; per-event cost = batch time / 128.
    let mut per_event = Vec::with_capacity(20_000);
    for batch in 0..20_000 {
        // Outside the timed region, let the consumer catch up so no event is dropped
        // (a drop is cheaper than a write and would flatter the figures).
        if batch % 100 == 0 {
            while flare_tracer::stats().written > DRAINED.load(Ordering::Acquire) + 1024 {
                std::thread::yield_now();
            }
        }
        let t0 = flare_tracer::clock::now_ns();
        for _ in 0..64 {
            flare_tracer::begin(black_box(name), OpKind::Compute, &args);
            flare_tracer::end(black_box(name), OpKind::Compute);
        }
        let t1 = flare_tracer::clock::now_ns();
        per_event.push((t1 - t0) as f64 / 128.0);
    }
    per_event.sort_by(f64::total_cmp);
    let q = |p: f64| per_event[((per_event.len() - 1) as f64 * p) as usize];
    println!(
        "tracer event cost (batches of 128 events, consumer draining): p50 {:.1} ns, p99 {:.1} ns, max {:.1} ns",
        q(0.5),
        q(0.99),
        q(1.0)
    );
    let s = flare_tracer::stats();
    println!(
        "events written {}, dropped (ring full) {} (must be 0 for the percentiles to count)",
        s.written, s.dropped_full
    );
    c.bench_function("span begin+end (2 events)", |b| {
        b.iter(|| {
            flare_tracer::begin(black_box(name), OpKind::Compute, &args);
            flare_tracer::end(black_box(name), OpKind::Compute);
        })
    });
    c.bench_function("step marker (1 event)", |b| {
        let mut i = 0;
        b.iter(|| {
            i += 1;
            flare_tracer::step(black_box(i));
        })
    });
    c.bench_function("clock read alone", |b| {
        b.iter(|| black_box(flare_tracer::clock::now_ns()))
    });
}

fn run(c: &mut Criterion) {
    let (stop, consumer) = setup();
    percentiles(c);
    stop.store(true, Ordering::Relaxed);
    let drained = consumer.join().unwrap();
    println!("consumer drained {drained} events");
    let _ = flare_tracer::shutdown();
}

criterion_group!(benches, run);
criterion_main!(benches);
