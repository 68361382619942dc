//! The streaming pass: every line of every file once, in file order, keeping only what
//! the verdict needs and bounded whatever the logs' size: the lines a signature matched
//! (the first few per file and signature, the rest counted), the launcher's failure
//! summaries, where each rank's progress stood, the joins between names (NCCL's host and
//! pid to ranks, IP addresses to hosts), and for the statistical part the templates of
//! error-looking lines no signature knows.

use crate::elastic::{self, WorkerFailure};
use crate::lexicon;
use crate::node_service;
use crate::origin::{self, TaskPrefix};
use crate::progress::{self, Marker};
use crate::shapes::{ShapeCache, ShapeVersion};
use crate::signatures::{exit, Captured, Matcher, Reading, Role};
use crate::source::{self, FileKind, FileSource};
use crate::stats::{Anomaly, Templates};
use crate::time::{self, Stamp};
use crate::traceback::{Frame, Step, Traceback};
use flare_model::{FailureCategory, JobStage, LogSignature};
use regex::Regex;
use std::collections::HashMap;
use std::sync::OnceLock;

/// Bounds on what the pass keeps.
#[derive(Clone, Debug)]
pub struct Limits {
    /// Lines kept per file and signature; the rest are counted.
    pub hits_per_signature: usize,
    /// Bytes of a line kept as evidence.
    pub line_bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            hits_per_signature: 8,
            line_bytes: 2_000,
        }
    }
}

/// A file as the pass knows it.
pub struct FileState {
    pub path: String,
    pub source: FileSource,
    pub lines: u64,
    /// Lines per signature, all of them (hits keep only the first few).
    pub signature_lines: HashMap<LogSignature, u64>,
    /// The writers of the file, found by `stream_index`; `last_stream` is the one the
    /// previous line came from (most lines come from the writer of the line before).
    streams: Vec<(StreamKey, Stream)>,
    stream_index: HashMap<StreamKey, usize>,
    last_stream: usize,
    /// The last stage and iteration any writer of the file announced (a console that
    /// interleaves ranks prints progress without their prefixes).
    last_stage: Option<JobStage>,
    last_iteration: Option<u64>,
    summary: elastic::Summary,
    prep: LinePreparer,
}

impl FileState {
    /// The writers the file held: (rank, local rank, host).
    pub fn stream_keys(
        &self,
    ) -> impl Iterator<Item = (Option<u32>, Option<u32>, Option<String>)> + '_ {
        self.streams.iter().map(|(k, _)| k.clone())
    }

    /// Each writer's last stage and iteration.
    pub fn stream_progress(
        &self,
    ) -> impl Iterator<Item = (&StreamKey, Option<JobStage>, Option<u64>)> + '_ {
        self.streams.iter().map(|(k, s)| (k, s.stage, s.iteration))
    }

    /// The last iteration any of its writers reached.
    pub fn last_iteration(&self) -> Option<u64> {
        self.streams.iter().filter_map(|(_, s)| s.iteration).max()
    }

    /// The writer (rank, local rank, host) among the file's, if it wrote before: most
    /// lines come from the writer of the line before.
    fn find_stream(
        &self,
        rank: Option<u32>,
        local_rank: Option<u32>,
        host: Option<&str>,
    ) -> Option<usize> {
        match self.streams.get(self.last_stream) {
            Some((k, _)) if k.0 == rank && k.1 == local_rank && k.2.as_deref() == host => {
                Some(self.last_stream)
            }
            _ => self
                .stream_index
                .get(&(rank, local_rank, host.map(str::to_string)))
                .copied(),
        }
    }
}

/// One writer inside a file (a rank in a console that interleaves ranks): (rank, local
/// rank, host).
pub type StreamKey = (Option<u32>, Option<u32>, Option<String>);

#[derive(Default)]
struct Stream {
    traceback: Traceback,
    stage: Option<JobStage>,
    iteration: Option<u64>,
    last_time: Option<Stamp>,
    /// The last timestamp as written (empty: none), its buffer reused.
    last_time_text: String,
}

