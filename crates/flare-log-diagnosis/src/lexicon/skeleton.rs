//! A line's skeleton: a hash of its bytes with ASCII case folded and each digit `0`
//! (sixteen bytes at a time with SSE2, which every x86-64 CPU has, eight at a time
//! elsewhere; both give the same hash, which a test holds them to), and, apart, where its
//! runs of digits are: a line the cache knows needs only the run its counter is in.
//! Numbers of another width make another skeleton. A line's [`shape`] is the same hash
//! with its case kept (every byte but the digits' values).

/// Digit runs a line's skeleton records (more are counted, not placed): the counter's
/// number is read back by its run.
pub(super) const MAX_RUNS: usize = 32;

/// Where a line's runs of digits are.
#[derive(Default)]
pub(super) struct Runs {
    pub(super) n: usize,
    pub(super) at: [(u32, u32); MAX_RUNS],
}

impl Runs {
    #[inline]
    fn push(&mut self, start: usize, end: usize) {
        if self.n < MAX_RUNS {
            self.at[self.n] = (start as u32, end as u32);
        }
        self.n += 1;
    }
}

/// Finds the runs from a mask of which bytes are digits, a block at a time.
#[derive(Default)]
struct RunEdges {
    start: usize,
    in_run: bool,
}

impl RunEdges {
    /// A block of `width` bytes at `base`; bit k of `digits` says byte k is a digit. A
    /// byte opens a run when it is a digit after a non-digit and closes one when it is a
    /// non-digit after a digit (the byte before the block's first is the last block's).
    #[inline]
    fn block(&mut self, runs: &mut Runs, base: usize, digits: u64, width: u32) {
        let before = (digits << 1) | self.in_run as u64;
        let mut edges = (digits ^ before) & ((1u64 << width) - 1);
        while edges != 0 {
            let at = base + edges.trailing_zeros() as usize;
            if self.in_run {
                runs.push(self.start, at);
            } else {
                self.start = at;
            }
            self.in_run = !self.in_run;
            edges &= edges - 1;
        }
    }

    fn end(self, runs: &mut Runs, len: usize) {
        if self.in_run {
            runs.push(self.start, len);
        }
    }
}

/// The skeleton's bytes mixed eight at a time, in two lanes (even and odd words) so that
/// the multiplies of one line overlap: each lane a 64x64->128-bit multiply folded, as
/// foldhash and wyhash do.
struct Mixer {
    lanes: [u64; 2],
    /// Words mixed so far.
    words: usize,
    /// The last bytes, fewer than eight.
    tail: u64,
    total: u64,
}

const MIX: u64 = 0x9e37_79b9_7f4a_7c15;

#[inline]
fn fold_mul(a: u64, b: u64) -> u64 {
    let p = (a as u128) * (b as u128);
    (p as u64) ^ ((p >> 64) as u64)
}

impl Mixer {
    fn new() -> Mixer {
        Mixer {
            lanes: [0x243f_6a88_85a3_08d3, 0x1319_8a2e_0370_7344],
            words: 0,
            tail: 0,
            total: 0,
        }
    }

    /// Word number `words` (little-endian bytes).
    #[inline]
    fn word(&mut self, w: u64) {
        let lane = &mut self.lanes[self.words & 1];
        *lane = fold_mul(*lane ^ w, MIX);
        self.words += 1;
        self.total += 8;
    }

    /// Two words, the first an even one.
    #[cfg(target_arch = "x86_64")]
    #[inline]
    fn pair(&mut self, even: u64, odd: u64) {
        debug_assert_eq!(self.words & 1, 0);
        self.lanes[0] = fold_mul(self.lanes[0] ^ even, MIX);
        self.lanes[1] = fold_mul(self.lanes[1] ^ odd, MIX);
        self.words += 2;
        self.total += 16;
    }

    /// The last bytes (fewer than eight), after every word.
    #[inline]
    fn byte(&mut self, c: u8) {
        self.tail |= (c as u64) << (8 * (self.total % 8));
        self.total += 1;
    }

