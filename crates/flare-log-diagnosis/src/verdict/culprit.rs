//! Who the cascade points at. Effects name their cause even when the cause left no line
//! of its own: the ranks that timed out waiting in a collective name, by their absence or
//! by a different sequence number, the rank that never joined; peers whose connections
//! broke name the host they lost; ranks waiting for the store name rank 0.

use crate::collect::Hit;
use flare_model::LogSignature;
use std::collections::{BTreeMap, BTreeSet, HashMap};

/// What the watchdog timeouts say.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Watchdogs {
    /// Ranks that timed out, with the collective they waited in (sequence number, op,
    /// elements).
    pub waiting: BTreeMap<u32, (u64, Option<String>, Option<u64>)>,
    /// The sequence number most ranks waited at.
    pub common_seq: Option<u64>,
    /// Ranks that waited at another sequence number, or made less progress than the
    /// others (last completed work).
    pub behind: BTreeSet<u32>,
    /// Ranks that said they waited for another (any timeout or lost connection).
    pub waited: BTreeSet<u32>,
    /// Ranks seen in the logs that never said they waited while the others did.
    pub silent: BTreeSet<u32>,
    /// Ranks that waited at the same sequence number in different collectives or sizes:
    /// (rank, op, elements) per variant.
    pub mismatched: Vec<(u32, String, Option<u64>)>,
}

pub fn watchdogs(hits: &[Hit], ranks_seen: &BTreeSet<u32>) -> Watchdogs {
    let mut w = Watchdogs::default();
    let mut completed: BTreeMap<u32, u64> = BTreeMap::new();
    for h in hits
        .iter()
        .filter(|h| h.reading.signature == LogSignature::WatchdogTimeout)
    {
        let Some(rank) = h.rank else { continue };
        if let Some(seq) = h.captured.seq {
            if h.captured.op.is_some() || h.captured.completed.is_none() {
                w.waiting
                    .entry(rank)
                    .or_insert((seq, h.captured.op.clone(), h.captured.numel));
            }
        }
        if let Some(c) = h.captured.completed {
            completed.entry(rank).or_insert(c);
        }
    }
    // waiting ranks from the progress lines too (they carry the failing sequence number)
    for h in hits
        .iter()
        .filter(|h| h.reading.signature == LogSignature::WatchdogTimeout)
    {
        if let (Some(rank), Some(seq)) = (h.rank, h.captured.seq) {
            w.waiting.entry(rank).or_insert((seq, None, None));
        }
    }
    (w.waited, w.silent) = silent(hits, ranks_seen);
    if w.waiting.is_empty() {
        return w;
    }
    let mut by_seq: HashMap<u64, usize> = HashMap::new();
    for (seq, _, _) in w.waiting.values() {
        *by_seq.entry(*seq).or_insert(0) += 1;
    }
    let common = by_seq
        .iter()
        .max_by(|a, b| a.1.cmp(b.1).then(b.0.cmp(a.0)))
        .map(|(s, _)| *s);
    w.common_seq = common;
    if let Some(common) = common {
        for (r, (seq, _, _)) in &w.waiting {
            if *seq != common && by_seq.len() > 1 {
                w.behind.insert(*r);
            }
        }
        // same sequence number, different collectives: the ranks' code paths diverged
        let mut variants: BTreeMap<(String, Option<u64>), Vec<u32>> = BTreeMap::new();
        for (r, (seq, op, numel)) in &w.waiting {
            if *seq == common {
                if let Some(op) = op {
                    variants.entry((op.clone(), *numel)).or_default().push(*r);
                }
            }
        }
        let ops: BTreeSet<&String> = variants.keys().map(|(o, _)| o).collect();
        let sizes_differ = variants.len() > 1;
        if ops.len() > 1 || (sizes_differ && variants.keys().all(|(_, n)| n.is_some())) {
            w.mismatched = variants
                .into_iter()
                .map(|((op, n), ranks)| (ranks[0], op, n))
                .collect();
        }
    }
    // the rank that completed least is behind the others
    if completed.len() >= 2 {
        let max = *completed.values().max().unwrap_or(&0);
        for (r, c) in &completed {
            if *c < max {
                w.behind.insert(*r);
            }
        }
    }
    w
}

/// Whether a cascade line says its rank was waiting for another (a timeout, a lost
/// connection, an aborted communicator), not only that it was stopped.
fn waits(sig: LogSignature) -> bool {
    !matches!(
        sig,
        LogSignature::LauncherSigterm
            | LogSignature::DeathSignal
            | LogSignature::ChildFailed
            | LogSignature::SrunStepAborted
            | LogSignature::ProcessExit
            | LogSignature::ProcessSignal
            | LogSignature::SrunTaskExit
            | LogSignature::GpuXidCleanup
    )
}

/// Ranks seen in the logs that never said they waited, while at least two others did:
/// the rank the others waited for is often the one that says nothing (it hung, or died
/// without a word).
/// (ranks that waited, ranks that did not while at least two others did)
pub fn silent(hits: &[Hit], ranks_seen: &BTreeSet<u32>) -> (BTreeSet<u32>, BTreeSet<u32>) {
    let waiting: BTreeSet<u32> = hits
        .iter()
        .filter(|h| {
            h.reading.role == crate::signatures::Role::Cascade && waits(h.reading.signature)
        })
        .filter_map(|h| h.rank)
        .collect();
    let silent = if waiting.len() < 2 {
        BTreeSet::new()
    } else {
        ranks_seen.difference(&waiting).copied().collect()
    };
    (waiting, silent)
}

