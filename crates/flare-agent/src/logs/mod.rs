//! Following the job's log files (`flare agent --logs PATH`), so that the server can say
//! why a job died seconds after it did. A thread of its own tails the files ([`tail`]),
//! reads each line once (its template, for the window's counts; whether the diagnosis
//! needs it: `flare_log_diagnosis::Excerpter`) and hands the agent one bounded
//! [`LogExcerpt`] per window. The agent attaches it to the job's summary of that window,
//! or, when the job's processes are gone and no summary comes, sends it alone.
//!
//! The collector never waits on this thread: excerpts come over a channel, and file I/O
//! (a slow network file system included) happens here.

mod tail;

use crate::window::Windows;
use crate::AgentError;
use flare_logs::header::strip_header;
use flare_logs::{Miner, TemplateId};
use flare_model::summary::SUMMARY_VERSION;
use flare_model::{LogExcerpt, LogExcerptLine, LogProgressLine, TemplateCount, WindowSummary};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

pub use tail::TailStats;

/// How the files are followed.
#[derive(Clone, Debug)]
pub struct LogConfig {
    /// Files and directories (walked for log files) to follow.
    pub paths: Vec<PathBuf>,
    /// Lines sent per window at most (the rest counted as dropped).
    pub max_lines: usize,
    /// Templates whose counts are sent per window (the most frequent).
    pub top_templates: usize,
    /// How often the files are read.
    pub poll: Duration,
    /// How often the paths are scanned for new files.
    pub scan: Duration,
    /// Bytes read per poll at most, all files (a backlog is read over several polls).
    pub read_budget: usize,
}

impl LogConfig {
    pub fn new(paths: Vec<PathBuf>) -> LogConfig {
        LogConfig {
            paths,
            max_lines: 2_000,
            top_templates: 32,
            poll: Duration::from_millis(200),
            scan: Duration::from_secs(1),
            read_budget: 16 << 20,
        }
    }
}

/// What the follower did, in total.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LogStats {
    pub lines_read: u64,
    pub lines_sent: u64,
    pub lines_dropped: u64,
    pub tail: TailStats,
}

fn now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// One window's excerpt being gathered.
struct Gathering {
    window: u64,
    excerpt: LogExcerpt,
    counts: HashMap<TemplateId, u64>,
}

impl Gathering {
    fn new(window: u64) -> Gathering {
        Gathering {
            window,
            excerpt: LogExcerpt::default(),
            counts: HashMap::new(),
        }
    }
}

/// The follower thread's state.
struct Follower {
    cfg: LogConfig,
    windows: Windows,
    tailer: tail::Tailer,
    miner: Miner,
    now: Gathering,
    stats: LogStats,
    tx: mpsc::Sender<(u64, LogExcerpt, LogStats)>,
}

impl Follower {
    fn poll(&mut self) {
        let window = self.windows.index(now_ns());
        if window != self.now.window {
            self.send(window);
        }
        let Follower {
            tailer,
            miner,
            now,
            stats,
            cfg,
            ..
        } = self;
        tailer.read(cfg.read_budget, |path, x, line| {
            stats.lines_read += 1;
            now.excerpt.lines_read += 1;
            *now.counts.entry(miner.add(strip_header(line))).or_insert(0) += 1;
            if x.line(line).is_some() {
                if now.excerpt.lines.len() < cfg.max_lines {
                    now.excerpt.lines.push(LogExcerptLine {
                        file: path.to_string_lossy().into_owned(),
                        line: x.line_no(),
                        text: line.to_string(),
                    });
                    stats.lines_sent += 1;
                } else {
                    now.excerpt.lines_dropped += 1;
                    stats.lines_dropped += 1;
                }
            }
        });
        self.stats.tail = self.tailer.stats;
    }

    /// Ends the window being gathered and starts `next`.
    fn send(&mut self, next: u64) {
        let mut done = std::mem::replace(&mut self.now, Gathering::new(next));
        for (path, t) in self.tailer.files_mut() {
            let file = path.to_string_lossy();
            done.excerpt
                .progress
                .extend(
                    t.excerpter
                        .take_progress()
                        .into_iter()
                        .map(|(writer, line, text)| LogProgressLine {
                            file: file.clone().into_owned(),
                            writer,
                            line,
                            text,
                        }),
                );
        }
        if done.excerpt.lines_read == 0 && done.excerpt.progress.is_empty() {
            return;
        }
        let mut counts: Vec<(TemplateId, u64)> = done.counts.into_iter().collect();
        counts.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        done.excerpt.templates = counts
            .into_iter()
            .take(self.cfg.top_templates)
            .filter_map(|(id, count)| {
                self.miner.template(id).map(|t| TemplateCount {
                    template: t.text(),
                    count,
                })
            })
            .collect();
        // the agent is gone when the channel is: nothing to do then
        let _ = self.tx.send((done.window, done.excerpt, self.stats));
    }
}

/// The follower, seen from the agent: excerpts by window until attached.
pub struct LogFollower {
    job: String,
    node: String,
    windows: Windows,
    grace: Duration,
    rx: mpsc::Receiver<(u64, LogExcerpt, LogStats)>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
    pending: BTreeMap<u64, LogExcerpt>,
    /// Windows of the job the agent sent a summary for, recent ones.
    sent: BTreeSet<u64>,
    pub stats: LogStats,
}

