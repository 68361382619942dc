//! Quick check of the Kineto reader's speed on files written by Flare's Kineto writer.
//!
//! ```text
//! cargo run --release -p flare-import --example kineto_speed -- [ranks] [iterations]
//! ```
//!
//! Prints single-thread parse throughput in MB/s of uncompressed JSON, and the end-to-end
//! time of reading a directory of gzip files (parallel over files).

use flare_import::{
    read_kineto_bytes, read_kineto_dir, write_kineto_dir, write_kineto_rank, KinetoOptions,
};
use std::time::Instant;

#[path = "support/gen.rs"]
mod gen;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let ranks: u32 = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(64);
    let iterations: u32 = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(10);
    let trace = gen::build(ranks, iterations);
    let opts = KinetoOptions::default();

    let mut files = Vec::new();
    let t = Instant::now();
    for i in 0..trace.ranks.len() {
        let mut buf = Vec::new();
        write_kineto_rank(&trace, i, &mut buf).expect("write");
        files.push(buf);
    }
    let total: usize = files.iter().map(Vec::len).sum();
    println!(
        "wrote {} files, {:.1} MB of JSON, {} ops, in {:.2?}",
        files.len(),
        total as f64 / 1e6,
        trace.op_count(),
        t.elapsed()
    );

    let t = Instant::now();
    let mut ops = 0;
    for (i, f) in files.iter().enumerate() {
        let (tr, _) = read_kineto_bytes(&format!("rank{i}.json"), f, &opts).expect("read");
        ops += tr.op_count();
    }
    let s = t.elapsed().as_secs_f64();
    println!(
        "parse (one thread): {:.2} s, {:.0} MB/s of JSON, {:.2} M ops/s ({ops} ops)",
        s,
        total as f64 / 1e6 / s,
        ops as f64 / 1e6 / s
    );

    let dir = std::env::temp_dir().join(format!("flare-kineto-speed-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let t = Instant::now();
    write_kineto_dir(&trace, &dir).expect("write dir");
    println!("write_kineto_dir (gzip): {:.2?}", t.elapsed());
    let t = Instant::now();
    let back = read_kineto_dir(&dir, &opts).expect("read dir");
    println!(
        "read_kineto_dir (gzip, {} threads): {:.2?}, {} ops",
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1),
        t.elapsed(),
        back.op_count()
    );
    let _ = std::fs::remove_dir_all(&dir);
}
