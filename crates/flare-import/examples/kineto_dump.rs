//! Prints a summary of a Kineto import: `kineto_dump <dir or files...>`.

use flare_import::{read_kineto_dir_with_stats, read_kineto_files_with_stats, KinetoOptions};
use std::path::PathBuf;

fn main() {
    let args: Vec<PathBuf> = std::env::args().skip(1).map(PathBuf::from).collect();
    let opts = KinetoOptions::default();
    let t = std::time::Instant::now();
    let result = if args.len() == 1 && args[0].is_dir() {
        read_kineto_dir_with_stats(&args[0], &opts)
    } else {
        read_kineto_files_with_stats(&args, &opts)
    };
    let (trace, stats) = match result {
        Ok(x) => x,
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(1);
        }
    };
    println!("read in {:.2?}", t.elapsed());
    println!("{stats:#?}");
    println!(
        "world {} ranks present {:?} missing {} comms:",
        trace.job.world_size,
        trace.ranks.iter().map(|r| r.rank).collect::<Vec<_>>(),
        trace.meta.missing_ranks.len()
    );
    for c in &trace.communicators {
        println!("  {} {:?} {:?} {}", c.id, c.kind, c.members, c.label);
    }
    for r in &trace.ranks {
        println!(
            "rank {}: {} ops, iterations {:?}",
            r.rank,
            r.ops.len(),
            r.iterations
        );
        for op in r
            .ops
            .iter()
            .filter(|o| o.kind != flare_model::OpKind::Compute)
        {
            println!(
                "  {:?} it {} comm {} seq {} peer {} start {} dur {:?} issue {:?} amount {} {}",
                op.kind,
                op.iteration,
                op.comm as i64,
                op.seq,
                op.peer as i64,
                op.start_ns,
                op.duration(),
                op.issue().map(|i| op.start_ns - i),
                op.amount,
                &trace.name(op.name)[..trace.name(op.name).len().min(40)]
            );
        }
    }
}
