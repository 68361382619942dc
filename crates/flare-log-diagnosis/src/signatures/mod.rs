//! The table of known log signatures: how each is recognised, what it is to a failure
//! (the root cause, a symptom on the rank that failed, or a cascade effect of a failure
//! elsewhere), its category, the stage it implies, the action, whether a restart helps,
//! and a real line it matches (tested: each row matches its own line first).
//!
//! A line is matched against the rows in table order and the first row whose pattern
//! matches wins, so specific rows (an IB completion error) come before generic ones (any
//! `NCCL WARN`). Rows are grouped by what they are about, one module each: `nccl`
//! (NCCL's own warnings about its setup and use, first: exact texts), `hardware`,
//! `network`, `process` (memory, numerics, code, configuration, data), `platform`
//! (schedulers), `cascade`; `xid` and `exit` refine a row from what it captured (the Xid
//! number, the exit code or signal), and `exceptions` from a Python exception's type.
//!
//! Each row is written from how the message is specified (the format string in NCCL,
//! PyTorch, the kernel, Slurm), so it matches the message whatever the prefixes before
//! it. A row's `weight` orders root causes found together: hardware seen by the kernel
//! (100) outweighs a scheduler's node failure (90), a process-local cause (OOM, an
//! exception, a configuration error: 80), a network error seen by NCCL (70, below
//! process-local causes because a peer that dies also makes its links fail), a software
//! fault (60), a scheduler's time limit (50) and symptoms whose cause is not named (30
//! to 45).

mod cascade;
mod exceptions;
pub mod exit;
mod hardware;
mod nccl;
mod network;
mod platform;
mod process;
mod xid;

use flare_model::{FailureCategory, JobStage, LineRole, LogSignature};
use regex::Regex;
use std::sync::OnceLock;

/// What a row says a matching line is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    Root,
    Symptom,
    Cascade,
    /// Recognised, and not a failure (a refinement's answer: IB fabric events): the line
    /// is no hit.
    Context,
}

impl Role {
    pub fn line_role(self) -> Option<LineRole> {
        match self {
            Role::Root => Some(LineRole::Root),
            Role::Symptom => Some(LineRole::Symptom),
            Role::Cascade => Some(LineRole::Cascade),
            Role::Context => None,
        }
    }
}

/// One row of the table.
pub struct Rule {
    pub signature: LogSignature,
    pub role: Role,
    pub category: FailureCategory,
    /// Substrings (ASCII case-insensitive) of which a line must hold one before the
    /// pattern is tried: the fast filter that keeps most lines from any regex.
    pub needles: &'static [&'static str],
    /// A regex over the line's message. Named groups it may capture: `rank`, `host`,
    /// `gpu`, `pci`, `peer` (an address), `xid`, `status`, `code` (an exit code),
    /// `signal`, `seq`, `op`, `numel`, `exc` (an exception type), `detail`, `enqueued`,
    /// `completed`, `suspect` (a rank the line waits for); a second alternative that
    /// captures the same thing names it `<name>2`.
    pub pattern: &'static str,
    /// What the line means, for a person.
    pub meaning: &'static str,
    /// What to do.
    pub action: &'static str,
    pub restart_helps: Option<bool>,
    /// The stage such a line implies, if any (NCCL bootstrap errors: init).
    pub stage: Option<JobStage>,
    pub weight: u8,
    /// Turns what the pattern captured into a more precise reading (Xid numbers, exit
    /// codes, exception types).
    pub refine: Option<fn(&regex::Captures) -> Option<Reading>>,
    /// A real line this row matches, and where it was published.
    pub example: &'static str,
    pub example_source: &'static str,
}

/// What a matched line is, after refinement.
#[derive(Clone, Debug, PartialEq)]
pub struct Reading {
    pub signature: LogSignature,
    pub role: Role,
    pub category: FailureCategory,
    pub weight: u8,
    pub meaning: String,
    pub action: String,
    pub restart_helps: Option<bool>,
    pub stage: Option<JobStage>,
}

impl Rule {
    pub fn reading(&self) -> Reading {
        Reading {
            signature: self.signature,
            role: self.role,
            category: self.category,
            weight: self.weight,
            meaning: self.meaning.to_string(),
            action: self.action.to_string(),
            restart_helps: self.restart_helps,
            stage: self.stage,
        }
    }
}

