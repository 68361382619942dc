//! What of a log to send for a diagnosis made elsewhere. The agent follows a node's log
//! files while the job runs and sends the server, not every line, but the lines the
//! verdict reads: lines of a known signature or that look like errors, whole Python
//! tracebacks, torchrun's failure summary, NCCL's lines that tie a process to its rank
//! and address, each change of a writer's stage, and each writer's latest progress line
//! (its iteration, and that it exists: the rank the others wait for often prints
//! nothing else). Diagnosing
//! the excerpt gives the verdict the whole files give (a test holds every labelled log
//! to it).
//!
//! Per line the cost is the pass's own reading of it (prefixes, one automaton scan,
//! the signature match); nothing is kept but a traceback state per writer and the
//! latest progress line per writer, both bounded.

use crate::collect::LinePreparer;
use crate::elastic::{Seen, Summary};
use crate::progress;
use crate::traceback::{Step, Traceback};
use flare_model::JobStage;
use std::collections::HashMap;
use std::hash::{Hash, Hasher};

/// Why a line is sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kept {
    /// A failure line, or part of one (a traceback, torchrun's summary).
    Failure,
    /// A line that says who a process is (NCCL's `Init COMPLETE`, its bootstrap address)
    /// or that a writer entered another stage (loading, training, checkpointing).
    Context,
}

/// Writers (rank, local rank, host) followed per file at most; more share one state.
const MAX_STREAMS: usize = 1024;

/// One file's excerpt, line by line.
pub struct Excerpter {
    prep: LinePreparer,
    summary: Summary,
    /// Per writer (by a hash of its rank, local rank and host): its traceback state.
    tracebacks: HashMap<u64, Traceback>,
    /// Per writer, the stage its last progress line said.
    stages: HashMap<u64, JobStage>,
    /// Per writer, the latest progress line since [`Excerpter::take_progress`]:
    /// (writer, line number, text).
    progress: HashMap<u64, (String, u64, String)>,
    line: u64,
}

impl Excerpter {
    /// For the file at `path` (its path says what it is: see [`crate::source`]).
    pub fn for_path(path: &str) -> Excerpter {
        Excerpter {
            prep: LinePreparer::for_path(path),
            summary: Summary::default(),
            tracebacks: HashMap::new(),
            stages: HashMap::new(),
            progress: HashMap::new(),
            line: 0,
        }
    }

    /// Numbers the next line `line` (a file followed from its middle).
    pub fn starting_at(mut self, line: u64) -> Excerpter {
        self.line = line.saturating_sub(1);
        self
    }

    /// The number of the line last given.
    pub fn line_no(&self) -> u64 {
        self.line
    }

    /// The next line of the file: whether to send it now. Progress lines are not sent
    /// one by one; [`Excerpter::take_progress`] gives each writer's latest.
    pub fn line(&mut self, text: &str) -> Option<Kept> {
        self.line += 1;
        let p = self.prep.prepare_one(text);
        let o = p.origin.of(text);
        match self.summary.step(o.message, self.line, text) {
            Seen::Consumed | Seen::Ended(_) => return Some(Kept::Failure),
            Seen::Other => {}
        }
        let writer = {
            let mut h = std::collections::hash_map::DefaultHasher::new();
            (o.rank, o.local_rank, o.host).hash(&mut h);
            if self.tracebacks.len() >= MAX_STREAMS && !self.tracebacks.contains_key(&h.finish()) {
                0
            } else {
                h.finish()
            }
        };
        let tb = self.tracebacks.entry(writer).or_default();
        let step = tb.step(o.message);
        if tb.in_traceback() || matches!(step, Step::Exception { .. }) {
            return Some(Kept::Failure);
        }
        if p.matched.is_some() || p.words.error_like {
            return Some(Kept::Failure);
        }
        // what the pass learns identities from (see `Collector::learn`)
        if o.message.contains("Init COMPLETE")
            || (o.message.contains("Using") && o.message.contains('<'))
        {
            return Some(Kept::Context);
        }
        if let Some(m) = progress::marker_scanned(o.message, &p.words) {
            // a change of stage is sent as it comes (the failures after it are in it);
            // iterations only as each writer's latest
            let stage = m.stage();
            let room = self.stages.len() < MAX_STREAMS;
            let changed = match self.stages.get_mut(&writer) {
                Some(last) => std::mem::replace(last, stage) != stage,
                None => {
                    if room {
                        self.stages.insert(writer, stage);
                    }
                    true
                }
            };
            if changed {
                return Some(Kept::Context);
            }
            let key = || {
                format!(
                    "{}/{}/{}",
                    o.rank.map_or(String::new(), |r| r.to_string()),
                    o.local_rank.map_or(String::new(), |r| r.to_string()),
                    o.host.unwrap_or("")
                )
            };
            let room = self.progress.len() < MAX_STREAMS;
            match self.progress.get_mut(&writer) {
                Some(e) => {
                    e.1 = self.line;
                    e.2.clear();
                    e.2.push_str(text);
                }
                None if room => {
                    self.progress
                        .insert(writer, (key(), self.line, text.to_string()));
                }
                None => {}
            }
        }
        None
    }

    /// Each writer's latest progress line since the last call: (writer, line number,
    /// text), in line order. `writer` names the writer within the file, so a receiver
    /// keeps the latest per writer.
    pub fn take_progress(&mut self) -> Vec<(String, u64, String)> {
        let mut out: Vec<(String, u64, String)> = self.progress.drain().map(|(_, v)| v).collect();
        out.sort_by_key(|(_, line, _)| *line);
        out
    }
}
