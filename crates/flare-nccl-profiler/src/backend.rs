//! Which tracer the plugin records into.
//!
//! A process must have one tracer: two copies would each create the same ring file. The
//! plugin is a shared library with its own copy of `flare_tracer`, so when the
//! application already has Flare's C ABI loaded (`libflare.so`, or a library exporting the
//! same `flare_*` functions) the plugin records through that library instead:
//!
//! 1. `FLARE_LIBRARY=<path>`: that library (loaded if it is not yet; a later `dlopen` of
//!    the same path by the application gets the same instance);
//! 2. `libflare.so` already loaded in the process (found by soname, even when it was
//!    loaded `RTLD_LOCAL`, as Python's ctypes does);
//! 3. `flare_*` symbols in the global scope (an application linked with `-lflare`);
//! 4. otherwise the plugin's own copy of the tracer, configured from the environment.
//!
//! Whichever it is, the plugin initializes it from the environment if nobody did, and then
//! also shuts it down at process exit (writing `FLARE_DUMP`).

use crate::abi::{NcclResult, NCCL_INVALID_USAGE, NCCL_SYSTEM_ERROR};
use flare_tracer::{Config, Event, NameId, TracerError};
use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::sync::{Mutex, OnceLock};

/// The C ABI version of `libflare` this plugin speaks (`FLARE_ABI_VERSION` in flare.h).
pub const FLARE_C_ABI_VERSION: u32 = 1;

/// Why the plugin could not attach to a tracer; `init` returns `code`.
#[derive(Debug)]
pub struct InitError {
    pub code: NcclResult,
    pub msg: String,
}

impl InitError {
    fn usage(msg: String) -> Self {
        InitError {
            code: NCCL_INVALID_USAGE,
            msg,
        }
    }
}

impl From<TracerError> for InitError {
    fn from(e: TracerError) -> Self {
        let code = match e {
            TracerError::Io { .. } | TracerError::Format { .. } => NCCL_SYSTEM_ERROR,
            TracerError::Config(_) | TracerError::AlreadyInitialized(_) => NCCL_INVALID_USAGE,
        };
        InitError {
            code,
            msg: format!("flare tracer: {e}"),
        }
    }
}

type AbiVersionFn = unsafe extern "C" fn() -> u32;
type IsInitializedFn = unsafe extern "C" fn() -> bool;
type InitFromEnvFn = unsafe extern "C" fn() -> c_int;
type InternFn = unsafe extern "C" fn(*const c_char) -> u32;
type RecordFn = unsafe extern "C" fn(*const Event) -> c_int;
type ShutdownFn = unsafe extern "C" fn() -> c_int;
type LastErrorFn = unsafe extern "C" fn(*mut c_char, usize) -> usize;

/// The functions of a `libflare` found in the process.
pub struct SharedLib {
    intern: InternFn,
    record: RecordFn,
    shutdown: ShutdownFn,
    /// Where it came from, for the log.
    pub origin: String,
}

pub enum Backend {
    /// The plugin's own copy of the tracer.
    Embedded,
    /// The application's `libflare`.
    Shared(SharedLib),
}

pub struct Attached {
    pub backend: Backend,
    /// The plugin initialized the tracer, so it shuts it down at exit.
    pub owner: bool,
}

impl Backend {
    #[inline]
    pub fn record(&self, ev: &Event) {
        match self {
            Backend::Embedded => flare_tracer::record(ev),
            // SAFETY: flare_record takes a flare_event_t*, which has Event's layout
            // (asserted in flare-capi); the pointer is valid for the call.
            Backend::Shared(lib) => unsafe {
                (lib.record)(ev);
            },
        }
    }

    /// Interns a name; takes the tracer's name-table lock, so only at init and on the rare
    /// names the plugin does not know in advance.
    pub fn intern(&self, name: &str) -> NameId {
        match self {
            Backend::Embedded => flare_tracer::intern(name),
            Backend::Shared(lib) => match CString::new(name) {
                // SAFETY: a valid C string for the duration of the call.
                Ok(c) => NameId(unsafe { (lib.intern)(c.as_ptr()) }),
                Err(_) => NameId::NONE,
            },
        }
    }

    fn shutdown(&self) {
        match self {
            Backend::Embedded => {
                let _ = flare_tracer::shutdown();
            }
            // SAFETY: flare_shutdown takes no arguments and never unwinds.
            Backend::Shared(lib) => unsafe {
                (lib.shutdown)();
            },
        }
    }

    pub fn describe(&self) -> String {
        match self {
            Backend::Embedded => match flare_tracer::ring_path() {
                Some(p) => format!("plugin's tracer, ring file {}", p.display()),
                None => "plugin's tracer".into(),
            },
            Backend::Shared(lib) => format!("application's tracer in {}", lib.origin),
        }
    }
}

static ATTACHED: OnceLock<Attached> = OnceLock::new();
static ATTACH_LOCK: Mutex<()> = Mutex::new(());

/// The tracer of this process, attached on the first successful call. A failure is not
/// remembered: a later communicator retries (the environment may have been fixed).
pub fn attach() -> Result<&'static Attached, InitError> {
    if let Some(a) = ATTACHED.get() {
        return Ok(a);
    }
    let _serial = ATTACH_LOCK.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(a) = ATTACHED.get() {
        return Ok(a);
    }
    let attached = select()?;
    let owner = attached.owner;
    let a = ATTACHED.get_or_init(|| attached);
    if owner {
        // SAFETY: registering a plain extern "C" function; the library is linked
        // -z nodelete, so the handler's code stays mapped until exit.
        unsafe { libc::atexit(shutdown_at_exit) };
    }
    Ok(a)
}

