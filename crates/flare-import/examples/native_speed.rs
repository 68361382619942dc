//! Quick check of the native format's size and speed on a realistic synthetic trace.
//!
//! ```text
//! cargo run --release -p flare-import --example native_speed -- [ranks] [iterations]
//! cargo run --release -p flare-import --example native_speed -- --file PATH [runs]
//! ```
//!
//! Defaults: 8,192 ranks x 10 iterations x 100 ops (about 8.2 million ops), the size the
//! format is designed for. Prints bytes per op and write/read throughput (reads on the
//! calling thread alone, then as `read_native` does by default).
//!
//! With `--file`, reads an existing native file (e.g. `flare sim ... --out DIR` then
//! `DIR/trace.flare`) `runs` times (default 3) from disk, chunk by chunk (as `flare
//! diagnose` reads it) and then whole, each on the calling thread alone and with the
//! default decoding threads, and prints each read's wall and CPU time.

use flare_import::native::{
    decode_threads, read_native, read_native_file, read_native_threads, write_native,
};
use flare_model::Op;
use std::time::Instant;

#[path = "support/gen.rs"]
mod gen;
use gen::build;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("--file") {
        let path = args.get(2).expect("--file PATH");
        let runs: usize = args.get(3).and_then(|s| s.parse().ok()).unwrap_or(3);
        read_file(path, runs);
        return;
    }
    let ranks: u32 = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(8192);
    let iterations: u32 = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(10);
    let t0 = Instant::now();
    let trace = build(ranks, iterations);
    let n_ops = trace.op_count();
    let model_bytes = n_ops * std::mem::size_of::<Op>();
    println!(
        "built {ranks} ranks x {iterations} iterations = {n_ops} ops in {:.2?}",
        t0.elapsed()
    );

    let t1 = Instant::now();
    let mut buf = Vec::with_capacity(n_ops * 12);
    write_native(&trace, &mut buf).expect("write");
    let w = t1.elapsed().as_secs_f64();

    let t2 = Instant::now();
    let back = read_native_threads(
        &buf[..],
        "memory",
        &flare_import::limits::Limits::default(),
        0,
    )
    .expect("read");
    let r = t2.elapsed().as_secs_f64();
    assert!(back == trace, "round trip differs");
    drop(back);
    let t3 = Instant::now();
    let back = read_native(&buf[..], "memory").expect("read");
    let rp = t3.elapsed().as_secs_f64();
    assert!(back == trace, "round trip differs");
    drop(back);
    lz4_only(&buf);

    let mb = |bytes: usize| bytes as f64 / 1e6;
    println!(
        "file: {:.1} MB, {:.2} bytes/op",
        mb(buf.len()),
        buf.len() as f64 / n_ops as f64
    );
    println!(
        "write: {w:.2} s, {:.1} M ops/s, {:.0} MB/s of file, {:.0} MB/s of in-memory ops",
        n_ops as f64 / w / 1e6,
        mb(buf.len()) / w,
        mb(model_bytes) / w
    );
    for (what, r) in [
        ("read, one thread".to_string(), r),
        (format!("read, {} decoding threads", decode_threads()), rp),
    ] {
        println!(
            "{what}: {r:.2} s, {:.1} M ops/s, {:.0} MB/s of file, {:.0} MB/s of in-memory ops",
            n_ops as f64 / r / 1e6,
            mb(buf.len()) / r,
            mb(model_bytes) / r
        );
    }
}

/// CPU time of this process so far (user + system), from /proc (Linux), in seconds.
fn cpu_s() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // Fields after the command name (which ends with ')'): utime and stime are 14 and 15.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<f64> = rest
        .split_whitespace()
        .map(|x| x.parse().unwrap_or(0.0))
        .collect();
    (f.get(11).unwrap_or(&0.0) + f.get(12).unwrap_or(&0.0)) / 100.0
}

fn read_file(path: &str, runs: usize) {
    let bytes = std::fs::metadata(path).expect("file").len();
    for _ in 0..runs {
        read_chunks(path, 0);
        read_chunks(path, decode_threads());
    }
    for run in 0..runs {
        for threads in [0, decode_threads()] {
            let (t, c) = (Instant::now(), cpu_s());
            let trace = if threads == 0 {
                let f = std::fs::File::open(path).expect("open");
                read_native_threads(
                    std::io::BufReader::with_capacity(1 << 20, f),
                    path,
                    &flare_import::limits::Limits::default(),
                    0,
                )
            } else {
                read_native_file(path)
            }
            .expect("read");
            let (wall, cpu) = (t.elapsed().as_secs_f64(), cpu_s() - c);
            let ops = trace.op_count();
            if threads == 0 && run == 0 {
                // What one pass over every op costs (the engine's batch entry makes one
                // to find the iterations).
                let t = Instant::now();
                let its = trace.iterations_with_ops();
                println!(
                    "Trace::iterations_with_ops (one pass over the ops): {:.2} s, {} iterations",
                    t.elapsed().as_secs_f64(),
                    its.len()
                );
            }
            drop(trace);
            println!(
                "run {run}, {}: {wall:.2} s wall, {cpu:.2} s CPU, {:.1} M ops/s, {:.0} MB/s of file ({ops} ops, {:.1} MB)",
                if threads == 0 {
                    "calling thread alone".to_string()
                } else {
                    format!("{threads} decoding threads")
                },
                ops as f64 / wall / 1e6,
                bytes as f64 / 1e6 / wall,
                bytes as f64 / 1e6
            );
        }
    }
}

/// Reads the file chunk by chunk (as `flare diagnose` does), dropping each chunk.
fn read_chunks(path: &str, threads: usize) {
    let (t, c) = (Instant::now(), cpu_s());
    let f = std::fs::File::open(path).expect("open");
    let mut r = flare_import::native::NativeReader::with_threads(
        std::io::BufReader::with_capacity(1 << 20, f),
        path,
        &flare_import::limits::Limits::default(),
        threads,
    )
    .expect("header");
    let (mut chunks, mut ops) = (0, 0);
    while let Some(chunk) = r.next_chunk().expect("chunk") {
        chunks += 1;
        ops += chunk.ranks.iter().map(|r| r.ops.len()).sum::<usize>();
    }
    let (wall, cpu) = (t.elapsed().as_secs_f64(), cpu_s() - c);
    println!(
        "chunk by chunk, {threads} decoding threads: {wall:.2} s wall, {cpu:.2} s CPU, {chunks} chunks, {ops} ops"
    );
}

#[allow(dead_code)]
fn lz4_only(buf: &[u8]) {
    use std::io::Read;
    let t = Instant::now();
    let mut out = Vec::new();
    lz4_flex::frame::FrameDecoder::new(&buf[12..])
        .read_to_end(&mut out)
        .unwrap();
    println!(
        "lz4 alone: {:.2?} for {:.1} MB payload",
        t.elapsed(),
        out.len() as f64 / 1e6
    );
}