/// A line a signature matched (or an exception ending a traceback), where it was, and
/// what the rank was doing.
#[derive(Clone, Debug)]
pub struct Hit {
    pub file: usize,
    pub line: u64,
    pub text: String,
    pub rank: Option<u32>,
    pub local_rank: Option<u32>,
    pub host: Option<String>,
    pub gpu: Option<u32>,
    pub pid: Option<u32>,
    pub time: Option<Stamp>,
    pub time_text: Option<String>,
    pub reading: Reading,
    pub captured: Captured,
    /// The innermost frame of the job's code, for an exception ending a traceback.
    pub location: Option<Frame>,
    /// The torch.distributed call the exception was raised in.
    pub collective: Option<String>,
    pub stage: Option<JobStage>,
    pub iteration: Option<u64>,
    /// The order lines arrived in.
    pub order: u64,
    /// Its template was seen in the logs of earlier good runs.
    pub in_baseline: bool,
    /// Listed first in torchrun's summary (`Root Cause (first observed failure)`).
    pub first_observed: bool,
}

/// A line as the fold reads it.
struct Pre<'a> {
    o: origin::Origin<'a>,
    words: lexicon::Words,
    matched: Option<Box<crate::signatures::Match>>,
}

/// What a line says by itself, without the pass's state: who wrote it, the words a scan
/// found, the signature it matches.
#[derive(Default)]
pub(crate) struct PreAt {
    pub(crate) origin: origin::OriginAt,
    pub(crate) words: lexicon::Words,
    /// Boxed: a match is a few hundred bytes and few lines have one, so the lines of a
    /// chunk stay small to write and move.
    pub(crate) matched: Option<Box<crate::signatures::Match>>,
    /// Lines just before this one, quiet and read as it was (see [`quiet`]), folded
    /// with it.
    pub(crate) run: u32,
    /// Whether `srun -l` task ids were read in it (the run's lines are read again so
    /// where the pass's state needs each of them).
    pub(crate) task_prefix: TaskPrefix,
}

/// Lines of a file read by a [`LinePreparer`], for [`Collector::fold`].
pub struct Prepared(Vec<PreAt>);

/// What a line's progress marker is, its numbers aside.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum MarkerKind {
    Iteration,
    CheckpointAt,
    Stage(JobStage),
}

/// Whether a line may go on a quiet run, and its marker's kind. A quiet run: consecutive
/// lines of a file read through one version of a remembered shape (so with the same
/// prefixes: one writer), each matching no signature, not error-like, tying no names,
/// opening no traceback or torchrun summary, with markers of one kind. Where the writer
/// is in no traceback and the file in no summary, such a line changes nothing that the
/// next line of its run does not set again (the writer's time, stage and iteration), so
/// a run is folded as its last line and its other lines counted: most lines of a large
/// job are such runs (a rank's progress lines).
fn quiet(message: &str, p: &PreAt) -> Option<Option<MarkerKind>> {
    let quiet = p.matched.is_none()
        && !p.words.error_like
        && !p.words.joins
        && !Traceback::opens(message)
        && !elastic::Summary::opens(message);
    quiet.then(|| {
        progress::marker_scanned(message, &p.words).map(|m| match m {
            Marker::Iteration(_) => MarkerKind::Iteration,
            Marker::CheckpointAt(_) => MarkerKind::CheckpointAt,
            Marker::Stage(s) => MarkerKind::Stage(s),
        })
    })
}

/// Reads what each line of one file says by itself: the costly part of the pass, which
/// needs no state but the file's own (whether it writes `srun -l` task ids), so files
/// can be prepared on several threads while one [`Collector`] folds them in order.
pub struct LinePreparer {
    source: FileSource,
    cache: lexicon::ScanCache,
    shapes: ShapeCache,
    /// (lines that start with a task id, lines): `srun -l` ids are read once the file
    /// shows it writes them.
    task_votes: (u32, u32),
}

impl LinePreparer {
    pub fn for_path(path: &str) -> LinePreparer {
        LinePreparer {
            source: source::classify(path),
            cache: lexicon::ScanCache::default(),
            shapes: ShapeCache::default(),
            task_votes: (0, 0),
        }
    }

