//! A root cause's effects: the failure lines it explains, grouped by signature with what
//! they are effects of, and the lines logged too long before it to be its effects.

use super::{Context, Place};
use crate::collect::Hit;
use crate::signatures::Role;
use crate::verdict::{absolute, Group};
use flare_model::{CascadeGroup, LineRole, LogSignature};
use std::collections::{BTreeMap, BTreeSet, HashMap};

/// Ranks and hosts listed per cascade group at most.
const LISTED: usize = 64;

/// How long before a root cause's first line a failure line may be and still be its
/// effect. A failure's effects follow it; they precede its line only where the line is
/// written late: a scheduler that notices a node failure after its heartbeat timeout, a
/// time limit that ends a job hung in a collective. The longest wait by default is a
/// collective's (30 minutes in PyTorch's Gloo and DeepSpeed; NCCL's is 10), and a
/// minute for clocks of different hosts.
const EFFECT_LEAD_MAX_S: f64 = 31.0 * 60.0;

/// Effect lines of one signature, as they are gathered.
#[derive(Default)]
struct Effects {
    ranks: BTreeSet<u32>,
    hosts: BTreeSet<String>,
    /// The hit that came first.
    first: usize,
    files: BTreeSet<usize>,
    hits: u64,
}

impl Context<'_> {
    /// Whether a line not of the root cause reads as an effect of it: a cascade line, or
    /// a symptom of another rank (its exit after the culprit's failure).
    fn may_be_effect(&self, h: &Hit, place: &Place) -> bool {
        h.reading.role == Role::Cascade || (h.reading.role == Role::Symptom && !self.at(h, place))
    }

    /// When the root cause's first line was logged, where its clock compares.
    fn root_time(&self, root: &Group) -> Option<f64> {
        root.hits
            .iter()
            .filter_map(|&i| absolute(&self.hits()[i].time, self.year))
            .min_by(f64::total_cmp)
    }

    /// Lines that would read as effects but were logged too long before the root cause's
    /// first line to be caused by it (where clocks compare).
    pub(super) fn too_early(
        &self,
        root: &Group,
        place: &Place,
        skip: &BTreeSet<usize>,
    ) -> BTreeSet<usize> {
        let hits = self.hits();
        let Some(t_root) = self.root_time(root) else {
            return BTreeSet::new();
        };
        (0..hits.len())
            .filter(|i| !skip.contains(i) && self.may_be_effect(&hits[*i], place))
            .filter(|&i| {
                absolute(&hits[i].time, self.year).is_some_and(|t| t < t_root - EFFECT_LEAD_MAX_S)
            })
            .collect()
    }

    /// Failure lines logged too long before the root cause to be its effects, grouped by
    /// signature: an earlier failure the logs do not explain, told apart.
    pub(super) fn earlier(&self, root: &Group, early: &BTreeSet<usize>) -> Vec<CascadeGroup> {
        let hits = self.hits();
        let t_root = self.root_time(root);
        let mut out: Vec<CascadeGroup> = self
            .gather(early.iter().copied())
            .into_iter()
            .map(|(sig, e)| {
                let h = &hits[e.first];
                let before = t_root
                    .zip(absolute(&h.time, self.year))
                    .map(|(r, t)| duration_words(r - t))
                    .unwrap_or_default();
                let explanation = format!(
                    "{}; logged {before} before the root cause, longer than a failure's effects lag it: not its effect, an earlier failure these logs do not explain",
                    h.reading.meaning
                );
                let lines = e.hits;
                self.group(sig, e, lines, explanation)
            })
            .collect();
        out.sort_by(|a, b| b.lines.cmp(&a.lines).then(a.signature.cmp(&b.signature)));
        out
    }

    /// Hits grouped by signature.
    fn gather(&self, indices: impl Iterator<Item = usize>) -> BTreeMap<LogSignature, Effects> {
        let mut groups: BTreeMap<LogSignature, Effects> = BTreeMap::new();
        for i in indices {
            let h = &self.hits()[i];
            let e = groups.entry(h.reading.signature).or_insert(Effects {
                first: i,
                ..Effects::default()
            });
            e.files.insert(h.file);
            if let Some(r) = h.rank {
                e.ranks.insert(r);
            }
            if let Some(x) = &h.host {
                e.hosts.insert(x.clone());
            }
            e.hits += 1;
            if h.order < self.hits()[e.first].order {
                e.first = i;
            }
        }
        groups
    }

    fn group(
        &self,
        sig: LogSignature,
        e: Effects,
        lines: u64,
        explanation: String,
    ) -> CascadeGroup {
        CascadeGroup {
            signature: sig,
            lines,
            rank_count: e.ranks.len() as u32,
            host_count: e.hosts.len() as u32,
            ranks: e.ranks.into_iter().take(LISTED).collect(),
            hosts: e.hosts.into_iter().take(LISTED).collect(),
            first: self.log_line(&self.hits()[e.first], LineRole::Cascade),
            explanation,
        }
    }

    /// The effects of a root cause, grouped by signature, largest first.
    pub(super) fn cascade(
        &self,
        place: &Place,
        cause: &str,
        skip: &BTreeSet<usize>,
        early: &BTreeSet<usize>,
    ) -> (Vec<CascadeGroup>, u64) {
        let effects = (0..self.hits().len())
            .filter(|i| !skip.contains(i) && self.may_be_effect(&self.hits()[*i], place));
        // lines told apart as earlier, by file and signature: not counted again here
        let mut earlier: HashMap<(usize, LogSignature), u64> = HashMap::new();
        for &i in early {
            let h = &self.hits()[i];
            *earlier.entry((h.file, h.reading.signature)).or_default() += 1;
        }
        let mut total = 0;
        let mut out: Vec<CascadeGroup> = self
            .gather(effects)
            .into_iter()
            .map(|(sig, e)| {
                // every line of the signature in those files, kept or only counted
                let lines: u64 = e
                    .files
                    .iter()
                    .map(|&f| {
                        let all = self.c.files[f].signature_lines.get(&sig).copied();
                        let before = earlier.get(&(f, sig)).copied().unwrap_or(0);
                        all.unwrap_or(0).saturating_sub(before)
                    })
                    .sum();
                total += lines;
                let explanation = self.explain(&self.hits()[e.first], place, cause);
                self.group(sig, e, lines, explanation)
            })
            .collect();
        out.sort_by(|a, b| b.lines.cmp(&a.lines).then(a.signature.cmp(&b.signature)));
        (out, total)
    }

    fn explain(&self, h: &Hit, place: &Place, cause: &str) -> String {
        let who = place.describe();
        match h.reading.signature {
            LogSignature::WatchdogTimeout => {
                let at = self
                    .watchdogs
                    .common_seq
                    .map(|s| format!(" (at collective sequence number {s})"))
                    .unwrap_or_default();
                format!("ranks timed out waiting in a collective{at} that {who} never completed: {cause}")
            }
            LogSignature::LauncherSigterm => {
                format!("the launcher stopped the other processes after {who} failed: {cause}")
            }
            _ => format!("{}; an effect of {who} failing: {cause}", h.reading.meaning),
        }
    }

    /// Seconds from the root cause to the first effect, where clocks compare.
    pub(super) fn lead(
        &self,
        root: &Group,
        skip: &BTreeSet<usize>,
        in_root: &BTreeSet<usize>,
    ) -> Option<f64> {
        let hits = self.hits();
        let t_root = self.root_time(root)?;
        let t_effect = hits
            .iter()
            .enumerate()
            .filter(|(i, h)| {
                !skip.contains(i) && !in_root.contains(i) && h.reading.role == Role::Cascade
            })
            .filter_map(|(_, h)| absolute(&h.time, self.year))
            .min_by(f64::total_cmp)?;
        Some(t_effect - t_root)
    }
}

/// A span of seconds in the unit a person reads it in: `45 minutes`, `2.5 hours`, `20 days`.
fn duration_words(seconds: f64) -> String {
    let (n, unit) = if seconds < 90.0 {
        (seconds, "seconds")
    } else if seconds < 90.0 * 60.0 {
        (seconds / 60.0, "minutes")
    } else if seconds < 36.0 * 3600.0 {
        (seconds / 3600.0, "hours")
    } else {
        (seconds / 86400.0, "days")
    };
    if n >= 10.0 {
        format!("{n:.0} {unit}")
    } else {
        format!("{n:.1} {unit}")
    }
}
