//! The process-wide tracer, end to end in one process: threads record, a consumer drains
//! the shared-memory file as the agent would, spans come out paired, full rings count
//! drops, and shutdown writes a dump the same reader opens. One test: the tracer is global.

use flare_model::OpKind;
use flare_tracer::{Assembler, Config, Item, RingFile, SpanArgs};

#[test]
fn threads_record_and_a_consumer_drains_spans_steps_and_drops() {
    let dir = std::env::temp_dir().join(format!("flare-tracer-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let dump = dir.join("dump.ring");
    let cfg = Config {
        job_id: "job/with spaces".into(),
        rank: 3,
        local_rank: 1,
        world_size: 8,
        shm_dir: dir.clone(),
        max_rings: 4,
        ring_capacity: 1024,
        dump_path: Some(dump.clone()),
        ..Config::default()
    };
    let path = flare_tracer::init(cfg.clone()).unwrap();
    assert!(path.starts_with(&dir));
    assert!(path
        .file_name()
        .unwrap()
        .to_string_lossy()
        .starts_with("flare-job_with_spaces-r3-p"));
    // Same identity again is fine; another identity is refused.
    assert_eq!(flare_tracer::init(cfg.clone()).unwrap(), path);
    assert!(flare_tracer::init(Config {
        rank: 4,
        ..cfg.clone()
    })
    .is_err());
    assert_eq!(
        flare_tracer::discover(&dir, Some("job/with spaces")).unwrap(),
        vec![path.clone()]
    );

    let fwd = flare_tracer::intern("forward");
    let ar = flare_tracer::intern("all_reduce");
    let dp = flare_tracer::intern("dp0");
    assert_eq!(flare_tracer::intern("forward"), fwd);

    let mut file = RingFile::open(&path).unwrap();
    assert_eq!(file.info().rank, 3);
    assert_eq!(file.info().world_size, 8);
    assert_eq!(file.info().job_id, "job/with spaces");
    assert_eq!(file.name(fwd), Some("forward"));
    file.heartbeat(flare_tracer::clock::unix_ns());

    // Three threads, 100 iterations each of forward { all_reduce }.
    let handles: Vec<_> = (0..3)
        .map(|t| {
            std::thread::Builder::new()
                .name(format!("worker-{t}"))
                .spawn(move || {
                    for i in 0..100u64 {
                        flare_tracer::step(i);
                        flare_tracer::begin(fwd, OpKind::Compute, &SpanArgs::default());
                        let args = SpanArgs {
                            amount: 4096,
                            group: dp,
                            seq: i as u32,
                            group_size: 8,
                            issue_latency_ns: 0,
                        };
                        flare_tracer::begin(ar, OpKind::AllReduce, &args);
                        flare_tracer::end(ar, OpKind::AllReduce);
                        flare_tracer::end(fwd, OpKind::Compute);
                    }
                })
                .unwrap()
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    let mut events = Vec::new();
    let n = file.drain(&mut events);
    assert_eq!(n, 3 * 100 * 5);
    let mut asm = Assembler::new();
    let mut items = Vec::new();
    for e in &events {
        asm.feed(e.ring, &e.event, &mut items);
    }
    let spans: Vec<_> = items
        .iter()
        .filter_map(|i| match i {
            Item::Span(s) => Some(*s),
            _ => None,
        })
        .collect();
    assert_eq!(spans.len(), 600);
    let ars: Vec<_> = spans
        .iter()
        .filter(|s| s.kind == OpKind::AllReduce)
        .collect();
    assert_eq!(ars.len(), 300);
    assert!(ars
        .iter()
        .all(|s| s.depth == 1 && s.args.amount == 4096 && s.args.group == dp));
    assert_eq!(ars.iter().map(|s| s.args.seq).max(), Some(99));
    assert_eq!(
        items
            .iter()
            .filter(|i| matches!(i, Item::Step { .. }))
            .count(),
        300
    );
    assert!(asm.open_spans().is_empty());
    assert_eq!(asm.unmatched_ends, 0);
    let threads: Vec<String> = (0..3).map(|r| file.thread(r).1).collect();
    assert!(
        threads.iter().all(|t| t.starts_with("worker-")),
        "{threads:?}"
    );

    // Exited threads released their rings: a fifth thread reuses one (4 rings in all).
    for _ in 0..2 {
        std::thread::spawn(move || flare_tracer::step(7))
            .join()
            .unwrap();
    }
    events.clear();
    file.drain(&mut events);
    assert_eq!(events.len(), 2);
    assert_eq!(flare_tracer::stats().dropped_no_ring, 0);

    // Without a consumer a ring fills: the rest is dropped and counted, nothing blocks.
    std::thread::spawn(move || {
        for i in 0..5000 {
            flare_tracer::counter(fwd, i);
        }
    })
    .join()
    .unwrap();
    let drops = file.drops();
    assert_eq!(drops.ring_full, 5000 - 1024);

    // An open span is visible to the consumer (the watchdog's view of a hang).
    flare_tracer::begin(ar, OpKind::AllReduce, &SpanArgs::default());
    let s = flare_tracer::stats();
    assert_eq!(s.dropped_full, 5000 - 1024);

    let dumped = flare_tracer::shutdown().unwrap();
    assert_eq!(dumped.as_deref(), Some(dump.as_path()));
    // An agent heartbeat is fresh: the live file is left for it to drain and remove.
    assert!(path.exists());
    let mut d = RingFile::open(&dump).unwrap();
    assert!(d.exited());
    assert_eq!(d.info().rank, 3);
    assert_eq!(d.name(ar), Some("all_reduce"));
    let mut left = Vec::new();
    d.drain(&mut left);
    // The counter ring's 1024 kept samples and the open all_reduce begin.
    assert_eq!(left.len(), 1024 + 1);
    let mut asm = Assembler::new();
    let mut items = Vec::new();
    for e in &left {
        asm.feed(e.ring, &e.event, &mut items);
    }
    let open = asm.open_spans();
    assert_eq!(open.len(), 1);
    assert_eq!(open[0].kind, OpKind::AllReduce);
    assert_eq!(d.drops().ring_full, 5000 - 1024);
    std::fs::remove_dir_all(&dir).unwrap();
}