    /// Whether `srun -l` task ids are read in this file: Slurm's own output, or a file
    /// without a rank of its own whose lines mostly start with one.
    fn task_prefix(&mut self, line: &str) -> TaskPrefix {
        if self.source.rank.is_some() || self.source.kind == FileKind::System {
            return TaskPrefix::Ignored;
        }
        if self.source.kind == FileKind::Scheduler {
            return TaskPrefix::Allowed;
        }
        let t = line.trim_start();
        let digits = t.bytes().take_while(u8::is_ascii_digit).count();
        let looks = digits > 0 && digits <= 5 && t[digits..].starts_with(": ");
        self.task_votes.1 += 1;
        if looks {
            self.task_votes.0 += 1;
        }
        let (yes, all) = self.task_votes;
        if yes >= 3 && yes * 2 >= all {
            TaskPrefix::Allowed
        } else {
            TaskPrefix::Ignored
        }
    }

    /// The next lines of the file, in order, quiet runs folded into their last line.
    pub fn prepare<'t>(&mut self, texts: impl IntoIterator<Item = &'t str>) -> Prepared {
        let mut out: Vec<PreAt> = Vec::new();
        // the last line's shape version and marker, when it may go on a quiet run
        let mut run: Option<(ShapeVersion, Option<MarkerKind>)> = None;
        let mut p = PreAt::default();
        for t in texts {
            let task_prefix = self.task_prefix(t);
            let version = self.prepare_into(t, task_prefix, &mut p);
            let now = version.and_then(|v| Some((v, quiet(&t[p.origin.message_at()..], &p)?)));
            match out.last_mut() {
                Some(last) if now.is_some() && now == run => {
                    // read through the same shape version: only its time and words differ
                    last.origin.time = p.origin.time;
                    last.words = p.words;
                    last.run += 1;
                }
                _ => out.push(std::mem::take(&mut p)),
            }
            run = now;
        }
        Prepared(out)
    }

    /// The next line of the file.
    pub(crate) fn prepare_one(&mut self, t: &str) -> PreAt {
        let task_prefix = self.task_prefix(t);
        self.prepare_under(t, task_prefix)
    }

    /// A line of the file with task ids read or not as `task_prefix` says.
    fn prepare_under(&mut self, t: &str, task_prefix: TaskPrefix) -> PreAt {
        let mut p = PreAt::default();
        self.prepare_into(t, task_prefix, &mut p);
        p
    }

    /// A line of the file into `p`, with task ids read or not as `task_prefix` says: the
    /// version of the remembered shape it was read through, if any.
    fn prepare_into(
        &mut self,
        t: &str,
        task_prefix: TaskPrefix,
        p: &mut PreAt,
    ) -> Option<ShapeVersion> {
        let mut key = None;
        let recalled = self.shapes.recall_last(t, task_prefix, p).or_else(|| {
            let k = *key.insert(ShapeCache::key(t));
            self.shapes.recall(k, t, task_prefix, p)
        });
        if let Some(version) = recalled {
            if p.words.error_like && node_service::is_node_service(t) {
                p.words = lexicon::Words::default();
            }
            return Some(version);
        }
        let key = key.unwrap_or_else(|| ShapeCache::key(t));
        time::values_refused();
        let mut stamps = origin::Stamps::default();
        let o = origin::parse_noting(t, task_prefix, &mut stamps);
        let refused = time::values_refused();
        let (scan, cached) = self.cache.scan_noting(o.message);
        let origin = o.at(t);
        let version = cached.filter(|_| !refused).and_then(|c| {
            self.shapes
                .learn(key, t, task_prefix, &origin, stamps, (c, &mut self.cache))
        });
        *p = PreAt {
            origin,
            words: scan.words(),
            matched: None,
            run: 0,
            task_prefix,
        };
        // a node's own services' lines (sshd, cron: see `node_service`) are no evidence
        if (!scan.rows.is_empty() || scan.error_like) && node_service::is_node_service(t) {
            p.words = lexicon::Words::default();
        } else if !scan.rows.is_empty() {
            p.matched = Matcher::get()
                .find_among(o.message, &scan.rows)
                .map(Box::new);
        }
        version
    }

    /// Whether `line` would be read through a remembered shape.
    #[cfg(test)]
    pub(crate) fn recalls(&mut self, line: &str) -> bool {
        let task_prefix = self.task_prefix(line);
        let p = &mut PreAt::default();
        self.shapes.recall_last(line, task_prefix, p).is_some()
            || self
                .shapes
                .recall(ShapeCache::key(line), line, task_prefix, p)
                .is_some()
    }
}

