//! The Rust ABI types against NCCL's own headers: tests/c/abi_layout.c, compiled against
//! them, prints every member's offset and every type's size; they must equal what
//! src/abi.rs gives. Needs NCCL's sources: set NCCL_PROFILER_INCLUDE to
//! `<nccl>/plugins/profiler/example/nccl` (or `ext-profiler/example/nccl` before 2.30)
//! and run with `--ignored`. v7's members are compared when the headers have v7.

#[path = "support/abi_table.rs"]
mod abi_table;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

#[test]
#[ignore = "needs NCCL's headers: NCCL_PROFILER_INCLUDE=<nccl>/plugins/profiler/example/nccl"]
fn abi_types_match_nccls_headers() {
    let include = std::env::var("NCCL_PROFILER_INCLUDE")
        .expect("NCCL_PROFILER_INCLUDE: the directory holding NCCL's profiler.h");
    let dir = tempfile::tempdir().unwrap();
    let exe = dir.path().join("abi_layout");
    let out = Command::new("cc")
        .args(["-std=c11", "-Wall", "-Werror", "-I", &include, "-o"])
        .arg(&exe)
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c/abi_layout.c"))
        .output()
        .expect("running cc");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = Command::new(&exe).output().expect("running abi_layout");
    assert!(out.status.success());
    let c: BTreeMap<String, usize> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| {
            let (k, v) = l.rsplit_once(' ').unwrap();
            (k.to_string(), v.parse().unwrap())
        })
        .collect();
    // Headers from NCCL 2.30 and earlier have no v7: its keys are compared where they do.
    let has_v7 = c.keys().any(|k| k.contains("_v7_t"));
    if !has_v7 {
        eprintln!("these headers have no profiler_v7.h: v1 to v6 compared");
    }
    let v7 = if has_v7 {
        abi_table::rust_layout_v7()
    } else {
        Vec::new()
    };
    let rust: BTreeMap<String, usize> = abi_table::rust_layout()
        .into_iter()
        .chain(v7)
        .map(|(k, v)| (k.to_string(), v))
        .collect();
    assert_eq!(c.len(), rust.len(), "the same members on both sides");
    let diff: Vec<_> = c
        .iter()
        .filter(|(k, v)| rust.get(*k) != Some(v))
        .map(|(k, v)| format!("{k}: C {v}, Rust {:?}", rust.get(k)))
        .collect();
    assert!(diff.is_empty(), "layout differences:\n{}", diff.join("\n"));
}
