//! Kineto parse throughput on real files: decompresses each file once, then parses it
//! `repeat` times on one thread and prints MB/s of uncompressed JSON (best and median).
//!
//! ```text
//! cargo run --release -p flare-import --example kineto_file_speed -- FILE... [--repeat N]
//! ```

use flare_import::{read_kineto_bytes, KinetoOptions};
use std::io::Read;
use std::time::Instant;

fn main() {
    let mut files = Vec::new();
    let mut repeat = 10;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        if a == "--repeat" {
            repeat = args
                .next()
                .and_then(|s| s.parse().ok())
                .expect("--repeat N");
        } else {
            files.push(a);
        }
    }
    let opts = KinetoOptions::default();
    for f in &files {
        let raw = std::fs::read(f).expect("read");
        let data = if raw.starts_with(&[0x1f, 0x8b]) {
            let mut out = Vec::new();
            flate2::read::MultiGzDecoder::new(&raw[..])
                .read_to_end(&mut out)
                .expect("gunzip");
            out
        } else {
            raw
        };
        let mut times = Vec::new();
        let mut ops = 0;
        for _ in 0..repeat {
            let t = Instant::now();
            let (tr, _) = read_kineto_bytes(f, &data, &opts).expect("parse");
            times.push(t.elapsed().as_secs_f64());
            ops = tr.op_count();
        }
        times.sort_by(f64::total_cmp);
        let mb = data.len() as f64 / 1e6;
        println!(
            "{f}: {mb:.1} MB, {ops} ops: best {:.0} MB/s, median {:.0} MB/s",
            mb / times[0],
            mb / times[times.len() / 2]
        );
    }
}
