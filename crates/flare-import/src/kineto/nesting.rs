//! Spans that nest on their thread (Python frames, CPU ops) and the ones around a moment:
//! the innermost span around a moment is the latest-starting span before it or one of
//! that span's ancestors, so a lookup walks as deep as the nesting, not back along the
//! whole thread (a kernel launched outside every GEMM op would otherwise scan all the
//! GEMM ops its thread ran before it).

use std::cmp::Reverse;

/// A span: its thread, start and end.
pub type SpanKey = (u64, i64, i64);

/// No enclosing span.
const NONE: u32 = u32::MAX;

/// Spans sorted by thread and start, outer spans before those they hold, each with the
/// span that encloses it.
#[derive(Debug)]
pub struct Nested<T> {
    spans: Vec<T>,
    keys: Vec<SpanKey>,
    parents: Vec<u32>,
}

impl<T> Nested<T> {
    pub fn new(mut spans: Vec<T>, key: impl Fn(&T) -> SpanKey) -> Self {
        spans.sort_by_key(|s| {
            let (tid, start, end) = key(s);
            (tid, start, Reverse(end))
        });
        let keys: Vec<SpanKey> = spans.iter().map(key).collect();
        let mut parents = Vec::with_capacity(keys.len());
        let mut open: Vec<usize> = Vec::new();
        for &(tid, start, end) in &keys {
            while let Some(&top) = open.last() {
                let (t, s, e) = keys[top];
                if t == tid && s <= start && end <= e {
                    break;
                }
                open.pop();
            }
            parents.push(open.last().map_or(NONE, |&p| p as u32));
            open.push(parents.len() - 1);
        }
        Nested {
            spans,
            keys,
            parents,
        }
    }

    pub fn get(&self, i: usize) -> &T {
        &self.spans[i]
    }

    /// For each span (in their order), whether it encloses another.
    pub fn holds_others(&self) -> Vec<bool> {
        let mut out = vec![false; self.spans.len()];
        for &p in self.parents.iter().filter(|&&p| p != NONE) {
            out[p as usize] = true;
        }
        out
    }

    /// The spans of thread `tid` around `[start, end]`, innermost first.
    pub fn around(&self, tid: u64, start: i64, end: i64) -> impl Iterator<Item = usize> + '_ {
        let lo = self.keys.partition_point(|k| k.0 < tid);
        let hi = self
            .keys
            .partition_point(|k| k.0 < tid || (k.0 == tid && k.1 <= start));
        let mut next = (hi > lo).then(|| hi - 1);
        std::iter::from_fn(move || {
            while let Some(i) = next {
                next = match self.parents[i] {
                    NONE => None,
                    p => Some(p as usize),
                };
                if self.keys[i].2 >= end {
                    return Some(i);
                }
            }
            None
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_spans_around_a_moment_innermost_first() {
        let spans = vec![
            (1, 10, 50, "step"),
            (1, 0, 100, "main"),
            (1, 12, 14, "helper"), // ended before 20
            (1, 15, 40, "item"),
            (2, 0, 100, "other thread"),
            (1, 60, 70, "later"),
        ];
        let n = Nested::new(spans, |s| (s.0, s.1, s.2));
        let names = |tid, start, end| -> Vec<&str> {
            n.around(tid, start, end).map(|i| n.get(i).3).collect()
        };
        assert_eq!(names(1, 20, 22), ["item", "step", "main"]);
        assert_eq!(names(1, 45, 45), ["step", "main"]);
        assert_eq!(names(1, 80, 80), ["main"]);
        assert_eq!(
            names(1, 95, 120),
            Vec::<&str>::new(),
            "runs past every span"
        );
        assert_eq!(names(2, 5, 6), ["other thread"]);
        assert_eq!(names(3, 5, 6), Vec::<&str>::new(), "a thread without spans");
        assert_eq!(names(1, -5, -4), Vec::<&str>::new(), "before every span");
        let holds = n.holds_others();
        let holding: Vec<&str> = (0..holds.len())
            .filter(|&i| holds[i])
            .map(|i| n.get(i).3)
            .collect();
        assert_eq!(holding, ["main", "step"]);
    }
}
