//! The C ABI from C: tests/c/example.c is compiled with `cc` against include/flare.h and
//! the built library (shared and static), run as a traced rank, and its dump is read
//! back with `flare_tracer`'s reader. Also checks that the committed header is fresh.

use flare_model::OpKind;
use flare_tracer::{Assembler, Item, RingFile};
use std::path::{Path, PathBuf};
use std::process::Command;

const CRATE_DIR: &str = env!("CARGO_MANIFEST_DIR");

/// The profile directory (`target/<profile>`): this test binary lives in its `deps/`.
fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test binary path");
    let deps = exe.parent().expect("deps dir");
    deps.parent().expect("profile dir").to_path_buf()
}

/// A library cargo built for this package (`libflare.so` or `libflare.a`).
fn built_lib(file: &str) -> PathBuf {
    let profile = profile_dir();
    [profile.join(file), profile.join("deps").join(file)]
        .into_iter()
        .find(|p| p.exists())
        .unwrap_or_else(|| panic!("{file} not found under {}", profile.display()))
}

enum Link {
    Dynamic,
    Static,
}

fn compile(out_dir: &Path, link: Link) -> PathBuf {
    let exe = out_dir.join("example");
    let mut cmd = Command::new("cc");
    cmd.args([
        "-std=c11",
        "-Wall",
        "-Wextra",
        "-Werror",
        "-pedantic",
        "-O1",
    ])
    .arg("-I")
    .arg(Path::new(CRATE_DIR).join("include"))
    .arg(Path::new(CRATE_DIR).join("tests/c/example.c"))
    .arg("-o")
    .arg(&exe);
    match link {
        Link::Dynamic => {
            let so = built_lib("libflare.so");
            let dir = so.parent().expect("lib dir");
            cmd.arg("-L")
                .arg(dir)
                .arg("-lflare")
                .arg(format!("-Wl,-rpath,{}", dir.display()));
        }
        Link::Static => {
            // What a Rust staticlib needs from the system on Linux (rustc
            // --print native-static-libs).
            cmd.arg(built_lib("libflare.a")).args([
                "-lgcc_s",
                "-lutil",
                "-lrt",
                "-lpthread",
                "-lm",
                "-ldl",
                "-lc",
            ]);
        }
    }
    let out = cmd.output().expect("running cc");
    assert!(
        out.status.success(),
        "cc failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    exe
}

/// Runs the example as rank 2 of 4 and returns its dump.
fn run(exe: &Path, dir: &Path) -> PathBuf {
    let shm = dir.join("shm");
    let dump = dir.join("dump.ring");
    let out = Command::new(exe)
        .env_clear()
        .env("FLARE_SHM_DIR", &shm)
        .env("FLARE_DUMP", &dump)
        .env("RANK", "2")
        .env("LOCAL_RANK", "2")
        .env("WORLD_SIZE", "4")
        .output()
        .expect("running the example");
    assert!(
        out.status.success(),
        "example failed ({}):\nstdout: {}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "ok 22 events");
    // No agent was attached: shutdown removed the shared-memory file.
    let left: Vec<_> = std::fs::read_dir(&shm).unwrap().collect();
    assert!(left.is_empty(), "ring file left behind: {left:?}");
    dump
}

fn check_dump(dump: &Path) {
    let mut file = RingFile::open(dump).expect("opening the dump");
    let info = file.info().clone();
    assert_eq!(info.job_id, "capi-example");
    assert_eq!((info.rank, info.local_rank, info.world_size), (2, 2, 4));
    assert_eq!(info.ring_capacity, 1024);
    let mut events = Vec::new();
    assert_eq!(file.drain(&mut events), 22);
    assert_eq!(file.drops().total(), 0);

    let mut asm = Assembler::new();
    let mut items = Vec::new();
    for e in &events {
        asm.feed(e.ring, &e.event, &mut items);
    }
    assert!(asm.open_spans().is_empty());
    assert_eq!((asm.unmatched_ends, asm.unclosed_begins), (0, 0));

    let steps: Vec<u64> = items
        .iter()
        .filter_map(|i| match i {
            Item::Step { step, .. } => Some(*step),
            _ => None,
        })
        .collect();
    assert_eq!(steps, vec![0, 1, 2]);
    let counters: Vec<(String, u64)> = items
        .iter()
        .filter_map(|i| match i {
            Item::Counter { name, value, .. } => Some((file.name_or(*name), *value)),
            _ => None,
        })
        .collect();
    assert_eq!(
        counters,
        vec![
            ("loss".to_string(), 100),
            ("loss".to_string(), 99),
            ("loss".to_string(), 98)
        ]
    );
    let instants: Vec<String> = items
        .iter()
        .filter_map(|i| match i {
            Item::Instant { name, .. } => Some(file.name_or(*name)),
            _ => None,
        })
        .collect();
    assert_eq!(instants, vec!["checkpoint_saved"]);

    let spans: Vec<_> = items
        .iter()
        .filter_map(|i| match i {
            Item::Span(s) => Some(*s),
            _ => None,
        })
        .collect();
    let forward: Vec<_> = spans
        .iter()
        .filter(|s| file.name(s.name) == Some("forward"))
        .collect();
    let reduce: Vec<_> = spans
        .iter()
        .filter(|s| file.name(s.name) == Some("all_reduce"))
        .collect();
    assert_eq!((forward.len(), reduce.len()), (3, 3));
    for (i, (f, r)) in forward.iter().zip(&reduce).enumerate() {
        assert_eq!((f.kind, f.depth), (OpKind::Compute, 0));
        assert_eq!((r.kind, r.depth), (OpKind::AllReduce, 1));
        assert!(f.start_ns <= r.start_ns && r.end_ns <= f.end_ns, "nesting");
        assert_eq!(r.args.amount, 1 << 20);
        assert_eq!(file.name(r.args.group), Some("dp0"));
        assert_eq!((r.args.seq, r.args.group_size), (i as u32, 4));
    }
    let prefetch: Vec<_> = spans
        .iter()
        .filter(|s| file.name(s.name) == Some("prefetch"))
        .collect();
    assert_eq!(prefetch.len(), 1);
    let p = prefetch[0];
    assert_eq!((p.kind, p.async_id, p.progress), (OpKind::DataLoader, 7, 1));
    assert_eq!((p.duration_ns(), p.args.amount), (20, 4096));
}

#[test]
fn c_program_linked_against_the_shared_library_records_a_readable_dump() {
    let dir = tempfile::tempdir().unwrap();
    let exe = compile(dir.path(), Link::Dynamic);
    check_dump(&run(&exe, dir.path()));
}

#[test]
fn c_program_linked_against_the_static_library_records_a_readable_dump() {
    let dir = tempfile::tempdir().unwrap();
    let exe = compile(dir.path(), Link::Static);
    check_dump(&run(&exe, dir.path()));
}

#[test]
fn header_compiles_as_cpp() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("use.cpp");
    std::fs::write(
        &src,
        "#include \"flare.h\"\nint main() { flare_config_t c; return flare_config_default(&c) == FLARE_OK ? 0 : 1; }\n",
    )
    .unwrap();
    let out = Command::new("c++")
        .args(["-std=c++17", "-Wall", "-Wextra", "-Werror", "-fsyntax-only"])
        .arg("-I")
        .arg(Path::new(CRATE_DIR).join("include"))
        .arg(&src)
        .output()
        .expect("running c++");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn committed_header_matches_a_fresh_generation() {
    let fresh = include_str!(concat!(env!("OUT_DIR"), "/flare.h"));
    let committed = std::fs::read_to_string(Path::new(CRATE_DIR).join("include/flare.h"))
        .expect("reading include/flare.h");
    assert!(
        committed == fresh,
        "include/flare.h is stale: regenerate it with \
         FLARE_UPDATE_HEADER=1 cargo build -p flare-capi, and commit it"
    );
}
