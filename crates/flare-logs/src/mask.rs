//! Token classification: which parts of a whitespace-separated token are variables.
//!
//! The rules follow how log lines are built in general, not any one system's format:
//! numbers, hex ids, IPs, `host:port`, timestamps, sizes (`12KB`, `3.5GB`), durations
//! (`250ms`), block and job ids (`blk_-123`, `job_42_0007`), ranks (`rank3`) and UUIDs all
//! carry digits, so an alphanumeric run that holds a digit is a variable, unless it is a
//! well-known name whose digits are part of the name (`ipv4`, `utf8`, `x86_64`). Paths
//! and URLs are variables whatever they hold, and so is the value of `key=value`.
//!
//! A token is rewritten, not only judged: `blk_-123` becomes `blk_<*>`, `rdd_2_3` becomes
//! `rdd_<*>`, `HWID=1973` becomes `HWID=<*>` (adjacent variable runs and what separates
//! them make one wildcard); a token with more such wildcards than constant words
//! (`10.0.0.1:8080`, `R02-M1-N0-C:J12-U11`) becomes `<*>` whole, so that ids of one kind
//! but different shapes still compare equal. Runs are counted, not bytes, so the verdict
//! does not depend on how many digits a value has.

/// The wildcard written in templates.
pub const WILDCARD: &str = "<*>";

/// Names whose digits are part of the name, not a value: masking them would merge
/// messages that differ only in, say, the IP version or the encoding. Lower case.
const NAMES_WITH_DIGITS: &[&str] = &[
    "ipv4", "ipv6", "utf8", "utf16", "utf32", "x86", "x86_64", "x64", "amd64", "arm64", "aarch64",
    "i386", "i686", "md5", "sha1", "sha256", "sha512", "base64", "ext2", "ext3", "ext4", "log4j",
    "http2", "s3", "oauth2", "win32", "win64", "fp16", "fp32", "fp64", "bf16", "int8", "int32",
    "int64", "uint8", "uint32", "uint64", "float32", "float64", "3d", "2d",
];

/// Bytes some masking rule looks for: digits, `=` (key=value), `/` and backslash (paths, URLs).
const INTERESTING: [bool; 256] = {
    let mut t = [false; 256];
    let mut c = b'0';
    while c <= b'9' {
        t[c as usize] = true;
        c += 1;
    }
    t[b'=' as usize] = true;
    t[b'/' as usize] = true;
    t[b'\\' as usize] = true;
    t
};

/// Characters that open or close a token and are kept around its masked core.
fn is_opener(b: u8) -> bool {
    matches!(b, b'(' | b'[' | b'{' | b'<' | b'"' | b'\'' | b'`')
}

fn is_closer(b: u8) -> bool {
    matches!(
        b,
        b')' | b']' | b'}' | b'>' | b'"' | b'\'' | b'`' | b',' | b';' | b':' | b'.' | b'!' | b'?'
    )
}

/// Part of an alphanumeric run: ASCII letters and digits, and any non-ASCII byte so that
/// words in other scripts stay whole.
fn is_word_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b >= 0x80
}

fn is_key_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.')
}

/// For each length up to 8, which first bytes (`0`..`z`, lower-cased) some name in
/// [`NAMES_WITH_DIGITS`] starts with: most runs are rejected without the list scan.
const NAME_STARTS: [u128; 9] = {
    let mut t = [0u128; 9];
    let mut i = 0;
    while i < NAMES_WITH_DIGITS.len() {
        let n = NAMES_WITH_DIGITS[i].as_bytes();
        t[n.len()] |= 1u128 << (n[0] - b'0');
        i += 1;
    }
    t
};

fn is_name_with_digits(run: &[u8]) -> bool {
    let Some(&first) = run.first() else {
        return false;
    };
    let first = first.to_ascii_lowercase();
    run.len() <= 8
        && (b'0'..=b'z').contains(&first)
        && NAME_STARTS[run.len()] & (1u128 << (first - b'0')) != 0
        && NAMES_WITH_DIGITS
            .iter()
            .any(|n| n.len() == run.len() && n.as_bytes().eq_ignore_ascii_case(run))
}

