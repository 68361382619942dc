//! Bounded statistics for one window: value distributions with exact percentiles up to a
//! sample cap, and the union of time intervals (busy time).

use std::collections::BTreeMap;

/// A distribution of `u64` values (durations in ns, bandwidths in B/s).
///
/// The first `cap` values are kept as they are, so percentiles are exact (nearest rank)
/// for ordinary windows. Past the cap the values move into a log-linear histogram
/// ([`LogHistogram`]: 128 linear buckets per power of two, at most 0.4% relative error
/// and ~15-30 KB per distribution), which bounds memory for ops that run millions of
/// times per window. Count, sum, min and max stay exact either way.
#[derive(Clone, Debug)]
pub struct Samples {
    exact: Vec<u64>,
    sorted: bool,
    hist: Option<LogHistogram>,
    cap: usize,
    count: u64,
    sum: u64,
    min: u64,
    max: u64,
}

impl Samples {
    pub fn new(cap: usize) -> Samples {
        Samples {
            exact: Vec::new(),
            sorted: true,
            hist: None,
            cap: cap.max(1),
            count: 0,
            sum: 0,
            min: u64::MAX,
            max: 0,
        }
    }

    pub fn record(&mut self, v: u64) {
        self.count += 1;
        self.sum = self.sum.saturating_add(v);
        self.min = self.min.min(v);
        self.max = self.max.max(v);
        match &mut self.hist {
            Some(h) => h.record(v),
            None if self.exact.len() < self.cap => {
                self.sorted = false;
                self.exact.push(v);
            }
            None => {
                let mut h = LogHistogram::default();
                for &x in &self.exact {
                    h.record(x);
                }
                h.record(v);
                // Release the sample buffer: the point of the switch is bounded memory.
                self.exact = Vec::new();
                self.hist = Some(h);
            }
        }
    }

    pub fn merge(&mut self, other: &Samples) {
        if other.count == 0 {
            return;
        }
        match &other.hist {
            None => {
                for &v in &other.exact {
                    self.record(v);
                }
            }
            Some(oh) => {
                let h = self.hist.get_or_insert_with(LogHistogram::default);
                for &x in &self.exact {
                    h.record(x);
                }
                self.exact = Vec::new();
                h.merge(oh);
                self.count += other.count;
                self.sum = self.sum.saturating_add(other.sum);
                self.min = self.min.min(other.min);
                self.max = self.max.max(other.max);
            }
        }
    }

    pub fn count(&self) -> u64 {
        self.count
    }

    pub fn sum(&self) -> u64 {
        self.sum
    }

    pub fn max(&self) -> u64 {
        self.max
    }

    pub fn is_exact(&self) -> bool {
        self.hist.is_none()
    }

    /// The nearest-rank `q`-quantile (`q` in 0..=1): the smallest value with at least
    /// `ceil(q * n)` values at or below it. `None` without samples.
    pub fn quantile(&mut self, q: f64) -> Option<u64> {
        if self.count == 0 {
            return None;
        }
        // The epsilon keeps 0.99 x 100 (98.99999... in binary) from rounding up a rank.
        let rank =
            ((q.clamp(0.0, 1.0) * self.count as f64 - 1e-9).ceil() as u64).clamp(1, self.count);
        match &self.hist {
            Some(h) => Some(h.at_rank(rank).clamp(self.min, self.max)),
            None => {
                if !self.sorted {
                    self.exact.sort_unstable();
                    self.sorted = true;
                }
                Some(self.exact[(rank - 1) as usize])
            }
        }
    }
}

/// Log-linear buckets: values below 128 exactly, above that 128 buckets per power of two.
#[derive(Clone, Debug, Default)]
pub struct LogHistogram {
    counts: Vec<u32>,
}

const SUB_BITS: u32 = 7;
const SUB: u64 = 1 << SUB_BITS;

impl LogHistogram {
    fn index(v: u64) -> usize {
        if v < SUB {
            return v as usize;
        }
        let exp = 63 - v.leading_zeros();
        let shift = exp - SUB_BITS;
        let mantissa = (v >> shift) - SUB;
        (((shift as u64 + 1) << SUB_BITS) + mantissa) as usize
    }

    /// The middle of a bucket (its exact value below 128).
    fn value(index: usize) -> u64 {
        let i = index as u64;
        if i < SUB {
            return i;
        }
        let shift = (i >> SUB_BITS) - 1;
        let mantissa = (i & (SUB - 1)) + SUB;
        let low = mantissa << shift;
        low + ((1u64 << shift) >> 1)
    }

