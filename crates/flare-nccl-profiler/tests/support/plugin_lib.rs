//! Finding and loading the built plugin (and libflare) from a test binary, as NCCL does.
#![allow(dead_code)]

use std::ffi::{c_int, c_void, CStr, CString};
use std::path::{Path, PathBuf};

pub fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test binary path");
    exe.parent()
        .and_then(Path::parent)
        .expect("target/<profile>")
        .to_path_buf()
}

/// The newest build of `file`: `cargo test` rebuilds the library in `deps/` without
/// always refreshing the copy `cargo build` left in the profile directory.
pub fn built(file: &str) -> PathBuf {
    let p = profile_dir();
    [p.join(file), p.join("deps").join(file)]
        .into_iter()
        .filter_map(|f| Some((std::fs::metadata(&f).ok()?.modified().ok()?, f)))
        .max_by_key(|(t, _)| *t)
        .map(|(_, f)| f)
        .unwrap_or_else(|| panic!("{file} not built under {}", p.display()))
}

/// `libnccl-profiler-flare.so`, the name NCCL looks for, as a symlink next to cargo's
/// `libnccl_profiler_flare.so` (created atomically: tests run in parallel).
pub fn plugin_path() -> PathBuf {
    let so = built("libnccl_profiler_flare.so");
    let link = so.with_file_name("libnccl-profiler-flare.so");
    if std::fs::read_link(&link).ok().as_deref() != Some(so.as_path()) {
        let tmp = so.with_file_name(format!(".libnccl-profiler-flare.so.{}", std::process::id()));
        let _ = std::fs::remove_file(&tmp);
        std::os::unix::fs::symlink(&so, &tmp).expect("symlink");
        std::fs::rename(&tmp, &link).expect("rename symlink");
    }
    link
}

pub fn dlopen(path: &Path, flags: c_int) -> *mut c_void {
    let c = CString::new(path.to_str().unwrap()).unwrap();
    // SAFETY: a valid path string.
    let h = unsafe { libc::dlopen(c.as_ptr(), flags) };
    if h.is_null() {
        // SAFETY: dlerror after a failed dlopen.
        let e = unsafe { CStr::from_ptr(libc::dlerror()) };
        panic!("dlopen {}: {}", path.display(), e.to_string_lossy());
    }
    h
}

pub fn dlsym(h: *mut c_void, name: &str) -> *mut c_void {
    let c = CString::new(name).unwrap();
    // SAFETY: a handle from dlopen and a valid name.
    let p = unsafe { libc::dlsym(h, c.as_ptr()) };
    assert!(!p.is_null(), "symbol {name} not found");
    p
}
