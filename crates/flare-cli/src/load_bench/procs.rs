//! What the bench's processes cost: the servers and nats-server it starts, and a
//! PostgreSQL on this machine with its backends.

use anyhow::{Context, Result};
use std::process::Child;

/// A child process killed when the bench ends.
pub(super) struct Proc {
    pub(super) child: Child,
    pub(super) name: String,
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Proc {
    /// CPU seconds (user + system) and peak resident MB so far, from /proc.
    pub(super) fn usage(&self) -> (f64, f64) {
        let pid = self.child.id();
        let cpu = stat(pid).map_or(0.0, |s| s.own_s());
        let peak = kb_field(&format!("/proc/{pid}/status"), "VmHWM:").map_or(0.0, |kb| kb / 1024.0);
        (cpu, peak)
    }
}

/// The fields of `/proc/PID/stat` a bench reads.
struct Stat {
    ppid: u32,
    /// utime, stime, cutime, cstime in clock ticks.
    ticks: [f64; 4],
}

impl Stat {
    fn tick_s() -> f64 {
        unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64
    }

    /// The process's own CPU seconds.
    fn own_s(&self) -> f64 {
        (self.ticks[0] + self.ticks[1]) / Self::tick_s()
    }

    /// The CPU seconds of its children that exited and were waited for.
    fn reaped_children_s(&self) -> f64 {
        (self.ticks[2] + self.ticks[3]) / Self::tick_s()
    }
}

fn stat(pid: u32) -> Option<Stat> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command's closing parenthesis (the command may hold spaces):
    // state, ppid, ...; utime to cstime are the 14th to 17th of the whole line.
    let f: Vec<&str> = s.rsplit_once(')')?.1.split_whitespace().collect();
    let num = |i: usize| f.get(i)?.parse::<f64>().ok();
    Some(Stat {
        ppid: f.get(1)?.parse().ok()?,
        ticks: [num(11)?, num(12)?, num(13)?, num(14)?],
    })
}

/// A `kB` field (`VmHWM:`, `Pss:`) of a `/proc` file that lists them a line each.
fn kb_field(path: &str, field: &str) -> Option<f64> {
    let s = std::fs::read_to_string(path).ok()?;
    let line = s.lines().find(|l| l.starts_with(field))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// A PostgreSQL server on this machine: its postmaster, found as the parent of the
/// backend that serves a connection of ours. Its backends come and go with their
/// connections, so its CPU is the postmaster's own, its exited children's (added to
/// it when it reaps them) and its living children's.
pub(super) struct Postgres {
    postmaster: u32,
}

impl Postgres {
    /// `None` when the server is not on this machine (its backend's process is not ours
    /// to read).
    pub(super) fn on_this_machine(url: &str) -> Result<Option<Postgres>> {
        let mut c = postgres::Client::connect(url, postgres::NoTls).with_context(|| {
            let shown = flare_server::store::DbLocation::Postgres(url.to_string());
            format!("connecting to {shown}")
        })?;
        let backend: i32 = c
            .query_one("SELECT pg_backend_pid()", &[])
            .context("asking PostgreSQL for its backend's pid")?
            .get(0);
        let Some(backend) = u32::try_from(backend).ok().and_then(stat) else {
            return Ok(None);
        };
        // The backend must be PostgreSQL's and not a process that happens to hold the
        // number here: its parent is a postgres process too.
        let comm =
            std::fs::read_to_string(format!("/proc/{}/comm", backend.ppid)).unwrap_or_default();
        Ok(comm.starts_with("postgres").then_some(Postgres {
            postmaster: backend.ppid,
        }))
    }

    fn children(&self) -> Vec<u32> {
        let Ok(dir) = std::fs::read_dir("/proc") else {
            return Vec::new();
        };
        dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
            .filter(|&pid| stat(pid).is_some_and(|s| s.ppid == self.postmaster))
            .collect()
    }

    /// CPU seconds the server has used since it started.
    pub(super) fn cpu_s(&self) -> f64 {
        let Some(main) = stat(self.postmaster) else {
            return 0.0;
        };
        main.own_s()
            + main.reaped_children_s()
            + self
                .children()
                .into_iter()
                .filter_map(stat)
                .map(|s| s.own_s())
                .sum::<f64>()
    }

    /// Memory of the postmaster and its children now, MB: each process's proportional
    /// share of the pages it maps (shared buffers counted once across them); `None` where
    /// another user's processes' maps are not ours to read.
    pub(super) fn pss_mb(&self) -> Option<f64> {
        let kb: Vec<f64> = std::iter::once(self.postmaster)
            .chain(self.children())
            .filter_map(|pid| kb_field(&format!("/proc/{pid}/smaps_rollup"), "Pss:"))
            .collect();
        (!kb.is_empty()).then(|| kb.iter().sum::<f64>() / 1024.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_process_named_with_a_parenthesis_and_spaces_is_read_right() {
        let dir = tempfile::tempdir().unwrap();
        let exe = dir.path().join("x) (y z");
        std::os::unix::fs::symlink("/bin/sleep", &exe).unwrap();
        let child = std::process::Command::new(&exe).arg("5").spawn().unwrap();
        let proc = Proc {
            child,
            name: "sleep".into(),
        };
        let s = stat(proc.child.id()).expect("its stat");
        assert_eq!(s.ppid, std::process::id());
        assert!(s.ticks.iter().all(|t| *t >= 0.0));
        let (cpu, peak) = proc.usage();
        assert!(cpu >= 0.0 && peak > 0.0, "{cpu} {peak}");
    }
}