/// The table in match order: specific rows first.
pub fn rules() -> &'static [&'static Rule] {
    static ALL: OnceLock<Vec<&'static Rule>> = OnceLock::new();
    ALL.get_or_init(|| {
        nccl::RULES
            .iter()
            .chain(hardware::RULES)
            .chain(network::RULES)
            .chain(platform::RULES)
            .chain(process::RULES)
            .chain(cascade::RULES)
            .chain(process::GENERIC)
            .collect()
    })
}

/// A line's match: the row, its reading and what it captured.
#[derive(Clone, Debug, PartialEq)]
pub struct Match {
    pub rule: usize,
    pub reading: Reading,
    pub captures: Captured,
}

/// The named groups a row captured.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Captured {
    pub rank: Option<u32>,
    pub local_rank: Option<u32>,
    pub host: Option<String>,
    pub gpu: Option<u32>,
    /// A process id the message names (an Xid's channel owner).
    pub pid: Option<u32>,
    pub pci: Option<String>,
    pub peer: Option<String>,
    pub seq: Option<u64>,
    pub op: Option<String>,
    pub numel: Option<u64>,
    pub exception: Option<String>,
    pub detail: Option<String>,
    /// A watchdog's last enqueued and last completed work (sequence numbers).
    pub enqueued: Option<u64>,
    pub completed: Option<u64>,
    /// A rank the line says it waits for or heard the failure from.
    pub suspect: Option<u32>,
}

/// The compiled table. A row's regex is compiled the first time one of its needles
/// shows up (the needles are scanned for by `lexicon`, with the other words a line is
/// looked at for): a job's logs need a few of them.
pub struct Matcher {
    patterns: Vec<OnceLock<Regex>>,
}

impl Matcher {
    /// The table compiled once per process.
    pub fn get() -> &'static Matcher {
        static M: OnceLock<Matcher> = OnceLock::new();
        M.get_or_init(|| Matcher::new(rules()))
    }

    fn new(rules: &[&Rule]) -> Matcher {
        Matcher {
            patterns: rules.iter().map(|_| OnceLock::new()).collect(),
        }
    }

    fn pattern(&self, row: usize) -> &Regex {
        self.patterns[row].get_or_init(|| {
            let r = rules()[row];
            Regex::new(r.pattern).unwrap_or_else(|e| {
                panic!("signature {} pattern does not compile: {e}", r.signature)
            })
        })
    }

    /// The first row (in table order) that matches `message`, if any.
    pub fn find(&self, message: &str) -> Option<Match> {
        self.find_among(message, &crate::lexicon::scan(message).rows)
    }

    /// The first of `rows` (in table order: the rows whose needles a scan found) whose
    /// pattern matches `message`.
    pub fn find_among(&self, message: &str, rows: &[usize]) -> Option<Match> {
        let rules = rules();
        for &row in rows {
            let Some(caps) = self.pattern(row).captures(message) else {
                continue;
            };
            let rule = rules[row];
            let reading = match rule.refine.and_then(|f| f(&caps)) {
                Some(r) => r,
                None => rule.reading(),
            };
            if reading.role == Role::Context {
                return None;
            }
            return Some(Match {
                rule: row,
                reading,
                captures: captured(&caps),
            });
        }
        None
    }
}

