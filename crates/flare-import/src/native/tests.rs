//! Unit tests of the native reader and writer: the parallel reader against the sequential
//! one, chunking, and version 1 files.

use super::read::read_native_threads;
use super::write::{frame_info, Payload};
use super::*;
use crate::limits::Limits;
use flare_model::{ClusterTopology, GroupKind, IterationSpan, Op, OpKind, Trace};
use std::io::Write;

fn small_trace() -> Trace {
    let op = |kind, start: i64| Op {
        kind,
        name: 0,
        iteration: 3,
        comm: if kind == OpKind::Compute {
            Op::NO_COMM
        } else {
            0
        },
        seq: 7,
        peer: Op::NO_PEER,
        start_ns: start,
        end_ns: start + 1000,
        issue_ns: start - 50,
        amount: 1 << 20,
    };
    Trace {
        meta: TraceMeta {
            source: "test".into(),
            detail: String::new(),
            missing_ranks: vec![2],
            cpu_compute: false,
            notes: Vec::new(),
            host_calls: Default::default(),
        },
        job: JobInfo {
            job_id: "j".into(),
            world_size: 3,
            cluster: ClusterTopology::for_world(3, 8, 32),
            parallel: None,
            microbatches: Some(4),
        },
        communicators: vec![Communicator {
            id: 0,
            kind: GroupKind::World,
            members: vec![0, 1, 2],
            label: "world".into(),
        }],
        names: vec!["gemm".into()],
        ranks: vec![
            RankTrace {
                rank: 0,
                ops: vec![op(OpKind::Compute, 10), op(OpKind::AllReduce, 2000)],
                iterations: vec![IterationSpan {
                    iteration: 3,
                    start_ns: 0,
                    end_ns: Some(5000),
                }],
            },
            RankTrace {
                rank: 1,
                ops: vec![Op {
                    end_ns: Op::IN_FLIGHT,
                    issue_ns: Op::UNKNOWN,
                    ..op(OpKind::AllReduce, 2100)
                }],
                iterations: vec![IterationSpan {
                    iteration: 3,
                    start_ns: 1,
                    end_ns: None,
                }],
            },
        ],
    }
}

/// A trace of `n` ranks, each with a few ops, for the parallel reader.
fn many_ranks(n: u32) -> Trace {
    let mut t = small_trace();
    let proto = t.ranks[0].clone();
    t.job.world_size = n;
    t.meta.missing_ranks.clear();
    t.ranks = (0..n)
        .map(|r| {
            let mut rt = proto.clone();
            rt.rank = r;
            for (i, op) in rt.ops.iter_mut().enumerate() {
                op.start_ns += (r as i64) * 7 + i as i64;
                op.amount += r as u64;
            }
            rt
        })
        .collect();
    t
}

/// A file of `version` holding `trace`, with `damage` applied to each block (with its
/// index in the file) before compression.
fn file_with(trace: &Trace, version: u32, damage: impl Fn(u64, &mut Vec<u8>)) -> Vec<u8> {
    let mut payload = Vec::new();
    let layout = Payload::of(trace, version);
    let json = layout.header_json().unwrap();
    payload.extend_from_slice(&(json.len() as u32).to_le_bytes());
    payload.extend_from_slice(&json);
    layout.write_body(&mut payload, damage).unwrap();
    let mut out = MAGIC.to_vec();
    out.extend_from_slice(&version.to_le_bytes());
    let mut enc = lz4_flex::frame::FrameEncoder::with_frame_info(
        frame_info(lz4_flex::frame::BlockSize::Max64KB),
        out,
    );
    enc.write_all(&payload).unwrap();
    enc.finish().unwrap()
}

/// A change to rank block `i`'s bytes.
type Damage = dyn Fn(u64, &mut Vec<u8>);

fn outcome(buf: &[u8], threads: usize) -> Result<Trace, String> {
    read_native_threads(buf, "p.flare", &Limits::default(), threads).map_err(|e| e.to_string())
}

/// `n` ranks over iterations 4, 5 and 7, each rank's ops in iteration order.
fn iterated(n: u32) -> Trace {
    let mut t = many_ranks(n);
    for rt in &mut t.ranks {
        let proto = rt.ops.clone();
        rt.ops.clear();
        rt.iterations.clear();
        for (k, it) in [4u32, 5, 7].into_iter().enumerate() {
            let shift = k as i64 * 10_000;
            rt.iterations.push(IterationSpan {
                iteration: it,
                start_ns: shift,
                end_ns: Some(shift + 9_000),
            });
            rt.ops.extend(proto.iter().map(|o| Op {
                iteration: it,
                start_ns: o.start_ns + shift,
                end_ns: o.end_ns.saturating_add(shift),
                seq: o.seq + k as u32,
                ..*o
            }));
        }
    }
    t
}

#[test]
fn parallel_reads_equal_sequential_ones() {
    for (t, version) in [(many_ranks(50), 1), (many_ranks(50), 2), (iterated(17), 2)] {
        parallel_equals_sequential(&t, version);
    }
}

