//! A general guess at where a raw log line's header (timestamp, host, pid, level, thread,
//! component) ends and its message begins, with no per-format rules:
//!
//! - if an upper-case level word (`INFO`, `WARN`...) shows up among the first tokens, the
//!   header runs to it, then over a `[thread]` group (which may hold spaces), a lone `-`,
//!   a `package.Component` followed by a `[context]` group, and a `component:` token;
//! - otherwise the header is the leading run of tokens that are variable but for at most
//!   one word (dates, times, numbers, hosts such as `node-12` or `cn204`, `host/host`) or
//!   month and weekday names or `-`, then a `program[pid]:` tag among the next two tokens
//!   or a `program -` (`program *64 -`).
//!
//! It is a heuristic: the LogHub scores are measured on the ground truth's Content column,
//! not through this (`flare bench logs` shows both).

use crate::mask::{mask_token, WILDCARD};

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
/// Words a `[thread name]` group may span.
const MAX_GROUP_WORDS: usize = 8;

fn trim_punct(t: &str) -> &str {
    t.trim_matches(|c: char| c.is_ascii_punctuation())
}

/// `INFO`, `[WARN]`: upper case, as the lower-case word `error` is usually message.
fn is_level(t: &str) -> bool {
    LEVELS.contains(&trim_punct(t))
}

/// `Info`, `Warning`: capitalised, trusted only right after header tokens, as a
/// sentence may well start with `Error`.
fn is_capitalised_level(t: &str) -> bool {
    let t = trim_punct(t);
    t.len() > 1
        && t.as_bytes()[0].is_ascii_uppercase()
        && t[1..].bytes().all(|c| c.is_ascii_lowercase())
        && LEVELS.iter().any(|l| l.eq_ignore_ascii_case(t))
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
    if !mask_token(t, buf) {
        return false;
    }
    // `kernel[0]:` is a tag, said after the header, not part of it
    if is_tag(t) && buf != "<*>:" {
        return false;
    }
    // variable but for at most one word, with no brackets: `12:01:01,228`, `[2915]`,
    // `node-12`, `tbird-sm1` (`QQ(10018)` or `sshd[42]` name a program, not a host)
    let words = buf
        .split(WILDCARD)
        .flat_map(|p| p.split(|c: char| !c.is_alphanumeric()))
        .filter(|w| !w.is_empty())
        .count();
    words == 0 || (words == 1 && !t.contains(['(', '[', '{', '<']))
}

/// `component:` or `program[pid]:`, not `[instance:`.
fn is_tag(t: &str) -> bool {
    t.len() > 1 && t.ends_with(':') && !t.starts_with('[')
}

/// The message part of a raw log line.
pub fn strip_header(line: &str) -> &str {
    let mut buf = String::new();
    let mut tokens = Vec::new(); // (start offset, token)
    let mut rest = line;
    while tokens.len() < LEVEL_WITHIN + MAX_GROUP_WORDS + 4 {
        let t = rest.trim_start();
        if t.is_empty() {
            break;
        }
        let start = line.len() - t.len();
        let end = t.find(char::is_whitespace).unwrap_or(t.len());
        tokens.push((start, &t[..end]));
        rest = &t[end..];
    }
    let tok = |i: usize| tokens.get(i).map_or("", |(_, t)| *t);
    let lead = tokens
        .iter()
        .position(|(_, t)| !is_header_token(t, &mut buf))
        .unwrap_or(tokens.len());
    let level = tokens
        .iter()
        .take(LEVEL_WITHIN)
        .position(|(_, t)| is_level(t))
        .or_else(|| (lead > 0 && is_capitalised_level(tok(lead))).then_some(lead));
    let cut = if let Some(level) = level {
        let mut cut = level + 1;
        // then `[thread]`, `-`, `package.Component [context]`, `component:`, in any order,
        // one bracket group at most: a second is usually the message's own
        let mut group_seen = false;
        for _ in 0..4 {
            let t = tok(cut);
            if t.starts_with('[') && !group_seen {
                group_seen = true;
                let group_end = tokens.len().min(cut + MAX_GROUP_WORDS);
                match (cut..group_end).find(|&j| tok(j).contains(']')) {
                    Some(close) => cut = close + 1,
                    None => break,
                }
            } else if t == "-" {
                cut += 1;
            } else if is_tag(t) {
                if cut + 1 < tokens.len() {
                    cut += 1;
                }
                break;
            } else if t.contains('.') && tok(cut + 1).starts_with('[') {
                cut += 1;
            } else {
                break;
            }
        }
        cut
    } else {
        // a `program[pid]:` tag, or `program -` (`program *64 -`), right after the header
        match (lead..(lead + 2).min(tokens.len())).find(|&j| is_tag(tok(j))) {
            Some(tag) if lead > 0 && tag + 1 < tokens.len() => tag + 1,
            _ if lead > 0 => match (lead + 1..lead + 3).find(|&j| tok(j) == "-") {
                Some(dash) if dash + 1 < tokens.len() => dash + 1,
                _ => lead,
            },
            _ => lead,
        }
    };
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
                "Created MRAppMaster",
            ),
            (
                "Nov 9 12:01:01 dn228/dn228 crond(pam_unix)[2915]: session closed for user root",
                "session closed for user root",
            ),
            ("2024-01-02T03:04:05Z [rank3] NCCL timeout", "NCCL timeout"),
            (
                "2017-05-16 00:00:00.008 25746 INFO nova.wsgi.server [req-3810 - - -] 10.1.2.3 GET",
                "10.1.2.3 GET",
            ),
            ("[10.30 16:49:06] chrome.exe - example.com:443 open", "example.com:443 open"),
            ("[10.30 16:49:06] svc.exe *64 - example.com:443 open", "example.com:443 open"),
            ("Jul  1 14:29:01 host-1 sandboxd[129] ([10018]): QQ(10018) deny", "QQ(10018) deny"),
            ("Jul  1 09:00:55 host-10-1 kernel[0]: ARPT: 62.01: up", "ARPT: 62.01: up"),
            ("2016-09-28 04:30:30, Info    CBS    Loaded", "CBS    Loaded"),
            ("12:00:01 Error reading x", "reading x"),
            (
                "2015-10-18 18:06:18,045 INFO [RMCommunicator Allocator] o.a.h.Client: Retrying connect",
                "Retrying connect",
            ),
            (
                "2015-07-29 19:29:03,816 - WARN  [RecvWorker:1:Q@765] - Interrupting SendWorker",
                "Interrupting SendWorker",
            ),
            (
                "- 1131567313 2005.11.09 tbird-admin1 Nov 9 12:15:13 local@tbird-admin1 gmetad[1682]: data_thread() got no answer",
                "data_thread() got no answer",
            ),
            ("plain message with no header", "plain message with no header"),
            ("", ""),
            ("12:00:00", ""),
        ];
        for (raw, want) in cases {
            assert_eq!(strip_header(raw), want, "{raw:?}");
        }
    }
}
