//! The statistical part, after L4: lines that look like errors but match no known
//! signature are grouped by template (the `flare-logs` miner) and judged by how unusual
//! they are: not seen in the logs of earlier good runs (cross-job), logged by few of the
//! job's files (spatial), first seen late in their rank's run (temporal). It finds
//! failures no rule names, and never outranks a known signature.

use crate::time::Stamp;
use flare_logs::{Config, Miner, TemplateId};
use flare_model::JobStage;
use std::collections::{HashMap, HashSet};

/// Words that make a line look like an error (whole words, any case).
pub(crate) const ERROR_WORDS: &[&str] = &[
    "error",
    "errors",
    "fail",
    "failed",
    "failure",
    "fatal",
    "exception",
    "abort",
    "aborted",
    "aborting",
    "killed",
    "timeout",
    "timed out",
    "refused",
    "denied",
    "invalid",
    "cannot",
    "can't",
    "unable",
    "corrupt",
    "corrupted",
    "panic",
    "critical",
    "unreachable",
    "lost",
    "mismatch",
    "unexpected",
    "traceback",
    "segfault",
    "not found",
    "no such",
    "crash",
    "crashed",
    "hang",
    "hung",
    "stuck",
    "exceeded",
    "overflow",
];

/// Whether a message holds an error word as a whole word.
pub fn error_like(message: &str) -> bool {
    crate::lexicon::scan(message).error_like
}

/// A line's template, as the pass sees it.
#[derive(Clone, Copy, Debug)]
pub struct TemplateInfo {
    pub id: TemplateId,
    pub error_like: bool,
    pub in_baseline: bool,
}

/// An error-looking line of no known signature: the first of its template in its file.
#[derive(Clone, Debug)]
pub struct Anomaly {
    pub file: usize,
    pub line: u64,
    pub text: String,
    pub template: TemplateId,
    pub rank: Option<u32>,
    pub host: Option<String>,
    pub time: Option<Stamp>,
    pub stage: Option<JobStage>,
    pub iteration: Option<u64>,
    pub order: u64,
}

/// Anomalies kept at most (first of a template per file); the rest are counted.
const MAX_ANOMALIES: usize = 200_000;

/// Templates of the job's error-looking lines and of earlier good runs' lines.
pub struct Templates {
    miner: Miner,
    baseline: HashSet<TemplateId>,
    /// (file, template) -> lines, for anomalies.
    per_file: HashMap<(usize, TemplateId), u64>,
    pub dropped_anomalies: u64,
}

impl Default for Templates {
    fn default() -> Self {
        Self::new()
    }
}

impl Templates {
    pub fn new() -> Self {
        Templates {
            miner: Miner::new(Config::default()).expect("the default miner config is valid"),
            baseline: HashSet::new(),
            per_file: HashMap::new(),
            dropped_anomalies: 0,
        }
    }

    /// A line of an earlier good run.
    pub fn baseline(&mut self, message: &str) {
        let id = self.miner.add(message);
        self.baseline.insert(id);
    }

    /// The template of a line of the failed job, when it looks like an error (its scan
    /// says) or a signature matched it (`matched`); other lines are not mined.
    pub fn add(&mut self, message: &str, error_like: bool, matched: bool) -> Option<TemplateInfo> {
        if !error_like && !matched {
            return None;
        }
        let id = self.miner.add(message);
        Some(TemplateInfo {
            id,
            error_like,
            in_baseline: self.baseline.contains(&id),
        })
    }

    /// Keeps the first anomaly of each template per file; counts the rest.
    pub fn record(&mut self, anomalies: &mut Vec<Anomaly>, a: Anomaly) {
        let n = self.per_file.entry((a.file, a.template)).or_insert(0);
        *n += 1;
        if *n == 1 && anomalies.len() < MAX_ANOMALIES {
            anomalies.push(a);
        } else if *n == 1 {
            self.dropped_anomalies += 1;
        }
    }

    pub fn in_baseline(&self, id: TemplateId) -> bool {
        self.baseline.contains(&id)
    }

    pub fn has_baseline(&self) -> bool {
        !self.baseline.is_empty()
    }

    /// Lines of template `id` in `file`.
    pub fn lines_in(&self, file: usize, id: TemplateId) -> u64 {
        self.per_file.get(&(file, id)).copied().unwrap_or(0)
    }

    pub fn text(&self, id: TemplateId) -> String {
        self.miner
            .template(id)
            .map(|t| t.text())
            .unwrap_or_default()
    }
}

/// An anomaly with how unusual it is.
#[derive(Clone, Debug)]
pub struct Scored {
    pub anomaly: Anomaly,
    /// Share of the job's files whose logs hold its template.
    pub spread: f64,
    /// Lines of its template in its file.
    pub repeats: u64,
    pub score: f64,
}

/// The anomalies worth showing, most unusual first: templates of earlier good runs are
/// dropped; a template in few of the job's files scores higher (spatial), one first seen
/// at its rank's last iterations higher again (temporal), one repeated thousands of times
/// lower (a noisy warning, not an event).
pub fn score(
    anomalies: &[Anomaly],
    templates: &Templates,
    process_files: usize,
    last_iteration: &HashMap<usize, u64>,
) -> Vec<Scored> {
    let mut files_of: HashMap<TemplateId, HashSet<usize>> = HashMap::new();
    for a in anomalies {
        files_of.entry(a.template).or_default().insert(a.file);
    }
    let mut out: Vec<Scored> = anomalies
        .iter()
        .filter(|a| !templates.in_baseline(a.template))
        .map(|a| {
            let files = files_of.get(&a.template).map_or(1, |f| f.len());
            let spread = files as f64 / process_files.max(1) as f64;
            let repeats = templates.lines_in(a.file, a.template);
            let mut score = 1.0;
            if process_files >= 3 {
                score += 1.0 - spread;
            }
            if let (Some(it), Some(last)) = (a.iteration, last_iteration.get(&a.file)) {
                if it + 1 >= *last {
                    score += 0.5;
                }
            }
            if repeats > 100 {
                score -= 0.5;
            }
            Scored {
                anomaly: a.clone(),
                spread,
                repeats,
                score,
            }
        })
        .collect();
    out.sort_by(|a, b| {
        b.score
            .total_cmp(&a.score)
            .then(a.anomaly.order.cmp(&b.anomaly.order))
    });
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_words_are_whole_words() {
        for yes in [
            "Error: x",
            "something failed",
            "Traceback (most recent call last):",
            "request timed out",
            "File not found",
        ] {
            assert!(error_like(yes), "{yes}");
        }
        for no in [
            "errorless run",
            "iteration 10 | loss 2.3",
            "prefailure",
            "NCCL INFO Channel 00/0",
        ] {
            assert!(!error_like(no), "{no}");
        }
    }
}
