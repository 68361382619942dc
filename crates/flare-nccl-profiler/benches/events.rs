//! The plugin's hot path: what NCCL's proxy thread pays per profiler call. A proxy step as
//! NCCL drives it with proxy steps on: startEvent, three recordEventState, stopEvent (five
//! calls, five tracer events), through the v7 table, into the plugin's own tracer with a
//! consumer draining the ring as the agent does. p50/p99 per call come from timing batches
//! with the monotonic clock; criterion reports the mean of one step.
//!
//! cargo bench -p flare-nccl-profiler --bench events

use criterion::{criterion_group, criterion_main, Criterion};
use nccl_profiler_flare::abi::*;
use std::ffi::c_void;
use std::hint::black_box;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

static DRAINED: AtomicU64 = AtomicU64::new(0);

struct Plugin {
    t: &'static ProfilerV7,
    ctx: *mut c_void,
    op: *mut c_void,
}

fn init() -> Plugin {
    let dir = std::env::temp_dir().join(format!("flare-plugin-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    // The plugin initializes its own tracer from the environment, as in a job without
    // Flare's Python package.
    for (k, v) in [
        ("FLARE_SHM_DIR", dir.to_str().unwrap()),
        ("FLARE_JOB_ID", "plugin-bench"),
        ("RANK", "0"),
        ("WORLD_SIZE", "2"),
        ("FLARE_RING_EVENTS", "65536"),
        ("FLARE_NCCL_EVENT_MASK", "default,proxystep"),
    ] {
        std::env::set_var(k, v);
    }
    let t = &nccl_profiler_flare::ncclProfiler_v7;
    let mut ctx = std::ptr::null_mut();
    let mut mask = 0;
    // SAFETY: valid out pointers, NCCL's argument order.
    let r = unsafe { (t.init)(&mut ctx, 1, &mut mask, c"bench".as_ptr(), 2, 2, 0, None) };
    assert_eq!(r, NCCL_SUCCESS);
    let mut d: EventDescrV7 = unsafe { std::mem::zeroed() };
    d.type_ = event::PROXY_OP;
    d.u.proxy_op = ProxyOpDescr {
        pid: std::process::id() as i32,
        channel_id: 0,
        peer: 1,
        n_steps: 1 << 20,
        chunk_size: 1 << 19,
        is_send: 1,
    };
    let mut op = std::ptr::null_mut();
    // SAFETY: the context from init and a filled descriptor.
    unsafe { (t.start_event)(ctx, &mut op, &mut d) };
    assert!(!op.is_null());
    Plugin { t, ctx, op }
}

/// One proxy step: five calls.
#[inline]
fn step(p: &Plugin, i: i32) {
    let mut d: EventDescrV7 = unsafe { std::mem::zeroed() };
    d.type_ = event::PROXY_STEP;
    d.parent_obj = p.op;
    d.u.proxy_step = ProxyStepDescr { step: i };
    let mut h = std::ptr::null_mut();
    let mut args = StateArgsV7 {
        proxy_step: ProxyStepStateArgs {
            trans_size: 1 << 19,
        },
    };
    // SAFETY: the context and handles the plugin gave, NCCL's call order.
    unsafe {
        (p.t.start_event)(p.ctx, &mut h, &mut d);
        for s in [
            state::PROXY_STEP_SEND_GPU_WAIT,
            state::PROXY_STEP_SEND_PEER_WAIT_V4,
            state::PROXY_STEP_SEND_WAIT,
        ] {
            (p.t.record_event_state)(black_box(h), s, &mut args);
        }
        (p.t.stop_event)(h);
    }
}

fn consumer(stop: Arc<AtomicBool>) -> std::thread::JoinHandle<u64> {
    let path = flare_tracer::ring_path().expect("the plugin initialized a tracer");
    std::thread::spawn(move || {
        let mut f = flare_tracer::RingFile::open(&path).unwrap();
        let mut buf = Vec::with_capacity(1 << 16);
        let mut n = 0u64;
        while !stop.load(Ordering::Relaxed) {
            buf.clear();
            n += f.drain(&mut buf) as u64;
            DRAINED.store(n, Ordering::Release);
            std::thread::sleep(std::time::Duration::from_micros(50));
        }
        n
    })
}

fn run(c: &mut Criterion) {
    let p = init();
    let stop = Arc::new(AtomicBool::new(false));
    let drain = consumer(stop.clone());
    // Batches of 32 steps (160 calls).
    let mut per_call = Vec::with_capacity(10_000);
    for batch in 0..10_000 {
        if batch % 50 == 0 {
            while flare_tracer::stats().written > DRAINED.load(Ordering::Acquire) + 4096 {
                std::thread::yield_now();
            }
        }
        let t0 = flare_tracer::clock::now_ns();
        for i in 0..32 {
            step(&p, i);
        }
        per_call.push((flare_tracer::clock::now_ns() - t0) as f64 / 160.0);
    }
    per_call.sort_by(f64::total_cmp);
    let q = |x: f64| per_call[((per_call.len() - 1) as f64 * x) as usize];
    println!(
        "plugin call cost (proxy steps through the v7 table, batches of 160 calls, consumer draining): p50 {:.1} ns, p99 {:.1} ns per call",
        q(0.5),
        q(0.99)
    );
    let s = flare_tracer::stats();
    println!(
        "events written {}, dropped (ring full) {} (must be 0 for the percentiles to count)",
        s.written, s.dropped_full
    );
    c.bench_function("proxy step: start + 3 states + stop", |b| {
        let mut i = 0;
        b.iter(|| {
            i += 1;
            step(&p, i)
        })
    });
    stop.store(true, Ordering::Relaxed);
    drain.join().unwrap();
}

criterion_group!(benches, run);
criterion_main!(benches);
