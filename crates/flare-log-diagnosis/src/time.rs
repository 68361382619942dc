//! Timestamps as logs write them, made comparable where they can be.
//!
//! Logs of one job mix clocks: ISO dates (Python logging, Slurm), glog's month-day
//! (`E1125 10:00:00.123`, PyTorch's C++ logs), syslog's `Nov 25 10:00:00`, bare times of
//! day, and the kernel's seconds since boot (`[12345.678]`, one clock per host). Two
//! stamps are compared only when they share a reference: calendar stamps with each other
//! (a missing year is taken as the other's), times of day with times of day, uptimes of
//! one host with each other.

use std::cmp::Ordering;

/// One timestamp, in the finest reference its text gives.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Stamp {
    /// A calendar date and time. `year` is absent for glog and syslog stamps.
    Calendar {
        year: Option<u16>,
        /// Seconds since the start of the year (months of 31 days: only order matters).
        second_of_year: f64,
    },
    /// A time of day with no date.
    TimeOfDay(f64),
    /// Seconds since the host booted (dmesg); comparable within one host only.
    Uptime(f64),
}

impl Stamp {
    /// How `self` compares with `other`, when both have one reference (`same_host` for
    /// uptimes). `None` when they cannot be compared.
    pub fn compare(&self, other: &Stamp, same_host: bool) -> Option<Ordering> {
        use Stamp::*;
        match (*self, *other) {
            (
                Calendar {
                    year: ya,
                    second_of_year: a,
                },
                Calendar {
                    year: yb,
                    second_of_year: b,
                },
            ) => match (ya, yb) {
                (Some(ya), Some(yb)) if ya != yb => Some(ya.cmp(&yb)),
                _ => a.partial_cmp(&b),
            },
            (TimeOfDay(a), TimeOfDay(b)) => a.partial_cmp(&b),
            (Uptime(a), Uptime(b)) if same_host => a.partial_cmp(&b),
            _ => None,
        }
    }

    /// Seconds from `self` to `later`, when they can be compared.
    pub fn seconds_until(&self, later: &Stamp, same_host: bool) -> Option<f64> {
        use Stamp::*;
        self.compare(later, same_host)?;
        match (*self, *later) {
            (
                Calendar {
                    year: ya,
                    second_of_year: a,
                },
                Calendar {
                    year: yb,
                    second_of_year: b,
                },
            ) => match (ya, yb) {
                (Some(ya), Some(yb)) if ya != yb => None,
                _ => Some(b - a),
            },
            (TimeOfDay(a), TimeOfDay(b)) | (Uptime(a), Uptime(b)) => Some(b - a),
            _ => None,
        }
    }
}

const MONTHS: [&str; 12] = [
    "jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec",
];

fn digits(b: &[u8], at: usize, n: usize) -> Option<u32> {
    let s = b.get(at..at + n)?;
    let mut v = 0u32;
    for &c in s {
        if !c.is_ascii_digit() {
            return None;
        }
        v = v * 10 + (c - b'0') as u32;
    }
    Some(v)
}

/// Powers of ten a fraction's digits are scaled by (a call to `powi` per line cost more).
const POW10: [f64; 10] = [1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9];

