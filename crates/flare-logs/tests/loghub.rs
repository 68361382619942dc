//! Grouping accuracy on LogHub-2k (the ground truth's Content column fed to the miner),
//! held at or above what the miner measured when this test was written, less a margin
//! for harmless drift. A drop here means a masking or tree change hurt some system.

use flare_logs::{csv, grouping_accuracy, Config, Miner};

const DIR: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../../shared/data/loghub-2k"
);

/// (system, floor): the measured GA rounded down to 0.01.
const FLOORS: &[(&str, f64)] = &[
    ("HDFS", 0.99),
    ("Hadoop", 0.97),
    ("Spark", 0.92),
    ("Zookeeper", 0.98),
    ("BGL", 0.98),
    ("HPC", 0.90),
    ("Thunderbird", 0.97),
];
const MEAN_FLOOR: f64 = 0.96;

fn ga(system: &str) -> f64 {
    let path = format!("{DIR}/{system}/{system}_2k.log_structured_corrected.csv");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let rows = csv::columns(&text, &["Content", "EventId"]).expect("ground truth parses");
    assert_eq!(rows.len(), 2000, "{system}: 2,000 lines");
    let mut miner = Miner::new(Config::default()).unwrap();
    let pred: Vec<u32> = rows.iter().map(|r| miner.add(&r[0])).collect();
    let truth: Vec<&str> = rows.iter().map(|r| r[1].as_str()).collect();
    grouping_accuracy(&pred, &truth)
}

#[test]
fn grouping_accuracy_per_system_and_mean() {
    let mut sum = 0.0;
    let mut low = Vec::new();
    for (system, floor) in FLOORS {
        let g = ga(system);
        eprintln!("{system:12} {g:.4}");
        if g < *floor {
            low.push(format!("{system}: {g:.4} < {floor}"));
        }
        sum += g;
    }
    let mean = sum / FLOORS.len() as f64;
    eprintln!("mean         {mean:.4}");
    assert!(low.is_empty(), "below floor: {low:?}");
    assert!(mean >= MEAN_FLOOR, "mean {mean:.4} < {MEAN_FLOOR}");
}
