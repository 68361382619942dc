//! A native file diagnosed an iteration at a time: the next chunk (one iteration of every
//! rank) is decoded on another thread while the engine digests this one, and only the
//! engine's digests stay in memory, so a 10,000-rank trace is diagnosed in the memory of
//! one iteration's ops. The answer is that of the whole trace read at once.

use super::{report_alignment, DiagnoseArgs};
use anyhow::{Context, Result};
use flare_engine::clock::{self, ClockEvidence};
use flare_engine::{EngineConfig, JobContext, Offline, OfflineRun};
use flare_import::native::{open_native_file, Chunk, NativeReader};
use flare_import::Limits;
use flare_model::{MachineMetrics, Window};
use std::fs::File;
use std::io::BufReader;
use std::sync::mpsc;

type Reader = NativeReader<BufReader<File>>;

/// Decoded chunks that may wait for the engine (each is one iteration of every rank: about
/// 100 MB for 10,000 ranks).
const CHUNKS_AHEAD: usize = 3;

/// Diagnoses the file `reader` has opened, `None` when its collectives' members are
/// tagged with different iterations (the engine then needs the whole trace, with the
/// instances' iterations unified).
pub(super) fn diagnose(
    a: &DiagnoseArgs,
    mut reader: Reader,
    window: Option<Window>,
    machine: Option<&MachineMetrics>,
    limits: &Limits,
    sp: &indicatif::ProgressBar,
) -> Result<Option<Offline>> {
    let path = &a.paths[0];
    reader.set_decode_threads(decode_workers());
    let header = reader.header().clone();
    let iterations = header
        .iterations
        .iter()
        .filter(|&&it| window.is_none_or(|w| w.contains(it)))
        .count();
    let align = !a.no_align && super::needs_alignment(&header.meta);
    // Offsets need every chunk's collectives: a file of several chunks is read twice.
    let (reader, offsets) = if align && header.chunk_count > 1 {
        sp.set_message("reading collectives to align rank clocks");
        let mut evidence = ClockEvidence::default();
        for_each_chunk(reader, window, |chunk| {
            evidence.add(&chunk.ranks);
            Ok(())
        })?;
        let al = evidence.solve(header.ranks.iter().copied());
        report_alignment(&al);
        let mut again = open_native_file(path, limits)
            .with_context(|| format!("reading {} again", path.display()))?;
        again.set_decode_threads(decode_workers());
        (again, Some(al))
    } else {
        (reader, None)
    };
    let ctx = JobContext::new(
        header.job,
        header.meta,
        header.communicators,
        header.names,
        header.ranks,
    );
    let mut run = OfflineRun::new(ctx, iterations, &EngineConfig::default());
    sp.set_message(format!(
        "diagnosing {} ops an iteration at a time",
        header.ops_per_rank.iter().sum::<u64>()
    ));
    for_each_chunk(reader, window, |chunk| {
        if align {
            match &offsets {
                Some(al) => clock::apply(al, &mut chunk.ranks),
                // The only chunk (a version 1 file, or ranks out of iteration order):
                // aligned on its own, as a whole trace is.
                None => report_alignment(&clock::align_ranks(&mut chunk.ranks)),
            }
        }
        run.push(&chunk.ranks, &chunk.iterations)
            .context("pushing a chunk into the engine")
    })?;
    sp.finish_and_clear();
    if run.needs_unified_instances() {
        return Ok(None);
    }
    Ok(Some(run.finish(machine)))
}

/// Threads that decode rank blocks besides the reading thread: the engine digesting on
/// every core and the reader are already two busy threads, and more decoders than cores
/// only trade places with them (on 2 cores: 1.97-1.99 s for the 10,240-rank file with
/// none against 2.09-2.11 s with two, and less CPU).
fn decode_workers() -> usize {
    flare_import::native::decode_threads().saturating_sub(2)
}

/// Calls `f` on each chunk of `reader` within `window`, in order, while the next one is
/// read and decoded on another thread. Stops at the first error, `f`'s or the reader's.
fn for_each_chunk(
    mut reader: Reader,
    window: Option<Window>,
    mut f: impl FnMut(&mut Chunk) -> Result<()>,
) -> Result<()> {
    std::thread::scope(|s| {
        // Chunks decoded ahead: the reader works while the engine digests, and banks work
        // in the engine's single-threaded phases for its parallel ones.
        let (tx, rx) = mpsc::sync_channel(CHUNKS_AHEAD);
        // Chunks done with go back, to be decoded into: no fresh memory per chunk.
        let (back_tx, back_rx) = mpsc::channel::<Chunk>();
        s.spawn(move || loop {
            if let Ok(done) = back_rx.try_recv() {
                reader.recycle(done);
            }
            let next = match reader.next_chunk() {
                Ok(Some(chunk)) => match in_window(chunk, window) {
                    Some(chunk) => Ok(chunk),
                    None => continue,
                },
                Ok(None) => break,
                Err(e) => Err(e),
            };
            let failed = next.is_err();
            // The receiver is gone when `f` failed: stop reading.
            if tx.send(next).is_err() || failed {
                break;
            }
        });
        for next in rx {
            // The reader's errors name the file and the place.
            let mut chunk = next?;
            f(&mut chunk)?;
            // The reader may have finished: then the chunk is dropped.
            let _ = back_tx.send(chunk);
        }
        Ok(())
    })
}

/// The part of `chunk` within `window`, `None` if nothing is.
fn in_window(mut chunk: Chunk, window: Option<Window>) -> Option<Chunk> {
    let Some(w) = window else {
        return Some(chunk);
    };
    if chunk.iterations.iter().all(|&it| w.contains(it)) {
        return Some(chunk);
    }
    chunk.iterations.retain(|&it| w.contains(it));
    if chunk.iterations.is_empty() {
        return None;
    }
    for r in &mut chunk.ranks {
        r.ops.retain(|o| w.contains(o.iteration));
        r.iterations.retain(|s| w.contains(s.iteration));
    }
    Some(chunk)
}
