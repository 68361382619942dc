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

/// When this process started, on the `CLOCK_MONOTONIC` scale (to the resolution of
/// `/proc`'s clock ticks, 10 ms on most systems): its age from `/proc/self/stat` against
/// `CLOCK_BOOTTIME`, the clock that age is counted on. `None` where `/proc` does not say.
pub fn process_start_ns() -> Option<u64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    process_start_from_stat(&stat, boottime_ns(), now_ns())
}

fn boottime_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes the timespec we pass; CLOCK_BOOTTIME exists on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_BOOTTIME, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// The start time in a `/proc/<pid>/stat` line (field 22, clock ticks since boot) as a
/// `CLOCK_MONOTONIC` time, given both clocks now.
fn process_start_from_stat(stat: &str, boot_now_ns: u64, mono_now_ns: u64) -> Option<u64> {
    // The command name (field 2) may hold spaces and parentheses: count after the last ')'.
    let rest = stat.get(stat.rfind(')')? + 1..)?;
    let ticks: u64 = rest.split_whitespace().nth(19)?.parse().ok()?;
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if hz <= 0 {
        return None;
    }
    let started_ns = (ticks as u128 * 1_000_000_000 / hz as u128) as u64;
    let age = boot_now_ns.checked_sub(started_ns)?;
    mono_now_ns.checked_sub(age)
}

/// The calling thread's OS id (a system call: only on ring claim).
pub fn thread_id() -> u32 {
    // SAFETY: gettid has no preconditions.
    unsafe { libc::syscall(libc::SYS_gettid) as u32 }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_started_before_now_and_not_long_ago() {
        let start = process_start_ns().expect("/proc/self/stat");
        let now = now_ns();
        assert!(start <= now);
        // A test binary is minutes old at most.
        assert!(
            now - start < 3_600_000_000_000,
            "started {} s ago",
            (now - start) / 1_000_000_000
        );
    }

    #[test]
    fn the_start_field_is_read_after_the_command_name() {
        // A command name with spaces and a parenthesis; start time 500 ticks.
        let fields: Vec<String> = (3..=21).map(|i| i.to_string()).collect();
        let stat = format!("42 (a (b) c) {} 500 0 0", fields[..19].join(" "));
        let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as u64;
        let started = 500 * 1_000_000_000 / hz;
        assert_eq!(
            process_start_from_stat(&stat, started + 7_000, 1_000_000),
            Some(1_000_000 - 7_000)
        );
        assert_eq!(process_start_from_stat("garbage", 0, 0), None);
    }
}