    fn finish(self) -> u64 {
        let h = fold_mul(self.lanes[0] ^ self.tail, MIX ^ self.total);
        fold_mul(h ^ self.lanes[1] ^ (self.total << 56), MIX)
    }
}

const LOW7: u64 = 0x7f7f_7f7f_7f7f_7f7f;
const HIGH: u64 = 0x8080_8080_8080_8080;

/// The high bit of each byte of `w` that lies in `lo..=hi` (ASCII bounds): exact per
/// byte, since each byte's sum stays within it.
#[inline]
fn in_range(w: u64, lo: u8, hi: u8) -> u64 {
    let rep = |b: u8| (b as u64) * 0x0101_0101_0101_0101;
    let above_hi = (w & LOW7) + rep(0x7f - hi);
    let from_lo = (w & LOW7) + rep(0x80 - lo);
    from_lo & !above_hi & !w & HIGH
}

/// The line's skeleton hash: digits folded to `0`, ASCII case folded.
pub(super) fn skeleton(message: &str) -> u64 {
    hash::<true>(message.as_bytes())
}

/// The line's shape hash: digits folded to `0`, every other byte as it is. Two lines of
/// one shape differ only in their digits' values.
pub(crate) fn shape(line: &str) -> u64 {
    hash::<false>(line.as_bytes())
}

/// Whether two lines are of one shape (see [`shape`]): the same bytes but where both
/// hold a digit. Cheaper than hashing either.
pub(crate) fn same_shape(a: &str, b: &[u8]) -> bool {
    let a = a.as_bytes();
    if a.len() != b.len() {
        return false;
    }
    #[cfg(target_arch = "x86_64")]
    {
        sse2::same_shape(a, b)
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        same_shape_from(a, b, 0)
    }
}

/// [`same_shape`] of `a[i..]` and `b[i..]` (of one length), eight bytes at a time.
fn same_shape_from(a: &[u8], b: &[u8], mut i: usize) -> bool {
    while i + 8 <= a.len() {
        let wa = u64::from_le_bytes(a[i..i + 8].try_into().expect("8 bytes"));
        let wb = u64::from_le_bytes(b[i..i + 8].try_into().expect("8 bytes"));
        let (da, db) = (in_range(wa, b'0', b'9'), in_range(wb, b'0', b'9'));
        if da != db || (wa ^ wb) & !((da >> 7) * 0xff) != 0 {
            return false;
        }
        i += 8;
    }
    a[i..]
        .iter()
        .zip(&b[i..])
        .all(|(x, y)| x == y || (x.is_ascii_digit() && y.is_ascii_digit()))
}

fn hash<const FOLD_CASE: bool>(bytes: &[u8]) -> u64 {
    #[cfg(target_arch = "x86_64")]
    {
        sse2::hash::<FOLD_CASE>(bytes)
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        portable::<FOLD_CASE>(bytes)
    }
}

/// The hash eight bytes at a time (the reading SSE2's is held to).
#[cfg_attr(target_arch = "x86_64", allow(dead_code))]
fn portable<const FOLD_CASE: bool>(bytes: &[u8]) -> u64 {
    finish_from::<FOLD_CASE>(bytes, 0, Mixer::new())
}

/// The hash of `bytes[i..]`, eight bytes at a time, then byte by byte.
fn finish_from<const FOLD_CASE: bool>(bytes: &[u8], mut i: usize, mut m: Mixer) -> u64 {
    while i + 8 <= bytes.len() {
        let w = u64::from_le_bytes(bytes[i..i + 8].try_into().expect("8 bytes"));
        let digits = in_range(w, b'0', b'9');
        // Each digit byte becomes b'0'; the others are case folded for a skeleton.
        let full = (digits >> 7) * 0xff;
        let masked = (w & !full) | (0x3030_3030_3030_3030 & full);
        m.word(if FOLD_CASE {
            masked | (in_range(masked, b'A', b'Z') >> 2)
        } else {
            masked
        });
        i += 8;
    }
    for &b in &bytes[i..] {
        m.byte(match b {
            b'0'..=b'9' => b'0',
            _ if FOLD_CASE => b.to_ascii_lowercase(),
            _ => b,
        });
    }
    m.finish()
}

