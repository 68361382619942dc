//! Grouping accuracy on LogHub-2k, per system, from the Content column of the ground
//! truth: `cargo run --release -p flare-logs --example loghub_ga [DIR] [--errors SYSTEM]`.

use flare_logs::{csv, grouping_accuracy, Config, Miner};
use std::collections::HashMap;

const SYSTEMS: &[&str] = &[
    "HDFS",
    "Hadoop",
    "Spark",
    "Zookeeper",
    "BGL",
    "HPC",
    "Thunderbird",
];

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let dir = args
        .first()
        .filter(|a| !a.starts_with("--"))
        .cloned()
        .unwrap_or_else(|| {
            concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/../../../shared/data/loghub-2k"
            )
            .into()
        });
    let errors = args
        .iter()
        .position(|a| a == "--errors")
        .map(|i| args[i + 1].clone());
    let mut systems: Vec<String> = SYSTEMS.iter().map(|s| s.to_string()).collect();
    if args.first().is_some_and(|a| !a.starts_with("--")) {
        // another LogHub-shaped directory: every system in it
        systems = std::fs::read_dir(&dir)
            .expect("lists the directory")
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| {
                std::path::Path::new(&format!("{dir}/{n}/{n}_2k.log_structured_corrected.csv"))
                    .exists()
            })
            .collect();
        systems.sort();
    }
    let mut sum = 0.0;
    for sys in &systems {
        let path = format!("{dir}/{sys}/{sys}_2k.log_structured_corrected.csv");
        let text = std::fs::read_to_string(&path).expect("reads the ground truth");
        let rows = csv::columns(&text, &["Content", "EventId"]).expect("parses");
        let mut cfg = Config::default();
        if let Ok(v) = std::env::var("SIM") {
            cfg.similarity = v.parse().unwrap();
        }
        if let Ok(v) = std::env::var("DEPTH") {
            cfg.depth = v.parse().unwrap();
        }
        let mut miner = Miner::new(cfg).unwrap();
        let pred: Vec<u32> = rows.iter().map(|r| miner.add(&r[0])).collect();
        let truth: Vec<&str> = rows.iter().map(|r| r[1].as_str()).collect();
        let ga = grouping_accuracy(&pred, &truth);
        sum += ga;
        println!("{sys:12} {ga:.4}  templates {}", miner.templates().count());
        if std::env::var("HEADER").as_deref() == Ok(sys.as_str()) {
            let raw = std::fs::read(format!("{dir}/{sys}/{sys}_2k.log")).unwrap();
            let raw = String::from_utf8_lossy(&raw);
            for (l, r) in raw
                .lines()
                .zip(&rows)
                .filter(|(l, r)| flare_logs::header::strip_header(l).trim() != r[0].trim())
                .take(8)
            {
                println!(
                    "  raw: {l}\n  got: {}\n want: {}",
                    flare_logs::header::strip_header(l),
                    r[0]
                );
            }
        }
        if errors.as_deref() == Some(sys.as_str()) {
            let mut by_truth: HashMap<&str, Vec<usize>> = HashMap::new();
            for (i, t) in truth.iter().enumerate() {
                by_truth.entry(t).or_default().push(i);
            }
            let mut by_pred: HashMap<u32, Vec<usize>> = HashMap::new();
            for (i, p) in pred.iter().enumerate() {
                by_pred.entry(*p).or_default().push(i);
            }
            for (t, lines) in &by_truth {
                let p = pred[lines[0]];
                let ok = lines.iter().all(|&i| pred[i] == p) && by_pred[&p].len() == lines.len();
                if !ok {
                    let mut ps: Vec<u32> = lines.iter().map(|&i| pred[i]).collect();
                    ps.sort();
                    ps.dedup();
                    println!(
                        "--- truth {t} ({} lines) -> pred groups {:?}",
                        lines.len(),
                        ps
                    );
                    for p in ps.iter().take(4) {
                        let tv = miner.template(*p).unwrap();
                        let ex = by_pred[p].iter().find(|&&i| truth[i] == *t).unwrap();
                        let others: Vec<&&str> = by_pred[p]
                            .iter()
                            .map(|&i| &truth[i])
                            .filter(|x| **x != *t)
                            .take(3)
                            .collect();
                        println!(
                            "   [{p}] n={} {} | ex: {} | others {:?}",
                            tv.count,
                            tv.text(),
                            rows[*ex][0],
                            others
                        );
                    }
                }
            }
        }
    }
    println!("{:12} {:.4}", "mean", sum / systems.len() as f64);
}