    pub fn record(&mut self, v: u64) {
        let i = Self::index(v);
        if i >= self.counts.len() {
            self.counts.resize(i + 1, 0);
        }
        self.counts[i] = self.counts[i].saturating_add(1);
    }

    fn merge(&mut self, other: &LogHistogram) {
        if other.counts.len() > self.counts.len() {
            self.counts.resize(other.counts.len(), 0);
        }
        for (a, b) in self.counts.iter_mut().zip(&other.counts) {
            *a = a.saturating_add(*b);
        }
    }

    fn at_rank(&self, rank: u64) -> u64 {
        let mut seen = 0u64;
        for (i, &c) in self.counts.iter().enumerate() {
            seen += c as u64;
            if seen >= rank {
                return Self::value(i);
            }
        }
        self.counts.len().checked_sub(1).map_or(0, Self::value)
    }
}

/// The union of half-open intervals `[start, end)`, coalesced as they arrive.
///
/// Everything before the floor is final: [`IntervalUnion::advance`] folds it into a total
/// and forgets it, so memory holds only recent intervals (the caller advances the floor
/// to "now minus the grace": spans still open are added up to now on every poll, and
/// later spans start after the floor). Parts of intervals below the floor are ignored,
/// since that time is already accounted for or was never going to be.
///
/// Spans mostly arrive in time order, so the latest interval is kept apart (`tail`) and
/// extended in O(1); only out-of-order intervals go through the ordered map.
#[derive(Clone, Debug, Default)]
pub struct IntervalUnion {
    /// Disjoint, non-touching intervals, all ending before `tail` starts.
    set: BTreeMap<u64, u64>,
    tail: Option<(u64, u64)>,
    finalized: u64,
    floor: u64,
}

impl IntervalUnion {
    pub fn add(&mut self, start: u64, end: u64) {
        let s = start.max(self.floor);
        if end <= s {
            return;
        }
        let Some((ts, te)) = self.tail else {
            self.tail = Some((s, end));
            return;
        };
        if s >= ts {
            if s <= te {
                self.tail = Some((ts, te.max(end)));
            } else {
                self.set.insert(ts, te);
                self.tail = Some((s, end));
            }
            return;
        }
        let (ms, me) = self.insert_ordered(s, end);
        if me >= ts {
            // It reaches the tail: they become one.
            self.set.remove(&ms);
            self.tail = Some((ms, me.max(te)));
        }
    }

    /// Inserts into the ordered set, merging what it overlaps or touches; returns the
    /// merged interval.
    fn insert_ordered(&mut self, start: u64, end: u64) -> (u64, u64) {
        let (mut s, mut e) = (start, end);
        // The interval starting at or before `s` may overlap or touch it.
        if let Some((&ps, &pe)) = self.set.range(..=s).next_back() {
            if pe >= s {
                if pe >= e {
                    return (ps, pe);
                }
                s = ps;
                self.set.remove(&ps);
            }
        }
        // Swallow every interval that starts inside [s, e].
        while let Some((&ns, &ne)) = self.set.range(s..=e).next() {
            self.set.remove(&ns);
            e = e.max(ne);
        }
        self.set.insert(s, e);
        (s, e)
    }

    /// Makes everything before `floor` final.
    pub fn advance(&mut self, floor: u64) {
        if floor <= self.floor {
            return;
        }
        while let Some((&s, &e)) = self.set.first_key_value() {
            if s >= floor {
                break;
            }
            self.set.remove(&s);
            if e > floor {
                self.finalized += floor - s;
                self.set.insert(floor, e);
                break;
            }
            self.finalized += e - s;
        }
        if let Some((s, e)) = self.tail {
            if s < floor {
                if e <= floor {
                    self.finalized += e - s;
                    self.tail = None;
                } else {
                    self.finalized += floor - s;
                    self.tail = Some((floor, e));
                }
            }
        }
        self.floor = floor;
    }

    pub fn total(&self) -> u64 {
        self.finalized
            + self.set.iter().map(|(s, e)| e - s).sum::<u64>()
            + self.tail.map_or(0, |(s, e)| e - s)
    }

    /// The time covered before `t`: exact where `t` is at or above the floor; below it,
    /// everything up to the floor (what was folded is no longer told apart), which
    /// callers avoid by reading a time before the floor passes it.
    pub fn total_before(&self, t: u64) -> u64 {
        let part = |(s, e): (u64, u64)| e.min(t).saturating_sub(s);
        self.finalized
            + self
                .set
                .range(..t)
                .map(|(&s, &e)| part((s, e)))
                .sum::<u64>()
            + self.tail.map_or(0, part)
    }

