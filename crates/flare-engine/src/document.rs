//! The findings document ([`FindingsDocument`]) of a diagnosis: what `flare diagnose
//! --json` prints and the report renders. Live windows build theirs in the server, Flight
//! Recorder hang analysis in `flare-hang`, from the same type.

use crate::Diagnosis;
use flare_model::{FindingsDocument, JobSummary, Trace};

/// Per-rank time breakdowns the document carries, most idle first.
const BREAKDOWN_RANKS: usize = 64;

/// The document of a trace's diagnosis.
pub fn of_trace(trace: &Trace, d: &Diagnosis, diagnosis_ms: f64) -> FindingsDocument {
    let job = JobSummary {
        id: trace.job.job_id.clone(),
        source: trace.meta.source.clone(),
        world_size: trace.job.world_size,
        ranks_with_data: trace.ranks.len(),
        missing_ranks: trace.meta.missing_ranks.clone(),
        iterations: d.iterations.clone(),
        ops: Some(trace.op_count() as u64),
        ..JobSummary::default()
    };
    let mut doc = FindingsDocument::new(job, d.findings.clone(), d.conclusive());
    doc.skipped_detectors = d.skipped.clone();
    doc.rank_metrics = d.rank_metrics.clone();
    doc.rank_breakdown = crate::breakdown::most_idle(trace, BREAKDOWN_RANKS);
    doc.diagnosis_ms = Some(diagnosis_ms);
    doc.notes = trace.meta.notes.clone();
    doc
}