thread_local! {
    /// Whether a stamp of the right shape was refused for its values since the last
    /// [`values_refused`].
    static VALUES_REFUSED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Whether, since it was last asked on this thread, a stamp was refused for its digits'
/// values (hour 25, month 13) rather than its shape: only then may two lines that differ
/// in nothing but their digits read differently (see `shapes`).
pub(crate) fn values_refused() -> bool {
    VALUES_REFUSED.with(|r| r.replace(false))
}

/// Marks a refusal for values (see [`values_refused`]).
fn refuse_values<T>() -> Option<T> {
    VALUES_REFUSED.with(|r| r.set(true));
    None
}

/// `HH:MM:SS` at `at`, with an optional fraction after `.` or `,`: (seconds of day, bytes).
fn time_of_day(b: &[u8], at: usize) -> Option<(f64, usize)> {
    // the eight bytes at once: each digit's value and the colons' zero after taking away
    // `00:00:00`, no byte of them past 9
    let w = u64::from_le_bytes(b.get(at..at + 8)?.try_into().expect("8 bytes"));
    let v = w ^ u64::from_le_bytes(*b"00:00:00");
    const HIGH: u64 = 0x8080_8080_8080_8080;
    if (v | v.wrapping_add(0x7676_7676_7676_7676)) & HIGH != 0
        || v & u64::from_le_bytes([0, 0, 0xff, 0, 0, 0xff, 0, 0]) != 0
    {
        return None;
    }
    let byte = |k: u32| ((v >> (8 * k)) & 0xff) as u32;
    let (h, m, s) = (
        byte(0) * 10 + byte(1),
        byte(3) * 10 + byte(4),
        byte(6) * 10 + byte(7),
    );
    if h > 23 || m > 59 || s > 60 {
        return refuse_values();
    }
    let mut len = 8;
    let mut frac = 0.0;
    if matches!(b.get(at + 8), Some(b'.' | b',')) {
        // the digits as one integer, scaled once (nanoseconds: 9 digits kept, more read)
        let (mut n, mut kept) = (0u64, 0usize);
        let mut i = at + 9;
        while let Some(c) = b.get(i).filter(|c| c.is_ascii_digit()) {
            if kept < 9 {
                n = n * 10 + (c - b'0') as u64;
                kept += 1;
            }
            i += 1;
        }
        if i > at + 9 {
            len = i - at;
            frac = n as f64 / POW10[kept];
        }
    }
    Some(((h * 3600 + m * 60 + s) as f64 + frac, len))
}

/// `HH:MM:SS[.frac]` at byte `at` of `text`: (seconds of day, bytes).
pub(crate) fn time_of_day_at(text: &str, at: usize) -> Option<(f64, usize)> {
    time_of_day(text.as_bytes(), at)
}

fn second_of_year(month: u32, day: u32, tod: f64) -> Option<f64> {
    if !(1..=12).contains(&month) || !(1..=31).contains(&day) {
        return refuse_values();
    }
    Some((((month - 1) * 31 + (day - 1)) * 86_400) as f64 + tod)
}

fn month_of(word: &[u8]) -> Option<u32> {
    let w = word.get(..3)?;
    // lower case by one bit: it maps no byte but a capital onto a small letter
    let key = [w[0] | 0x20, w[1] | 0x20, w[2] | 0x20];
    // most words are no month: their first letter says so
    if !b"jfmasond".contains(&key[0]) {
        return None;
    }
    MONTHS
        .iter()
        .position(|m| m.as_bytes() == key)
        .map(|i| i as u32 + 1)
}

/// A ten-byte date at `at` (its year, month and day read by the caller) and the time of
/// day after its separator: the stamp and its length.
fn dated(b: &[u8], at: usize, year: u32, month: u32, day: u32) -> Option<(Stamp, usize)> {
    let (tod, n) = time_of_day(b, at + 11)?;
    let stamp = Stamp::Calendar {
        year: Some(year as u16),
        second_of_year: second_of_year(month, day, tod)?,
    };
    Some((stamp, 11 + n))
}

/// The length of an RFC 3339 zone at `at`: `Z`, or an offset `+hh:mm`, `+hhmm`, `-hh:mm`
/// (rsyslog's and journald's precise formats, `date --iso-8601`); 0 if none.
fn zone_len(b: &[u8], at: usize) -> usize {
    match b.get(at) {
        Some(b'Z') => 1,
        Some(b'+' | b'-') if digits(b, at + 1, 2).is_some() => {
            if b.get(at + 3) == Some(&b':') && digits(b, at + 4, 2).is_some() {
                6
            } else if digits(b, at + 3, 2).is_some() {
                5
            } else {
                0
            }
        }
        _ => 0,
    }
}

/// Whether a stamp's text is RFC 3339 with a numeric offset
/// (`2025-11-25T10:03:12.123456+00:00`): how rsyslog (its high-precision default) and
/// `journalctl -o short-iso` start a line, a host and a tag following.
pub fn is_rfc3339_offset(text: &str) -> bool {
    let b = text.as_bytes();
    let n = b.len();
    b.get(10) == Some(&b'T')
        && ((n > 6 && zone_len(b, n - 6) == 6) || (n > 5 && zone_len(b, n - 5) == 5))
}

/// A calendar stamp from microseconds since the Unix epoch (journald's
/// `__REALTIME_TIMESTAMP`), in UTC.
pub fn from_unix_micros(micros: u64) -> Option<Stamp> {
    let secs = micros / 1_000_000;
    let days = (secs / 86_400) as i64;
    let tod = (secs % 86_400) as f64 + (micros % 1_000_000) as f64 / 1e6;
    // days since 1970-01-01 to a civil date (Howard Hinnant's `civil_from_days`)
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    Some(Stamp::Calendar {
        year: Some(u16::try_from(year).ok()?),
        second_of_year: second_of_year(month, day, tod)?,
    })
}

/// glog's `MMDD HH:MM:SS.frac` at `at`, the month unpadded as PyTorch writes it (`321
/// 02:07:08` is March 21): the stamp and its length.
pub fn parse_glog(text: &str, at: usize) -> Option<(Stamp, usize)> {
    let b = text.as_bytes();
    let digits_len = b
        .get(at..)?
        .iter()
        .take_while(|c| c.is_ascii_digit())
        .count();
    if !(3..=4).contains(&digits_len) || b.get(at + digits_len) != Some(&b' ') {
        return None;
    }
    let md = digits(b, at, digits_len)?;
    let (tod, n) = time_of_day(b, at + digits_len + 1)?;
    let soy = second_of_year(md / 100, md % 100, tod)?;
    Some((
        Stamp::Calendar {
            year: None,
            second_of_year: soy,
        },
        digits_len + 1 + n,
    ))
}

/// A timestamp starting at byte `at` of `text`, and its length. Recognises
/// `2024-01-02[T ]03:04:05[.,frac]` (and `_` between date and time, as torchrun writes),
/// glog's `MMDD HH:MM:SS.frac` after a level letter (the caller skips the letter),
/// syslog's `Mon DD HH:MM:SS`, dmesg's `[ 1234.567890]` (the caller passes the number's
/// start), `Tue Jan  2 03:04:05 2024`, and a bare `HH:MM:SS`.
pub fn parse_at(text: &str, at: usize) -> Option<(Stamp, usize)> {
    let b = text.as_bytes();
    // ISO date
    if let (Some(y), Some(mo), Some(d)) =
        (digits(b, at, 4), digits(b, at + 5, 2), digits(b, at + 8, 2))
    {
        if matches!(b.get(at + 4), Some(b'-' | b'/'))
            && b.get(at + 7) == b.get(at + 4)
            && matches!(b.get(at + 10), Some(b'T' | b' ' | b'_'))
        {
            let (stamp, len) = dated(b, at, y, mo, d)?;
            // a zone (ignored: one job's hosts share a zone, or write UTC)
            return Some((stamp, len + zone_len(b, at + len)));
        }
    }
    // US date: MM/DD/YYYY HH:MM:SS (Hugging Face's example scripts log with
    // `datefmt="%m/%d/%Y %H:%M:%S"`); a first field past 12 is read as the day
    if let (Some(a), Some(c), Some(y)) =
        (digits(b, at, 2), digits(b, at + 3, 2), digits(b, at + 6, 4))
    {
        if b.get(at + 2) == Some(&b'/')
            && b.get(at + 5) == Some(&b'/')
            && matches!(b.get(at + 10), Some(b' ' | b'T'))
        {
            let (mo, d) = if a > 12 { (c, a) } else { (a, c) };
            return dated(b, at, y, mo, d);
        }
    }
    // glog: MMDD HH:MM:SS
    if let (Some(md), Some(b' ')) = (digits(b, at, 4), b.get(at + 4)) {
        if let Some((tod, n)) = time_of_day(b, at + 5) {
            let soy = second_of_year(md / 100, md % 100, tod)?;
            return Some((
                Stamp::Calendar {
                    year: None,
                    second_of_year: soy,
                },
                5 + n,
            ));
        }
    }
    // syslog: Mon DD HH:MM:SS, or Www Mon DD HH:MM:SS YYYY
    let mut p = at;
    let word = |p: usize| {
        b.get(p..p + 3)
            .filter(|w| w.iter().all(u8::is_ascii_alphabetic))
    };
    if word(p).is_some() && b.get(p + 3) == Some(&b' ') && month_of(&b[p..]).is_none() {
        p += 4; // a weekday
    }
    if let Some(month) = word(p).and_then(month_of) {
        if b.get(p + 3) == Some(&b' ') {
            let mut q = p + 4;
            while b.get(q) == Some(&b' ') {
                q += 1;
            }
            let day_len = if b.get(q + 1).is_some_and(u8::is_ascii_digit) {
                2
            } else {
                1
            };
            let day = digits(b, q, day_len)?;
            let (tod, n) = time_of_day(b, q + day_len + 1)?;
            let soy = second_of_year(month, day, tod)?;
            let mut end = q + day_len + 1 + n;
            let mut year = None;
            if b.get(end) == Some(&b' ') {
                if let Some(y) = digits(b, end + 1, 4) {
                    year = Some(y as u16);
                    end += 5;
                }
            }
            return Some((
                Stamp::Calendar {
                    year,
                    second_of_year: soy,
                },
                end - at,
            ));
        }
    }
    // dmesg: seconds since boot
    if b.get(at).is_some_and(u8::is_ascii_digit) {
        let mut i = at;
        while b.get(i).is_some_and(u8::is_ascii_digit) {
            i += 1;
        }
        if b.get(i) == Some(&b'.')
            && b.get(i + 1).is_some_and(u8::is_ascii_digit)
            && b.get(at + 2) != Some(&b':')
        {
            let mut j = i + 1;
            while b.get(j).is_some_and(u8::is_ascii_digit) {
                j += 1;
            }
            if b.get(j) == Some(&b']') {
                let v: f64 = text[at..j].parse().ok()?;
                return Some((Stamp::Uptime(v), j - at));
            }
        }
    }
    let (tod, n) = time_of_day(b, at)?;
    Some((Stamp::TimeOfDay(tod), n))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The eight bytes read at once are a byte-by-byte reading: digits and colons where
    /// they must be, values in range (a refusal for values noted as one), any bytes
    /// around them.
    #[test]
    fn a_time_of_day_is_read_as_byte_by_byte() {
        fn by_bytes(b: &[u8]) -> Option<(u32, u32, u32)> {
            let d = |i: usize| {
                b.get(i)
                    .filter(|c| c.is_ascii_digit())
                    .map(|c| (c - b'0') as u32)
            };
            let (h, m, s) = (d(0)? * 10 + d(1)?, d(3)? * 10 + d(4)?, d(6)? * 10 + d(7)?);
            (b[2] == b':' && b[5] == b':').then_some((h, m, s))
        }
        let alphabet = b"0123456789:.,/ \xff\x8a\x3a\x40";
        let mut state = 0x0bad_5eed_1234_5678u64;
        let mut next = || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        for _ in 0..50_000 {
            let len = (next() % 14) as usize;
            let mut b: Vec<u8> = (0..len)
                .map(|_| alphabet[(next() % alphabet.len() as u64) as usize])
                .collect();
            // most in the right shape, so that values are read
            if next().is_multiple_of(2) && len >= 8 {
                for (i, c) in b.iter_mut().enumerate().take(8) {
                    *c = if i == 2 || i == 5 {
                        b':'
                    } else {
                        b'0' + (next() % 10) as u8
                    };
                }
            }
            values_refused();
            let got = time_of_day(&b, 0);
            let refused = values_refused();
            match by_bytes(&b) {
                Some((h, m, s)) if h <= 23 && m <= 59 && s <= 60 => {
                    let (v, _) = got.unwrap_or_else(|| panic!("{b:?}"));
                    assert_eq!(v.floor() as u32, h * 3600 + m * 60 + s, "{b:?}");
                    assert!(!refused, "{b:?}");
                }
                Some(_) => assert!(got.is_none() && refused, "{b:?}"),
                None => assert!(got.is_none() && !refused, "{b:?}"),
            }
        }
    }

    #[test]
    fn journald_micros_are_the_calendar_they_name() {
        for (micros, iso) in [
            (1_764_064_992_123_456, "2025-11-25T10:03:12.123456Z"),
            (1_709_164_800_000_000, "2024-02-29T00:00:00Z"),
            (946_684_799_000_000, "1999-12-31T23:59:59Z"),
        ] {
            let (want, _) = parse_at(iso, 0).unwrap();
            assert_eq!(from_unix_micros(micros), Some(want), "{iso}");
        }
    }

    fn stamp(s: &str) -> Stamp {
        parse_at(s, 0).unwrap_or_else(|| panic!("{s}")).0
    }

    #[test]
    fn formats() {
        let cases: &[(&str, Stamp, usize)] = &[
            (
                "2024-01-02 03:04:05,678 - INFO",
                Stamp::Calendar {
                    year: Some(2024),
                    second_of_year: 86_400.0 + 3.0 * 3600.0 + 245.678,
                },
                23,
            ),
            (
                "2024-01-02T03:04:05Z x",
                Stamp::Calendar {
                    year: Some(2024),
                    second_of_year: 86_400.0 + 11_045.0,
                },
                20,
            ),
            (
                "2024-01-02_03:04:05",
                Stamp::Calendar {
                    year: Some(2024),
                    second_of_year: 86_400.0 + 11_045.0,
                },
                19,
            ),
            (
                "0102 03:04:05.5 123 x.cc:1]",
                Stamp::Calendar {
                    year: None,
                    second_of_year: 86_400.0 + 11_045.5,
                },
                15,
            ),
            (
                "Jan  2 03:04:05 host kernel:",
                Stamp::Calendar {
                    year: None,
                    second_of_year: 86_400.0 + 11_045.0,
                },
                15,
            ),
            (
                "Tue Jan  2 03:04:05 2024] NVRM",
                Stamp::Calendar {
                    year: Some(2024),
                    second_of_year: 86_400.0 + 11_045.0,
                },
                24,
            ),
            ("12345.678901] NVRM", Stamp::Uptime(12345.678901), 12),
            ("03:04:05 x", Stamp::TimeOfDay(11_045.0), 8),
            (
                "01/02/2024 03:04:05 - INFO - __main__ - x",
                Stamp::Calendar {
                    year: Some(2024),
                    second_of_year: 86_400.0 + 11_045.0,
                },
                19,
            ),
            (
                "25/01/2024 03:04:05 x",
                Stamp::Calendar {
                    year: Some(2024),
                    second_of_year: 24.0 * 86_400.0 + 11_045.0,
                },
                19,
            ),
        ];
        for (text, want, len) in cases {
            let (got, n) = parse_at(text, 0).unwrap_or_else(|| panic!("{text}"));
            assert_eq!((got, n), (*want, *len), "{text}");
        }
        for bad in [
            "2024-13-02 03:04:05",
            "hello",
            "1234",
            "99:00:00",
            "Jan 40 03:04:05",
            "13/13/2024 03:04:05",
        ] {
            assert!(parse_at(bad, 0).is_none(), "{bad}");
        }
    }

    #[test]
    fn comparisons_need_a_shared_reference() {
        let iso = stamp("2024-01-02 03:04:05");
        let glog = stamp("0102 03:04:06.0");
        assert_eq!(iso.compare(&glog, false), Some(Ordering::Less));
        assert_eq!(iso.seconds_until(&glog, false), Some(1.0));
        let up = stamp("5.0]");
        assert_eq!(up.compare(&stamp("6.0]"), true), Some(Ordering::Less));
        assert_eq!(up.compare(&stamp("6.0]"), false), None);
        assert_eq!(up.compare(&iso, true), None);
        assert_eq!(stamp("03:04:05").compare(&iso, false), None);
        let other_year = stamp("2023-12-31 23:59:59");
        assert_eq!(other_year.compare(&iso, false), Some(Ordering::Less));
    }
}