fn captured(c: &regex::Captures) -> Captured {
    // a row with two alternatives that capture the same thing names the second `<name>2`
    let s = |name: &str| {
        c.name(name)
            .or_else(|| c.name(&format!("{name}2")))
            .map(|m| m.as_str().to_string())
    };
    fn n<T: std::str::FromStr>(c: &regex::Captures, name: &str) -> Option<T> {
        c.name(name).and_then(|m| m.as_str().parse().ok())
    }
    Captured {
        rank: n(c, "rank"),
        local_rank: n(c, "local"),
        pid: n(c, "pid"),
        host: s("host"),
        gpu: n(c, "gpu"),
        pci: s("pci"),
        peer: s("peer"),
        seq: n(c, "seq").or_else(|| n(c, "seq2")),
        op: s("op"),
        numel: n(c, "numel"),
        exception: s("exc"),
        detail: s("detail"),
        enqueued: n(c, "enqueued").or_else(|| n(c, "enqueued2")),
        completed: n(c, "completed").or_else(|| n(c, "completed2")),
        suspect: n(c, "suspect"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_row_matches_its_own_example_first() {
        let m = Matcher::get();
        for (row, rule) in rules().iter().enumerate() {
            // as lines are matched: their prefixes read first
            let message =
                crate::origin::parse(rule.example, crate::origin::TaskPrefix::Allowed).message;
            let got = m
                .find(message)
                .unwrap_or_else(|| panic!("{}: its example matches no row", rule.signature));
            assert_eq!(
                got.rule,
                row,
                "{}: its example is taken by {} first",
                rule.signature,
                rules()[got.rule].signature
            );
            assert!(
                rule.example_source.starts_with("https://"),
                "{}: the example's source must be a link",
                rule.signature
            );
            assert!(!rule.needles.is_empty(), "{}: no needle", rule.signature);
        }
    }

    /// Lines a row's words are in that are, or are not, the failure the row names:
    /// (line, where it was published, the signature and a word of the meaning it must
    /// get, or `None` for no reading of that signature).
    const LOOK_ALIKES: &[(&str, &str, LogSignature, Option<&str>)] = &[
        // a node's daemons binding their own ports
        (
            "- 1131567055 2005.11.09 tbird-admin1 Nov 9 12:10:55 local@tbird-admin1 sshd[1761]: error: Bind to port 22 on 0.0.0.0 failed: Address already in use.",
            "https://github.com/logpai/loghub/tree/master/Thunderbird",
            LogSignature::AddressInUse,
            None,
        ),
        (
            "[Server] WARN: bind() failed with: Address already in use (98)",
            "https://github.com/madMAx43v3r/chia-plotter/issues/984",
            LogSignature::AddressInUse,
            None,
        ),
        (
            "Error: listen EADDRINUSE",
            "https://github.com/twilson63/w3/issues/2",
            LogSignature::AddressInUse,
            None,
        ),
        // the training stack's own
        (
            "torch.distributed.DistNetworkError: The server socket has failed to listen on any local network address. port: 29500, useIpv6: false, code: -98, name: EADDRINUSE, message: address already in use",
            "https://github.com/vllm-project/vllm/issues/39015",
            LogSignature::AddressInUse,
            Some("rendezvous port"),
        ),
        (
            "RuntimeError: The server socket has failed to listen on any local network address. The server socket has failed to bind to [::]:29500 (errno: 98 - Address already in use).",
            "https://github.com/showlab/Tune-A-Video/issues/90",
            LogSignature::AddressInUse,
            Some("rendezvous port"),
        ),
        (
            "misc/socket.cc:409 NCCL WARN Call to bind failed: Address already in use",
            "https://github.com/NVIDIA/nccl/issues/1882",
            LogSignature::AddressInUse,
            Some("ephemeral port range"),
        ),
        (
            "OSError: [Errno 98] Address already in use",
            "https://docs.python.org/3/library/socket.html",
            LogSignature::AddressInUse,
            Some("could not listen on a port"),
        ),
    ];

    #[test]
    fn look_alikes_are_told_apart() {
        let m = Matcher::get();
        for (line, source, signature, meaning) in LOOK_ALIKES {
            assert!(source.starts_with("https://"), "{line}");
            let message = crate::origin::parse(line, crate::origin::TaskPrefix::Allowed).message;
            let got = m
                .find(message)
                .filter(|g| g.reading.signature == *signature);
            match (meaning, got) {
                (None, None) => {}
                (None, Some(g)) => panic!("{line}: read as {signature}: {}", g.reading.meaning),
                (Some(_), None) => panic!("{line}: not read as {signature}"),
                (Some(word), Some(g)) => {
                    assert!(
                        g.reading.meaning.contains(word),
                        "{line}: {}",
                        g.reading.meaning
                    )
                }
            }
        }
    }

    #[test]
    fn every_pattern_compiles() {
        let m = Matcher::get();
        for row in 0..rules().len() {
            m.pattern(row);
        }
    }

    #[test]
    fn every_signature_has_a_row() {
        for &s in LogSignature::ALL {
            assert!(
                rules().iter().any(|r| r.signature == s) || xid::REFINED.contains(&s),
                "{s} has no row"
            );
        }
    }
}
