//! The findings document ([`FindingsDocument`]) of a diagnosis: what `flare diagnose
//! --json` prints and the report renders. Live windows build theirs in the server from the
//! same type.

use crate::Diagnosis;
use flare_model::flight_recorder::FrJob;
use flare_model::{Finding, FindingsDocument, JobSummary, Trace};

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
    doc
}

/// The document of a Flight Recorder hang analysis ([`crate::flight_recorder::analyze`]).
/// Dumps say which collectives each rank reached, which is all a hang analysis needs: it
/// is always conclusive.
pub fn of_flight_recorder(
    id: &str,
    job: &FrJob,
    findings: Vec<Finding>,
    diagnosis_ms: f64,
) -> FindingsDocument {
    let summary = JobSummary {
        id: id.to_string(),
        source: "flight_recorder".into(),
        world_size: job.world().len() as u32,
        ranks_with_data: job.dumps.len(),
        missing_ranks: job.missing_ranks.clone(),
        ..JobSummary::default()
    };
    let mut doc = FindingsDocument::new(summary, findings, true);
    doc.diagnosis_ms = Some(diagnosis_ms);
    doc
}
