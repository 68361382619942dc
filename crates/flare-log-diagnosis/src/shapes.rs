//! Lines of one shape read alike. A file repeats a few shapes of line (a rank's progress
//! line, its NCCL lines), and reading a line's prefixes costs more than scanning its
//! message. A line's shape is the line with each digit folded to `0` and every other
//! byte kept (case too): two lines of one shape differ only in their digits' values.
//!
//! The prefixes' readers decide by shape, except where a stamp's digits are read as a
//! time (hour 25, month 13 refuse a stamp of the right shape). So a line reads as an
//! earlier line of its shape did when:
//! - no stamp was refused for its values while the earlier line was read (the time
//!   module says so; such a line is not remembered);
//! - the bytes before its message are the earlier line's, its stamps aside (ranks, hosts,
//!   pids and GPUs are read from them);
//! - each stamp reads again, at its place, to the same length and kind.
//!
//! The message's scan is then its skeleton's (see `lexicon`), its counter read again.
//! Lines a signature row concerns are never remembered: the matcher reads them whole.

use crate::collect::PreAt;
use crate::lexicon::{self, Cached, ScanCache};
use crate::origin::{OriginAt, StampReader, Stamps, TaskPrefix, MAX_STAMPS};
use crate::time::{self, Stamp};
use std::collections::HashMap;

/// Shapes remembered per file at most; past it the cache starts over.
const CAP: usize = 1 << 12;

/// What a line of a remembered shape reads to.
struct Shape {
    task_prefix: TaskPrefix,
    /// The line it was learned from (its bytes before the message are its prefixes').
    line: Box<[u8]>,
    /// The stamps, left to right, each with how it is read again.
    stamps: [(Reread, StampReader); MAX_STAMPS],
    n_stamps: usize,
    /// Index of the line's time among them.
    chosen: Option<usize>,
    origin: OriginAt,
    scan: Cached,
    /// Where the counter's digits stand (lines of one shape have their digits in the
    /// same places).
    counter: Option<(usize, usize)>,
}

impl Shape {
    /// What `line`, of this shape, reads to, into `out`, if it reads as the learned line
    /// did (`out` is written in place: a prepared line returned by value was copied
    /// twice on its way, a tenth of the pass in stalls reading what was just written).
    fn read(&self, line: &str, task_prefix: TaskPrefix, out: &mut PreAt) -> Option<()> {
        let message_at = self.origin.message_at();
        if self.task_prefix != task_prefix || line.len() <= message_at {
            return None;
        }
        let b = line.as_bytes();
        let stamps = &self.stamps[..self.n_stamps];
        // the prefixes' bytes outside what is read again (stamps are noted left to right)
        let mut from = 0;
        for (r, _) in stamps {
            let (a, e) = r.span();
            if b[from..a] != self.line[from..a] {
                return None;
            }
            from = e;
        }
        if b[from..message_at] != self.line[from..message_at] {
            return None;
        }
        let mut time = None;
        for (i, (r, reader)) in stamps.iter().enumerate() {
            let stamp = r.read(line, *reader)?;
            if self.chosen == Some(i) {
                time = Some(stamp);
            }
        }
        let counter = self.counter.and_then(|(a, e)| line.get(a..e)?.parse().ok());
        out.origin.clone_from(&self.origin);
        out.origin.time = time;
        out.words = self.scan.words(counter);
        out.matched = None;
        out.run = 0;
        out.task_prefix = task_prefix;
        Some(())
    }
}

/// How a remembered stamp is read in a line of its shape.
#[derive(Clone, Copy, Debug)]
enum Reread {
    /// Whole, by its reader, at bytes `at..end`: to the same length and kind.
    Whole { at: u32, end: u32, kind: StampKind },
    /// Only its time of day, `HH:MM:SS[.frac]` at bytes `at..end`, when the stamp's other
    /// bytes are the learned line's: the stamp is then its date's seconds (`day`, a whole
    /// number, as the reader adds them) plus the time of day. Most of a file's lines
    /// share their date.
    Clock {
        at: u32,
        end: u32,
        day: f64,
        calendar: Option<Option<u16>>,
    },
}