/// Appends the masked form of `token` (no whitespace inside) to `out`; returns whether it
/// holds a wildcard.
pub fn mask_token(token: &str, out: &mut String) -> bool {
    let b = token.as_bytes();
    // Most tokens are plain words: without a digit, `=`, `/` or a backslash no rule applies.
    if !b.iter().any(|&c| INTERESTING[c as usize]) {
        out.push_str(token);
        return false;
    }
    // Peel punctuation that wraps the token, `(HWID=1973)` or `failed:`, so it is kept
    // literally around the masked core.
    let mut start = 0;
    while start < b.len() && is_opener(b[start]) {
        start += 1;
    }
    let mut end = b.len();
    while end > start && is_closer(b[end - 1]) {
        end -= 1;
    }
    if start == end {
        out.push_str(token);
        return false;
    }
    out.push_str(&token[..start]);
    let masked = mask_core(&token[start..end], out);
    out.push_str(&token[end..]);
    masked
}

fn mask_core(core: &str, out: &mut String) -> bool {
    let b = core.as_bytes();
    if is_path_or_url(b) {
        out.push_str(WILDCARD);
        return true;
    }
    // `key=value`: the value is a variable whatever it holds.
    if let Some(eq) = b.iter().position(|&c| c == b'=') {
        if eq > 0 && b[..eq].iter().all(|&c| is_key_byte(c)) && eq + 1 < b.len() {
            out.push_str(&core[..=eq]);
            out.push_str(WILDCARD);
            return true;
        }
    }
    if is_name_with_digits(b) {
        out.push_str(core);
        return false;
    }
    mask_runs(core, out)
}

/// Absolute or home-relative paths and URLs.
fn is_path_or_url(b: &[u8]) -> bool {
    if b.len() < 2 {
        return false;
    }
    if b[0] == b'/' || b.starts_with(b"~/") || b.starts_with(b"./") || b.starts_with(b"../") {
        return b[1..].iter().any(|&c| c != b'/');
    }
    if b.len() > 2 && b[0].is_ascii_alphabetic() && b[1] == b':' && b[2] == b'\\' {
        return true;
    }
    // scheme://
    if let Some(p) = memfind(b, b"://") {
        return p > 0
            && b[..p]
                .iter()
                .all(|c| c.is_ascii_alphanumeric() || *c == b'+');
    }
    false
}