/// What the pass gathered.
pub struct Collected {
    pub files: Vec<FileState>,
    pub hits: Vec<Hit>,
    pub anomalies: Vec<Anomaly>,
    pub templates: Templates,
    /// IP address -> host, learned from NCCL's `Using` lines.
    pub ip_hosts: HashMap<String, String>,
    /// (host, pid) -> rank, learned from NCCL's `Init COMPLETE` and torchrun's lines.
    pub pid_ranks: HashMap<(String, u32), u32>,
    pub lines: u64,
    pub baseline_lines: u64,
}

/// The pass over a job's logs (and, first, over earlier good runs' logs).
pub struct Collector {
    limits: Limits,
    c: Collected,
    order: u64,
}

/// Phrases of the lines that tie names together (see [`Joins`]): the scan says which
/// lines may hold one.
pub(crate) const JOIN_PHRASES: [&str; 2] = ["Init COMPLETE", "Using"];

struct Joins {
    init_complete: Regex,
    oob_address: Regex,
    /// A rank the message names (`[Rank 3]`, `for rank 3`, `Rank 3:`).
    message_rank: Regex,
}

fn joins() -> &'static Joins {
    static J: OnceLock<Joins> = OnceLock::new();
    J.get_or_init(|| Joins {
        // NCCL `comm 0x.. rank 3 nranks 16 cudaDev 3 ... - Init COMPLETE`
        init_complete: Regex::new(
            r"comm 0x[0-9a-f]+ rank (\d+) nranks (\d+) cudaDev \d+.* - Init COMPLETE",
        )
        .expect("compiles"),
        // `Bootstrap : Using eth0:10.0.0.5<0>`, `NET/IB : Using [0]mlx5_0:1/IB ; OOB eth0:10.0.0.5<0>`
        oob_address: Regex::new(
            r"(?:Bootstrap ?: Using|OOB) \[?\w*\]?[\w.-]+:(\d{1,3}(?:\.\d{1,3}){3})<",
        )
        .expect("compiles"),
        message_rank: Regex::new(r"(?:^|[\[\s(])(?:global )?[Rr]ank[:=\s]\s*(\d{1,7})\b")
            .expect("compiles"),
    })
}

fn cut(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_string();
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}

impl Collector {
    pub fn new(limits: Limits) -> Self {
        Collector {
            limits,
            c: Collected {
                files: Vec::new(),
                hits: Vec::new(),
                anomalies: Vec::new(),
                templates: Templates::new(),
                ip_hosts: HashMap::new(),
                pid_ranks: HashMap::new(),
                lines: 0,
                baseline_lines: 0,
            },
            order: 0,
        }
    }

    /// A line of an earlier good run's logs: its template becomes "seen in good runs".
    pub fn baseline_line(&mut self, text: &str) {
        let o = origin::parse(text, TaskPrefix::Ignored);
        self.c.templates.baseline(o.message);
        self.c.baseline_lines += 1;
    }

    /// Starts a file of the failed job; its lines follow with [`Collector::line`].
    pub fn file(&mut self, path: &str) -> usize {
        self.c.files.push(FileState {
            path: path.to_string(),
            source: source::classify(path),
            lines: 0,
            signature_lines: HashMap::new(),
            streams: Vec::new(),
            stream_index: HashMap::new(),
            last_stream: 0,
            last_stage: None,
            last_iteration: None,
            summary: elastic::Summary::default(),
            prep: LinePreparer::for_path(path),
        });
        self.c.files.len() - 1
    }

    /// Starts a file written on `host` (one a node's agent sent): the host holds where
    /// the file's path names none.
    pub fn file_on_host(&mut self, path: &str, host: &str) -> usize {
        let id = self.file(path);
        let source = &mut self.c.files[id].source;
        if source.host.is_none() {
            source.host = Some(host.to_string());
        }
        id
    }