impl Reread {
    /// The bytes read again; the others must be the learned line's.
    fn span(&self) -> (usize, usize) {
        match *self {
            Reread::Whole { at, end, .. } | Reread::Clock { at, end, .. } => {
                (at as usize, end as usize)
            }
        }
    }

    /// How the stamp `stamp`, read by `reader` at `at..end` of `line`, is read again.
    fn of(line: &str, at: usize, end: usize, stamp: &Stamp) -> Reread {
        let whole = Reread::Whole {
            at: at as u32,
            end: end as u32,
            kind: StampKind::of(stamp),
        };
        let (value, calendar) = match *stamp {
            Stamp::Calendar {
                year,
                second_of_year,
            } => (second_of_year, Some(year)),
            Stamp::TimeOfDay(v) => (v, None),
            Stamp::Uptime(_) => return whole,
        };
        let b = &line.as_bytes()[at..end];
        let clock = (0..b.len().saturating_sub(7)).find(|&p| b[p + 2] == b':' && b[p + 5] == b':');
        let Some((p, (tod, len))) =
            clock.and_then(|p| time::time_of_day_at(line, at + p).map(|t| (p, t)))
        else {
            return whole;
        };
        let day = (value - tod).round();
        // the reader's sum, exactly: a whole number of days plus the time of day
        let exact = day >= 0.0
            && day % 86_400.0 == 0.0
            && day + tod == value
            && (calendar.is_some() || day == 0.0);
        if !exact || at + p + len > end {
            return whole;
        }
        Reread::Clock {
            at: (at + p) as u32,
            end: (at + p + len) as u32,
            day,
            calendar,
        }
    }

    /// The stamp read again in `line`, if it reads as the learned one did.
    fn read(&self, line: &str, reader: StampReader) -> Option<Stamp> {
        match *self {
            Reread::Whole { at, end, kind } => {
                let (stamp, len) = reader.read(line, at as usize)?;
                (len == (end - at) as usize && StampKind::of(&stamp) == kind).then_some(stamp)
            }
            Reread::Clock {
                at,
                end,
                day,
                calendar,
            } => {
                let (tod, len) = time::time_of_day_at(line, at as usize)?;
                if len != (end - at) as usize {
                    return None;
                }
                Some(match calendar {
                    Some(year) => Stamp::Calendar {
                        year,
                        second_of_year: day + tod,
                    },
                    None => Stamp::TimeOfDay(tod),
                })
            }
        }
    }
}

/// A stamp's reference and form, which a stamp read again must keep.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum StampKind {
    Dated,
    Undated,
    TimeOfDay,
    Uptime,
}

impl StampKind {
    fn of(s: &Stamp) -> StampKind {
        match s {
            Stamp::Calendar { year: Some(_), .. } => StampKind::Dated,
            Stamp::Calendar { year: None, .. } => StampKind::Undated,
            Stamp::TimeOfDay(_) => StampKind::TimeOfDay,
            Stamp::Uptime(_) => StampKind::Uptime,
        }
    }
}

/// The shapes of one file's lines.
#[derive(Default)]
pub(crate) struct ShapeCache {
    shapes: Vec<Shape>,
    /// Each shape's place in `shapes`, by its hash.
    by_key: HashMap<u64, usize, lexicon::BuildSkeletonHasher>,
    /// The shape of the last line read: the next line is most often of it, which a
    /// comparison tells without hashing the line.
    last: Option<usize>,
    /// Shapes learned so far: lines read through one shape with none learned between
    /// them have the same prefixes, stamps aside.
    learned: u64,
}

/// A remembered shape as it stands: lines read through one version have the same
/// prefixes, stamps aside.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ShapeVersion {
    shape: usize,
    learned: u64,
}

impl ShapeCache {
    /// The key of `line`'s shape.
    pub(crate) fn key(line: &str) -> u64 {
        lexicon::shape(line)
    }

    /// What `line` reads to, into `out`, when it is of the last line's shape and reads
    /// as the line that shape was learned from did (see the module).
    pub(crate) fn recall_last(
        &self,
        line: &str,
        task_prefix: TaskPrefix,
        out: &mut PreAt,
    ) -> Option<ShapeVersion> {
        let i = self.last?;
        let s = &self.shapes[i];
        if !lexicon::same_shape(line, &s.line) {
            return None;
        }
        s.read(line, task_prefix, out)?;
        Some(self.version(i))
    }

