//! Clocks: `CLOCK_MONOTONIC` for events (cheap through the vDSO, never jumps) and one
//! anchor pairing it with `CLOCK_REALTIME`, so readers turn event times into wall-clock
//! times comparable across nodes (to the accuracy of the nodes' NTP/PTP sync).

#[inline]
pub fn now_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes the timespec we pass; CLOCK_MONOTONIC always exists.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

pub fn unix_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}

/// A (monotonic, unix) pair read as close together as possible: the realtime read
/// bracketed by the two monotonic reads with the smallest gap out of a few tries.
pub fn anchor() -> (u64, u64) {
    let mut best = (u64::MAX, 0, 0);
    for _ in 0..16 {
        let m0 = now_ns();
        let u = unix_ns();
        let m1 = now_ns();
        if m1 - m0 < best.0 {
            best = (m1 - m0, m0 + (m1 - m0) / 2, u);
        }
    }
    (best.1, best.2)
}

/// The calling thread's OS id (a system call: only on ring claim).
pub fn thread_id() -> u32 {
    // SAFETY: gettid has no preconditions.
    unsafe { libc::syscall(libc::SYS_gettid) as u32 }
}