/// The attached tracer, if any (the event paths run only after a successful `attach`).
#[inline]
pub fn attached() -> Option<&'static Attached> {
    ATTACHED.get()
}

extern "C" fn shutdown_at_exit() {
    // Never unwind out of an exit handler.
    let _ = std::panic::catch_unwind(|| {
        if let Some(a) = ATTACHED.get() {
            a.backend.shutdown();
        }
    });
}

fn select() -> Result<Attached, InitError> {
    if let Some(lib) = find_shared()? {
        return Ok(lib);
    }
    if flare_tracer::is_initialized() {
        return Ok(Attached {
            backend: Backend::Embedded,
            owner: false,
        });
    }
    flare_tracer::init(Config::from_env()?)?;
    Ok(Attached {
        backend: Backend::Embedded,
        owner: true,
    })
}

fn dlerror_string() -> String {
    // SAFETY: dlerror returns NULL or a C string valid until the next dl* call here.
    let e = unsafe { libc::dlerror() };
    if e.is_null() {
        "unknown dlopen error".into()
    } else {
        // SAFETY: non-NULL C string from dlerror.
        unsafe { CStr::from_ptr(e) }.to_string_lossy().into_owned()
    }
}

fn find_shared() -> Result<Option<Attached>, InitError> {
    if let Some(path) = std::env::var_os("FLARE_LIBRARY").filter(|p| !p.is_empty()) {
        use std::os::unix::ffi::OsStrExt;
        let shown = path.to_string_lossy().into_owned();
        let c = CString::new(path.as_bytes())
            .map_err(|_| InitError::usage(format!("FLARE_LIBRARY={shown:?} contains NUL")))?;
        // SAFETY: a valid C string; loading a library the user named.
        let h = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
        if h.is_null() {
            return Err(InitError::usage(format!(
                "FLARE_LIBRARY={shown:?}: {}",
                dlerror_string()
            )));
        }
        return load(h, format!("FLARE_LIBRARY={shown}")).map(Some);
    }
    // SAFETY: RTLD_NOLOAD only returns a handle to a library already in the process.
    let h = unsafe { libc::dlopen(c"libflare.so".as_ptr(), libc::RTLD_NOW | libc::RTLD_NOLOAD) };
    if !h.is_null() {
        return load(h, "libflare.so".into()).map(Some);
    }
    // SAFETY: looking a symbol up in the global scope.
    let global = unsafe { libc::dlsym(libc::RTLD_DEFAULT, c"flare_record".as_ptr()) };
    if !global.is_null() {
        return load(
            libc::RTLD_DEFAULT,
            "the application's global symbols".into(),
        )
        .map(Some);
    }
    Ok(None)
}

/// Resolves the C ABI in `h` and attaches to its tracer, initializing it if needed.
fn load(h: *mut c_void, origin: String) -> Result<Attached, InitError> {
    let sym = |name: &CStr| -> Result<*mut c_void, InitError> {
        // SAFETY: h is a handle from dlopen or RTLD_DEFAULT; name is a C string.
        let p = unsafe { libc::dlsym(h, name.as_ptr()) };
        if p.is_null() {
            Err(InitError::usage(format!(
                "{origin}: no symbol {} (not Flare's C ABI?)",
                name.to_string_lossy()
            )))
        } else {
            Ok(p)
        }
    };
    // SAFETY (all transmutes below): each symbol is the C function flare.h declares with
    // exactly this signature, checked by the ABI version first.
    let version: AbiVersionFn = unsafe { std::mem::transmute(sym(c"flare_abi_version")?) };
    let v = unsafe { version() };
    if v != FLARE_C_ABI_VERSION {
        return Err(InitError::usage(format!(
            "{origin}: Flare C ABI version {v}, this plugin needs {FLARE_C_ABI_VERSION}"
        )));
    }
    let is_initialized: IsInitializedFn =
        unsafe { std::mem::transmute(sym(c"flare_is_initialized")?) };
    let init_from_env: InitFromEnvFn = unsafe { std::mem::transmute(sym(c"flare_init_from_env")?) };
    let last_error: LastErrorFn = unsafe { std::mem::transmute(sym(c"flare_last_error")?) };
    let lib = SharedLib {
        intern: unsafe { std::mem::transmute::<*mut c_void, InternFn>(sym(c"flare_intern")?) },
        record: unsafe { std::mem::transmute::<*mut c_void, RecordFn>(sym(c"flare_record")?) },
        shutdown: unsafe {
            std::mem::transmute::<*mut c_void, ShutdownFn>(sym(c"flare_shutdown")?)
        },
        origin,
    };
    // SAFETY: C ABI calls without arguments (or with a valid buffer).
    let owner = if unsafe { is_initialized() } {
        false
    } else {
        let status = unsafe { init_from_env() };
        if status != 0 {
            let mut buf = [0 as c_char; 512];
            let n = unsafe { last_error(buf.as_mut_ptr(), buf.len()) };
            let bytes: Vec<u8> = buf[..n.min(buf.len() - 1)]
                .iter()
                .map(|&c| c as u8)
                .collect();
            return Err(InitError::usage(format!(
                "{}: flare_init_from_env failed ({status}): {}",
                lib.origin,
                String::from_utf8_lossy(&bytes)
            )));
        }
        true
    };
    Ok(Attached {
        backend: Backend::Shared(lib),
        owner,
    })
}