    /// Ends a file (a summary entry still open is read).
    pub fn end_file(&mut self, file: usize) {
        if let Some(wf) = self.c.files[file].summary.finish() {
            self.worker_failure(file, wf);
        }
    }

    /// One line of `file`, in order.
    pub fn line(&mut self, file: usize, text: &str) {
        self.lines(file, &[text]);
    }

    /// Line number `line_no` of `file` (after the lines before it, in order): an
    /// excerpt's lines keep their numbers in the file they came from.
    pub fn numbered_line(&mut self, file: usize, line_no: u64, text: &str) {
        let fs = &mut self.c.files[file];
        fs.lines = fs.lines.max(line_no.saturating_sub(1));
        self.lines(file, &[text]);
    }

    /// Lines of `file`, in order.
    pub fn lines(&mut self, file: usize, texts: &[&str]) {
        let prepared = self.c.files[file].prep.prepare(texts.iter().copied());
        self.fold(file, texts.iter().copied(), prepared);
    }

    /// Lines of `file` that a [`LinePreparer`] of the same file read (on another thread,
    /// in order), folded into the pass in order.
    pub fn fold<'t>(
        &mut self,
        file: usize,
        texts: impl IntoIterator<Item = &'t str>,
        mut prepared: Prepared,
    ) {
        // the prepared lines read in place: moving each out would copy it, on the one
        // thread every line goes through
        let mut texts = texts.into_iter();
        for p in prepared.0.iter_mut() {
            if p.run > 0 {
                self.fold_run(file, &mut texts, p);
            }
            let Some(t) = texts.next() else {
                break;
            };
            let o = p.origin.of(t);
            self.fold_line(
                file,
                t,
                Pre {
                    o,
                    words: p.words,
                    matched: p.matched.take(),
                },
            );
        }
    }

    /// The lines of a quiet run before its last line, `last` (see [`quiet`]): counted
    /// where the writer is in no traceback and the file in no summary, else read again
    /// and folded one by one.
    fn fold_run<'t>(
        &mut self,
        file: usize,
        texts: &mut impl Iterator<Item = &'t str>,
        last: &PreAt,
    ) {
        let mut run = (0..last.run).map_while(|_| texts.next());
        let Some(first) = run.next() else {
            return;
        };
        let fs = &self.c.files[file];
        // the run's lines have the last one's prefixes: its writer's
        let o = last.origin.of(first);
        let writer = fs.find_stream(
            o.rank.or(fs.source.rank),
            o.local_rank.or(fs.source.local_rank),
            o.host.or(fs.source.host.as_deref()),
        );
        let quiet =
            fs.summary.idle() && writer.is_none_or(|i| !fs.streams[i].1.traceback.in_traceback());
        if quiet {
            let n = 1 + run.count() as u64;
            self.c.lines += n;
            self.order += n;
            self.c.files[file].lines += n;
            return;
        }
        for t in std::iter::once(first).chain(run) {
            let p = self.c.files[file].prep.prepare_under(t, last.task_prefix);
            let o = p.origin.of(t);
            self.fold_line(
                file,
                t,
                Pre {
                    o,
                    words: p.words,
                    matched: p.matched,
                },
            );
        }
    }

    /// One line, with what it says by itself already read.
    fn fold_line(&mut self, file: usize, text: &str, p: Pre) {
        self.c.lines += 1;
        self.order += 1;
        let Pre { o, words, matched } = p;
        let fs = &mut self.c.files[file];
        fs.lines += 1;
        let line_no = fs.lines;

        // torchrun's failure summary
        match fs.summary.step(o.message, line_no, text) {
            elastic::Seen::Consumed => return,
            elastic::Seen::Ended(wf) => {
                self.worker_failure(file, wf);
                return;
            }
            elastic::Seen::Other => {}
        }
        let fs = &mut self.c.files[file];
        let inside = fs.summary.current();
        let (mut rank, mut local_rank) = (
            o.rank.or(fs.source.rank),
            o.local_rank.or(fs.source.local_rank),
        );
        let mut host_ref: Option<&str> = o.host.or(fs.source.host.as_deref());
        if let Some((r, l, h)) = inside {
            rank = rank.or(r);
            local_rank = local_rank.or(l);
            host_ref = host_ref.or(h);
        }
        let index = fs.find_stream(rank, local_rank, host_ref);
        let host: Option<String> = host_ref.map(str::to_string).filter(|_| index.is_none());
        let index = index.unwrap_or_else(|| {
            let key: StreamKey = (rank, local_rank, host);
            fs.stream_index.insert(key.clone(), fs.streams.len());
            fs.streams.push((key, Stream::default()));
            fs.streams.len() - 1
        });
        fs.last_stream = index;
        let stream = &mut fs.streams[index].1;
        if let Some(t) = o.time {
            stream.last_time = Some(t);
            stream.last_time_text.clear();
            stream.last_time_text.push_str(o.time_text.unwrap_or(""));
        }
        let step = stream.traceback.step(o.message);
        let in_traceback = stream.traceback.in_traceback();
        if let Some(m) = progress::marker_scanned(o.message, &words) {
            match m {
                Marker::Iteration(n) | Marker::CheckpointAt(n) => {
                    stream.iteration = Some(n);
                    stream.stage = Some(m.stage());
                }
                Marker::Stage(s) => stream.stage = Some(s),
            }
        }
        let (stage, iteration) = (stream.stage, stream.iteration);
        let time = stream.last_time;
        let has_time_text = !stream.last_time_text.is_empty();
        if stage.is_some() {
            fs.last_stage = stage;
        }
        if iteration.is_some() {
            fs.last_iteration = iteration;
        }
        let (stage, iteration) = (stage.or(fs.last_stage), iteration.or(fs.last_iteration));
        // the host and the time as written, owned, only for the few lines kept
        let owned = |c: &Collected| {
            let (k, s) = &c.files[file].streams[index];
            (k.2.clone(), has_time_text.then(|| s.last_time_text.clone()))
        };
        if words.joins && JOIN_PHRASES.iter().any(|p| o.message.contains(p)) {
            let (host, _) = owned(&self.c);
            self.learn(&o, rank, host.as_deref());
        }

        let exception = match &step {
            Step::Exception {
                location,
                chained,
                stage,
                collective,
            } => Some((location.clone(), *chained, *stage, collective.clone())),
            Step::Other => None,
        };
        let template = self.c.templates.add(
            o.message,
            words.error_like,
            matched.is_some() || exception.is_some(),
        );
        let m = match (matched, &exception) {
            (Some(m), _) => {
                let m = *m;
                Some((m.reading, m.captures))
            }
            // a traceback ended in an exception no row knows (`StopIteration`)
            (None, Some(_)) => Some((
                Reading {
                    signature: LogSignature::PythonException,
                    role: Role::Symptom,
                    category: FailureCategory::Unknown,
                    weight: 30,
                    meaning: "the program raised an exception".into(),
                    action: "read the exception and the traceback above it".into(),
                    restart_helps: None,
                    stage: None,
                },
                Captured::default(),
            )),
            (None, None) => None,
        };
        let Some((mut reading, captured)) = m else {
            // the statistical part: error-looking lines of no known signature
            if let Some(t) = template.filter(|t| t.error_like && !in_traceback) {
                let (host, _) = owned(&self.c);
                let a = Anomaly {
                    file,
                    line: line_no,
                    text: cut(text, self.limits.line_bytes),
                    template: t.id,
                    rank,
                    host,
                    time,
                    stage,
                    iteration,
                    order: self.order,
                };
                self.c.templates.record(&mut self.c.anomalies, a);
            }
            return;
        };
        let (location, chained, frames_stage, collective) =
            exception.unwrap_or((None, false, None, None));
        if chained {
            // raised while handling the exception before it: that one is the cause
            reading.weight = reading.weight.saturating_sub(10);
        }
        // a failure whose line has no rank prefix may name its rank in the message
        // (`[Rank 3] ...`, `Rank 3: found NaN`); a mismatch names two ranks, neither at fault
        let message_rank = (rank.is_none()
            && captured.rank.is_none()
            && reading.role != Role::Cascade
            && reading.category != FailureCategory::CollectiveMismatch)
            .then(|| joins().message_rank.captures(o.message))
            .flatten()
            .and_then(|c| c[1].parse::<u32>().ok());
        let (host, time_text) = owned(&self.c);
        let fs = &mut self.c.files[file];
        let seen = fs.signature_lines.entry(reading.signature).or_insert(0);
        *seen += 1;
        if *seen as usize > self.limits.hits_per_signature {
            return;
        }
        self.c.hits.push(Hit {
            file,
            line: line_no,
            text: cut(text, self.limits.line_bytes),
            rank: rank
                .or(captured.rank.filter(|_| reading.role != Role::Cascade))
                .or(message_rank),
            local_rank: local_rank.or(captured.local_rank),
            host: host.or_else(|| captured.host.clone()),
            gpu: o.local_gpu.or(captured.gpu),
            pid: o.pid.or(captured.pid),
            time,
            time_text,
            reading,
            captured,
            location,
            collective,
            // what the traceback's frames were doing outweighs the last progress line
            stage: frames_stage.or(stage),
            iteration,
            order: self.order,
            in_baseline: template.is_some_and(|t| t.in_baseline),
            first_observed: false,
        });
    }

    /// Joins between names that later lines need: NCCL's `Init COMPLETE` ties a host's
    /// pid to a rank, its `Using` lines tie an IP address to a host.
    fn learn(&mut self, o: &origin::Origin, rank: Option<u32>, host: Option<&str>) {
        let m = o.message;
        let j = joins();
        if let (Some(c), Some(h), Some(pid)) = (j.init_complete.captures(m), host, o.pid) {
            let comm_rank: u32 = c[1].parse().unwrap_or(0);
            let nranks: u32 = c[2].parse().unwrap_or(0);
            // the world communicator's rank is the global rank; others' are not
            let r = rank.unwrap_or(comm_rank);
            if rank.is_some() || nranks > 1 {
                self.c.pid_ranks.entry((h.to_string(), pid)).or_insert(r);
            }
        }
        if let (Some(c), Some(h)) = (j.oob_address.captures(m), host) {
            self.c
                .ip_hosts
                .entry(c[1].to_string())
                .or_insert_with(|| h.to_string());
        }
    }

    /// A worker's entry in torchrun's summary, as a hit of its rank.
    fn worker_failure(&mut self, file: usize, wf: WorkerFailure) {
        let signal = wf.signal.or_else(|| wf.exit_code.and_then(exit::signal_of));
        if wf.exit_code.is_none() && signal.is_none() {
            return;
        }
        let reading = exit::ended(LogSignature::ProcessExit, signal, wf.exit_code);
        let fs = &mut self.c.files[file];
        *fs.signature_lines.entry(reading.signature).or_insert(0) += 1;
        self.order += 1;
        self.c.hits.push(Hit {
            file,
            line: wf.line,
            text: cut(&wf.text, self.limits.line_bytes),
            rank: wf.rank,
            local_rank: wf.local_rank,
            host: wf.host.clone(),
            gpu: None,
            pid: None,
            time: wf.time,
            time_text: None,
            reading,
            captured: Captured::default(),
            location: None,
            collective: None,
            stage: None,
            iteration: None,
            order: self.order,
            in_baseline: false,
            first_observed: wf.first_observed,
        });
    }

    pub fn finish(self) -> Collected {
        self.c
    }

    /// The verdict on the lines so far, the pass going on (a server following a job's
    /// logs as its agents send them). Costs what the kept hits and files cost, not the
    /// lines read.
    pub fn diagnosis(&self) -> crate::LogDiagnosis {
        crate::verdict::verdict(&self.c, self.c.hits.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What a pass gathered, as text to compare.
    fn gathered(c: Collector) -> String {
        let c = c.finish();
        let files: Vec<String> = c
            .files
            .iter()
            .map(|f| {
                let mut sig: Vec<_> = f.signature_lines.iter().collect();
                sig.sort();
                let progress: Vec<_> = f.stream_progress().collect();
                let times: Vec<_> = f.streams.iter().map(|(_, s)| s.last_time).collect();
                format!("{} {} {sig:?} {progress:?} {times:?}", f.path, f.lines)
            })
            .collect();
        let mut joins: Vec<_> = c.ip_hosts.iter().map(|(a, b)| format!("{a}={b}")).collect();
        joins.extend(c.pid_ranks.iter().map(|(a, b)| format!("{a:?}={b}")));
        joins.sort();
        format!(
            "{} {files:#?}\n{:#?}\n{:#?}\n{joins:?}",
            c.lines, c.hits, c.anomalies
        )
    }

    /// A rank's file: progress lines, a traceback that never ends with progress lines
    /// inside it, an error, torchrun's summary with lines of one shape inside it, progress
    /// again, a traceback that ends, one given up for its length.
    fn a_rank_file() -> Vec<String> {
        let step = |i: u32| {
            format!(
                "[rank3]:[titan] 2026-11-25 10:{:02}:{:02},{:03} - root - INFO - step: {i:5}  loss: 2.{i:04}",
                i / 60 % 60,
                i % 60,
                i % 1000
            )
        };
        let mut lines: Vec<String> = (0..300).map(step).collect();
        lines.push("[rank3]:Traceback (most recent call last):".into());
        lines.push("[rank3]:  File \"/work/train.py\", line 88, in <module>".into());
        lines.extend((300..400).map(step));
        lines.push("[rank3]:worker 3 failed to prefetch batch 17".into());
        lines.extend((400..450).map(step));
        lines.push("Failures:".into());
        lines.extend((0..40).map(|i| format!("  time      : 2026-11-25_10:00:{i:02}")));
        lines.push("[1]:".into());
        lines.push("  exitcode  : -9 (pid: 1234)".into());
        lines.extend((0..40).map(|i| format!("  time      : 2026-11-25_10:01:{i:02}")));
        lines.push("=====".into());
        lines.extend((450..900).map(step));
        lines.push("[rank3]:Traceback (most recent call last):".into());
        lines.push("[rank3]:  File \"/work/train.py\", line 40, in step".into());
        lines.extend((900..950).map(step));
        lines.push(
            "[rank3]:RuntimeError: CUDA error: an illegal memory access was encountered".into(),
        );
        lines.extend((950..1000).map(step));
        // a traceback given up after its two thousandth line: the error after it is no
        // exception of it
        lines.push("[rank3]:Traceback (most recent call last):".into());
        lines.push("[rank3]:  File \"/work/train.py\", line 41, in step".into());
        lines.extend((1000..3100).map(step));
        lines.push("[rank3]:ValueError: loss is nan".into());
        lines
    }

    /// A file folded in chunks, its quiet runs folded as their last lines, gives what
    /// the same lines folded one at a time give (where no run can form): the hits,
    /// anomalies, joins, each writer's progress and time, the line counts. Files: the
    /// rank's file above and every file of the logs corpus.
    #[test]
    fn quiet_runs_fold_as_their_lines_do() {
        let mut files: Vec<(String, Vec<String>)> = vec![("logs/rank3.log".into(), a_rank_file())];
        let dir = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../tests/fixtures/logs/corpus"
        );
        let mut stack = vec![std::path::PathBuf::from(dir)];
        while let Some(p) = stack.pop() {
            if p.is_dir() {
                stack.extend(std::fs::read_dir(&p).unwrap().map(|e| e.unwrap().path()));
            } else if let Ok(text) = std::fs::read_to_string(&p) {
                let lines = text.lines().map(String::from).collect();
                files.push((p.display().to_string(), lines));
            }
        }
        let mut folded_in_runs = 0;
        for (path, lines) in &files {
            let texts: Vec<&str> = lines.iter().map(String::as_str).collect();
            let mut chunked = Collector::new(Limits::default());
            let f = chunked.file(path);
            for chunk in texts.chunks(97) {
                chunked.lines(f, chunk);
            }
            chunked.end_file(f);
            let mut single = Collector::new(Limits::default());
            let f = single.file(path);
            for t in &texts {
                single.line(f, t);
            }
            single.end_file(f);
            assert_eq!(gathered(chunked), gathered(single), "{path}");
            let prepared = LinePreparer::for_path(path).prepare(texts.iter().copied());
            folded_in_runs += texts.len() - prepared.0.len();
        }
        // most of the rank's file, and more, went in runs
        assert!(folded_in_runs > 3_000, "{folded_in_runs}");
    }
}
