//! Every literal the pass looks for in a line, in one automaton, so that a line is
//! scanned once: the signatures' needles (which rows to try), the words that make a line
//! look like an error (the statistical part), and the phrases and counters that tell
//! progress (stage, iteration). Each list stays with the module that owns it; this
//! module only compiles them together.
//!
//! Logs repeat themselves: a line's scan depends only on its letters and where digits
//! stand (no literal holds a digit, which a test checks), so a [`ScanCache`] keyed by the
//! line with each digit folded to `0` answers most lines of a large job without the
//! automaton; only the counters' positions are looked up again.

use crate::collect::JOIN_PHRASES;
use crate::progress::{COUNTERS, STAGES};
use crate::signatures::rules;
use crate::stats::ERROR_WORDS;
use aho_corasick::{AhoCorasick, AhoCorasickBuilder, AhoCorasickKind, MatchKind};
use skeleton::{digit_runs, skeleton, Runs, MAX_RUNS};
pub(crate) use skeleton::{same_shape, shape};
use std::sync::OnceLock;

mod skeleton;

/// What a literal of the automaton is.
#[derive(Clone, Debug)]
enum Word {
    /// A signature needle: the rows (table order) that list it.
    Needle(Vec<usize>),
    Error,
    /// A stage phrase: its index in `STAGES`.
    Stage(usize),
    Counter,
    /// A phrase that ties names together (`collect::JOIN_PHRASES`).
    Join,
}

struct Lexicon {
    ac: AhoCorasick,
    words: Vec<Word>,
}

/// What one scan of a line found.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Scan {
    /// Signature rows to try, in table order.
    pub rows: Vec<usize>,
    /// An error word stands as a whole word.
    pub error_like: bool,
    /// The first stage phrase in `STAGES`' order, if any.
    pub stage: Option<usize>,
    /// The iteration number a counter word gives (`step: 10`).
    pub counter: Option<u64>,
    /// A phrase that ties names together may stand in the line, in any case (the pass
    /// reads such lines again, case and all).
    pub joins: bool,
}

/// What the pass reads of a line's scan once the rows have been tried: small, since
/// every line carries one from the thread that prepares it to the one that folds it.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Words {
    pub error_like: bool,
    pub joins: bool,
    /// The first stage phrase's index in `STAGES`.
    pub stage: Option<u8>,
    pub counter: Option<u64>,
}

impl Scan {
    pub fn words(&self) -> Words {
        Words {
            error_like: self.error_like,
            joins: self.joins,
            stage: self.stage.map(|i| i as u8),
            counter: self.counter,
        }
    }
}

/// Skeletons remembered at most; past it the cache starts over.
const CACHE_CAP: usize = 1 << 16;

/// What a cached skeleton's lines scan to: error-like, the stage phrase, and which digit
/// run holds the counter's number.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Cached {
    error_like: bool,
    stage: Option<usize>,
    counter_run: Option<u8>,
    joins: bool,
}

impl Cached {
    /// The scan of a line of this skeleton whose counter reads `counter`.
    pub(crate) fn scan(&self, counter: Option<u64>) -> Scan {
        Scan {
            rows: Vec::new(),
            error_like: self.error_like,
            stage: self.stage,
            counter,
            joins: self.joins,
        }
    }

    /// The words of a line of this skeleton whose counter reads `counter`.
    pub(crate) fn words(&self, counter: Option<u64>) -> Words {
        self.scan(counter).words()
    }
}

/// Scans of lines no signature row concerns, by the line's skeleton (see the module).
#[derive(Default)]
pub struct ScanCache {
    seen: std::collections::HashMap<u64, Cached, BuildSkeletonHasher>,
    /// The runs of the line being scanned, reused: a line costs no copy of them.
    runs: Runs,
}

/// The key is a skeleton's hash already: it is used as it is.
#[derive(Default)]
pub(crate) struct SkeletonHasher(u64);

impl std::hash::Hasher for SkeletonHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 << 8) | b as u64;
        }
    }

    fn write_u64(&mut self, v: u64) {
        self.0 = v;
    }
}

pub(crate) type BuildSkeletonHasher = std::hash::BuildHasherDefault<SkeletonHasher>;

