//! The C functions called from Rust in one process: argument checking, error messages,
//! configuration precedence and the tracer they drive. One test: the tracer is global.

use flare::*;
use std::ffi::{c_char, CString};
use std::ptr;

fn last_error() -> String {
    let mut buf = [0 as c_char; 256];
    // SAFETY: buf holds 256 writable bytes.
    let n = unsafe { flare_last_error(buf.as_mut_ptr(), buf.len()) };
    let bytes: Vec<u8> = buf[..n.min(255)].iter().map(|&c| c as u8).collect();
    String::from_utf8(bytes).unwrap()
}

fn default_config() -> FlareConfig {
    let mut c = std::mem::MaybeUninit::<FlareConfig>::uninit();
    // SAFETY: a writable FlareConfig.
    assert_eq!(
        unsafe { flare_config_default(c.as_mut_ptr()) },
        FlareStatus::FLARE_OK
    );
    // SAFETY: flare_config_default initialized it.
    unsafe { c.assume_init() }
}

#[test]
fn c_functions_check_their_arguments_and_drive_the_tracer() {
    use FlareStatus::*;
    let dir = tempfile::tempdir().unwrap();
    let shm = CString::new(dir.path().join("shm").to_str().unwrap()).unwrap();
    // A stale variable the explicit configuration must shadow rather than parse.
    std::env::set_var("WORLD_SIZE", "not-a-number");
    std::env::remove_var("FLARE_DUMP");

    // Before init.
    assert!(!flare_is_initialized());
    // SAFETY: NULL is allowed and reported.
    assert_eq!(unsafe { flare_intern(ptr::null()) }, FLARE_NAME_NONE);
    assert_eq!(last_error(), "name is NULL");
    assert_eq!(flare_step(1), FLARE_ERR_NOT_INITIALIZED);
    assert!(last_error().contains("flare_init"), "{}", last_error());
    let mut stats = FlareStats {
        written: 7,
        ..FlareStats::default()
    };
    // SAFETY: a writable stats struct.
    assert_eq!(
        unsafe { flare_stats(&mut stats) },
        FLARE_ERR_NOT_INITIALIZED
    );
    assert_eq!(stats, FlareStats::default());
    // SAFETY: NULL buffer with length 0 only sizes the message.
    assert_eq!(unsafe { flare_ring_path(ptr::null_mut(), 0) }, 0);

    // The environment alone is invalid here.
    assert_eq!(flare_init_from_env(), FLARE_ERR_CONFIG);
    assert!(last_error().contains("WORLD_SIZE"), "{}", last_error());
    // SAFETY: NULL means "from the environment".
    assert_eq!(unsafe { flare_init(ptr::null()) }, FLARE_ERR_CONFIG);

    // Explicit values: bad ones are refused with a readable message.
    let mut c = default_config();
    c.shm_dir = shm.as_ptr();
    c.rank = 4;
    c.world_size = 4;
    // SAFETY: valid config with valid strings.
    assert_eq!(unsafe { flare_init(&c) }, FLARE_ERR_CONFIG);
    assert_eq!(
        last_error(),
        "tracer configuration: rank 4 is outside a world of 4 ranks"
    );
    c.rank = 1;
    c.ring_events = 1000;
    assert_eq!(unsafe { flare_init(&c) }, FLARE_ERR_CONFIG);
    assert!(last_error().contains("power of two"), "{}", last_error());
    c.ring_events = 0;
    c.local_rank = -2;
    assert_eq!(unsafe { flare_init(&c) }, FLARE_ERR_INVALID_ARGUMENT);
    assert!(last_error().contains("local_rank = -2"), "{}", last_error());
    c.local_rank = -1;
    let bad_job = [0xffu8 as c_char, 0];
    c.job_id = bad_job.as_ptr();
    assert_eq!(unsafe { flare_init(&c) }, FLARE_ERR_INVALID_ARGUMENT);
    assert!(
        last_error().contains("job_id is not valid UTF-8"),
        "{}",
        last_error()
    );
    assert!(!flare_is_initialized());

    // A good one; the stale WORLD_SIZE is shadowed, the empty dump path means no dump.
    let job = CString::new("in-process").unwrap();
    let no_dump = CString::new("").unwrap();
    c.job_id = job.as_ptr();
    c.dump_path = no_dump.as_ptr();
    c.ring_events = 256;
    assert_eq!(unsafe { flare_init(&c) }, FLARE_OK, "{}", last_error());
    assert!(flare_is_initialized());
    // Same identity: fine; another: refused.
    assert_eq!(unsafe { flare_init(&c) }, FLARE_OK);
    c.rank = 2;
    assert_eq!(unsafe { flare_init(&c) }, FLARE_ERR_ALREADY_INITIALIZED);
    assert!(
        last_error().contains("another identity"),
        "{}",
        last_error()
    );

    // The ring path, also through a too-small buffer (truncated, NUL-terminated).
    let full = unsafe { flare_ring_path(ptr::null_mut(), 0) };
    assert!(full > 0);
    let mut small = [1 as c_char; 8];
    assert_eq!(
        unsafe { flare_ring_path(small.as_mut_ptr(), small.len()) },
        full
    );
    assert_eq!(small[7], 0);
    let path = flare_tracer::ring_path().unwrap();
    assert!(path.starts_with(dir.path().join("shm")));
    assert_eq!(path.as_os_str().len(), full);

    let name = CString::new("step_time").unwrap();
    let id = unsafe { flare_intern(name.as_ptr()) };
    assert_ne!(id, FLARE_NAME_NONE);
    assert_eq!(
        unsafe { flare_span_begin(id, 16, ptr::null()) },
        FLARE_ERR_INVALID_ARGUMENT
    );
    assert!(last_error().contains("FLARE_KIND_"), "{}", last_error());
    assert_eq!(
        unsafe { flare_span_begin(id, FLARE_KIND_OPTIMIZER, ptr::null()) },
        FLARE_OK
    );
    assert_eq!(flare_span_end(id, FLARE_KIND_OPTIMIZER), FLARE_OK);
    assert_eq!(flare_counter(id, 5), FLARE_OK);
    let ev = FlareEvent {
        tag: FLARE_TAG_ASYNC_BEGIN,
        kind: 77,
        ..FlareEvent::default()
    };
    assert_eq!(unsafe { flare_record(&ev) }, FLARE_ERR_INVALID_ARGUMENT);
    let ev = FlareEvent {
        kind: FLARE_KIND_HOST_OTHER,
        ..ev
    };
    assert_eq!(unsafe { flare_record(&ev) }, FLARE_OK);
    assert!(flare_now_ns() > 0);

    assert_eq!(unsafe { flare_stats(&mut stats) }, FLARE_OK);
    assert_eq!(stats.written, 4);
    assert_eq!(stats.rings_in_use, 1);

    // The reader sees the same file while the process runs.
    let mut file = flare_tracer::RingFile::open(&path).unwrap();
    assert_eq!(file.info().job_id, "in-process");
    assert_eq!((file.info().rank, file.info().world_size), (1, 4));
    let mut events = Vec::new();
    assert_eq!(file.drain(&mut events), 4);
    assert_eq!(events[0].event.name, id);
    assert_eq!(events[0].event.kind, FLARE_KIND_OPTIMIZER);

    assert_eq!(flare_shutdown(), FLARE_OK);
    assert!(!path.exists(), "no agent: the ring file is removed");
    assert!(!dir.path().join("dump.ring").exists());
    assert_eq!(flare_abi_version(), FLARE_ABI_VERSION);
}