    fn version(&self, shape: usize) -> ShapeVersion {
        ShapeVersion {
            shape,
            learned: self.learned,
        }
    }

    /// What `line` (of shape `key`) reads to, into `out`, when a line of its shape was
    /// learned and the line reads as it did (see the module); `None` otherwise.
    pub(crate) fn recall(
        &mut self,
        key: u64,
        line: &str,
        task_prefix: TaskPrefix,
        out: &mut PreAt,
    ) -> Option<ShapeVersion> {
        let i = *self.by_key.get(&key)?;
        // a line whose hash only collides with the shape's is not of it
        if !lexicon::same_shape(line, &self.shapes[i].line) {
            return None;
        }
        self.shapes[i].read(line, task_prefix, out)?;
        self.last = Some(i);
        Some(self.version(i))
    }

    /// Remembers what `line` (of shape `key`) read to, `stamps` the stamps its prefixes
    /// held (the caller learns no line whose reading refused a stamp for its values).
    pub(crate) fn learn(
        &mut self,
        key: u64,
        line: &str,
        task_prefix: TaskPrefix,
        origin: &OriginAt,
        stamps: Stamps,
        (scan, scans): (Cached, &mut ScanCache),
    ) -> Option<ShapeVersion> {
        if stamps.incomplete || line.len() <= origin.message_at() {
            return None;
        }
        let mut rereads = [(
            Reread::Whole {
                at: 0,
                end: 0,
                kind: StampKind::Uptime,
            },
            StampReader::Any,
        ); MAX_STAMPS];
        for (i, &(a, e, reader)) in stamps.at[..stamps.n].iter().enumerate() {
            let (a, e) = (a as usize, e as usize);
            let (stamp, _) = reader.read(line, a)?;
            rereads[i] = (Reread::of(line, a, e, &stamp), reader);
        }
        let message_at = origin.message_at();
        let counter = scans
            .counter_at(&line[message_at..], &scan)
            .map(|(a, e)| (message_at + a, message_at + e));
        let shape = Shape {
            task_prefix,
            line: line.as_bytes().into(),
            stamps: rereads,
            n_stamps: stamps.n,
            chosen: stamps.chosen,
            origin: origin.clone(),
            scan,
            counter,
        };
        let i = match self.by_key.get(&key) {
            Some(&i) => {
                self.shapes[i] = shape;
                i
            }
            None => {
                if self.shapes.len() >= CAP {
                    self.shapes.clear();
                    self.by_key.clear();
                }
                self.by_key.insert(key, self.shapes.len());
                self.shapes.push(shape);
                self.shapes.len() - 1
            }
        };
        self.last = Some(i);
        self.learned += 1;
        Some(self.version(i))
    }
}

#[cfg(test)]
mod tests {
    use crate::collect::LinePreparer;