impl ScanCache {
    /// The line's scan, from the cache when a line of the same skeleton was scanned.
    pub fn scan(&mut self, message: &str) -> Scan {
        self.scan_noting(message).0
    }

    /// The scan of a line whose skeleton scanned to `c`: only its counter is read.
    fn recall(&mut self, message: &str, c: &Cached) -> Scan {
        let counter = self
            .counter_at(message, c)
            .and_then(|(a, b)| message.get(a..b)?.parse().ok());
        c.scan(counter)
    }

    /// Where the counter's digits stand in a line whose skeleton scanned to `c`.
    pub(crate) fn counter_at(&mut self, message: &str, c: &Cached) -> Option<(usize, usize)> {
        let k = c.counter_run? as usize;
        digit_runs(message, &mut self.runs, Some(k));
        // a line whose hash only collides with the cached one may have fewer runs: the
        // slots past its own hold an earlier line's places
        if self.runs.n <= k {
            return None;
        }
        let (a, b) = self.runs.at[k];
        Some((a as usize, b as usize))
    }

    /// The line's scan, and what the cache keeps of it when lines of its skeleton scan
    /// alike (no signature row concerns them).
    pub(crate) fn scan_noting(&mut self, message: &str) -> (Scan, Option<Cached>) {
        let key = skeleton(message);
        if let Some(&c) = self.seen.get(&key) {
            return (self.recall(message, &c), Some(c));
        }
        let (s, counter_start) = scan_with_counter(message);
        digit_runs(message, &mut self.runs, None);
        let runs = &self.runs;
        let counter_run = counter_start.and_then(|start| {
            runs.at[..runs.n.min(MAX_RUNS)]
                .iter()
                .position(|(a, _)| *a as usize == start)
                .map(|k| k as u8)
        });
        let cacheable = s.rows.is_empty()
            && runs.n <= MAX_RUNS
            && (counter_start.is_none() || counter_run.is_some());
        if !cacheable {
            return (s, None);
        }
        if self.seen.len() >= CACHE_CAP {
            self.seen.clear();
        }
        let c = Cached {
            error_like: s.error_like,
            stage: s.stage,
            counter_run,
            joins: s.joins,
        };
        self.seen.insert(key, c);
        (s, Some(c))
    }
}

fn lexicon() -> &'static Lexicon {
    static L: OnceLock<Lexicon> = OnceLock::new();
    L.get_or_init(|| {
        let mut literals: Vec<String> = Vec::new();
        let mut words: Vec<Word> = Vec::new();
        let mut add = |lit: &str, w: Word| {
            let lower = lit.to_ascii_lowercase();
            match (literals.iter().position(|x| *x == lower), &w) {
                // a needle listed by several rows, or by a row and another list
                (Some(i), Word::Needle(rows)) => match &mut words[i] {
                    Word::Needle(have) => have.extend(rows),
                    _ => {
                        literals.push(lower);
                        words.push(w);
                    }
                },
                _ => {
                    literals.push(lower);
                    words.push(w);
                }
            }
        };
        for (row, rule) in rules().iter().enumerate() {
            for n in rule.needles {
                add(n, Word::Needle(vec![row]));
            }
        }
        for w in ERROR_WORDS {
            add(w, Word::Error);
        }
        for (i, (p, _)) in STAGES.iter().enumerate() {
            add(p, Word::Stage(i));
        }
        for c in COUNTERS {
            add(c, Word::Counter);
        }
        for j in JOIN_PHRASES {
            add(j, Word::Join);
        }
        // all occurrences of every literal (overlapping), in one pass
        let ac = AhoCorasickBuilder::new()
            .ascii_case_insensitive(true)
            .match_kind(MatchKind::Standard)
            .kind(Some(AhoCorasickKind::DFA))
            .build(&literals)
            .expect("the lexicon compiles");
        Lexicon { ac, words }
    })
}

fn whole_word(b: &[u8], start: usize, end: usize) -> bool {
    (start == 0 || !b[start - 1].is_ascii_alphanumeric())
        && (end == b.len() || !b[end].is_ascii_alphanumeric())
}

