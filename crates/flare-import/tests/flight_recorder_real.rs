//! Flight Recorder dumps of real fault-injection runs (nvidia-resiliency-ext): the analysis
//! must name the process group, op, sizes, dtype and missing ranks of each `reference.txt`.

use flare_hang::{analyze, divergences};
use flare_import::flight_recorder::{looks_like_fr_dump, read_fr_dir, read_fr_file, FrError};
use flare_model::{Component, FindingKind, Severity};
use std::path::{Path, PathBuf};

const DATA: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../../shared/data/flight-recorder"
);

fn scenario(name: &str) -> Option<PathBuf> {
    let p = Path::new(DATA).join(name);
    if p.is_dir() {
        Some(p)
    } else {
        eprintln!("skipping: {} not present", p.display());
        None
    }
}

/// `reference.txt`'s data row: (pgid, desc, op, size, dtype, missing ranks).
fn reference(dir: &Path) -> (String, String, String, String, String, Vec<u32>) {
    let text = std::fs::read_to_string(dir.join("reference.txt")).unwrap();
    let row = text.lines().nth(1).unwrap();
    let cols: Vec<String> = row.split('|').map(|c| c.trim().to_string()).collect();
    let missing = cols[5]
        .split(',')
        .map(|r| r.trim().parse().unwrap())
        .collect();
    (
        cols[0].clone(),
        cols[1].split(',').next().unwrap().to_string(),
        cols[2].clone(),
        cols[3].clone(),
        cols[4].clone(),
        missing,
    )
}

fn check(name: &str) {
    let Some(dir) = scenario(name) else { return };
    let (pgid, desc, op, size, dtype, missing) = reference(&dir);
    assert!(looks_like_fr_dump(&dir));
    assert!(looks_like_fr_dump(&dir.join("_dump_0")));
    assert!(!looks_like_fr_dump(&dir.join("reference.txt")));
    let job = read_fr_dir(&dir).unwrap();
    assert_eq!(job.dumps.len(), 16);
    assert!(job.missing_ranks.is_empty());
    let d9 = &job.dumps[&9];
    assert_eq!(d9.version, "2.9");
    assert_eq!(d9.nccl_version.as_deref(), Some("2.27.3"));
    assert_eq!(d9.pg_config["72"].desc, "EXPERT_MODEL_PARALLEL_GROUP");
    assert_eq!(d9.pg_config["72"].ranks, (8..16).collect::<Vec<u32>>());

    let divs = divergences(&job);
    for d in &divs {
        eprintln!(
            "{name}: {:?} group {} {} #{} reached {:?} missing {:?} t={}",
            d.kind, d.group, d.op, d.seq, d.reached, d.missing, d.time_created_ns
        );
    }
    let top = &divs[0];
    assert_eq!(top.group, pgid);
    assert_eq!(top.desc, desc);
    assert_eq!(top.op, op);
    assert_eq!(top.missing, missing);
    assert_eq!(flare_model::flight_recorder::shapes(&top.input_sizes), size);
    assert_eq!(top.input_dtypes.join(","), dtype);

    let findings = analyze(&job);
    let f = &findings[0];
    assert_eq!(f.kind, FindingKind::Hang);
    assert_eq!(f.severity, Severity::Critical);
    let culprits: Vec<u32> = f.culprits.iter().filter_map(|c| c.rank).collect();
    assert_eq!(culprits, missing);
    assert!(f.culprits.iter().all(|c| c.component == Component::Process));
    let text = format!(
        "{} {}",
        f.summary,
        f.evidence
            .iter()
            .map(|e| e.detail.as_str())
            .collect::<Vec<_>>()
            .join(" ")
    );
    for needle in [&pgid, &desc, &op, &size, &dtype] {
        assert!(text.contains(needle.as_str()), "{needle} not in {text}");
    }
    // The root cause ranks first once sorted by severity then confidence, as the CLI does.
    let best = findings
        .iter()
        .max_by(|a, b| a.rank_key().partial_cmp(&b.rank_key()).unwrap())
        .unwrap();
    assert_eq!(best, f);
    for f in &findings {
        eprintln!("{:.3} {}", f.confidence, f.summary);
    }
}

#[test]
fn gpu_error_2nd() {
    check("gpu_error_2nd");
}

#[test]
fn lock_gil_1st() {
    check("lock_gil_1st");
}

#[test]
fn single_file_and_errors() {
    let Some(dir) = scenario("gpu_error_2nd") else {
        return;
    };
    let d = read_fr_file(&dir.join("_dump_14")).unwrap();
    assert_eq!(d.rank, 14);
    assert!(!d.entries.is_empty());
    let e = d
        .entries
        .iter()
        .find(|e| e.process_group.name == "72")
        .unwrap();
    assert_eq!(e.profiling_name, "nccl:all_to_all");
    assert_eq!(e.timeout_ms, Some(600000));
    assert_eq!(e.time_discovered_started_ns, None);
    // Truncations of a real dump are errors naming the file and the offset, never panics.
    let bytes = std::fs::read(dir.join("_dump_14")).unwrap();
    for cut in (0..bytes.len()).step_by(7) {
        match flare_import::flight_recorder::parse_fr_bytes("_dump_14", &bytes[..cut]) {
            Err(FrError::Pickle { file, offset, .. }) => {
                assert_eq!(file, "_dump_14");
                assert!(offset <= cut);
            }
            Err(FrError::NotADump { .. }) if cut == 0 => {}
            other => panic!("cut {cut}: {other:?}"),
        }
    }
}