    /// Intervals still held (not yet final).
    pub fn pending(&self) -> usize {
        self.set.len() + usize::from(self.tail.is_some())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exact_quantiles_use_the_nearest_rank() {
        let mut s = Samples::new(100);
        for v in [5u64, 1, 4, 2, 3] {
            s.record(v);
        }
        assert_eq!(s.quantile(0.5), Some(3));
        assert_eq!(s.quantile(0.99), Some(5));
        assert_eq!(s.quantile(0.0), Some(1));
        assert_eq!((s.count(), s.sum(), s.max()), (5, 15, 5));
        let mut four = Samples::new(100);
        for v in [10u64, 20, 30, 40] {
            four.record(v);
        }
        assert_eq!(four.quantile(0.5), Some(20));
        assert_eq!(Samples::new(4).quantile(0.5), None);
    }

    #[test]
    fn past_the_cap_quantiles_stay_within_half_a_bucket() {
        let mut s = Samples::new(64);
        for v in 1..=100_000u64 {
            s.record(v * 1000);
        }
        assert!(!s.is_exact());
        assert_eq!(s.count(), 100_000);
        assert_eq!(s.max(), 100_000_000);
        for (q, want) in [(0.5, 50_000_000f64), (0.99, 99_000_000f64)] {
            let got = s.quantile(q).unwrap() as f64;
            assert!((got - want).abs() / want < 0.005, "q{q}: {got} vs {want}");
        }
        // Merging an exact set into a histogram keeps the totals exact.
        let mut small = Samples::new(64);
        small.record(7);
        s.merge(&small);
        assert_eq!(s.count(), 100_001);
        assert_eq!(s.quantile(0.0), Some(7));
    }

    #[test]
    fn histogram_buckets_are_contiguous_and_tight() {
        let mut last = 0;
        for v in (0..5000u64).chain([1 << 40, u64::MAX]) {
            let i = LogHistogram::index(v);
            assert!(i >= last, "{v}");
            last = i;
            let mid = LogHistogram::value(i) as f64;
            if v > 0 {
                assert!((mid - v as f64).abs() / (v as f64) < 0.0040, "{v} -> {mid}");
            }
        }
    }

    #[test]
    fn union_matches_a_brute_force_count_in_any_order() {
        // Deterministic pseudo-random intervals, mostly in order with some stragglers.
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let mut u = IntervalUnion::default();
        let mut covered = vec![false; 20_000];
        let mut t = 0u64;
        for _ in 0..3000 {
            t += next() % 7;
            let back = if next() % 5 == 0 { next() % 300 } else { 0 };
            let s = t.saturating_sub(back);
            let e = (s + 1 + next() % 40).min(covered.len() as u64);
            if s >= e {
                continue;
            }
            u.add(s, e);
            for c in &mut covered[s as usize..e as usize] {
                *c = true;
            }
        }
        let want = covered.iter().filter(|&&c| c).count() as u64;
        assert_eq!(u.total(), want);
        let before = |t: u64| covered[..t as usize].iter().filter(|&&c| c).count() as u64;
        for at in [0, 1, t / 3, t / 2, t, covered.len() as u64] {
            assert_eq!(u.total_before(at), before(at), "{at}");
        }
        u.advance(t / 2);
        assert_eq!(u.total(), want);
        // At and above the floor, still exact once folded.
        for at in [t / 2, t / 2 + 17, t, covered.len() as u64] {
            assert_eq!(u.total_before(at), before(at), "{at}");
        }
    }

    #[test]
    fn union_coalesces_and_finalizes() {
        let mut u = IntervalUnion::default();
        u.add(10, 20);
        u.add(30, 40);
        u.add(15, 32);
        assert_eq!(u.total(), 30);
        assert_eq!(u.pending(), 1);
        u.add(50, 60);
        u.add(40, 50);
        assert_eq!(u.total(), 50);
        u.add(0, 5);
        u.add(12, 18);
        assert_eq!(u.total(), 55);
        u.advance(35);
        assert_eq!(u.total(), 55);
        assert_eq!(u.pending(), 1);
        // Below the floor is already accounted for.
        u.add(0, 40);
        assert_eq!(u.total(), 55);
        u.add(70, 80);
        u.advance(100);
        assert_eq!((u.total(), u.pending()), (65, 0));
    }
}
