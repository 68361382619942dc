//! The verdicts of one iteration: gate, then the forest (or the 3-sigma rule).

use super::{batch_forest, features, model, AbnormalMethod, Classes, History, N_FEATURES};
use crate::context::JobContext;
use crate::digest::{Members, OpGroup};
use crate::forest::BATCH;

/// What abnormal-op detection concluded for one iteration.
#[derive(Clone, Debug, Default)]
pub struct Verdicts {
    /// Per op group (global id): abnormal.
    pub abnormal: Vec<bool>,
    /// Groups the forest scored (past the gate), and those found abnormal.
    pub scored: u32,
    pub n_abnormal: u32,
    /// The most abnormal groups: (rank index, communicator, name, mean ratio).
    pub examples: Vec<(u32, u32, u32, f32)>,
}

/// One thread's verdicts: flags of its groups, groups scored, examples (mean ratio, rank
/// index, communicator, name).
type ChunkVerdicts = (Vec<bool>, u32, Vec<(f32, u32, u32, u32)>);

/// Judges every op group of an iteration, one thread per chunk of ranks.
pub fn detect(
    ctx: &JobContext,
    members: &Members,
    history: &History,
    iteration_ratio: f64,
    drift: f64,
    method: AbnormalMethod,
) -> Verdicts {
    // One thread per chunk of ranks, as the digest used.
    let classes = Classes::new(ctx, members, members.group_chunks().count());
    let m = model();
    let mut scale = [1.0f32; N_FEATURES];
    for &f in &m.drift_features {
        if let Some(s) = scale.get_mut(f) {
            *s = drift as f32;
        }
    }
    let chunks: Vec<(u32, &[OpGroup])> = members.group_chunks().collect();
    let forest = batch_forest();
    let judge = |base: u32, groups: &[OpGroup]| -> ChunkVerdicts {
        let mut flags = vec![false; groups.len()];
        let mut scored = 0u32;
        let mut buf = Vec::new();
        // Groups past the gate wait for the forest in batches (its trees walked for many
        // rows at once), in group order.
        let mut batch: Vec<(usize, [f32; N_FEATURES])> = Vec::with_capacity(BATCH);
        let mut probs = [0f32; BATCH];
        let mut rows = [[0f32; N_FEATURES]; BATCH];
        let mut flush = |batch: &mut Vec<(usize, [f32; N_FEATURES])>, flags: &mut [bool]| {
            for (row, (_, f)) in rows.iter_mut().zip(batch.iter()) {
                *row = *f;
            }
            forest.predict_scaled(&rows[..batch.len()], &scale, &mut probs);
            for ((k, _), p) in batch.drain(..).zip(probs) {
                flags[k] = p >= m.threshold;
            }
        };
        for (k, g) in groups.iter().enumerate() {
            if g.n == 0 {
                continue;
            }
            let id = base + k as u32;
            let r = classes.refs[classes.of_group[id as usize] as usize];
            match method {
                AbnormalMethod::ThreeSigma => {
                    scored += 1;
                    flags[k] = g.mean_d() > r.mean + 3.0 * r.std && r.std > 0.0;
                }
                AbnormalMethod::Forest => {
                    // The gate first, on figures that need no quartiles.
                    let refd = r.median.max(1.0);
                    let mean = g.mean_d();
                    let quick_mean = (mean / refd) as f32;
                    let quick_z = ((mean - r.median) / r.mad.max(0.02 * refd)) as f32;
                    let hist = history
                        .get(g)
                        .filter(|h| *h > 0.0)
                        .map_or(1.0, |h| (mean / h as f64) as f32);
                    let transfer = if r.transfer > 0.0 {
                        (g.sum_transfer / g.n as f64 / r.transfer) as f32
                    } else {
                        1.0
                    };
                    if m.gate
                        .passes_on(quick_mean, quick_z, hist, transfer, drift as f32)
                    {
                        scored += 1;
                        let f = features(
                            ctx,
                            members,
                            &classes,
                            history,
                            iteration_ratio,
                            id,
                            id as usize,
                            g,
                            &mut buf,
                        );
                        batch.push((k, f));
                        if batch.len() == BATCH {
                            flush(&mut batch, &mut flags);
                        }
                    }
                }
            }
        }
        if !batch.is_empty() {
            flush(&mut batch, &mut flags);
        }
        let mut examples: Vec<(f32, u32, u32, u32)> = groups
            .iter()
            .enumerate()
            .filter(|&(k, _)| flags[k])
            .map(|(k, g)| {
                let r = classes.refs[classes.of_group[base as usize + k] as usize];
                (
                    (g.mean_d() / r.median.max(1.0)) as f32,
                    g.rank_index,
                    g.comm,
                    g.name,
                )
            })
            .collect();
        examples.sort_by(|a, b| b.0.total_cmp(&a.0));
        examples.truncate(8);
        (flags, scored, examples)
    };
    // One chunk per thread (the calling thread takes the first: see `par_ranges`).
    let results: Vec<ChunkVerdicts> = crate::par::par_ranges(chunks.len(), chunks.len(), |r| {
        r.map(|k| judge(chunks[k].0, chunks[k].1))
            .collect::<Vec<_>>()
    })
    .into_iter()
    .flatten()
    .collect();
    let mut v = Verdicts {
        abnormal: Vec::with_capacity(members.n_groups()),
        ..Verdicts::default()
    };
    let mut examples = Vec::new();
    for (flags, scored, ex) in results {
        v.n_abnormal += flags.iter().filter(|&&f| f).count() as u32;
        v.abnormal.extend(flags);
        v.scored += scored;
        examples.extend(ex);
    }
    examples.sort_by(|a, b| b.0.total_cmp(&a.0));
    v.examples = examples
        .into_iter()
        .take(8)
        .map(|(r, ri, c, n)| (ri, c, n, r))
        .collect();
    v
}
