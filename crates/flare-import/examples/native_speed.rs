//! Quick check of the native format's size and speed on a realistic synthetic trace.
//!
//! ```text
//! cargo run --release -p flare-import --example native_speed -- [ranks] [iterations]
//! ```
//!
//! Defaults: 8,192 ranks x 10 iterations x 100 ops (about 8.2 million ops), the size the
//! format is designed for. Prints bytes per op and write/read throughput (single thread).

use flare_import::native::{read_native, write_native};
use flare_model::Op;
use std::time::Instant;

#[path = "support/gen.rs"]
mod gen;
use gen::build;

fn main() {
    let args: Vec<String> = std::env::args().collect();
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
    let back = read_native(&buf[..], "memory").expect("read");
    let r = t2.elapsed().as_secs_f64();
    lz4_only(&buf);
    assert!(back == trace, "round trip differs");

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
    println!(
        "read:  {r:.2} s, {:.1} M ops/s, {:.0} MB/s of file, {:.0} MB/s of in-memory ops",
        n_ops as f64 / r / 1e6,
        mb(buf.len()) / r,
        mb(model_bytes) / r
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
