//! What `/proc` says about a traced process: whether it still is the process that wrote
//! a file, whether it runs Python, and what its threads are blocked in.

use flare_model::{ParallelConfig, ParallelConfigError};
use std::path::Path;

/// Whether `pid` is (still) the process that anchored its tracer file at `anchor_mono_ns`.
/// `None` when `/proc` cannot tell (not mounted, another pid namespace): the caller falls
/// back on `kill(pid, 0)`.
pub fn same_process(pid: u32, anchor_mono_ns: u64) -> Option<bool> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let fields = stat_fields(&stat)?;
    // Field 3 (state): a zombie or a dead task has stopped tracing for good.
    let state = fields.first()?.chars().next()?;
    if matches!(state, 'Z' | 'X' | 'x') {
        return Some(false);
    }
    // Field 22 (starttime, clock ticks since boot): a process started after the file's
    // anchor is a new process that reused the pid.
    let ticks: u64 = fields.get(19)?.parse().ok()?;
    let start_mono = start_time_mono_ns(ticks)?;
    Some(start_mono <= anchor_mono_ns.saturating_add(2_000_000_000))
}

/// The job's parallel layout as the process states it: `FLARE_PARALLEL` in its
/// environment, else the parallel sizes on its command line (Megatron-LM, torchtitan;
/// see [`ParallelConfig::from_command_line`]), for a job of `world` ranks. `None` when
/// neither says or `/proc` cannot be read (the environment is readable by the process's
/// own user and root only).
pub fn parallel_layout(
    pid: u32,
    world: u32,
) -> Option<Result<ParallelConfig, ParallelConfigError>> {
    let environ = std::fs::read(format!("/proc/{pid}/environ")).unwrap_or_default();
    let prefix = format!("{}=", flare_model::PARALLEL_ENV);
    let stated = environ
        .split(|&b| b == 0)
        .find_map(|kv| kv.strip_prefix(prefix.as_bytes()));
    if let Some(spec) = stated {
        return Some(ParallelConfig::from_spec(
            &String::from_utf8_lossy(spec),
            world,
        ));
    }
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    let args: Vec<String> = cmdline
        .split(|&b| b == 0)
        .filter(|a| !a.is_empty())
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect();
    ParallelConfig::from_command_line(&args, world)
}

/// CPU time `pid` has used (user + system, all its threads), in ns; `None` when `/proc`
/// cannot tell. Tick resolution (usually 10 ms): enough over a window of seconds.
pub fn cpu_time_ns(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let fields = stat_fields(&stat)?;
    // Fields 14 and 15 (utime, stime), counted from the state (field 3).
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    (hz > 0).then(|| (utime + stime).saturating_mul(1_000_000_000) / hz as u64)
}

/// Time the main thread of `pid` has spent runnable but waiting for a CPU (the run
/// queue), in ns, from `/proc/PID/schedstat`; `None` without schedstats. A training loop
/// runs on its main thread: when it is off the CPU, this says whether it slept or waited
/// for a core that other processes held.
pub fn runqueue_wait_ns(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/schedstat")).ok()?;
    stat.split_whitespace().nth(1)?.parse().ok()
}

/// The fields after the command name in `/proc/PID/stat` (state first). The name sits
/// in parentheses and may itself contain spaces and parentheses.
fn stat_fields(stat: &str) -> Option<Vec<&str>> {
    let close = stat.rfind(')')?;
    Some(stat[close + 1..].split_whitespace().collect())
}

fn clock(id: libc::clockid_t) -> Option<u64> {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes the timespec we pass.
    let r = unsafe { libc::clock_gettime(id, &mut ts) };
    (r == 0).then(|| ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64)
}

/// Converts a start time in ticks since boot (`CLOCK_BOOTTIME`) to `CLOCK_MONOTONIC`,
/// which the tracer's anchor uses (they differ by the time the host was suspended).
fn start_time_mono_ns(ticks: u64) -> Option<u64> {
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if hz <= 0 {
        return None;
    }
    let boot_ns = ticks.saturating_mul(1_000_000_000) / hz as u64;
    let offset = clock(libc::CLOCK_BOOTTIME)?.saturating_sub(clock(libc::CLOCK_MONOTONIC)?);
    Some(boot_ns.saturating_sub(offset))
}

