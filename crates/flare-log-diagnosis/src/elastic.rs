//! torchrun's failure summary (`torch.distributed.elastic`'s `ChildFailedError`): one
//! entry per failed worker of a node, with its rank, host, exit code or signal, and the
//! first of them marked `Root Cause (first observed failure)`. That mark means only that
//! this worker ended first on its node, which a rank killed by the others' failure can
//! do too, so the verdict uses it to break ties, never as the cause.
//!
//! ```text
//! Root Cause (first observed failure):
//! [0]:
//!   time      : 2024-02-09_09:09:15
//!   host      : node1
//!   rank      : 4 (local_rank: 0)
//!   exitcode  : -9 (pid: 170581)
//!   error_file: <N/A>
//!   traceback : Signal 9 (SIGKILL) received by PID 170581
//! ```

use crate::time::{self, Stamp};

/// One failed worker, as the summary lists it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct WorkerFailure {
    /// Listed under `Root Cause (first observed failure)`.
    pub first_observed: bool,
    pub time: Option<Stamp>,
    pub host: Option<String>,
    pub rank: Option<u32>,
    pub local_rank: Option<u32>,
    pub exit_code: Option<i64>,
    /// From `Signal 9 (SIGKILL) received by PID`.
    pub signal: Option<u32>,
    /// The line of its exit code (or of its first field), for the evidence.
    pub line: u64,
    pub text: String,
}

/// The lines that open the summary's sections.
const FAILURES: &str = "Failures:";
const ROOT_CAUSE: &str = "Root Cause (first observed failure)";

#[derive(Default)]
pub struct Summary {
    section: Option<bool>,
    entry: Option<WorkerFailure>,
}

/// What the summary made of a line.
pub enum Seen {
    /// Not part of a summary.
    Other,
    /// A line of the summary, read here (not to be matched as anything else).
    Consumed,
    /// A line that ended an entry: the entry.
    Ended(WorkerFailure),
}

fn field<'a>(message: &'a str, key: &str) -> Option<&'a str> {
    let rest = message.strip_prefix(key)?;
    let rest = rest.trim_start();
    rest.strip_prefix(':').map(str::trim)
}

impl Summary {
    /// Outside any summary: a line that opens none leaves it as it is.
    pub fn idle(&self) -> bool {
        self.section.is_none() && self.entry.is_none()
    }

    /// Whether a line whose message is `message` may open a summary's section.
    pub(crate) fn opens(message: &str) -> bool {
        let first = message.trim_start().as_bytes().first().copied();
        if first != Some(FAILURES.as_bytes()[0]) && first != Some(ROOT_CAUSE.as_bytes()[0]) {
            return false;
        }
        let m = message.trim();
        m == FAILURES || m.starts_with(ROOT_CAUSE)
    }

    /// The rank and host of the entry being read, for the traceback lines inside it.
    pub fn current(&self) -> Option<(Option<u32>, Option<u32>, Option<&str>)> {
        self.entry
            .as_ref()
            .map(|e| (e.rank, e.local_rank, e.host.as_deref()))
    }