fn memfind(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// The alphanumeric run of `b` from `start`: where it ends, and whether it is a variable
/// (it holds a digit and is not a name such as `utf8`).
#[inline]
fn word_run(b: &[u8], start: usize) -> (usize, bool) {
    let mut i = start;
    let mut digit = false;
    while i < b.len() && is_word_byte(b[i]) {
        digit |= b[i].is_ascii_digit();
        i += 1;
    }
    (i, digit && !is_name_with_digits(&b[start..i]))
}

/// Masks the alphanumeric runs of `core` that hold a digit; adjacent variable runs and
/// the separators between them collapse into one wildcard.
fn mask_runs(core: &str, out: &mut String) -> bool {
    let b = core.as_bytes();
    // First pass: constant runs against groups of adjacent variable runs. Counting runs,
    // not bytes, keeps the verdict the same for `blk_7` and `blk_123456`.
    let (mut constant, mut groups) = (0usize, 0usize);
    let mut prev_var = false;
    let mut i = 0;
    while i < b.len() {
        if is_word_byte(b[i]) {
            let var;
            (i, var) = word_run(b, i);
            if var && !prev_var {
                groups += 1;
            } else if !var {
                constant += 1;
            }
            prev_var = var;
        } else {
            i += 1;
        }
    }
    if groups == 0 {
        out.push_str(core);
        return false;
    }
    // Mostly variable: one wildcard, so `10.0.0.1:80` and `fe80::1` compare equal.
    if groups > constant {
        out.push_str(WILDCARD);
        return true;
    }
    let mut last_var = false; // the last run written was a wildcard
    let mut pending_sep = 0..0; // separators after the last run, not written yet
    let mut i = 0;
    while i < b.len() {
        if !is_word_byte(b[i]) {
            let s = i;
            while i < b.len() && !is_word_byte(b[i]) {
                i += 1;
            }
            pending_sep = s..i;
            continue;
        }
        let s = i;
        let var;
        (i, var) = word_run(b, i);
        if var && last_var {
            // `<*>.<*>` -> `<*>`
            pending_sep = i..i;
            continue;
        }
        let mut sep = &core[pending_sep.clone()];
        // A minus sign belongs to the number: `blk_-42` and `blk_42` are one kind of id.
        if var && b[s].is_ascii_digit() && sep.len() > 1 && sep.ends_with('-') {
            sep = &sep[..sep.len() - 1];
        }
        out.push_str(sep);
        if var {
            out.push_str(WILDCARD);
        } else {
            out.push_str(&core[s..i]);
        }
        last_var = var;
        pending_sep = i..i;
    }
    out.push_str(&core[pending_sep]);
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(t: &str) -> String {
        let mut s = String::new();
        mask_token(t, &mut s);
        s
    }

    #[test]
    fn token_classes() {
        let cases: &[(&str, &str)] = &[
            // numbers, signed, decimal
            ("42", "<*>"),
            ("-7", "<*>"),
            ("3.14", "<*>"),
            ("1,234", "<*>"),
            // hex
            ("0x7fff5a2b", "<*>"),
            ("3fa2c9e1", "<*>"),
            // IPs and host:port
            ("10.86.169.121", "<*>"),
            ("10.86.169.121:53419", "<*>"),
            ("/10.10.34.11:3888", "<*>"),
            ("fe80::1ff:fe23:4567:890a", "<*>"),
            // paths and URLs
            ("/var/log/syslog", "<*>"),
            ("./run.sh", "<*>"),
            ("hdfs://namenode:8020/user/data", "<*>"),
            ("http://example.com/a?b=1", "<*>"),
            // key=value
            ("HWID=1973", "HWID=<*>"),
            ("(HWID=1973)", "(HWID=<*>)"),
            ("state=running", "state=<*>"),
            // sizes and durations
            ("12KB", "<*>"),
            ("3.5GB", "<*>"),
            ("250ms", "<*>"),
            // ids with a constant prefix
            ("blk_-6952295868487656571", "blk_<*>"),
            ("blk_7", "blk_<*>"),
            ("rdd_2_3", "rdd_<*>"),
            ("broadcast_0_piece0", "broadcast_<*>"),
            ("attempt_1445144423722_0020_m_000000_0", "attempt_<*>_m_<*>"),
            ("node-246", "node-<*>"),
            ("node-246:", "node-<*>:"),
            // timestamps, UUIDs
            ("2015-10-18", "<*>"),
            ("18:05:23,123", "<*>"),
            ("123e4567-e89b-12d3-a456-426614174000", "<*>"),
            // ranks
            ("rank3", "<*>"),
            ("[rank12]", "[<*>]"),
            ("R02-M1-N0-C:J12-U11", "<*>"),
            // kept: words, punctuation, names whose digits belong to them
            ("terminating", "terminating"),
            ("failed:", "failed:"),
            ("[TERM,", "[TERM,"),
            ("ipv4", "ipv4"),
            ("UTF8", "UTF8"),
            ("x86_64", "x86_64"),
            ("log4j", "log4j"),
            ("and/or", "and/or"),
            ("->", "->"),
            ("...", "..."),
            (
                "dfs.DataNode$PacketResponder:",
                "dfs.DataNode$PacketResponder:",
            ),
            ("größe", "größe"),
        ];
        for (input, want) in cases {
            assert_eq!(&m(input), want, "masking {input:?}");
        }
    }

    #[test]
    fn reports_whether_a_wildcard_was_written() {
        let mut s = String::new();
        assert!(mask_token("blk_42", &mut s));
        s.clear();
        assert!(!mask_token("ipv6", &mut s));
        s.clear();
        assert!(!mask_token("))", &mut s));
        assert_eq!(s, "))");
    }
}
