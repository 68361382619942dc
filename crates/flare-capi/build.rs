//! Generates the C header from src/lib.rs with cbindgen.
//!
//! The fresh header always goes to `$OUT_DIR/flare.h` (the header-freshness test compares
//! it with the committed one). `include/flare.h` is written only when it is missing or
//! `FLARE_UPDATE_HEADER=1`: a build must not silently rewrite a committed file, so a stale
//! header fails the test instead of passing unnoticed.

use std::path::PathBuf;

fn main() {
    let dir = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("set by cargo"));
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("set by cargo"));
    println!("cargo:rerun-if-changed=src/lib.rs");
    println!("cargo:rerun-if-changed=cbindgen.toml");
    println!("cargo:rerun-if-changed=include/flare.h");
    println!("cargo:rerun-if-env-changed=FLARE_UPDATE_HEADER");

    // A soname lets a plugin find an already loaded copy with dlopen("libflare.so", RTLD_NOLOAD).
    if std::env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("linux") {
        println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libflare.so");
    }

    let config = cbindgen::Config::from_file(dir.join("cbindgen.toml"))
        .unwrap_or_else(|e| panic!("cbindgen.toml: {e}"));
    let bindings = cbindgen::Builder::new()
        .with_config(config)
        .with_src(dir.join("src/lib.rs"))
        .generate()
        .unwrap_or_else(|e| panic!("generating flare.h: {e}"));
    let mut fresh = Vec::new();
    bindings.write(&mut fresh);
    std::fs::write(out.join("flare.h"), &fresh).expect("writing $OUT_DIR/flare.h");

    let committed = dir.join("include/flare.h");
    let current = std::fs::read(&committed).ok();
    let update = std::env::var("FLARE_UPDATE_HEADER").as_deref() == Ok("1");
    if current.is_none() || update {
        std::fs::create_dir_all(dir.join("include")).expect("creating include/");
        std::fs::write(&committed, &fresh).expect("writing include/flare.h");
    } else if current.as_deref() != Some(fresh.as_slice()) {
        println!(
            "cargo:warning=include/flare.h is stale: rebuild with FLARE_UPDATE_HEADER=1 and commit it"
        );
    }
}
