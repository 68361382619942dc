//! How a process ended, from its exit code or signal as launchers report it (torchrun's
//! `exitcode: -9`, its `Signal 9 (SIGKILL) received by PID`, DeepSpeed's `exits with
//! return code = -9`, Slurm's `task 3: Killed`, a container's exit code 137). A negative
//! code is a signal; a code above 128 is 128 plus the signal, as shells and containers
//! write it.

use super::{Reading, Role};
use flare_model::{FailureCategory as C, LogSignature as S};

/// The signal a code stands for: `-9` and `137` are SIGKILL.
pub fn signal_of(code: i64) -> Option<u32> {
    match code {
        c if c < 0 && c > -65 => Some((-c) as u32),
        c if c > 128 && c < 128 + 65 => Some((c - 128) as u32),
        _ => None,
    }
}

/// The reading of a process that ended with `signal`, or with exit `code` otherwise.
pub fn ended(signature: S, signal: Option<u32>, code: Option<i64>) -> Reading {
    let r = |role, category, weight, meaning: String, action: &str, restart| Reading {
        signature,
        role,
        category,
        weight,
        meaning,
        action: action.to_string(),
        restart_helps: restart,
        stage: None,
    };
    match signal {
        Some(9) => r(
            Role::Symptom,
            C::Unknown,
            45,
            "the process was killed with SIGKILL: by the host's OOM killer (the most common), the scheduler or a person; the logs here do not say which".into(),
            "look in that host's kernel log (`journalctl -k`, `dmesg`) for 'Out of memory: Killed process', and in the scheduler's records for a kill",
            None,
        ),
        Some(11) => r(
            Role::Symptom,
            C::Software,
            50,
            "the process crashed with a segmentation fault (SIGSEGV) in native code".into(),
            "get the native stack (a core dump, or run under `gdb -batch -ex bt`); suspect a library or extension built for another version",
            Some(false),
        ),
        Some(7) => r(
            Role::Symptom,
            C::Configuration,
            45,
            "the process got a bus error (SIGBUS), most often shared memory (/dev/shm) running out".into(),
            "give the container more shared memory (docker --shm-size, a memory-backed emptyDir at /dev/shm) or use fewer data-loader workers",
            Some(false),
        ),
        Some(6) => r(
            Role::Symptom,
            C::Unknown,
            25,
            "the process aborted (SIGABRT): PyTorch's NCCL watchdog aborts a process after a collective failed or timed out (the cause is then elsewhere), as does a failed C++ assertion".into(),
            "look for the first error of another rank, or a C++ assertion in this process's output",
            None,
        ),
        Some(15) | Some(2) | Some(1) => r(
            Role::Cascade,
            C::Unknown,
            0,
            "the process was stopped by a signal (SIGTERM, SIGINT or SIGHUP), as launchers and schedulers stop a job's other processes after one fails".into(),
            "look for the process that failed first",
            None,
        ),
        Some(s) => r(
            Role::Symptom,
            C::Unknown,
            30,
            format!("the process ended on signal {s}"),
            "look at that process's output for why",
            None,
        ),
        None => r(
            Role::Symptom,
            C::Unknown,
            30,
            match code {
                Some(c) => format!("the process exited with code {c} (a Python exception exits with 1; its traceback is in the process's output)"),
                None => "the process exited with an error".into(),
            },
            "look at that process's output for its error",
            None,
        ),
    }
}

/// A signal by its name (`SIGKILL`) or as `strsignal` words it (`Killed`), as launchers
/// and Slurm print them.
fn signal_named(name: &str) -> Option<u32> {
    let name = name.trim().trim_end_matches('.');
    Some(match name.trim_start_matches("SIG") {
        "HUP" | "Hangup" => 1,
        "INT" | "Interrupt" => 2,
        "ABRT" | "Aborted" => 6,
        "BUS" | "Bus error" => 7,
        "KILL" | "Killed" => 9,
        "SEGV" | "Segmentation fault" => 11,
        "TERM" | "Terminated" => 15,
        _ => return None,
    })
}

/// torchrun's `exitcode: -9`, DeepSpeed's `return code = -9`, a container's `137`.
pub fn refine_code(caps: &regex::Captures) -> Option<Reading> {
    let code: i64 = ["code", "code2", "code3"]
        .iter()
        .find_map(|n| caps.name(n))?
        .as_str()
        .parse()
        .ok()?;
    Some(ended(S::ProcessExit, signal_of(code), Some(code)))
}

/// `Signal 9 (SIGKILL) received by PID 1234`.
pub fn refine_signal(caps: &regex::Captures) -> Option<Reading> {
    let signal = caps
        .name("signal")
        .and_then(|m| m.as_str().parse().ok())
        .or_else(|| {
            ["detail", "detail2", "detail3"]
                .iter()
                .find_map(|n| caps.name(n))
                .and_then(|m| signal_named(m.as_str()))
        })
        // bash's `Killed`
        .or(Some(9));
    Some(ended(S::ProcessSignal, signal, None))
}

/// Slurm's `task 3: Exited with exit code 1` or `task 3: Killed`.
pub fn refine_srun(caps: &regex::Captures) -> Option<Reading> {
    let detail = caps.name("detail")?.as_str();
    if detail == "Out Of Memory" {
        return Some(Reading {
            signature: S::SrunTaskExit,
            role: Role::Root,
            category: C::OutOfMemory,
            weight: 85,
            meaning: "Slurm ended the task for exceeding its memory (the job's cgroup)".into(),
            action: "ask for more memory (--mem, --mem-per-gpu) or lower the job's host memory use (data-loader workers, prefetching, CPU offload)".into(),
            restart_helps: Some(false),
            stage: None,
        });
    }
    let (signal, code) = match caps
        .name("code")
        .and_then(|c| c.as_str().parse::<i64>().ok())
    {
        Some(c) => (signal_of(c), Some(c)),
        None => (signal_named(detail), None),
    };
    Some(ended(S::SrunTaskExit, signal, code))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_and_signals() {
        assert_eq!(signal_of(-9), Some(9));
        assert_eq!(signal_of(137), Some(9));
        assert_eq!(signal_of(139), Some(11));
        assert_eq!(signal_of(1), None);
        assert_eq!(signal_of(0), None);
        let killed = ended(S::ProcessExit, Some(9), Some(-9));
        assert_eq!((killed.role, killed.category), (Role::Symptom, C::Unknown));
        let term = ended(S::ProcessExit, Some(15), Some(-15));
        assert_eq!(term.role, Role::Cascade);
        assert_eq!(ended(S::ProcessExit, None, Some(1)).weight, 30);
    }
}