fn parallel_equals_sequential(t: &Trace, version: u32) {
    let good = file_with(t, version, |_, _| {});
    for threads in [0, 2, 3, 5] {
        assert_eq!(outcome(&good, threads), Ok(t.clone()));
    }
    // Blocks that fail to decode (a trailing byte, a cut column), alone or with a
    // truncated file after them: the first failure in file order is reported.
    let damages: [&Damage; 4] = [
        &|i, b| {
            if i == 7 {
                b.push(0)
            }
        },
        &|i, b| {
            if i == 31 || i == 44 {
                b.pop();
            }
        },
        &|i, b| {
            if i >= 12 {
                b.push(1)
            }
        },
        &|i, b| {
            if i == 0 || i == 49 {
                b.truncate(1)
            }
        },
    ];
    for damage in damages {
        let bad = file_with(t, version, damage);
        let want = outcome(&bad, 0);
        assert!(want.is_err());
        for threads in [2, 3, 5] {
            assert_eq!(outcome(&bad, threads), want, "{threads} threads");
        }
        for cut in (12..bad.len()).step_by(97) {
            let want = outcome(&bad[..cut], 0);
            assert!(want.is_err());
            assert_eq!(outcome(&bad[..cut], 2), want, "cut at {cut}");
        }
    }
    for cut in (0..good.len()).step_by(13) {
        let want = outcome(&good[..cut], 0);
        assert!(want.is_err());
        assert_eq!(outcome(&good[..cut], 3), want, "cut at {cut}");
    }
}

#[test]
fn small_round_trip() {
    let t = small_trace();
    let mut buf = Vec::new();
    write_native(&t, &mut buf).unwrap();
    let back = read_native(&buf[..], "mem").unwrap();
    assert_eq!(back, t);
}

#[test]
fn chunks_come_iteration_by_iteration() {
    let t = iterated(3);
    let mut buf = Vec::new();
    write_native(&t, &mut buf).unwrap();
    let mut r = NativeReader::with_threads(&buf[..], "mem", &Limits::default(), 0).unwrap();
    assert_eq!(r.header().iterations, vec![4, 5, 7]);
    assert_eq!(r.header().chunk_count, 3);
    assert_eq!(r.header().op_count(), t.op_count() as u64);
    for it in [4, 5, 7] {
        let c = r.next_chunk().unwrap().unwrap();
        assert_eq!(c.iterations, vec![it]);
        assert_eq!(c.ranks.len(), 3);
        for (got, want) in c.ranks.iter().zip(&t.ranks) {
            assert_eq!(got.rank, want.rank);
            let ops: Vec<Op> = want
                .ops
                .iter()
                .copied()
                .filter(|o| o.iteration == it)
                .collect();
            assert_eq!(got.ops, ops);
            assert_eq!(got.iterations.len(), 1);
            assert_eq!(got.iterations[0].iteration, it);
        }
        // The next chunk is decoded into this one's buffers.
        r.recycle(c);
    }
    assert_eq!(r.next_chunk().unwrap(), None);
}

#[test]
fn a_trace_out_of_iteration_order_is_one_chunk_and_round_trips() {
    let mut t = iterated(3);
    t.ranks[1].ops.swap(0, 3);
    let mut buf = Vec::new();
    write_native(&t, &mut buf).unwrap();
    let mut r = NativeReader::with_threads(&buf[..], "mem", &Limits::default(), 0).unwrap();
    assert_eq!(r.header().chunk_count, 1);
    assert_eq!(r.next_chunk().unwrap().unwrap().iterations, vec![4, 5, 7]);
    assert_eq!(read_native(&buf[..], "mem").unwrap(), t);
}

#[test]
fn version_1_files_read_as_one_chunk() {
    let t = iterated(20);
    let mut v1 = Vec::new();
    write_native_version(&t, &mut v1, 1).unwrap();
    assert_eq!(&v1[8..12], &1u32.to_le_bytes());
    assert_eq!(read_native(&v1[..], "v1").unwrap(), t);
    let mut r = NativeReader::with_threads(&v1[..], "v1", &Limits::default(), 2).unwrap();
    assert_eq!(r.header().version, 1);
    assert_eq!(r.header().ranks, (0..20).collect::<Vec<u32>>());
    assert_eq!(r.header().iterations, vec![4, 5, 7]);
    let c = r.next_chunk().unwrap().unwrap();
    assert_eq!(c.ranks, t.ranks);
    assert_eq!(r.next_chunk().unwrap(), None);
    assert!(write_native_version(&t, &mut Vec::new(), 3).is_err());
}

#[test]
fn a_block_with_another_chunks_iteration_or_rank_is_refused() {
    // Chunk 1 (iteration 5) gets chunk 0's first block (rank 0, iteration 4).
    let t = iterated(3);
    let swapped = std::cell::RefCell::new(None::<Vec<u8>>);
    let bad = file_with(&t, 2, |i, b| {
        if i == 0 {
            *swapped.borrow_mut() = Some(b.clone());
        }
        if i == 3 {
            *b = swapped.borrow().clone().unwrap();
        }
    });
    let e = outcome(&bad, 0).unwrap_err();
    assert!(
        e.contains("chunk 1, rank block 0 (rank 0), iteration span 0")
            && e.contains("iteration 5, the chunk's, found iteration 4"),
        "{e}"
    );
    // Chunk 0's second block (rank 1) gets rank 0's block.
    let bad = file_with(&t, 2, |i, b| {
        if i == 0 {
            *swapped.borrow_mut() = Some(b.clone());
        }
        if i == 1 {
            *b = swapped.borrow().clone().unwrap();
        }
    });
    let e = outcome(&bad, 0).unwrap_err();
    assert!(
        e.contains("chunk 0, rank block 1") && e.contains("rank 1, the header's rank"),
        "{e}"
    );
}
