//! Syncs the current run adds per step, and who makes them: the program's own lines, the
//! autograd engine's anomaly checks, or DDP's search for unused parameters.

use super::structure::{calls, grown, grown_words};
use super::{cpu_caveat, finding, sites_text};
use crate::compare::CompareConfig;
use flare_model::host_calls::AUTOGRAD_ANOMALY_CHECK;
use flare_model::{
    Comparison, Evidence, EvidenceKey, Finding, HostCallKind, HostCallRate, RunProfile, Severity,
    Unit,
};

/// Host-device synchronizations per step: the framework's ops (`aten::...`) where the
/// source recorded them, else the runtime's calls (each op syncs through one of those:
/// counting both would count a sync twice).
pub(super) fn syncs_per_step(run: &RunProfile) -> f64 {
    ops_or_runtime(
        calls(run, HostCallKind::Synchronize)
            .into_iter()
            .map(|h| (h.name.as_str(), h.per_step)),
    )
}

/// Sync counts summed apart for the framework's ops (`aten::...`) and the runtime's
/// calls, the larger of the two (see [`syncs_per_step`]).
fn ops_or_runtime<'a>(counts: impl IntoIterator<Item = (&'a str, f64)>) -> f64 {
    let (mut ops, mut runtime) = (0.0, 0.0);
    for (name, n) in counts {
        if name.starts_with("aten::") {
            ops += n;
        } else {
            runtime += n;
        }
    }
    f64::max(ops, runtime)
}

/// The sync calls that the current run adds, call by call, with their baseline per-step
/// counts: a call new to the run, or one made half as many times again as before; a call
/// that varies less is none, since syncs that depend on the data (`if loss.item() > x:`)
/// come and go between runs. Judged per call rather than in total because frameworks sync
/// on their own too (DDP's runtime statistics sync CUDA events in its first iterations):
/// one new sync per step beside seven of those is a change, however small a share.
fn added_syncs(c: &Comparison) -> Vec<(&HostCallRate, f64)> {
    grown(c, HostCallKind::Synchronize)
        .into_iter()
        .filter(|(h, before)| h.per_step >= 1.5 * before)
        .collect()
}

/// How many more syncs per step `added` makes: ops and runtime calls apart, as in
/// [`syncs_per_step`].
fn added_per_step(added: &[(&HostCallRate, f64)]) -> f64 {
    ops_or_runtime(
        added
            .iter()
            .map(|(h, before)| (h.name.as_str(), h.per_step - before)),
    )
}

/// The span DDP's reducer records while it walks the autograd graph for parameters the
/// forward did not use (`find_unused_parameters=True`).
const DDP_UNUSED_PARAMETER_SEARCH: &str = "torch.distributed.ddp.reducer::search_unused_parameters";

/// Whether the current run makes the autograd engine's anomaly checks more often per
/// step: each backward function's span then holds its checks.
pub(super) fn anomaly_checks_added(c: &Comparison) -> bool {
    added_syncs(c)
        .iter()
        .any(|(h, _)| h.name == AUTOGRAD_ANOMALY_CHECK)
}

/// The host waits for the device more often per step: calls that sync at least once more
/// every two steps ([`added_syncs`]).
pub fn synchronization(c: &Comparison, _cfg: &CompareConfig) -> Option<Finding> {
    let grown = added_syncs(c);
    if added_per_step(&grown) < 0.5 {
        return None;
    }
    let (before, after) = (syncs_per_step(&c.baseline), syncs_per_step(&c.current));
    let names = grown_words(&grown, 3);
    // An op and the runtime call under it are one sync made at one site: a site once,
    // with the larger count.
    let mut sites: Vec<(String, u64)> = Vec::new();
    for (site, n) in grown.iter().flat_map(|(h, _)| h.sites.iter()) {
        match sites.iter_mut().find(|(s, _)| s == site) {
            Some(seen) => seen.1 = seen.1.max(*n),
            None => sites.push((site.clone(), *n)),
        }
    }
    let mut evidence = vec![Evidence::new(
        EvidenceKey::SyncsPerStep,
        after,
        Some(before),
        Unit::None,
        format!(
            "host-device synchronizations per step of a rank: {}",
            names.join(", ")
        ),
    )
    .decisive()];
    let site = if sites.is_empty() {
        String::new()
    } else {
        evidence[0]
            .detail
            .push_str(&format!("; called from {}", sites_text(&sites)));
        format!(", from {}", sites[0].0)
    };
    // The autograd engine's own NaN checks: no line of the program makes them.
    let checks: f64 = grown
        .iter()
        .filter(|(h, _)| h.name == AUTOGRAD_ANOMALY_CHECK)
        .map(|(h, b)| h.per_step - b)
        .sum();
    // DDP's reducer searching the graph for unused parameters (`find_unused_parameters`)
    // reads each parameter's use back every step: the setting, not a line, makes them.
    let ddp_search = c
        .sequence
        .as_ref()
        .is_some_and(|s| s.appeared.iter().any(|n| n == DDP_UNUSED_PARAMETER_SEARCH));
    let first = grown.first().map_or("", |(h, _)| h.name.as_str());
    let (summary, action) = if checks >= 0.5 * added_per_step(&grown) {
        (
            format!(
                "autograd anomaly detection is on: {checks:.1} NaN checks per step, each a host-device sync after a backward function ({after:.1} syncs per step against {before:.1})"
            ),
            "turn anomaly detection off outside debugging (torch.autograd.set_detect_anomaly(False); no torch.autograd.detect_anomaly() around the step): after every backward function it reads each output's isnan().any() back to the host, and it records a traceback for every forward op; to catch NaNs in training, check the loss with torch.isfinite every N steps".to_string(),
        )
    } else if ddp_search {
        (
            format!(
                "DDP searches for unused parameters every step: {after:.1} host syncs per step against {before:.1} ({first}{site}), beside its graph search ({DDP_UNUSED_PARAMETER_SEARCH})"
            ),
            "DistributedDataParallel(find_unused_parameters=True) walks the autograd graph after each forward and reads every parameter's use back after the backward: pass find_unused_parameters=False where every parameter gets a gradient every step (DDP then names any that do not), or static_graph=True where the same ones are unused every step".to_string(),
        )
    } else {
        (
            format!(
                "accidental synchronization: {after:.1} host-device syncs per step against {before:.1} ({first}{site})"
            ),
            format!(
                "remove the sync from the step{}: keep the value on the device and read it every N steps (log the loss with .detach() and .item() only when printing), avoid tensor-dependent Python control flow, nonzero/masked_select/unique on the device; each sync makes the host wait until the device drains its queue, so launches stop overlapping compute",
                if sites.is_empty() {
                    " (torch.profiler with with_stack=True says which line)".to_string()
                } else {
                    format!(" at {}", sites[0].0)
                },
            ),
        )
    };
    Some(finding(
        Severity::Warning,
        summary,
        0.9,
        evidence,
        format!("{action}{}", cpu_caveat(c)),
    ))
}
