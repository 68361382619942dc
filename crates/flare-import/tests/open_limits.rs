//! `flare_import::open`: format detection case by case, and the input limits (special
//! files, bytes read and inflated, files per directory, duplicate ranks).

mod common;

use common::{data_dir, hand_built, kineto_file, temp_dir};
use flare_import::flight_recorder::FrError;
use flare_import::sniff::detect;
use flare_import::{open, Format, LimitError, Limits, OpenError, OpenOptions, Opened};
use std::error::Error;
use std::io::Write;
use std::path::{Path, PathBuf};

const NCCL: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/nccl");

fn fr_scenario() -> PathBuf {
    data_dir().join("flight-recorder/gpu_error_2nd")
}

/// The error and its sources, one line.
fn chain(e: &dyn Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cur = c.source();
    }
    s
}

fn auto() -> OpenOptions {
    OpenOptions::default()
}

fn with_limits(limits: Limits) -> OpenOptions {
    OpenOptions {
        limits,
        ..OpenOptions::default()
    }
}

fn detected(paths: &[PathBuf]) -> Format {
    detect(paths).format
}

fn open_err(paths: &[PathBuf], opts: &OpenOptions) -> OpenError {
    match open(paths, opts) {
        Ok(Opened::Trace(t)) => panic!("expected an error, read a trace of {} ops", t.op_count()),
        Ok(Opened::FlightRecorder(j)) => {
            panic!("expected an error, read {} dumps", j.dumps.len())
        }
        Ok(Opened::AgentSummaries(s)) => panic!("expected an error, read {} summaries", s.len()),
        Err(e) => e,
    }
}

fn trace_of(o: Opened) -> flare_model::Trace {
    match o {
        Opened::Trace(t) => *t,
        Opened::FlightRecorder(_) => panic!("expected a timeline, got Flight Recorder dumps"),
        Opened::AgentSummaries(_) => panic!("expected a timeline, got agent summaries"),
    }
}

// ---------------------------------------------------------------------------------------
// Detection.

