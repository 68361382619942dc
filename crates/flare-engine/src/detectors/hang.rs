//! Hang localization: a collective that some members are stuck in while others never
//! reached it. The ranks that never arrived and are not themselves stuck in another
//! collective are the cause; the others are waiting on them.

use crate::{Analysis, Detector, EngineConfig, Outcome};
use flare_model::{
    Component, DetectorId, Evidence, EvidenceKey, Finding, FindingKind, Severity, Unit,
};
use std::collections::{BTreeMap, BTreeSet};

pub struct HangDetector;

impl Detector for HangDetector {
    fn id(&self) -> DetectorId {
        DetectorId::Hang
    }
    fn summary(&self) -> &'static str {
        "ranks that never joined the collective the others wait in"
    }
    fn needs(&self) -> &'static str {
        "collective/P2P ops with communicator and sequence number; ops still in flight at the end of the trace"
    }

    fn detect(&self, a: &Analysis, _cfg: &EngineConfig) -> Outcome {
        if a.live.is_some() {
            // Summaries hold no in-flight ops; the watchdog detector reads live hangs.
            return Outcome::NotApplicable;
        }
        let ctx = a.ctx;
        if a.digests.iter().all(|d| d.stuck_ranks == 0) {
            return Outcome::Findings(vec![]);
        }
        // Ranks that are stuck: a sync op of theirs never ended.
        let mut stuck_ranks = vec![false; a.n_ranks()];
        for d in &a.digests {
            for (ri, r) in d.ranks.iter().enumerate() {
                stuck_ranks[ri] |= r.stuck;
            }
        }
        let stuck: BTreeSet<u32> = (0..a.n_ranks())
            .filter(|&ri| stuck_ranks[ri])
            .map(|ri| a.rank_id(ri))
            .collect();
        if stuck.is_empty() {
            return Outcome::Findings(vec![]);
        }
        // Stuck instances: members in flight, others absent.
        let mut culprits: BTreeMap<u32, Vec<(usize, usize)>> = BTreeMap::new();
        // (iteration index, index into its in-flight list)
        let mut stuck_instances = 0;
        for (ii, d) in a.digests.iter().enumerate() {
            for (k, fl) in d.in_flight.iter().enumerate() {
                stuck_instances += 1;
                let inst = &fl.instance;
                let Some(comm) = ctx.communicators.get(inst.comm as usize) else {
                    continue;
                };
                let arrived: BTreeSet<u32> = fl.arrived.iter().copied().collect();
                for &m in &comm.members {
                    if !arrived.contains(&m) && !stuck.contains(&m) {
                        culprits.entry(m).or_default().push((ii, k));
                    }
                }
            }
        }
        if culprits.is_empty() {
            // Everyone absent is itself waiting elsewhere: a cycle (inconsistent order).
            let mut f = Finding {
                kind: FindingKind::Hang,
                severity: Severity::Critical,
                summary: format!(
                    "job hangs: {} ranks wait in {} collectives, and every missing member waits in another one (deadlock from inconsistent collective order?)",
                    stuck.len(),
                    stuck_instances
                ),
                confidence: 0.6,
                culprits: vec![],
                evidence: vec![],
                action: "compare the collective order of the stuck ranks (flare hang --stacks); fix the code path that issues collectives in a different order".into(),
                iterations: vec![],
                detector: self.id(),
                corroborated_by: vec![],
                failure: None,
            };
            f.culprits
                .push(flare_model::Culprit::new(Component::Process));
            return Outcome::Findings(vec![f]);
        }
        let mut ranked: Vec<(u32, Vec<(usize, usize)>)> = culprits.into_iter().collect();
        // The rank that blocks the most instances first.
        ranked.sort_by_key(|(r, v)| (std::cmp::Reverse(v.len()), *r));
        let (top_it, top) = ranked[0].1[0];
        let inst = &a.digests[top_it].in_flight[top].instance;
        let comm = &ctx.communicators[inst.comm as usize];
        let op_name = ctx.name(inst.name);
        let missing: Vec<u32> = ranked.iter().map(|(r, _)| *r).collect();
        let mut evidence = vec![Evidence::new(
            EvidenceKey::RanksWaiting,
            stuck.len() as f64,
            Some(ctx.job.world_size as f64),
            Unit::Ranks,
            format!(
                "{} of {} ranks are stuck in a collective at the end of the trace",
                stuck.len(),
                ctx.job.world_size
            ),
        )];
        evidence.push(Evidence::new(
            EvidenceKey::ArrivedMembers,
            inst.present as f64,
            Some(comm.members.len() as f64),
            Unit::Ranks,
            format!(
                "{} {} (seq {}) on {} ({} members): {} arrived, never joined: {}",
                inst.kind.as_str(),
                op_name,
                inst.seq,
                comm.label,
                comm.members.len(),
                inst.present,
                list(&missing, 16)
            ),
        ));
        for &r in missing.iter().take(4) {
            let last = ctx
                .rank_index(r)
                .and_then(|ri| a.digests.iter().rev().find_map(|d| d.ranks[ri].last_op));
            let detail = match last {
                Some(o) => format!(
                    "rank {r}'s last op: {} {} (iteration {}), which {}",
                    o.kind.as_str(),
                    ctx.name(o.name),
                    o.iteration,
                    if o.ended { "completed" } else { "never ended" }
                ),
                None if ctx.rank_index(r).is_none() => format!("rank {r} has no trace at all"),
                None => format!("rank {r} recorded no op"),
            };
            evidence.push(Evidence::new(
                EvidenceKey::LastOp,
                0.0,
                None,
                Unit::None,
                detail,
            ));
        }
        let culprit_list = ranked
            .iter()
            .take(8)
            .map(|(r, v)| {
                let mut c = ctx.rank_culprit(Component::Process, *r);
                c.score = v.len() as f64 / ranked[0].1.len() as f64;
                c
            })
            .collect();
        Outcome::Findings(vec![Finding {
            kind: FindingKind::Hang,
            severity: Severity::Critical,
            summary: format!(
                "job hangs in {} on {}: rank{} {} never joined, {} ranks wait",
                op_name,
                comm.label,
                if missing.len() > 1 { "s" } else { "" },
                list(&missing, 8),
                stuck.len()
            ),
            confidence: if missing.len() <= 2 { 0.95 } else { 0.8 },
            culprits: culprit_list,
            evidence,
            action: format!(
                "dump the stacks of rank{} {} (py-spy dump) to see where it stopped; if it is in a host phase (dataloader, checkpoint), fix that; then restart from the last checkpoint, excluding its node if the GPU or driver is at fault",
                if missing.len() > 1 { "s" } else { "" },
                list(&missing, 8)
            ),
            iterations: vec![inst.iteration],
            detector: self.id(),
            corroborated_by: vec![],
            failure: None,
        }])
    }
}

fn list(v: &[u32], max: usize) -> String {
    let mut s: Vec<String> = v.iter().take(max).map(|r| r.to_string()).collect();
    if v.len() > max {
        s.push(format!("... ({} in all)", v.len()));
    }
    s.join(", ")
}

#[cfg(test)]
mod tests {
    use crate::{diagnose, EngineConfig};
    use flare_model::FindingKind;
    use flare_sim::{fault::FaultKind, simulate, SimConfig};

    #[test]
    fn names_the_rank_that_never_arrived() {
        for seed in [3, 4, 5] {
            let mut cfg = SimConfig::for_scale(64);
            cfg.iterations = 5;
            cfg.seed = seed;
            cfg.fault = FaultKind::Hang;
            let out = simulate(&cfg).unwrap();
            let d = diagnose(&out.trace, &EngineConfig::default());
            let f = &d.findings[0];
            assert_eq!(f.kind, FindingKind::Hang);
            assert_eq!(
                f.culprits[0].rank, out.truth.culprits[0].rank,
                "seed {seed}"
            );
        }
    }
}