/// Windows remembered as sent.
const SENT_KEPT: usize = 256;

impl LogFollower {
    /// Starts following for `job` on `node`.
    pub fn start(
        cfg: LogConfig,
        job: String,
        node: String,
        window: Duration,
        grace: Duration,
    ) -> Result<LogFollower, AgentError> {
        let windows = Windows {
            len_ns: window.as_nanos() as u64,
        };
        let (tx, rx) = mpsc::channel();
        let stop = Arc::new(AtomicBool::new(false));
        let miner = Miner::new(flare_logs::Config::default())
            .map_err(|e| AgentError::Config(format!("log template miner: {e}")))?;
        let mut f = Follower {
            tailer: tail::Tailer::new(cfg.paths.clone()),
            now: Gathering::new(windows.index(now_ns())),
            cfg,
            windows,
            miner,
            stats: LogStats::default(),
            tx,
        };
        let stop_flag = stop.clone();
        let thread = std::thread::Builder::new()
            .name("flare-logs".into())
            .spawn(move || {
                let mut scanned: Option<Instant> = None;
                loop {
                    let stopping = stop_flag.load(Ordering::Relaxed);
                    if scanned.is_none_or(|t| t.elapsed() >= f.cfg.scan) {
                        f.tailer.scan();
                        scanned = Some(Instant::now());
                    }
                    f.poll();
                    if stopping {
                        // read what is left (a backlog takes several reads), then send
                        let mut read = f.stats.lines_read;
                        loop {
                            f.poll();
                            if f.stats.lines_read == read {
                                break;
                            }
                            read = f.stats.lines_read;
                        }
                        let next = f.now.window + 1;
                        f.send(next);
                        return;
                    }
                    std::thread::sleep(f.cfg.poll);
                }
            })
            .map_err(|source| AgentError::Thread {
                what: "log follower",
                source,
            })?;
        Ok(LogFollower {
            job,
            node,
            windows,
            grace,
            rx,
            stop,
            thread: Some(thread),
            pending: BTreeMap::new(),
            sent: BTreeSet::new(),
            stats: LogStats::default(),
        })
    }

    fn receive(&mut self) {
        while let Ok((w, x, stats)) = self.rx.try_recv() {
            self.stats = stats;
            merge_into(self.pending.entry(w).or_default(), x);
        }
    }

    /// Attaches each excerpt to the job's summary of its window in `out`; an excerpt
    /// whose window was already sent goes with the next; one whose window closed with
    /// no summary (the job's processes gone) is sent in a summary of its own. `flush`:
    /// every excerpt goes now.
    pub fn attach(&mut self, out: &mut Vec<WindowSummary>, flush: bool) {
        self.receive();
        for s in out.iter_mut().filter(|s| s.job_id == self.job) {
            if let Some(x) = self.pending.remove(&s.window) {
                merge_into(s.logs.get_or_insert_with(LogExcerpt::default), x);
            }
            self.sent.insert(s.window);
        }
        let now = now_ns();
        let open = self.windows.index(now);
        // windows the collector had its chance to close (its end and the grace past)
        let closed_before = self
            .windows
            .index(now.saturating_sub(2 * self.grace.as_nanos() as u64));
        let windows: Vec<u64> = self.pending.keys().copied().collect();
        for w in windows {
            let due = flush || w < closed_before;
            if !self.sent.contains(&w) && !due {
                continue; // its summary may still come
            }
            let x = self.pending.remove(&w).expect("listed");
            // a window already sent is not sent again (the server would replace it):
            // its lines go with the first window not sent yet
            let mut target = w;
            if self.sent.contains(&w) {
                target = open.max(w + 1);
                while self.sent.contains(&target) {
                    target += 1;
                }
            }
            if flush || target < closed_before {
                out.push(self.alone(target, x));
                self.sent.insert(target);
            } else {
                merge_into(self.pending.entry(target).or_default(), x);
            }
        }
        while self.sent.len() > SENT_KEPT {
            self.sent.pop_first();
        }
    }

    /// A summary holding only the excerpt.
    fn alone(&self, window: u64, x: LogExcerpt) -> WindowSummary {
        WindowSummary {
            parallel: None,
            version: SUMMARY_VERSION,
            job_id: self.job.clone(),
            node: self.node.clone(),
            window,
            window_ns: self.windows.len_ns,
            start_unix_ns: self.windows.start(window),
            end_unix_ns: self.windows.end(window),
            world_size: 0,
            ranks: Vec::new(),
            hangs: Vec::new(),
            peer_stacks: Vec::new(),
            logs: Some(x),
        }
    }

    /// Stops the thread after a last read of the files.
    pub fn stop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        self.receive();
    }
}

impl Drop for LogFollower {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

fn merge_into(into: &mut LogExcerpt, x: LogExcerpt) {
    into.lines_read += x.lines_read;
    into.lines_dropped += x.lines_dropped;
    into.lines.extend(x.lines);
    into.progress.extend(x.progress);
    if into.templates.is_empty() {
        into.templates = x.templates;
    } else {
        for t in x.templates {
            match into.templates.iter_mut().find(|u| u.template == t.template) {
                Some(u) => u.count += t.count,
                None => into.templates.push(t),
            }
        }
        into.templates.sort_by_key(|t| std::cmp::Reverse(t.count));
    }
}