#[test]
fn a_native_file_and_a_directory_holding_trace_flare_are_flare() {
    let dir = temp_dir("open-native");
    let file = dir.join("trace.flare");
    flare_import::write_native_file(&hand_built(), &file).unwrap();
    assert_eq!(detected(std::slice::from_ref(&file)), Format::Flare);
    assert_eq!(detected(std::slice::from_ref(&dir)), Format::Flare);
    let t = trace_of(open(std::slice::from_ref(&dir), &auto()).unwrap());
    assert_eq!(t, hand_built());
    let t = trace_of(open(&[file], &auto()).unwrap());
    assert_eq!(t, hand_built());
    // A native file under another name is still found by its magic bytes.
    let other = dir.join("job.bin");
    flare_import::write_native_file(&hand_built(), &other).unwrap();
    assert_eq!(detected(&[other]), Format::Flare);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn kineto_directories_and_files_are_kineto() {
    let dir = temp_dir("open-kineto");
    flare_import::write_kineto_dir(&hand_built(), &dir).unwrap();
    assert_eq!(detected(std::slice::from_ref(&dir)), Format::Kineto);
    let t = trace_of(open(std::slice::from_ref(&dir), &auto()).unwrap());
    assert_eq!(t.meta.source, "kineto");
    assert_eq!(t.ranks.len(), hand_built().ranks.len());

    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    assert!(files.len() >= 2);
    assert_eq!(detected(&files), Format::Kineto);
    let t = trace_of(open(&files, &auto()).unwrap());
    assert_eq!(t.ranks.len(), files.len());

    let real = kineto_file("nccl_data.json.gz");
    assert_eq!(detected(std::slice::from_ref(&real)), Format::Kineto);
    trace_of(open(&[real], &auto()).unwrap());
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn flight_recorder_dumps_are_a_job_not_a_trace() {
    let dir = fr_scenario();
    assert_eq!(detected(std::slice::from_ref(&dir)), Format::FlightRecorder);
    let one = dir.join("_dump_3");
    assert_eq!(detected(std::slice::from_ref(&one)), Format::FlightRecorder);
    match open(&[dir], &auto()).unwrap() {
        Opened::FlightRecorder(job) => assert_eq!(job.dumps.len(), 16),
        _ => panic!("Flight Recorder dumps read as something else"),
    }
    match open(&[one], &auto()).unwrap() {
        Opened::FlightRecorder(job) => {
            assert_eq!(job.dumps.keys().copied().collect::<Vec<_>>(), [3])
        }
        _ => panic!("a Flight Recorder dump read as something else"),
    }
}

#[test]
fn nccl_inspector_and_profiler_fixtures_are_recognised() {
    let nccl = Path::new(NCCL);
    for (d, f) in [
        ("inspector", Format::NcclInspector),
        ("inspector_v2_28", Format::NcclInspector),
        ("profiler", Format::NcclProfiler),
        ("profiler_hang", Format::NcclProfiler),
    ] {
        let dir = nccl.join(d);
        assert_eq!(detected(std::slice::from_ref(&dir)), f, "{d}");
        let t = trace_of(open(std::slice::from_ref(&dir), &auto()).unwrap());
        assert!(t.op_count() > 0, "{d}");
        let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        files.sort();
        assert_eq!(detected(&files[..1]), f, "{d}: one file");
        // Several files of one format are read as that format.
        assert_eq!(detected(&files), f, "{d}: all files");
        trace_of(open(&files, &auto()).unwrap());
        // The format given is what is read.
        let given = OpenOptions {
            format: f,
            ..OpenOptions::default()
        };
        trace_of(open(&files, &given).unwrap());
    }
}

#[test]
fn agent_summaries_are_recognised_read_in_window_order_and_bad_ones_named() {
    let dir = temp_dir("open-summaries");
    let summary = |w: u64| {
        format!(
            r#"{{"version":1,"job_id":"j","node":"n0","window":{w},"window_ns":2000000000,"start_unix_ns":0,"end_unix_ns":1,"world_size":2,"ranks":[]}}"#
        )
    };
    std::fs::write(dir.join("j-n0-w8.json"), summary(8)).unwrap();
    std::fs::write(dir.join("j-n0-w7.json"), summary(7)).unwrap();
    assert_eq!(detected(std::slice::from_ref(&dir)), Format::AgentSummaries);
    match open(std::slice::from_ref(&dir), &auto()).unwrap() {
        Opened::AgentSummaries(s) => {
            assert_eq!(s.iter().map(|s| s.window).collect::<Vec<_>>(), [7, 8])
        }
        _ => panic!("agent summaries read as something else"),
    }
    std::fs::write(
        dir.join("j-n0-w9.json"),
        summary(9).replace("\"ranks\":[]", "\"ranks\":7"),
    )
    .unwrap();
    let e = open_err(std::slice::from_ref(&dir), &auto());
    let msg = chain(&e);
    assert!(msg.contains("j-n0-w9.json: line 1, column"), "{msg}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_missing_path_and_an_empty_directory_say_so() {
    let dir = temp_dir("open-missing");
    let missing = dir.join("absent");
    let e = open_err(std::slice::from_ref(&missing), &auto());
    assert!(
        matches!(e, OpenError::Input(LimitError::NotFound { .. })),
        "{e}"
    );
    assert_eq!(
        e.to_string(),
        format!("{}: no such file or directory", missing.display())
    );
    assert!(matches!(open_err(&[], &auto()), OpenError::NoPaths));

    let empty = temp_dir("open-empty");
    assert_eq!(detected(std::slice::from_ref(&empty)), Format::Kineto);
    let e = open_err(std::slice::from_ref(&empty), &auto());
    let msg = chain(&e);
    assert!(
        msg.starts_with(&format!(
            "reading Kineto traces in {} (detected:",
            empty.display()
        )) && msg.contains("no Kineto trace files here"),
        "{msg}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
    std::fs::remove_dir_all(&empty).unwrap();
}

#[test]
fn the_format_given_decides_and_bad_combinations_are_refused() {
    let dir = temp_dir("open-given");
    let file = dir.join("trace.flare");
    flare_import::write_native_file(&hand_built(), &file).unwrap();
    let as_kineto = OpenOptions {
        format: Format::Kineto,
        ..OpenOptions::default()
    };
    let msg = chain(&open_err(std::slice::from_ref(&file), &as_kineto));
    assert!(
        msg.contains("reading Kineto trace") && msg.contains("(format given)"),
        "{msg}"
    );
    let as_flare = OpenOptions {
        format: Format::Flare,
        ..OpenOptions::default()
    };
    let e = open_err(&[file.clone(), file.clone()], &as_flare);
    assert_eq!(e.to_string(), "a Flare trace is one file; got 2 paths");
    let as_fr = OpenOptions {
        format: Format::FlightRecorder,
        ..OpenOptions::default()
    };
    let e = open_err(&[file.clone(), file], &as_fr);
    assert!(
        matches!(e, OpenError::FlightRecorderManyPaths { count: 2 }),
        "{e}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

// ---------------------------------------------------------------------------------------
// Limits.

#[test]
fn a_gzip_bomb_stops_at_the_inflate_limit() {
    let dir = temp_dir("open-gzip-bomb");
    let bomb = dir.join("rank0.json.gz");
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    let zeros = vec![0u8; 1 << 20];
    for _ in 0..64 {
        enc.write_all(&zeros).unwrap();
    }
    let gz = enc.finish().unwrap();
    assert!(
        gz.len() < 1 << 20,
        "64 MB of zeros gzip to {} bytes",
        gz.len()
    );
    std::fs::write(&bomb, &gz).unwrap();
    let limits = Limits {
        max_inflated_bytes: 4 << 20,
        ..Limits::default()
    };
    let t0 = std::time::Instant::now();
    let e = open_err(std::slice::from_ref(&bomb), &with_limits(limits));
    let msg = chain(&e);
    assert!(
        msg.contains(&bomb.display().to_string())
            && msg.contains("inflates to more than 4194304 bytes")
            && msg.contains("max_inflated_bytes")
            && msg.contains("--max-inflated-bytes"),
        "{msg}"
    );
    assert!(t0.elapsed().as_secs() < 10);
    // The public reader takes the same limits from its options.
    let kopts = flare_import::KinetoOptions {
        limits,
        ..Default::default()
    };
    let e = flare_import::read_kineto_files(&[bomb], &kopts).unwrap_err();
    assert!(
        matches!(
            e,
            flare_import::KinetoError::Limit(LimitError::Inflated { .. })
        ),
        "{e}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn files_over_the_input_limit_are_refused() {
    let dir = temp_dir("open-too-large");
    let big = dir.join("rank0.json");
    std::fs::write(&big, vec![b' '; 10_000]).unwrap();
    let limits = Limits {
        max_input_bytes: 1000,
        ..Limits::default()
    };
    let msg = chain(&open_err(std::slice::from_ref(&big), &with_limits(limits)));
    assert!(
        msg.contains("10000 bytes, more than the limit of 1000 bytes")
            && msg.contains("--max-input-bytes"),
        "{msg}"
    );
    // A native trace: over the input limit, and over the inflate limit.
    let native = dir.join("trace.flare");
    flare_import::write_native_file(&hand_built(), &native).unwrap();
    let size = std::fs::metadata(&native).unwrap().len();
    let small_input = Limits {
        max_input_bytes: size - 1,
        ..Limits::default()
    };
    let e = flare_import::native::read_native_file_with_limits(&native, &small_input).unwrap_err();
    assert!(
        matches!(
            e,
            flare_import::NativeError::Limit(LimitError::TooLarge { .. })
        ),
        "{e}"
    );
    let bytes = std::fs::read(&native).unwrap();
    let e = flare_import::native::read_native_with_limits(&bytes[..], "mem.flare", &small_input)
        .unwrap_err();
    assert!(
        e.to_string()
            .starts_with(&format!("mem.flare: more than {} bytes", size - 1)),
        "{e}"
    );
    let small_inflate = Limits {
        max_inflated_bytes: 64,
        ..Limits::default()
    };
    let msg = chain(&open_err(
        std::slice::from_ref(&native),
        &with_limits(small_inflate),
    ));
    assert!(
        msg.contains("the LZ4 stream inflates to more than 64 bytes"),
        "{msg}"
    );
    // Exactly at the limits is fine.
    let exact = Limits {
        max_input_bytes: size,
        ..Limits::default()
    };
    flare_import::native::read_native_file_with_limits(&native, &exact).unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
}

#[cfg(unix)]
#[test]
fn character_devices_are_refused_before_they_are_read() {
    let zero = PathBuf::from("/dev/zero");
    if !zero.exists() {
        eprintln!("skipping: no /dev/zero");
        return;
    }
    let e = open_err(std::slice::from_ref(&zero), &auto());
    assert_eq!(
        e.to_string(),
        "/dev/zero: is a character device, not a regular file or directory: refusing to read it"
    );
    for format in [
        Format::Flare,
        Format::Kineto,
        Format::FlightRecorder,
        Format::NcclInspector,
        Format::NcclProfiler,
    ] {
        let opts = OpenOptions {
            format,
            ..OpenOptions::default()
        };
        let e = open_err(std::slice::from_ref(&zero), &opts);
        assert!(
            matches!(e, OpenError::Input(LimitError::NotAFile { .. })),
            "{format:?}: {e}"
        );
    }
    // The public readers refuse it too.
    let e = flare_import::read_native_file(&zero).unwrap_err();
    assert!(e.to_string().contains("character device"), "{e}");
    let e = flare_import::read_kineto_files(std::slice::from_ref(&zero), &Default::default())
        .unwrap_err();
    assert!(e.to_string().contains("character device"), "{e}");
    let e = flare_import::flight_recorder::read_fr_file(&zero).unwrap_err();
    assert!(e.to_string().contains("character device"), "{e}");
    assert!(!flare_import::flight_recorder::looks_like_fr_dump(&zero));
    let e = flare_import::prometheus::read_machine_metrics(&zero).unwrap_err();
    assert!(e.to_string().contains("character device"), "{e}");
}

#[cfg(unix)]
#[test]
fn a_fifo_is_refused_without_blocking() {
    let dir = temp_dir("open-fifo");
    let fifo = dir.join("rank0.json");
    match std::process::Command::new("mkfifo").arg(&fifo).status() {
        Ok(s) if s.success() => {}
        _ => {
            eprintln!("skipping: mkfifo is not available");
            return;
        }
    }
    let t0 = std::time::Instant::now();
    let e = open_err(std::slice::from_ref(&fifo), &auto());
    assert_eq!(
        e.to_string(),
        format!(
            "{}: is a FIFO (named pipe), not a regular file or directory: refusing to read it",
            fifo.display()
        )
    );
    // In a directory, a FIFO is not a file to read: the directory reads as empty.
    let msg = chain(&open_err(std::slice::from_ref(&dir), &auto()));
    assert!(msg.contains("no Kineto trace files here"), "{msg}");
    let fr = OpenOptions {
        format: Format::FlightRecorder,
        ..OpenOptions::default()
    };
    let msg = chain(&open_err(std::slice::from_ref(&dir), &fr));
    assert!(msg.contains("no Flight Recorder dumps"), "{msg}");
    assert!(t0.elapsed().as_secs() < 10);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn directories_over_the_file_limit_are_refused() {
    let three = Limits {
        max_files: 3,
        ..Limits::default()
    };
    let dir = temp_dir("open-many-kineto");
    for r in 0..5 {
        std::fs::write(dir.join(format!("rank{r}.json")), "{}").unwrap();
    }
    let msg = chain(&open_err(std::slice::from_ref(&dir), &with_limits(three)));
    assert!(
        msg.contains("more than 3 files to read, the limit for one directory")
            && msg.contains("--max-files"),
        "{msg}"
    );
    std::fs::remove_dir_all(&dir).unwrap();

    let fr = temp_dir("open-many-fr");
    for r in 0..5 {
        std::fs::copy(
            fr_scenario().join(format!("_dump_{r}")),
            fr.join(format!("_dump_{r}")),
        )
        .unwrap();
    }
    let msg = chain(&open_err(std::slice::from_ref(&fr), &with_limits(three)));
    assert!(msg.contains("more than 3 files to read"), "{msg}");
    match open(std::slice::from_ref(&fr), &auto()).unwrap() {
        Opened::FlightRecorder(job) => assert_eq!(job.dumps.len(), 5),
        _ => panic!("dumps read as something else"),
    }
    std::fs::remove_dir_all(&fr).unwrap();

    let two = Limits {
        max_files: 2,
        ..Limits::default()
    };
    let inspector = Path::new(NCCL).join("inspector");
    let msg = chain(&open_err(&[inspector], &with_limits(two)));
    assert!(msg.contains("more than 2 files to read"), "{msg}");
}

// ---------------------------------------------------------------------------------------
// Duplicate ranks.

/// The 16 dumps of the scenario in a fresh directory, with `replace` applied.
fn fr_copy(tag: &str, replace: impl FnOnce(&Path)) -> PathBuf {
    let dir = temp_dir(tag);
    for r in 0..16 {
        std::fs::copy(
            fr_scenario().join(format!("_dump_{r}")),
            dir.join(format!("_dump_{r}")),
        )
        .unwrap();
    }
    replace(&dir);
    dir
}

#[test]
fn a_dump_copied_under_another_ranks_name_is_refused() {
    // Rank 9 never arrived; its dump replaced by a copy of rank 8's.
    let dir = fr_copy("fr-copied", |d| {
        std::fs::copy(d.join("_dump_8"), d.join("_dump_9")).unwrap();
    });
    let e = open_err(std::slice::from_ref(&dir), &auto());
    let msg = chain(&e);
    assert!(
        msg.contains(&format!(
            "{}: the file name says rank 9",
            dir.join("_dump_9").display()
        )) && msg.contains("rank 8 (the one rank all its process groups share)"),
        "{msg}"
    );
    let OpenError::FlightRecorder { source, .. } = e else {
        panic!("{msg}")
    };
    assert!(
        matches!(*source, FrError::RankMismatch { named: 9, .. }),
        "{source}"
    );
    std::fs::remove_dir_all(&dir).unwrap();

    // A second copy of a rank's dump under a name that keeps its number.
    let dir = fr_copy("fr-twice", |d| {
        std::fs::copy(d.join("_dump_8"), d.join("_dump_8.pkl")).unwrap();
    });
    let msg = chain(&open_err(std::slice::from_ref(&dir), &auto()));
    assert!(
        msg.contains("rank 8 has two dumps")
            && msg.contains(&dir.join("_dump_8").display().to_string())
            && msg.contains(&dir.join("_dump_8.pkl").display().to_string()),
        "{msg}"
    );
    std::fs::remove_dir_all(&dir).unwrap();

    // A dump whose `rank` field disagrees with its name.
    let dir = temp_dir("fr-json-rank");
    let j = r#"{"version": "2.10", "rank": 2, "pg_config": {"0": {"name": "0", "desc": "default_pg", "ranks": [0, 1, 2]}}, "entries": []}"#;
    std::fs::write(dir.join("rank_5.json"), j).unwrap();
    let msg = chain(&open_err(std::slice::from_ref(&dir), &auto()));
    assert!(
        msg.contains("the file name says rank 5, but the dump says rank 2 (its `rank` field)"),
        "{msg}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn two_kineto_files_of_one_rank_are_refused() {
    let dir = temp_dir("kineto-dup");
    let src = kineto_file("sampled_rank-0.json.gz");
    std::fs::copy(&src, dir.join("sampled_rank-0.json.gz")).unwrap();
    // The same trace again under rank 1's name: its distributedInfo says rank 0.
    std::fs::copy(&src, dir.join("sampled_rank-1.json.gz")).unwrap();
    let msg = chain(&open_err(std::slice::from_ref(&dir), &auto()));
    assert!(
        msg.contains("rank 0 appears in two files")
            && msg.contains(&dir.join("sampled_rank-0.json.gz").display().to_string())
            && msg.contains(&dir.join("sampled_rank-1.json.gz").display().to_string()),
        "{msg}"
    );
    std::fs::remove_dir_all(&dir).unwrap();

    // Written by Flare's own writer, one file copied under another name.
    let dir = temp_dir("kineto-dup-own");
    flare_import::write_kineto_dir(&hand_built(), &dir).unwrap();
    std::fs::copy(dir.join("rank-0.json.gz"), dir.join("zz-copy.json.gz")).unwrap();
    let msg = chain(&open_err(std::slice::from_ref(&dir), &auto()));
    assert!(msg.contains("rank 0 appears in two files"), "{msg}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A parquet file (the NDTimeline traces `flare whatif` reads) given to `open` fails with
/// words that say what it is and which command reads it, not only "malformed JSON".
#[test]
fn a_parquet_file_is_named_as_one() {
    let path = data_dir().join("stragglers/trace-SE.parquet");
    let why = detect(std::slice::from_ref(&path)).why;
    assert!(
        why.contains("parquet") && why.contains("flare whatif"),
        "{why}"
    );
    let e = open_err(&[path], &auto());
    assert!(
        chain(&e).contains("only `flare whatif` reads parquet"),
        "{}",
        chain(&e)
    );
}
