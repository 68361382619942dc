//! Stack capture for the watchdog: py-spy for Python processes, otherwise the tracer's
//! own open spans per thread plus what `/proc` says each thread is blocked in.

use crate::procfs;
use flare_model::ThreadStack;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

pub const SOURCE_PY_SPY: &str = "py-spy";
pub const SOURCE_NATIVE: &str = "native";

/// The tracer's view of one ring (thread) of a process: its open spans, innermost first.
#[derive(Clone, Debug, Default)]
pub struct RingStack {
    pub ring: u32,
    /// OS thread id of the ring's owner (0 when the producer did not record it).
    pub tid: u32,
    pub thread_name: String,
    pub frames: Vec<String>,
    /// Async spans begun on this thread, still open.
    pub async_frames: Vec<String>,
}

/// Finds py-spy: the explicit path, then `py-spy` on PATH, then the repository's venv
/// (`target/flare-venv/bin/py-spy`, relative to the working directory or to the agent's
/// executable in `target/<profile>/`).
pub fn find_py_spy(explicit: Option<&Path>) -> Option<PathBuf> {
    if let Some(p) = explicit {
        return is_executable(p).then(|| p.to_path_buf());
    }
    if let Some(path) = std::env::var_os("PATH") {
        for dir in std::env::split_paths(&path) {
            let p = dir.join("py-spy");
            if is_executable(&p) {
                return Some(p);
            }
        }
    }
    let mut candidates = vec![PathBuf::from("target/flare-venv/bin/py-spy")];
    if let Ok(exe) = std::env::current_exe() {
        if let Some(target) = exe.parent().and_then(Path::parent) {
            candidates.push(target.join("flare-venv/bin/py-spy"));
        }
    }
    candidates.into_iter().find(|p| is_executable(p))
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p)
        .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        .unwrap_or(false)
}

/// Captures the stacks of `pid`: py-spy when given and the process runs Python, else the
/// native view. Returns the stacks and their source. Blocks up to `timeout` (call it off
/// the collector thread).
pub fn capture(
    pid: u32,
    rings: &[RingStack],
    py_spy: Option<&Path>,
    timeout: Duration,
) -> (Vec<ThreadStack>, &'static str) {
    if let Some(py_spy) = py_spy {
        if procfs::is_python(pid) {
            match py_spy_dump(py_spy, pid, timeout) {
                Ok(stacks) if !stacks.is_empty() => return (stacks, SOURCE_PY_SPY),
                Ok(_) => tracing::info!(pid, "py-spy found no Python threads; using native stacks"),
                Err(e) => tracing::warn!(pid, error = %e, "py-spy failed; using native stacks"),
            }
        }
    }
    (native_stacks(pid, rings), SOURCE_NATIVE)
}

/// Runs `py-spy dump --pid PID --json` and parses its output (the text form too, for
/// py-spy builds without `--json`).
pub fn py_spy_dump(py_spy: &Path, pid: u32, timeout: Duration) -> Result<Vec<ThreadStack>, String> {
    let out = run_with_timeout(
        Command::new(py_spy).args(["dump", "--pid", &pid.to_string(), "--json"]),
        timeout,
    )?;
    if !out.success {
        let err = String::from_utf8_lossy(&out.stderr);
        let first = err.lines().find(|l| !l.trim().is_empty()).unwrap_or("");
        return Err(format!(
            "{} exited unsuccessfully: {first}",
            py_spy.display()
        ));
    }
    let text = String::from_utf8_lossy(&out.stdout);
    parse_py_spy_json(&text)
        .or_else(|_| parse_py_spy_text(&text))
        .map_err(|e| format!("unreadable py-spy output: {e}"))
}

struct Output {
    success: bool,
    stdout: Vec<u8>,
    stderr: Vec<u8>,
}

/// Runs a command, reading its output on helper threads (a full pipe must not stall it)
/// and killing it at the deadline.
fn run_with_timeout(cmd: &mut Command, timeout: Duration) -> Result<Output, String> {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot run {:?}: {e}", cmd.get_program()))?;
    let reader = |pipe: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            if let Some(mut p) = pipe {
                // Cap what we keep: a stack dump is kilobytes, not gigabytes.
                let _ = p.by_ref().take(16 << 20).read_to_end(&mut buf);
            }
            buf
        })
    };
    let out = reader(
        child
            .stdout
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    );
    let err = reader(
        child
            .stderr
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    );
    let deadline = Instant::now() + timeout;
    let status = loop {
        match child.try_wait() {
            Ok(Some(s)) => break Some(s),
            Ok(None) if Instant::now() >= deadline => {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(20)),
            Err(e) => return Err(format!("waiting for {:?}: {e}", cmd.get_program())),
        }
    };
    let stdout = out.join().unwrap_or_default();
    let stderr = err.join().unwrap_or_default();
    match status {
        None => Err(format!(
            "{:?} timed out after {timeout:?}",
            cmd.get_program()
        )),
        Some(s) => Ok(Output {
            success: s.success(),
            stdout,
            stderr,
        }),
    }
}