/// Whether the process runs a Python interpreter: its executable is `python*`, or it
/// maps a `libpython` (embedded interpreters, uwsgi-style launchers).
pub fn is_python(pid: u32) -> bool {
    if let Ok(exe) = std::fs::read_link(format!("/proc/{pid}/exe")) {
        let name = exe
            .file_name()
            .map(|n| n.to_string_lossy().to_lowercase())
            .unwrap_or_default();
        if name.starts_with("python") || name.starts_with("pypy") {
            return true;
        }
    }
    std::fs::read_to_string(format!("/proc/{pid}/maps"))
        .map(|m| m.contains("/libpython"))
        .unwrap_or(false)
}

/// Whether the process has started using a GPU: it maps a GPU driver library (CUDA's
/// `libcuda`, ROCm's `libhsa-runtime`, which the frameworks load when they first touch a
/// device, not at import) or holds a GPU device open. `None` when `/proc` cannot tell.
/// A process once on a GPU stays on it, so callers may stop asking after `Some(true)`.
pub fn uses_gpu(pid: u32) -> Option<bool> {
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).ok()?;
    if maps.contains("/libcuda.so") || maps.contains("/libhsa-runtime64.so") {
        return Some(true);
    }
    let gpu_device = |target: &Path| {
        let t = target.to_string_lossy();
        t.starts_with("/dev/nvidia") || t == "/dev/kfd"
    };
    let open = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|fds| {
            fds.filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
                .any(|t| gpu_device(&t))
        })
        .unwrap_or(false);
    Some(open)
}

/// One OS thread of a process, as the kernel sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Task {
    pub tid: u32,
    pub comm: String,
    /// The kernel function it sleeps in ("0" or empty when running).
    pub wchan: String,
    /// The system call it is blocked in, by name where known, or "running".
    pub syscall: String,
}

pub fn tasks(pid: u32) -> Vec<Task> {
    let dir = format!("/proc/{pid}/task");
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return Vec::new();
    };
    let mut out: Vec<Task> = entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .map(|tid| task(Path::new(&dir), tid))
        .collect();
    out.sort_by_key(|t| t.tid);
    out
}

fn task(dir: &Path, tid: u32) -> Task {
    let read = |f: &str| {
        std::fs::read_to_string(dir.join(tid.to_string()).join(f))
            .map(|s| s.trim().to_string())
            .unwrap_or_default()
    };
    let syscall = read("syscall");
    Task {
        tid,
        comm: read("comm"),
        wchan: read("wchan"),
        syscall: describe_syscall(&syscall),
    }
}

/// `/proc/PID/task/TID/syscall` is "NR arg0 ... sp pc", "running", or "-1 sp pc" (blocked
/// outside a system call).
fn describe_syscall(raw: &str) -> String {
    let first = raw.split_whitespace().next().unwrap_or("");
    match first.parse::<i64>() {
        Ok(-1) => "none (blocked outside a system call)".into(),
        Ok(nr) => match syscall_name(nr) {
            Some(n) => n.to_string(),
            None => format!("#{nr}"),
        },
        Err(_) if first.is_empty() => "unknown".into(),
        Err(_) => first.to_string(),
    }
}

