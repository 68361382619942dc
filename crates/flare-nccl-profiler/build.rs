//! Link options of the plugin library.

fn main() {
    // NCCL dlcloses the plugin when its last communicator is destroyed and may load it
    // again later; the process-wide tracer inside must survive that, so the library is
    // never unloaded.
    if std::env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("linux") {
        println!("cargo:rustc-cdylib-link-arg=-Wl,-z,nodelete");
    }
}