#[derive(serde::Deserialize)]
struct PyThread {
    #[serde(default)]
    thread_name: Option<String>,
    #[serde(default)]
    os_thread_id: Option<u64>,
    #[serde(default)]
    thread_id: Option<u64>,
    #[serde(default)]
    active: Option<bool>,
    #[serde(default)]
    owns_gil: Option<bool>,
    #[serde(default)]
    frames: Vec<PyFrame>,
}

#[derive(serde::Deserialize)]
struct PyFrame {
    name: String,
    #[serde(default)]
    short_filename: Option<String>,
    #[serde(default)]
    filename: Option<String>,
    #[serde(default)]
    line: Option<i64>,
}

/// `py-spy dump --json`: an array of threads, frames innermost first.
pub fn parse_py_spy_json(text: &str) -> Result<Vec<ThreadStack>, String> {
    let threads: Vec<PyThread> = serde_json::from_str(text).map_err(|e| e.to_string())?;
    Ok(threads
        .into_iter()
        .map(|t| {
            let id = t.os_thread_id.or(t.thread_id).unwrap_or(0);
            let state = match (t.active, t.owns_gil) {
                (_, Some(true)) => "active, holds the GIL",
                (Some(true), _) => "active",
                (Some(false), _) => "idle",
                _ => "unknown",
            };
            ThreadStack {
                thread: format!(
                    "{} (tid {id}, {state})",
                    t.thread_name.as_deref().unwrap_or("<unnamed>")
                ),
                frames: t
                    .frames
                    .into_iter()
                    .map(|f| {
                        let file = f.short_filename.or(f.filename).unwrap_or_default();
                        match f.line {
                            Some(l) => format!("{} ({file}:{l})", f.name),
                            None => format!("{} ({file})", f.name),
                        }
                    })
                    .collect(),
            }
        })
        .collect())
}

/// `py-spy dump` text: `Thread 123 (idle): "MainThread"` then indented frames.
pub fn parse_py_spy_text(text: &str) -> Result<Vec<ThreadStack>, String> {
    let mut out: Vec<ThreadStack> = Vec::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("Thread ") {
            let (head, name) = rest.split_once(": ").unwrap_or((rest, ""));
            let mut parts = head.splitn(2, ' ');
            let tid = parts.next().unwrap_or("?");
            let state = parts
                .next()
                .unwrap_or("")
                .trim_matches(|c| c == '(' || c == ')');
            let name = name.trim().trim_matches('"');
            let name = if name.is_empty() { "<unnamed>" } else { name };
            out.push(ThreadStack {
                thread: format!("{name} (tid {tid}, {state})"),
                frames: Vec::new(),
            });
        } else if line.starts_with("    ") && !line.trim().is_empty() {
            let frame = line.trim();
            // `--locals` adds indented variable lines under each frame; keep frames only.
            if frame.ends_with(':') || line.starts_with("        ") {
                continue;
            }
            if let Some(t) = out.last_mut() {
                t.frames.push(frame.to_string());
            }
        }
    }
    if out.is_empty() {
        return Err("no `Thread` lines".into());
    }
    Ok(out)
}

