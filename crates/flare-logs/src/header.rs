//! A general guess at where a raw log line's header (timestamp, host, pid, level,
//! component) ends and its message begins, with no per-format rules: the header is the
//! leading run of tokens that are wholly variable (dates, times, numbers, ids, hosts
//! with digits) or month/weekday names or `-`; if a log level word shows up among the
//! first tokens, the header runs to it, and a `component:` or `program[pid]:` token right
//! after the header is part of it too. It is a heuristic: the LogHub scores are measured
//! on the ground truth's Content column, not through this.

use crate::mask::mask_token;

const LEVELS: &[&str] = &[
    "TRACE", "DEBUG", "INFO", "NOTICE", "WARN", "WARNING", "ERROR", "ERR", "SEVERE", "FATAL",
    "CRITICAL", "CRIT", "ALERT", "EMERG", "FAILURE",
];
const CALENDAR: &[&str] = &[
    "jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec", "mon",
    "tue", "wed", "thu", "fri", "sat", "sun",
];
/// How far into the line a level word still counts as part of the header.
const LEVEL_WITHIN: usize = 12;

fn trim_punct(t: &str) -> &str {
    t.trim_matches(|c: char| c.is_ascii_punctuation())
}

/// Upper case only (`INFO`, `[WARN]`): the lower-case word `error` is usually message.
fn is_level(t: &str) -> bool {
    let t = trim_punct(t);
    LEVELS.contains(&t)
}

fn is_header_token(t: &str, buf: &mut String) -> bool {
    if t == "-"
        || CALENDAR
            .iter()
            .any(|m| m.eq_ignore_ascii_case(trim_punct(t)))
    {
        return true;
    }
    buf.clear();
    mask_token(t, buf);
    // wholly variable, brackets and separators aside: `[2915]`, `12:01:01,228`
    buf.contains("<*>") && trim_punct(&buf.replace("<*>", "")).is_empty()
}

/// The message part of a raw log line.
pub fn strip_header(line: &str) -> &str {
    let mut buf = String::new();
    let mut tokens = Vec::new(); // (start offset, token)
    let mut rest = line;
    while tokens.len() < LEVEL_WITHIN + 2 {
        let t = rest.trim_start();
        if t.is_empty() {
            break;
        }
        let start = line.len() - t.len();
        let end = t.find(char::is_whitespace).unwrap_or(t.len());
        tokens.push((start, &t[..end]));
        rest = &t[end..];
    }
    let mut cut = match tokens
        .iter()
        .take(LEVEL_WITHIN)
        .position(|(_, t)| is_level(t))
    {
        Some(i) => i + 1,
        None => tokens
            .iter()
            .position(|(_, t)| !is_header_token(t, &mut buf))
            .unwrap_or(tokens.len()),
    };
    if cut > 0 {
        if let Some((_, t)) = tokens.get(cut) {
            if t.len() > 1 && t.ends_with(':') && cut + 1 < tokens.len() {
                cut += 1;
            }
        }
    }
    match tokens.get(cut) {
        Some(&(start, _)) => &line[start..],
        None if cut > 0 => "",
        None => line.trim_start(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strips_common_header_shapes() {
        let cases = [
            (
                "081109 203615 148 INFO dfs.DataNode$PacketResponder: PacketResponder 1 for block blk_1 terminating",
                "PacketResponder 1 for block blk_1 terminating",
            ),
            (
                "2015-10-18 18:01:47,978 INFO [main] org.apache.Foo: Created MRAppMaster",
                "[main] org.apache.Foo: Created MRAppMaster",
            ),
            (
                "Nov 9 12:01:01 dn228/dn228 crond(pam_unix)[2915]: session closed for user root",
                "session closed for user root",
            ),
            ("2024-01-02T03:04:05Z [rank3] NCCL timeout", "NCCL timeout"),
            ("plain message with no header", "plain message with no header"),
            ("", ""),
            ("12:00:00", ""),
        ];
        for (raw, want) in cases {
            assert_eq!(strip_header(raw), want, "{raw:?}");
        }
    }
}