    /// Lines of every prefix form the origin reader knows, of the logs corpus and of
    /// LogHub's systems.
    fn lines() -> Vec<String> {
        let mut out: Vec<String> = [
            "[rank3]:[E1125 10:00:00.123456789 ProcessGroupNCCL.cpp:616] [Rank 3] Watchdog caught",
            "[rank0]:[titan] 2026-11-25 10:12:11,118 - root - INFO - step:   487  loss: 5.4346",
            "[default5]:Traceback (most recent call last):",
            "[1,7]<stderr>:RuntimeError: x",
            "12: iteration 5",
            "node-17:1234:1290 [3] NCCL WARN NET/IB : Got completion",
            "worker-1: [rank9]: torch.OutOfMemoryError: CUDA out of memory.",
            "E1125 10:00:00.123456 1234 ProcessGroupNCCL.cpp:1]  Some NCCL operations",
            "I321 02:07:08.123 1234 f.cc:1] x",
            "2025-11-25T10:03:12.123456+00:00 gpu-node-07 kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid=1234",
            "2025-11-25T10:03:12.123Z stderr F [rank2]:[titan] 2025-11-25 10:03:12,123 - root - INFO - step: 12",
            "Nov 25 10:00:00 node-17 kernel: mlx5_core 0000:3b:00.0: port 1 down",
            "Tue Nov 25 10:00:00 2025 x",
            "[Tue Nov 25 10:00:00 2025] NVRM: Xid 79",
            "[    9.500000] mlx5_core 0000:18:00.1: firmware version: 28.39.1002",
            "kern  :err   : [12345.678901] NVRM: Xid (PCI:0000:3b:00): 48",
            "01/02/2024 03:04:05 - INFO - __main__ - step 10",
            "[NeMo I 2024-01-02 03:04:05 exp_manager:394] Experiments will be logged",
            "(RayTrainWorker pid=3812, ip=10.0.0.5) step 10 loss 2.0",
            "[pod/trainer-worker-3/pytorch] 2024-01-02 03:04:05,678 step 10",
            "2024-01-02 03:04:05,678 12:30:45 twice",
            "[2024-01-02 03:04:05] 23:59:59 [rank1]: iteration 9",
            "10:00:00 12345.678 bare",
            "{\"__REALTIME_TIMESTAMP\":\"1764064992123456\",\"_HOSTNAME\":\"n1\",\"MESSAGE\":\"x 12\"}",
        ]
        .map(String::from)
        .to_vec();
        // the corpus, and LogHub's systems (other formats of time and host) beside it
        let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
        let mut stack: Vec<std::path::PathBuf> = [
            format!("{root}/tests/fixtures/logs"),
            format!("{root}/../shared/data/loghub-2k"),
        ]
        .map(Into::into)
        .to_vec();
        while let Some(p) = stack.pop() {
            if p.is_dir() {
                stack.extend(std::fs::read_dir(&p).unwrap().map(|e| e.unwrap().path()));
            } else if p.extension().is_some_and(|e| e == "csv") {
                continue;
            } else if let Ok(text) = std::fs::read_to_string(&p) {
                out.extend(text.lines().take(400).map(String::from));
            }
        }
        out
    }

    /// `line` with the digits of its run of digits `run` drawn again (every run: `None`);
    /// nines often, so that hours, minutes, months and days go out of range.
    fn redraw(line: &str, run: Option<usize>, next: &mut impl FnMut() -> u64) -> String {
        let mut k = 0;
        let mut in_run = false;
        line.chars()
            .map(|c| {
                let digit = c.is_ascii_digit();
                if in_run && !digit {
                    k += 1;
                }
                in_run = digit;
                match c {
                    _ if !digit || run.is_some_and(|r| r != k) => c,
                    _ if next().is_multiple_of(3) => '9',
                    _ => char::from(b'0' + (next() % 10) as u8),
                }
            })
            .collect()
    }

    /// A line read through a file's remembered shapes reads as a first reading does:
    /// lines of every prefix form and of the corpus, each again with its digits redrawn,
    /// all or one run of them (same shape, other values, invalid times among them), under
    /// both task-id rules.
    #[test]
    fn a_remembered_shape_reads_as_a_first_reading() {
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let (mut checked, mut recalled) = (0, 0);
        // a rank's own file (task ids never read) and Slurm's output (always read)
        for path in ["logs/rank3.log", "slurm-1234.out"] {
            let mut prep = LinePreparer::for_path(path);
            for line in lines() {
                // every digit redrawn, or one run's (a stamp's seconds alone, its date alone)
                let runs = [None; 4].into_iter().chain((0..8).map(Some));
                let variants: Vec<String> = std::iter::once(line.clone())
                    .chain(runs.map(|run| redraw(&line, run, &mut next)))
                    .collect();
                for v in &variants {
                    let remembered = prep.recalls(v);
                    let got = prep.prepare_one(v);
                    let first = LinePreparer::for_path(path).prepare_one(v);
                    assert_eq!(got.origin, first.origin, "{path}: {v:?}");
                    assert_eq!(got.words, first.words, "{path}: {v:?}");
                    assert_eq!(got.matched.is_some(), first.matched.is_some(), "{v:?}");
                    checked += 1;
                    recalled += remembered as usize;
                }
            }
        }
        // most redrawn lines are read through their shape
        assert!(recalled * 2 > checked, "{recalled} of {checked}");
    }
}