    /// Follows one line (its message, prefixes removed; `line` its number, `text` the
    /// whole line).
    pub fn step(&mut self, message: &str, line: u64, text: &str) -> Seen {
        let m = message.trim();
        if m == FAILURES {
            let ended = self.entry.take();
            self.section = Some(false);
            return ended.map_or(Seen::Consumed, Seen::Ended);
        }
        if m.as_bytes().first() == Some(&b'R') && m.starts_with(ROOT_CAUSE) {
            let ended = self.entry.take();
            self.section = Some(true);
            return ended.map_or(Seen::Consumed, Seen::Ended);
        }
        let Some(first) = self.section else {
            return Seen::Other;
        };
        if m.starts_with("---") || m.starts_with("===") {
            let ended = self.entry.take();
            if m.starts_with("===") {
                self.section = None;
            }
            return ended.map_or(Seen::Consumed, Seen::Ended);
        }
        // `[0]:` starts an entry
        if m.starts_with('[')
            && m.ends_with("]:")
            && m[1..m.len() - 2].bytes().all(|b| b.is_ascii_digit())
        {
            let ended = self.entry.take();
            self.entry = Some(WorkerFailure {
                first_observed: first,
                line,
                text: text.to_string(),
                ..WorkerFailure::default()
            });
            return ended.map_or(Seen::Consumed, Seen::Ended);
        }
        let Some(e) = self.entry.as_mut() else {
            return Seen::Other;
        };
        if let Some(v) = field(m, "time") {
            let v = v.replace('_', " ");
            e.time = time::parse_at(&v, 0).map(|(s, _)| s);
        } else if let Some(v) = field(m, "host") {
            e.host = Some(v.to_string());
        } else if let Some(v) = field(m, "rank") {
            // `4 (local_rank: 0)`
            let (rank, rest) = v.split_once(' ').unwrap_or((v, ""));
            e.rank = rank.parse().ok();
            e.local_rank = rest
                .trim()
                .strip_prefix("(local_rank:")
                .and_then(|r| r.trim_end_matches(')').trim().parse().ok());
        } else if let Some(v) = field(m, "exitcode") {
            e.exit_code = v.split_whitespace().next().and_then(|c| c.parse().ok());
            e.line = line;
            e.text = text.to_string();
        } else if let Some(v) = field(m, "error_file") {
            let _ = v;
        } else if let Some(v) = field(m, "traceback") {
            // `Signal 9 (SIGKILL) received by PID 1234`
            if let Some(rest) = v.strip_prefix("Signal ") {
                e.signal = rest.split_whitespace().next().and_then(|s| s.parse().ok());
            }
        } else {
            // a line of the entry's traceback: read by the caller as a line of that rank
            return Seen::Other;
        }
        Seen::Consumed
    }

    /// The entry still open at the end of the file.
    pub fn finish(&mut self) -> Option<WorkerFailure> {
        self.section = None;
        self.entry.take()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_entries() {
        let text = "torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
============================================================
train.py FAILED
------------------------------------------------------------
Failures:
[1]:
  time      : 2024-02-09_09:09:16
  host      : node1
  rank      : 5 (local_rank: 1)
  exitcode  : -6 (pid: 1234)
  error_file: <N/A>
  traceback : Signal 6 (SIGABRT) received by PID 1234
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2024-02-09_09:09:15
  host      : node1
  rank      : 4 (local_rank: 0)
  exitcode  : 1 (pid: 170581)
  error_file: /tmp/error.json
  traceback : Traceback (most recent call last):
    File \"train.py\", line 3, in <module>
  ValueError: bad
============================================================";
        let mut s = Summary::default();
        let mut got = Vec::new();
        let mut inside = Vec::new();
        for (i, l) in text.lines().enumerate() {
            match s.step(l.trim(), i as u64 + 1, l) {
                Seen::Ended(e) => got.push(e),
                Seen::Other if s.current().is_some() => {
                    inside.push((l.trim(), s.current().unwrap().0))
                }
                _ => {}
            }
        }
        assert_eq!(got.len(), 2);
        assert_eq!(
            (
                got[0].first_observed,
                got[0].rank,
                got[0].local_rank,
                got[0].exit_code,
                got[0].signal
            ),
            (false, Some(5), Some(1), Some(-6), Some(6))
        );
        assert_eq!(got[0].line, 10);
        assert_eq!(
            (
                got[1].first_observed,
                got[1].rank,
                got[1].host.as_deref(),
                got[1].exit_code,
                got[1].signal
            ),
            (true, Some(4), Some("node1"), Some(1), None)
        );
        assert!(got[1].time.is_some());
        assert_eq!(
            inside,
            vec![
                ("File \"train.py\", line 3, in <module>", Some(4)),
                ("ValueError: bad", Some(4))
            ]
        );
    }
}
