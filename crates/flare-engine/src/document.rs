//! The findings document ([`FindingsDocument`]) of a diagnosis: what `flare diagnose
//! --json` prints and the report renders. Live windows build theirs in the server, Flight
//! Recorder hang analysis in `flare-hang`, from the same type.

use crate::Offline;
use flare_model::{FindingsDocument, JobSummary};

/// Per-rank time breakdowns the document carries, most idle first.
const BREAKDOWN_RANKS: usize = 64;

/// The document of an offline run (a trace diagnosed whole or read chunk by chunk).
pub fn of_run(run: &Offline, diagnosis_ms: f64) -> FindingsDocument {
    let (ctx, d) = (&run.ctx, &run.diagnosis);
    let job = JobSummary {
        id: ctx.job.job_id.clone(),
        source: ctx.meta.source.clone(),
        world_size: ctx.job.world_size,
        ranks_with_data: ctx.ranks.len(),
        missing_ranks: ctx.meta.missing_ranks.clone(),
        iterations: d.iterations.clone(),
        ops: Some(run.ops),
        parallel: ctx.job.parallel.clone(),
        ..JobSummary::default()
    };
    let mut doc = FindingsDocument::new(job, d.findings.clone(), d.conclusive());
    doc.skipped_detectors = d.skipped.clone();
    doc.rank_metrics = d.rank_metrics.clone();
    doc.rank_breakdown = run.breakdown.most_idle(BREAKDOWN_RANKS);
    doc.diagnosis_ms = Some(diagnosis_ms);
    doc.notes = ctx.meta.notes.clone();
    doc
}