/// Names of the calls a stuck training process typically sits in.
fn syscall_name(nr: i64) -> Option<&'static str> {
    #[cfg(target_arch = "x86_64")]
    let table: &[(i64, &str)] = &[
        (0, "read"),
        (1, "write"),
        (7, "poll"),
        (16, "ioctl"),
        (23, "select"),
        (35, "nanosleep"),
        (45, "recvfrom"),
        (47, "recvmsg"),
        (61, "wait4"),
        (202, "futex"),
        (230, "clock_nanosleep"),
        (232, "epoll_wait"),
        (270, "pselect6"),
        (271, "ppoll"),
        (281, "epoll_pwait"),
    ];
    #[cfg(target_arch = "aarch64")]
    let table: &[(i64, &str)] = &[
        (22, "epoll_pwait"),
        (29, "ioctl"),
        (63, "read"),
        (64, "write"),
        (72, "pselect6"),
        (73, "ppoll"),
        (98, "futex"),
        (101, "nanosleep"),
        (115, "clock_nanosleep"),
        (207, "recvfrom"),
        (212, "recvmsg"),
        (260, "wait4"),
    ];
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    let table: &[(i64, &str)] = &[];
    table.iter().find(|(n, _)| *n == nr).map(|(_, s)| *s)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A live process with `args` after `sh -c "sleep 5; true" sh`, and `env`, once it
    /// runs the shell (between fork and exec, /proc shows the test's own command line).
    fn process(args: &[&str], env: &[(&str, &str)]) -> std::process::Child {
        let child = std::process::Command::new("sh")
            .args(["-c", "sleep 5; true", "sh"])
            .args(args)
            .env_remove(flare_model::PARALLEL_ENV)
            .envs(env.iter().copied())
            .spawn()
            .unwrap();
        let cmdline = format!("/proc/{}/cmdline", child.id());
        let started = std::time::Instant::now();
        while !std::fs::read(&cmdline)
            .unwrap_or_default()
            .windows(7)
            .any(|w| w == b"sleep 5")
        {
            assert!(started.elapsed().as_secs() < 5, "sh did not start");
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        child
    }

    #[test]
    fn a_processs_layout_is_read_from_its_environment_then_its_command_line() {
        let mut stated = process(
            &["--tensor-model-parallel-size", "4"],
            &[(flare_model::PARALLEL_ENV, "tp=2,pp=2")],
        );
        let mut megatron = process(
            &[
                "--tensor-model-parallel-size",
                "4",
                "--pipeline-model-parallel-size",
                "2",
            ],
            &[],
        );
        let mut plain = process(&["--lr", "3e-4"], &[]);
        let mut wrong = process(&[], &[(flare_model::PARALLEL_ENV, "tp=3")]);
        let got = |c: &std::process::Child| parallel_layout(c.id(), 16);
        let sizes = |p: ParallelConfig| (p.tp, p.dp, p.pp);
        assert_eq!(
            got(&stated).unwrap().map(sizes),
            Ok((2, 4, 2)),
            "the environment first"
        );
        assert_eq!(got(&megatron).unwrap().map(sizes), Ok((4, 2, 2)));
        assert_eq!(got(&plain), None);
        assert!(got(&wrong).unwrap().unwrap_err().0.contains("cannot hold"));
        for c in [&mut stated, &mut megatron, &mut plain, &mut wrong] {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    #[test]
    fn cpu_time_grows_by_the_cpu_work_done_and_not_by_sleep() {
        // A sleeping child uses next to no CPU.
        let mut child = std::process::Command::new("sleep")
            .arg("5")
            .spawn()
            .unwrap();
        std::thread::sleep(std::time::Duration::from_millis(300));
        let slept = cpu_time_ns(child.id()).expect("/proc/PID/stat readable");
        let _ = child.kill();
        let _ = child.wait();
        assert!(slept < 50_000_000, "sleeping used {} ms", slept / 1_000_000);
        // This process spinning 300 ms uses at least that (other test threads only add).
        let pid = std::process::id();
        let t0 = cpu_time_ns(pid).unwrap();
        let spin = std::time::Instant::now();
        let mut x = 0u64;
        while spin.elapsed() < std::time::Duration::from_millis(300) {
            x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(7));
        }
        let spun = cpu_time_ns(pid).unwrap() - t0;
        assert!(spun >= 150_000_000, "spinning used {} ms", spun / 1_000_000);
        // The run-queue wait is read where the kernel keeps schedstats.
        if std::path::Path::new("/proc/self/schedstat").exists() {
            assert!(runqueue_wait_ns(pid).is_some());
        }
    }

    #[test]
    fn a_process_that_never_touched_a_gpu_is_not_on_one() {
        // The test runner loads no GPU driver and opens no GPU device, GPU machine or not.
        assert_eq!(uses_gpu(std::process::id()), Some(false));
        assert_eq!(uses_gpu(u32::MAX), None);
    }

    #[test]
    fn this_process_is_itself_and_not_python() {
        let pid = std::process::id();
        assert_eq!(same_process(pid, flare_tracer::clock::now_ns()), Some(true));
        // A file anchored before this process started belongs to an older process.
        assert_eq!(same_process(pid, 1), Some(false));
        assert!(!is_python(pid));
        let t = tasks(pid);
        assert!(t.iter().any(|t| t.tid == pid), "{t:?}");
    }

    #[test]
    fn stat_and_syscall_lines_parse() {
        let f = stat_fields("42 (a (weird) name) S 1 2 3").unwrap();
        assert_eq!(f[0], "S");
        assert_eq!(describe_syscall("running"), "running");
        assert_eq!(
            describe_syscall("-1 0x7ff 0x7ff"),
            "none (blocked outside a system call)"
        );
        assert!(describe_syscall("99999 0x0").starts_with("#99999"));
    }
}