/// The native view: per OS thread, the tracer's open spans on it (innermost first) and
/// what the kernel says it waits in. Rings whose thread is not found still appear, so
/// the open span names are always there.
pub fn native_stacks(pid: u32, rings: &[RingStack]) -> Vec<ThreadStack> {
    let tasks = procfs::tasks(pid);
    let mut used = vec![false; rings.len()];
    let mut out = Vec::new();
    for t in &tasks {
        let mut frames = Vec::new();
        for (i, r) in rings.iter().enumerate() {
            if r.tid != 0 && r.tid == t.tid {
                used[i] = true;
                frames.extend(r.frames.iter().cloned());
                frames.extend(r.async_frames.iter().map(|f| format!("async {f}")));
            }
        }
        let wchan = if t.wchan.is_empty() || t.wchan == "0" {
            "-"
        } else {
            &t.wchan
        };
        frames.push(format!("[kernel] wchan={wchan} syscall={}", t.syscall));
        out.push(ThreadStack {
            thread: format!("{} (tid {})", t.comm, t.tid),
            frames,
        });
    }
    for (r, _) in rings.iter().zip(used).filter(|(_, u)| !u) {
        if r.frames.is_empty() && r.async_frames.is_empty() {
            continue;
        }
        let who = if r.thread_name.is_empty() {
            format!("tracer ring {}", r.ring)
        } else {
            format!("{} (tracer ring {})", r.thread_name, r.ring)
        };
        let mut frames = r.frames.clone();
        frames.extend(r.async_frames.iter().map(|f| format!("async {f}")));
        out.push(ThreadStack {
            thread: if r.tid == 0 {
                format!("{who}, thread unknown")
            } else {
                format!("{who}, tid {} gone", r.tid)
            },
            frames,
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const JSON: &str = r#"[
      {"pid": 1, "thread_id": 140, "thread_name": "helper", "os_thread_id": 18643,
       "active": false, "owns_gil": false,
       "frames": [
         {"name": "worker", "filename": "<string>", "module": null, "short_filename": "<string>", "line": 3, "locals": null, "is_entry": true},
         {"name": "Thread.run", "filename": "/usr/lib/python3.11/threading.py", "short_filename": "threading.py", "line": 982}
       ], "process_info": null},
      {"pid": 1, "thread_id": 141, "thread_name": "MainThread", "os_thread_id": 18641,
       "active": true, "owns_gil": true,
       "frames": [{"name": "<module>", "filename": "<string>", "short_filename": "<string>", "line": 4}]}
    ]"#;

    const TEXT: &str = "Process 18641: python3 -c ...\nPython v3.11.7 (/usr/bin/python3.11)\n\n\
Thread 18641 (idle): \"MainThread\"\n    <module> (<string>:4)\n\
Thread 18643 (active): \"helper\"\n    worker (<string>:3)\n        Locals:\n            x: 1\n    Thread.run (threading.py:982)\n";

    #[test]
    fn py_spy_json_and_text_parse_to_the_same_frames() {
        let j = parse_py_spy_json(JSON).unwrap();
        assert_eq!(j.len(), 2);
        assert_eq!(j[0].thread, "helper (tid 18643, idle)");
        assert_eq!(
            j[0].frames,
            vec!["worker (<string>:3)", "Thread.run (threading.py:982)"]
        );
        assert_eq!(j[1].thread, "MainThread (tid 18641, active, holds the GIL)");
        let t = parse_py_spy_text(TEXT).unwrap();
        assert_eq!(t.len(), 2);
        assert_eq!(t[0].thread, "MainThread (tid 18641, idle)");
        assert_eq!(t[0].frames, vec!["<module> (<string>:4)"]);
        assert_eq!(t[1].frames, j[0].frames);
        assert!(parse_py_spy_json("Error: nope").is_err());
        assert!(parse_py_spy_text("Error: nope").is_err());
    }

    #[test]
    fn native_stacks_show_open_spans_and_kernel_state() {
        let me = std::process::id();
        let rings = vec![
            RingStack {
                ring: 0,
                tid: me,
                thread_name: "main".into(),
                frames: vec!["all_reduce".into(), "train_step".into()],
                async_frames: vec!["nccl:AllReduce".into()],
            },
            RingStack {
                ring: 3,
                tid: 0,
                thread_name: String::new(),
                frames: vec!["data_wait".into()],
                async_frames: vec![],
            },
        ];
        let s = native_stacks(me, &rings);
        let main = s
            .iter()
            .find(|t| t.thread.contains(&format!("tid {me}")))
            .unwrap();
        assert_eq!(main.frames[0], "all_reduce");
        assert_eq!(main.frames[2], "async nccl:AllReduce");
        assert!(main.frames.last().unwrap().starts_with("[kernel] wchan="));
        let orphan = s
            .iter()
            .find(|t| t.thread.contains("tracer ring 3"))
            .unwrap();
        assert_eq!(orphan.frames, vec!["data_wait"]);
    }

    #[test]
    fn a_command_past_its_timeout_is_killed() {
        let t0 = Instant::now();
        let r = run_with_timeout(Command::new("sleep").arg("10"), Duration::from_millis(200));
        assert!(r.is_err());
        assert!(t0.elapsed() < Duration::from_secs(5));
        let ok = run_with_timeout(Command::new("echo").arg("hi"), Duration::from_secs(5)).unwrap();
        assert!(ok.success);
        assert_eq!(ok.stdout, b"hi\n");
    }
}