/// The line's runs of digits into `runs`, eight bytes at a time: all of them, or, with
/// `through` = Some(k), up to run `k` (0-based) at least, its end found.
pub(super) fn digit_runs(message: &str, runs: &mut Runs, through: Option<usize>) {
    let bytes = message.as_bytes();
    runs.n = 0;
    let mut edges = RunEdges::default();
    let done = |runs: &Runs| through.is_some_and(|k| runs.n > k);
    let mut i = 0;
    while i + 8 <= bytes.len() {
        let w = u64::from_le_bytes(bytes[i..i + 8].try_into().expect("8 bytes"));
        let digits = in_range(w, b'0', b'9');
        if digits != 0 || edges.in_run {
            // the digit bytes' high bits gathered into the top byte, byte k at bit 56 + k
            let bits = ((digits >> 7).wrapping_mul(0x0102_0408_1020_4080)) >> 56;
            edges.block(runs, i, bits, 8);
            if done(runs) {
                return;
            }
        }
        i += 8;
    }
    for (at, &b) in bytes.iter().enumerate().skip(i) {
        edges.block(runs, at, b.is_ascii_digit() as u64, 1);
    }
    edges.end(runs, bytes.len());
}

#[cfg(target_arch = "x86_64")]
mod sse2 {
    use super::{finish_from, same_shape_from, Mixer};
    use std::arch::x86_64::*;

    /// [`super::same_shape`] of two lines of one length, sixteen bytes at a time.
    pub(super) fn same_shape(a: &[u8], b: &[u8]) -> bool {
        debug_assert_eq!(a.len(), b.len());
        let mut i = 0;
        // SAFETY: SSE2 is part of every x86-64 CPU; each load reads the 16 bytes at `i`,
        // inside both slices (of one length) by the loop's bound, unaligned.
        unsafe {
            let zero = _mm_set1_epi8(b'0' as i8);
            let nine = _mm_set1_epi8(9);
            let digit = |v: __m128i| {
                let d = _mm_sub_epi8(v, zero);
                _mm_cmpeq_epi8(_mm_min_epu8(d, nine), d)
            };
            while i + 16 <= a.len() {
                let va = _mm_loadu_si128(a.as_ptr().add(i) as *const __m128i);
                let vb = _mm_loadu_si128(b.as_ptr().add(i) as *const __m128i);
                let (da, db) = (digit(va), digit(vb));
                // digits where both hold one, the same bytes elsewhere
                let ok = _mm_and_si128(
                    _mm_cmpeq_epi8(da, db),
                    _mm_or_si128(_mm_cmpeq_epi8(va, vb), da),
                );
                if _mm_movemask_epi8(ok) != 0xffff {
                    return false;
                }
                i += 16;
            }
        }
        same_shape_from(a, b, i)
    }