/// The torch.distributed calls ranks were in when a collective failed on them (their
/// tracebacks' innermost frame in `distributed_c10d.py`): ranks that were in different
/// calls at once ran different collectives, and the fewer of them are the odd ones.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Calls {
    /// Rank -> (call, the job's own frame that made it).
    pub by_rank: BTreeMap<u32, (String, Option<String>)>,
    /// Ranks in another call than most.
    pub odd: BTreeSet<u32>,
}

impl Calls {
    pub fn mismatched(&self) -> bool {
        !self.odd.is_empty()
    }
}

pub fn calls(hits: &[Hit]) -> Calls {
    let mut c = Calls::default();
    for h in hits
        .iter()
        .filter(|h| h.reading.role == crate::signatures::Role::Cascade)
    {
        if let (Some(r), Some(call)) = (h.rank, &h.collective) {
            c.by_rank
                .entry(r)
                .or_insert((call.clone(), h.location.as_ref().map(|l| l.describe())));
        }
    }
    let mut n: BTreeMap<&str, usize> = BTreeMap::new();
    for (call, _) in c.by_rank.values() {
        *n.entry(call.as_str()).or_insert(0) += 1;
    }
    if n.len() < 2 {
        return c;
    }
    let (majority, most) = n
        .iter()
        .max_by(|a, b| a.1.cmp(b.1).then(b.0.cmp(a.0)))
        .map(|(k, v)| (k.to_string(), *v))
        .unwrap_or_default();
    // the odd ones must be fewer than the rest
    if most * 2 > c.by_rank.len() {
        c.odd = c
            .by_rank
            .iter()
            .filter(|(_, (call, _))| *call != majority)
            .map(|(r, _)| *r)
            .collect();
    }
    c
}

/// A host name as NCCL writes it (short) from an address or a long name, through the
/// IP-to-host joins the logs gave.
pub fn peer_host(peer: &str, ip_hosts: &HashMap<String, String>) -> String {
    let p = peer.split('<').next().unwrap_or(peer);
    if let Some(h) = ip_hosts.get(p) {
        return h.clone();
    }
    let is_ip = p.split('.').count() == 4 && p.split('.').all(|x| x.parse::<u8>().is_ok());
    if is_ip || p.contains(':') {
        p.to_string()
    } else {
        p.split('.').next().unwrap_or(p).to_string()
    }
}

/// `peer` as one of the hosts the logs came from: the same name, or a known host it
/// extends with an interface suffix (`ng30903-ib` is `ng30903`'s IB address).
pub fn known_host(peer: &str, hosts: &BTreeSet<String>) -> Option<String> {
    if hosts.contains(peer) {
        return Some(peer.to_string());
    }
    hosts
        .iter()
        .filter(|h| {
            peer.len() > h.len()
                && peer.starts_with(h.as_str())
                && matches!(peer.as_bytes()[h.len()], b'-' | b'.' | b'_')
        })
        .max_by_key(|h| h.len())
        .cloned()
}

/// The host most reporters name as the peer they lost: (host, reporters naming it,
/// reporters naming anything). `None` unless one host is named by at least two
/// reporters and by more than any other.
pub fn peer_consensus<'a>(
    hits: impl Iterator<Item = &'a Hit>,
    ip_hosts: &HashMap<String, String>,
) -> Option<(String, usize, usize)> {
    let mut named: HashMap<String, BTreeSet<String>> = HashMap::new();
    let mut reporters: BTreeSet<String> = BTreeSet::new();
    for h in hits {
        let Some(peer) = &h.captured.peer else {
            continue;
        };
        let reporter = match (&h.host, h.rank) {
            (Some(host), _) => format!("{host}/{:?}", h.gpu.or(h.local_rank)),
            (None, Some(r)) => format!("rank{r}"),
            (None, None) => format!("{}:{}", h.file, h.line),
        };
        let host = peer_host(peer, ip_hosts);
        named.entry(host).or_default().insert(reporter.clone());
        reporters.insert(reporter);
    }
    let mut best: Vec<(String, usize)> = named.into_iter().map(|(h, r)| (h, r.len())).collect();
    best.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    match best.as_slice() {
        [(h, n)] if *n >= 2 => Some((h.clone(), *n, reporters.len())),
        [(h, n), (_, m), ..] if *n >= 2 && n > m => Some((h.clone(), *n, reporters.len())),
        _ => None,
    }
}

/// A rank named by the lines that wait for it (`retrieving ncclUniqueId from [0]`,
/// `remote error detected from rank 5`), when one rank is named most.
pub fn named_rank<'a>(hits: impl Iterator<Item = &'a Hit>) -> Option<(u32, usize)> {
    let mut n: BTreeMap<u32, usize> = BTreeMap::new();
    for h in hits {
        if let Some(s) = h.captured.suspect {
            *n.entry(s).or_insert(0) += 1;
        }
    }
    let mut v: Vec<(u32, usize)> = n.into_iter().collect();
    v.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    match v.as_slice() {
        [one] => Some(*one),
        [a, b, ..] if a.1 > b.1 => Some(*a),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peers_are_short_host_names() {
        let mut ip = HashMap::new();
        ip.insert("10.0.0.5".to_string(), "node5".to_string());
        assert_eq!(peer_host("10.0.0.5<34567>", &ip), "node5");
        assert_eq!(peer_host("10.0.0.6", &ip), "10.0.0.6");
        assert_eq!(
            peer_host("ng30903-ib.narval.calcul.quebec", &ip),
            "ng30903-ib"
        );
        assert_eq!(peer_host("node2", &ip), "node2");
    }
}