/// Scans `message` once.
pub fn scan(message: &str) -> Scan {
    scan_with_counter(message).0
}

/// The scan, and where the counter's digits start.
fn scan_with_counter(message: &str) -> (Scan, Option<usize>) {
    let l = lexicon();
    let b = message.as_bytes();
    let mut s = Scan::default();
    let mut counters: Vec<(usize, usize)> = Vec::new();
    for m in l.ac.find_overlapping_iter(message) {
        match &l.words[m.pattern().as_usize()] {
            Word::Needle(rows) => s.rows.extend_from_slice(rows),
            Word::Error => s.error_like |= whole_word(b, m.start(), m.end()),
            Word::Stage(i) => s.stage = Some(s.stage.map_or(*i, |x| x.min(*i))),
            Word::Counter => counters.push((m.start(), m.end())),
            Word::Join => s.joins = true,
        }
    }
    if s.rows.len() > 1 {
        s.rows.sort_unstable();
        s.rows.dedup();
    }
    counters.sort_unstable();
    let found = crate::progress::counter(message, &counters);
    s.counter = found.map(|(n, _)| n);
    (s, found.map(|(_, at)| at))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_literal_holds_a_digit() {
        // the cache folds digits: a literal with one could be answered wrongly
        for rule in rules() {
            for n in rule.needles {
                assert!(
                    !n.bytes().any(|b| b.is_ascii_digit()),
                    "{}: {n}",
                    rule.signature
                );
            }
        }
        for w in ERROR_WORDS.iter().chain(COUNTERS).chain(&JOIN_PHRASES) {
            assert!(!w.bytes().any(|b| b.is_ascii_digit()), "{w}");
        }
        for (p, _) in STAGES {
            assert!(!p.bytes().any(|b| b.is_ascii_digit()), "{p}");
        }
    }

    #[test]
    fn stage_phrases_are_counted_in_a_byte() {
        assert!(STAGES.len() <= u8::MAX as usize);
    }

    #[test]
    fn the_cache_answers_as_the_scan_does() {
        let mut cache = ScanCache::default();
        let lines = [
            "[titan] 2026-11-25 10:00:01,000 - root - INFO - step:    11  loss: 2.1",
            "[titan] 2026-11-25 10:00:02,000 - root - INFO - step:    12  loss: 2.0",
            "[titan] 2026-11-25 10:00:03,000 - root - INFO - step:  1013  loss: 1.9",
            "worker 3 failed to prefetch",
            "worker 17 failed to prefetch",
            "OSError: [Errno 28] No space left on device",
            "NCCL INFO Bootstrap : Using ib0:10.0.0.1<0>",
        ];
        for _ in 0..2 {
            for l in lines {
                assert_eq!(cache.scan(l), scan(l), "{l}");
            }
        }
    }

    /// A line whose skeleton's hash collides with a cached one that has a counter in a run
    /// the line does not have: no counter, and no slice of an earlier line's places.
    #[test]
    fn a_colliding_line_without_the_counters_run_has_no_counter() {
        let mut cache = ScanCache::default();
        let long = "step: 1 loss 2 tokens 3 mem 4 lr 5 grad 6 time 77777777";
        assert_eq!(cache.scan(long).counter, Some(1));
        cache.seen.insert(
            skeleton("x"),
            Cached {
                error_like: false,
                stage: None,
                counter_run: Some(6),
                joins: false,
            },
        );
        assert_eq!(cache.scan("x").counter, None);
    }

    #[test]
    fn one_scan_finds_every_kind_of_word() {
        let s = scan("[rank3]: step: 10 RuntimeError: CUDA error: an illegal memory access was encountered; saving checkpoint failed");
        assert!(!s.rows.is_empty());
        assert!(s.error_like);
        assert!(s.stage.is_some());
        assert_eq!(s.counter, Some(10));
        let quiet = scan("[rank3]:[titan] 2026-11-25 10:00:01,000 - root - INFO - loss: 2.1");
        assert!(quiet.rows.is_empty() && !quiet.error_like && quiet.stage.is_none());
        // `failed` inside a word is not an error word
        assert!(!scan("prefailed").error_like);
    }
}