    pub(super) fn hash<const FOLD_CASE: bool>(bytes: &[u8]) -> u64 {
        let mut m = Mixer::new();
        let mut i = 0;
        // SAFETY: SSE2 is part of every x86-64 CPU (the intrinsics need no check at run
        // time); each load reads the 16 bytes at `i`, inside `bytes` by the loop's bound,
        // and an unaligned load has no alignment requirement.
        unsafe {
            let zero = _mm_set1_epi8(b'0' as i8);
            let nine = _mm_set1_epi8(9);
            let upper_a = _mm_set1_epi8(b'A' as i8);
            let letters = _mm_set1_epi8(25);
            let case_bit = _mm_set1_epi8(0x20);
            while i + 16 <= bytes.len() {
                let v = _mm_loadu_si128(bytes.as_ptr().add(i) as *const __m128i);
                // a byte is in lo..=lo+n when (byte - lo) wraps to at most n, unsigned
                let d = _mm_sub_epi8(v, zero);
                let digit = _mm_cmpeq_epi8(_mm_min_epu8(d, nine), d);
                let kept = if FOLD_CASE {
                    let u = _mm_sub_epi8(v, upper_a);
                    let upper = _mm_cmpeq_epi8(_mm_min_epu8(u, letters), u);
                    _mm_or_si128(v, _mm_and_si128(upper, case_bit))
                } else {
                    v
                };
                let folded =
                    _mm_or_si128(_mm_andnot_si128(digit, kept), _mm_and_si128(digit, zero));
                let even = _mm_cvtsi128_si64(folded) as u64;
                let odd = _mm_cvtsi128_si64(_mm_unpackhi_epi64(folded, folded)) as u64;
                m.pair(even, odd);
                i += 16;
            }
        }
        finish_from::<FOLD_CASE>(bytes, i, m)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(m: &str) -> u64 {
        skeleton(m)
    }

    #[test]
    fn skeletons_fold_digits_and_case_wherever_the_bytes_stand() {
        let same = [
            (
                "iteration 9 of 5000 | lm loss: 2.1E+00 | grad",
                "Iteration 8 of 5000 | LM loss: 3.7e+11 | GRAD",
            ),
            ("abcdefgh12345678abcdefgh", "abcdefgh87654321abcdefgh"),
            ("step 1234567 of 99", "STEP 7654321 OF 11"),
            (
                "0123456789abcdefghijklmnopqrstuvwxyz0123456789",
                "9876543210ABCDEFGHIJKLMNOPQRSTUVWXYZ5555555555",
            ),
            ("x", "X"),
        ];
        for (a, b) in same {
            assert_eq!(key(a), key(b), "{a:?} {b:?}");
        }
        let differ = [
            ("iteration 9 of 5000", "iteration 9 of 5000 "),
            ("iteration 9 of 5000", "iteration 10 of 5000"),
            ("abcdefgh", "abcdefgi"),
            ("abcdefghijklmnop", "abcdefghijklmnoq"),
            ("abcdefghijklmnopq", "abcdefghijklmnopr"),
            ("abcdefghijklmnopqrstuvwxyz", "abcdefghijklmnopqrstuvwxyy"),
            ("a1b", "ab"),
            ("a1b", "a12b"),
            ("", "\0"),
            ("@[`{", "`{@["),
        ];
        for (a, b) in differ {
            assert_ne!(key(a), key(b), "{a:?} {b:?}");
        }
    }

    /// Two lines of one length are of one shape where a byte-by-byte reading says so,
    /// and `same_shape` agrees with the shapes' hashes.
    #[test]
    fn same_shape_is_a_byte_by_byte_reading() {
        let alphabet: Vec<char> = "0123456789aZ /:@".chars().collect();
        let mut state = 0x1234_5678_9abc_def1u64;
        let mut next = || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let (mut same, mut differ) = (0, 0);
        for _ in 0..20_000 {
            let len = (next() % 70) as usize;
            let a: String = (0..len)
                .map(|_| alphabet[(next() % alphabet.len() as u64) as usize])
                .collect();
            // b: a with some bytes changed, digits for digits mostly
            let b: String = a
                .chars()
                .map(|c| match next() % 8 {
                    0 if c.is_ascii_digit() => char::from(b'0' + (next() % 10) as u8),
                    1 if next() % 4 == 0 => alphabet[(next() % alphabet.len() as u64) as usize],
                    _ => c,
                })
                .collect();
            let want = a.len() == b.len()
                && a.bytes()
                    .zip(b.bytes())
                    .all(|(x, y)| x == y || (x.is_ascii_digit() && y.is_ascii_digit()));
            assert_eq!(same_shape(&a, b.as_bytes()), want, "{a:?} {b:?}");
            assert_eq!(
                same_shape_from(a.as_bytes(), b.as_bytes(), 0),
                want,
                "{a:?} {b:?}"
            );
            assert_eq!(shape(&a) == shape(&b), want, "{a:?} {b:?}");
            if want {
                same += 1;
            } else {
                differ += 1;
            }
        }
        assert!(same > 1_000 && differ > 1_000, "{same} {differ}");
        assert!(!same_shape("step 1", b"step 10"));
    }

    #[test]
    fn shapes_fold_digits_and_keep_case() {
        assert_eq!(
            shape("[rank3]: step 10 of 500"),
            shape("[rank7]: step 99 of 123")
        );
        for (a, b) in [
            ("[rank3]: step", "[Rank3]: step"),
            ("I1125 10:00:00", "i1125 10:00:00"),
            ("step 1", "step 10"),
            ("abcdefghijklmnopqrstuvwxyZ", "abcdefghijklmnopqrstuvwxyz"),
        ] {
            assert_ne!(shape(a), shape(b), "{a:?} {b:?}");
        }
    }

    fn by_bytes(m: &str) -> Vec<(u32, u32)> {
        let mut out = Vec::new();
        let mut start = None;
        for (i, b) in m.bytes().enumerate() {
            match (b.is_ascii_digit(), start) {
                (true, None) => start = Some(i),
                (false, Some(s)) => {
                    out.push((s as u32, i as u32));
                    start = None;
                }
                _ => {}
            }
        }
        if let Some(s) = start {
            out.push((s as u32, m.len() as u32));
        }
        out
    }

    /// The runs of digits, block-wide, against a byte-by-byte reading: runs inside a
    /// block, across blocks' edges, at the ends, in the tail, and past the runs kept.
    #[test]
    fn digit_runs_are_found_where_a_byte_by_byte_reading_finds_them() {
        let many: String = (0..40).map(|i| format!("x{i}")).collect();
        for m in [
            "",
            "7",
            "abcdefgh12345678abcdefgh7",
            "1234567812345678",
            "12345678123456781",
            "a1b2c3d4e5f6g7h8i9",
            "abcdefg1234567890abcdef",
            "abcdefghijklmno1234567890abcdef",
            "12345678abcdefgh",
            "abcdefgh12345678",
            "step: 1013 loss 2.0 tokens/s 123456.7 mem 79.10GiB é 5",
            many.as_str(),
        ] {
            let want = by_bytes(m);
            let mut runs = Runs::default();
            digit_runs(m, &mut runs, None);
            assert_eq!(runs.n, want.len(), "{m:?}");
            let kept = runs.n.min(MAX_RUNS);
            assert_eq!(&runs.at[..kept], &want[..kept], "{m:?}");
            // up to a run: that run's place as a whole reading has it
            for (k, run) in want.iter().enumerate().take(kept) {
                digit_runs(m, &mut runs, Some(k));
                assert!(runs.n > k, "{m:?} {k}");
                assert_eq!(runs.at[k], *run, "{m:?} {k}");
            }
        }
    }

    /// SSE2's reading and the portable one: the same key for lines of every length up to
    /// a few blocks, with digits, capitals, bytes either side of the ranges (`/`, `:`,
    /// `@`, `[`) and UTF-8; and the runs as a byte-by-byte reading finds them.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn the_sse2_reading_is_the_portable_one() {
        let alphabet: Vec<char> = "0123456789aZz /:@[`{é-".chars().collect();
        let mut state = 0x2545_f491_4f6c_dd1du64;
        let mut next = || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        for _ in 0..20_000 {
            let len = (next() % 70) as usize;
            let line: String = (0..len)
                .map(|_| alphabet[(next() % alphabet.len() as u64) as usize])
                .collect();
            assert_eq!(
                sse2::hash::<true>(line.as_bytes()),
                portable::<true>(line.as_bytes()),
                "{line:?}"
            );
            assert_eq!(
                sse2::hash::<false>(line.as_bytes()),
                portable::<false>(line.as_bytes()),
                "{line:?}"
            );
            let mut runs = Runs::default();
            digit_runs(&line, &mut runs, None);
            let want = by_bytes(&line);
            assert_eq!(runs.n, want.len(), "{line:?}");
            assert_eq!(
                runs.at[..runs.n.min(MAX_RUNS)],
                want[..runs.n.min(MAX_RUNS)],
                "{line:?}"
            );
        }
    }
}
