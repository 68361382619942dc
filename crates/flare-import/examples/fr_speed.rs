//! Parse + analysis speed on 4,096 synthetic Flight Recorder dumps (pickle protocol 2,
//! written in memory by `write_fr_pickle`): `cargo run --release -p flare-import --example fr_speed`.
//!
//! Job: 4,096 ranks, TP groups of 8, EP groups of 64, PP pairs; ranks 1234 and 2345 never
//! reach an expert all-to-all the rest of their EP groups wait in.

use flare_import::flight_recorder::{
    assemble_job, parse_fr_bytes, write_fr_pickle, FrDump, FrEntry, FrPgConfig, FrPgRef,
    FrPgStatus, FrState,
};
use std::collections::BTreeMap;
use std::time::Instant;

const WORLD: u32 = 4096;
const FAULTY: [u32; 2] = [1234, 2345];

fn ranks_of(name: u32) -> (String, Vec<u32>) {
    match name {
        0 => ("default_pg".into(), (0..WORLD).collect()),
        1..=512 => {
            let i = name - 1;
            (
                "TENSOR_MODEL_PARALLEL_GROUP".into(),
                (8 * i..8 * i + 8).collect(),
            )
        }
        1000..=1063 => {
            let j = name - 1000;
            (
                "EXPERT_MODEL_PARALLEL_GROUP".into(),
                (64 * j..64 * j + 64).collect(),
            )
        }
        _ => {
            let k = name - 2000;
            (
                "PIPELINE_MODEL_PARALLEL_GROUP".into(),
                vec![k, k + WORLD / 2],
            )
        }
    }
}

fn dump(rank: u32) -> FrDump {
    let names = [0, 1 + rank / 8, 1000 + rank / 64, 2000 + rank % (WORLD / 2)];
    let mut pg_config = BTreeMap::new();
    let mut pg_status = BTreeMap::new();
    let faulty = FAULTY.contains(&rank);
    for (local, &n) in names.iter().enumerate() {
        let (desc, ranks) = ranks_of(n);
        pg_config.insert(
            n.to_string(),
            FrPgConfig {
                name: n.to_string(),
                desc,
                ranks,
            },
        );
        let last = match n {
            1000..=1063 if faulty => 300,
            1000..=1063 => 302,
            1..=512 => 505,
            _ => 40,
        };
        pg_status.insert(
            local.to_string(),
            FrPgStatus {
                last_enqueued_collective: last,
                last_started_collective: -1,
                last_completed_collective: if (1000..1064).contains(&n) { 300 } else { 499 },
            },
        );
    }
    let mut entries = Vec::new();
    let mut t = 1_758_580_156_000_000_000u64 + rank as u64;
    let mut push =
        |local: usize, n: u32, seq: u64, p2p: u64, name: &str, size: Vec<i64>, dt: &str| {
            t += 1000;
            entries.push(FrEntry {
                record_id: entries.len() as u64 + 10_000,
                pg_id: local as u64,
                process_group: FrPgRef {
                    name: n.to_string(),
                    desc: ranks_of(n).0,
                },
                collective_seq_id: seq,
                p2p_seq_id: p2p,
                op_id: seq,
                profiling_name: name.into(),
                time_created_ns: t,
                input_sizes: vec![size.clone()],
                input_dtypes: vec![dt.into()],
                output_sizes: vec![size],
                output_dtypes: vec![dt.into()],
                state: FrState::Scheduled,
                timeout_ms: Some(600_000),
                is_p2p: p2p > 0,
                ..Default::default()
            });
        };
    if !faulty {
        for seq in 301..=302 {
            push(
                2,
                names[2],
                seq,
                0,
                "nccl:all_to_all",
                vec![2048, 5120],
                "BFloat16",
            );
        }
    }
    for seq in 500..=505 {
        push(
            1,
            names[1],
            seq,
            0,
            "nccl:_all_gather_base",
            vec![2048, 1, 5120],
            "BFloat16",
        );
    }
    let peer = if rank < WORLD / 2 {
        "nccl:send 0->1"
    } else {
        "nccl:recv 1<-0"
    };
    push(3, names[3], 29, 41, peer, vec![2048, 1, 5120], "BFloat16");
    FrDump {
        rank,
        version: "2.9".into(),
        pg_config,
        pg_status,
        nccl_version: Some("2.27.3".into()),
        entries,
    }
}

fn main() {
    let files: Vec<(String, Vec<u8>)> = (0..WORLD)
        .map(|r| (format!("_dump_{r}"), write_fr_pickle(&dump(r))))
        .collect();
    let bytes: usize = files.iter().map(|f| f.1.len()).sum();
    let t0 = Instant::now();
    let dumps: Vec<(String, FrDump)> = std::thread::scope(|s| {
        let chunk = files
            .len()
            .div_ceil(std::thread::available_parallelism().map_or(4, |n| n.get()));
        let handles: Vec<_> = files
            .chunks(chunk)
            .map(|c| {
                s.spawn(move || {
                    c.iter()
                        .map(|(n, b)| {
                            (
                                n.clone(),
                                parse_fr_bytes(n, b).expect("synthetic dump parses"),
                            )
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().expect("parser thread"))
            .collect()
    });
    let job = assemble_job("synthetic", dumps).expect("job");
    let t_parse = t0.elapsed();
    let t1 = Instant::now();
    let findings = flare_hang::analyze(&job);
    let t_analyze = t1.elapsed();
    println!(
        "{} dumps ({:.1} MB pickle): parse {:.0} ms, analysis {:.0} ms, total {:.0} ms",
        job.dumps.len(),
        bytes as f64 / 1e6,
        t_parse.as_secs_f64() * 1e3,
        t_analyze.as_secs_f64() * 1e3,
        (t_parse + t_analyze).as_secs_f64() * 1e3
    );
    for f in findings.iter().take(3) {
        let c: Vec<u32> = f.culprits.iter().filter_map(|c| c.rank).collect();
        println!("  {:.3} culprits {:?}: {}", f.confidence, c, f.summary);
    }
    println!("  ({} findings)", findings.len());
}
