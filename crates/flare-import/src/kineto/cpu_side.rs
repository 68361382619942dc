//! Reading a file without GPU kernels from its CPU side (a CPU-only job on Gloo, or a
//! profile taken without `ProfilerActivity.CUDA`).
//!
//! * A collective's work span (`gloo:all_reduce`, ...) is the sync op: it starts when the
//!   rank enqueued the collective (its arrival) and ends when every member has taken part,
//!   as an NCCL kernel does. Its launch is the `c10d::*` call (or ProcessGroupNCCL's
//!   `nccl:*` annotation) of the same collective that enqueued it: launches and works of
//!   one kind are paired first in, first out (a backend runs its queue in order), and a
//!   work whose launch came before the profiled window has none. Gloo runs collectives on
//!   its own worker threads, but a send or receive on the thread that posted it: the span
//!   opens in the `c10d::send` / `c10d::recv_` call and closes when that thread's `wait()`
//!   sees the transfer done. The peer of a P2P work is its launch's (the call's `dstRank`
//!   or `srcRank`, a rank in the group).
//! * The compute is the top-level CPU spans (`cpu_op`, `user_annotation`) of every thread
//!   but the backends' worker threads (those that run works and post none), issued when
//!   they start: the CPU runs them itself. A span inside another one is part of it, except
//!   that a span in which its thread posts a collective or runs one is communication code
//!   that may wait for it (FSDP's `FSDP::all_gather (0)` waiting for the gather it posted,
//!   pipelining's `Forward 0` holding the receive it waits in): it is not compute, the
//!   spans inside it are, so that waiting is not read as computing. A `user_annotation`
//!   with spans inside it (`record_function`, `DistributedDataParallel.forward`) labels a
//!   region, and the ops inside it are its compute too, so a region reads the same ops
//!   whether or not it also posts a collective (DDP's forward broadcasts buffers only where
//!   the model has some and `broadcast_buffers` is on); its own time between them is
//!   time no op covers.
//! * Launches without any work span (the backend ran on a GPU that was not profiled) show
//!   no waiting: they are counted, not read.

use super::parse::{FileStats, KernelRec, NcclArgs};
use flare_model::OpKind;
use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};

/// A collective's work on a CPU backend's thread.
#[derive(Debug)]
pub struct CpuWork {
    pub index: u64,
    pub name: u32,
    pub tid: Option<u64>,
    pub start: i64,
    pub end: Option<i64>,
    pub args: NcclArgs,
}

/// A CPU-side call that enqueued a collective.
#[derive(Debug, Clone, Copy)]
pub struct CpuLaunch {
    pub kind: Option<OpKind>,
    pub ts: i64,
    pub tid: Option<u64>,
    /// A P2P call's peer, as a rank in the group.
    pub peer: Option<u64>,
}

/// A CPU span that is neither a host phase nor communication.
#[derive(Debug, Clone, Copy)]
pub struct CpuSpan {
    pub index: u64,
    pub name: u32,
    pub tid: u64,
    pub start: i64,
    pub end: i64,
    /// `user_annotation` rather than `cpu_op` (for the skipped counts).
    pub annotation: bool,
}

/// What a file's CPU side holds, gathered while it is parsed.
#[derive(Debug, Default)]
pub struct CpuRecords {
    pub work: Vec<CpuWork>,
    pub launches: Vec<CpuLaunch>,
    pub spans: Vec<CpuSpan>,
}

impl CpuRecords {
    /// Drops the CPU spans of a file that has GPU kernels (they are not its compute),
    /// counting them as skipped like any other CPU op.
    pub fn forget_spans(&mut self, skipped: &mut BTreeMap<String, u64>) {
        for s in self.spans.drain(..) {
            let cat = if s.annotation {
                "user_annotation"
            } else {
                "cpu_op"
            };
            *skipped.entry(cat.to_string()).or_insert(0) += 1;
        }
        self.spans.shrink_to_fit();
    }

    /// The sync ops and compute of a file without GPU kernels, as kernel records.
    pub fn into_kernels(mut self, stats: &mut FileStats) -> Vec<KernelRec> {
        let mut out = Vec::new();
        if self.work.is_empty() {
            stats.cpu_launches_without_work += self.launches.len() as u64;
        }
        // Launches and works of a kind, paired first in, first out.
        self.launches.sort_by_key(|l| l.ts);
        let mut queues: HashMap<OpKind, VecDeque<CpuLaunch>> = HashMap::new();
        for l in &self.launches {
            if let Some(k) = l.kind {
                queues.entry(k).or_default().push_back(*l);
            }
        }
        self.work.sort_by_key(|w| w.start);
        // Threads that post collectives are the program's; those that only run works are
        // the backend's workers.
        let posting: HashSet<u64> = self.launches.iter().filter_map(|l| l.tid).collect();
        let backend_threads: HashSet<u64> = self
            .work
            .iter()
            .filter_map(|w| w.tid)
            .filter(|t| !posting.contains(t))
            .collect();
        // Where each program thread posts collectives or runs their work, in order.
        let mut comm_points: HashMap<u64, Vec<i64>> = HashMap::new();
        for l in &self.launches {
            if let Some(t) = l.tid {
                comm_points.entry(t).or_default().push(l.ts);
            }
        }
        for w in &self.work {
            if let Some(t) = w.tid.filter(|t| posting.contains(t)) {
                comm_points.entry(t).or_default().push(w.start);
            }
        }
        for v in comm_points.values_mut() {
            v.sort_unstable();
        }
        for mut w in self.work {
            let kind = w
                .args
                .collective
                .as_deref()
                .and_then(super::names::kind_from_collective);
            let queue = kind.and_then(|k| queues.get_mut(&k));
            // The oldest launch not yet paired, if it came before the work started.
            // (A front launch after the work began belongs to a later work: this one was
            // launched before the profiled window.)
            let launch = queue.and_then(|q| {
                if q.front().is_some_and(|l| l.ts <= w.start) {
                    q.pop_front()
                } else {
                    None
                }
            });
            let issue = launch.map(|l| l.ts);
            if kind.is_some_and(OpKind::is_p2p) {
                w.args.group_peer = launch.and_then(|l| l.peer);
            }
            stats.cpu_collectives += 1;
            out.push(KernelRec {
                index: w.index,
                name: w.name,
                start: w.start,
                end: w.end,
                correlation: None,
                flops: 0,
                nccl: Some(Box::new(w.args)),
                cpu_side: true,
                issue: Some(issue.unwrap_or(w.start)),
            });
        }
        // Top-level spans of the other threads.
        self.spans
            .sort_by(|a, b| (a.tid, a.start, b.end).cmp(&(b.tid, b.start, a.end)));
        let mut open: Option<(u64, i64)> = None;
        for (i, s) in self.spans.iter().enumerate() {
            if backend_threads.contains(&s.tid) {
                continue;
            }
            if open.is_some_and(|(tid, end)| tid == s.tid && s.start < end) {
                continue;
            }
            // An annotation holding ops labels them: they are the compute.
            let labels_ops = s.annotation
                && self
                    .spans
                    .get(i + 1)
                    .is_some_and(|n| n.tid == s.tid && n.start < s.end);
            if labels_ops {
                continue;
            }
            // A span in which its thread posts a collective or runs one is communication
            // code that may wait for it: the spans inside it are the compute.
            let holds_comm = comm_points.get(&s.tid).is_some_and(|points| {
                let i = points.partition_point(|&t| t < s.start);
                points.get(i).is_some_and(|&t| t < s.end)
            });
            if holds_comm {
                continue;
            }
            open = Some((s.tid, s.end));
            stats.cpu_compute_spans += 1;
            out.push(KernelRec {
                index: s.index,
                name: s.name,
                start: s.start,
                end: Some(s.end),
                correlation: None,
                flops: 0,
                nccl: None,
                cpu_side: true,
                issue: Some(s.start),
            });
        }
        out.sort_by_key(|k| k.start);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::super::parse::parse_file;

    /// One rank of a CPU-only job: two steps, a forward span holding an aten op, a c10d
    /// launch on the main thread (tid 1) and Gloo's work on its own thread (tid 9); one
    /// work whose launch came before the window.
    const RANK: &[u8] = br#"{"distributedInfo": {"rank": 1, "world_size": 3,
        "pg_config": [{"pg_name": "0", "pg_desc": "default_pg", "pg_size": 3, "ranks": [0, 1, 2]}]},
      "traceEvents": [
      {"ph": "X", "cat": "user_annotation", "name": "gloo:all_reduce", "pid": 0, "tid": 9, "ts": 5, "dur": 10,
       "args": {"Input Dims": [[1024]], "Input type": ["float"]}},
      {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 0, "tid": 1, "ts": 10, "dur": 100},
      {"ph": "X", "cat": "user_annotation", "name": "DistributedDataParallel.forward", "pid": 0, "tid": 1, "ts": 20, "dur": 30},
      {"ph": "X", "cat": "cpu_op", "name": "aten::addmm", "pid": 0, "tid": 1, "ts": 25, "dur": 10},
      {"ph": "X", "cat": "cpu_op", "name": "c10d::allreduce_", "pid": 0, "tid": 1, "ts": 60, "dur": 2,
       "args": {"Input Dims": [[[1024]], [], []], "Input type": ["TensorList", "", ""]}},
      {"ph": "X", "cat": "user_annotation", "name": "gloo:all_reduce", "pid": 0, "tid": 9, "ts": 65, "dur": 40,
       "args": {"Input Dims": [[1024]], "Input type": ["float"]}},
      {"ph": "X", "cat": "user_annotation", "name": "Optimizer.step#SGD.step", "pid": 0, "tid": 1, "ts": 106, "dur": 3}
    ]}"#;

    #[test]
    fn gloo_work_is_the_collective_and_top_level_spans_the_compute() {
        let f = parse_file("rank1.json", RANK).unwrap();
        let comms: Vec<_> = f.kernels.iter().filter(|k| k.nccl.is_some()).collect();
        assert_eq!(comms.len(), 2);
        assert!(comms.iter().all(|k| k.cpu_side));
        let a = comms[1].nccl.as_deref().unwrap();
        assert_eq!(a.collective.as_deref(), Some("all_reduce"));
        assert_eq!(
            (a.in_nelems, a.dtype.as_deref()),
            (Some(1024), Some("Float"))
        );
        // The second work was enqueued by the c10d call at 60 us; the first one's launch
        // is not in the window: it is issued when it starts.
        assert_eq!(comms[1].issue, Some(60_000));
        assert_eq!(comms[0].issue, Some(5_000));
        // Compute: the addmm the forward annotation labels, not the annotation, the Gloo
        // thread's spans, the step, the launch or the optimizer (a host phase).
        assert_eq!(compute_of(RANK), ["aten::addmm"]);
        assert_eq!((f.stats.cpu_collectives, f.stats.cpu_compute_spans), (2, 1));
        assert_eq!(f.hosts.len(), 1);
    }

    /// The names of a file's compute, in order.
    fn compute_of(json: &[u8]) -> Vec<String> {
        let f = parse_file("rank0.json", json).unwrap();
        f.kernels
            .iter()
            .filter(|k| k.nccl.is_none())
            .map(|k| f.names.names[k.name as usize].clone())
            .collect()
    }

    #[test]
    fn an_annotated_region_reads_the_same_ops_whether_or_not_it_posts_a_collective() {
        // DDP's forward broadcasts buffers where the model has some and `broadcast_buffers`
        // is on: with or without that broadcast, its ops are the compute; an annotation
        // with nothing inside it is compute itself; an op inside an op is part of it.
        let region = |broadcast: &str, inner: &str| {
            format!(
                r#"{{"traceEvents": [
                  {{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 0, "tid": 1, "ts": 0, "dur": 200}},
                  {{"ph": "X", "cat": "user_annotation", "name": "DistributedDataParallel.forward", "pid": 0, "tid": 1, "ts": 10, "dur": 60}},
                  {broadcast}
                  {{"ph": "X", "cat": "cpu_op", "name": "aten::conv2d", "pid": 0, "tid": 1, "ts": 20, "dur": 20}},
                  {{"ph": "X", "cat": "cpu_op", "name": "aten::convolution", "pid": 0, "tid": 1, "ts": 21, "dur": 18}},
                  {{"ph": "X", "cat": "user_annotation", "name": "my_block", "pid": 0, "tid": 1, "ts": 42, "dur": 20}},
                  {{"ph": "X", "cat": "cpu_op", "name": "aten::relu", "pid": 0, "tid": 1, "ts": 45, "dur": 5}},
                  {{"ph": "X", "cat": "user_annotation", "name": "{inner}", "pid": 0, "tid": 1, "ts": 80, "dur": 30}}
                ]}}"#
            )
        };
        let broadcast = r#"{"ph": "X", "cat": "cpu_op", "name": "c10d::broadcast_", "pid": 0, "tid": 1, "ts": 12, "dur": 2},
                  {"ph": "X", "cat": "user_annotation", "name": "gloo:broadcast", "pid": 0, "tid": 9, "ts": 13, "dur": 5,
                   "args": {"Input Dims": [[10]], "Input type": ["float"]}},"#;
        let want = ["aten::conv2d", "aten::relu", "python_metrics"];
        assert_eq!(
            compute_of(region(broadcast, "python_metrics").as_bytes()),
            want
        );
        assert_eq!(compute_of(region("", "python_metrics").as_bytes()), want);
    }

    #[test]
    fn a_gpu_trace_keeps_its_kernels_and_ignores_its_cpu_spans() {
        let json = br#"{"traceEvents": [
          {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 0, "tid": 1, "ts": 1, "dur": 5},
          {"ph": "X", "cat": "kernel", "name": "sm90_gemm", "pid": 0, "tid": 7, "ts": 10, "dur": 5},
          {"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": 0, "tid": 1, "ts": 20, "dur": 5}
        ]}"#;
        let f = parse_file("rank0.json", json).unwrap();
        assert_eq!(f.kernels.len(), 1);
        assert!(!f.kernels[0].cpu_side);
        assert_eq!(f.stats.skipped.get("cpu_op"), Some(&2));
        assert_eq!(f.stats.cpu_compute_spans, 0);
    }

    #[test]
    fn launches_without_work_are_counted_not_read() {
        // A CPU-only profile of an NCCL job: the collective ran on a GPU nobody profiled.
        let json = br#"{"traceEvents": [
          {"ph": "X", "cat": "user_annotation", "name": "nccl:all_reduce", "pid": 0, "tid": 1, "ts": 1, "dur": 5},
          {"ph": "X", "cat": "cpu_op", "name": "c10d::allreduce_", "pid": 0, "tid": 1, "ts": 2, "dur": 3},
          {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 0, "tid": 1, "ts": 20, "dur": 5}
        ]}"#;
        let f = parse_file("rank0.json", json).unwrap();
        assert_eq!(f.stats.cpu_launches_without_work, 2);
        assert!(f.kernels.iter().all(|k| k.nccl.is_none()));
    }
}

#[cfg(test)]
mod p2p_tests {
    use super::super::assemble::assemble;
    use super::super::parse::parse_file;
    use super::super::KinetoOptions;
    use flare_model::{Op, OpKind};

    /// Two pipeline stages on Gloo: each `Forward 0` span posts a transfer on the program's
    /// own thread (tid 1), which runs it (`gloo:send` / `gloo:recv`), and computes. The
    /// send's span runs on until the sender waits for it, after the receive ended.
    fn stage(rank: u32, peer_arg: &str) -> String {
        let (call, work, ts, dur) = if rank == 0 {
            ("c10d::send", "gloo:send", 30, 500)
        } else {
            ("c10d::recv_", "gloo:recv", 12, 40)
        };
        format!(
            r#"{{"distributedInfo": {{"rank": {rank}, "world_size": 2,
              "pg_config": [{{"pg_name": "0", "pg_desc": "default_pg", "pg_size": 2, "ranks": [0, 1]}}]}},
              "traceEvents": [
              {{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 0, "tid": 1, "ts": 0, "dur": 900}},
              {{"ph": "X", "cat": "user_annotation", "name": "Forward 0", "pid": 0, "tid": 1, "ts": 5, "dur": 80}},
              {{"ph": "X", "cat": "cpu_op", "name": "{call}", "pid": 0, "tid": 1, "ts": {call_ts}, "dur": 3,
               "args": {{"Input Dims": [[[16, 512]], [], [], []], "Concrete Inputs": ["", "", {peer_arg}, "0"]}}}},
              {{"ph": "X", "cat": "user_annotation", "name": "{work}", "pid": 0, "tid": 1, "ts": {ts}, "dur": {dur},
               "args": {{"Input Dims": [[16, 512]], "Input type": ["float"]}}}},
              {{"ph": "X", "cat": "cpu_op", "name": "aten::linear", "pid": 0, "tid": 1, "ts": {lin}, "dur": 10,
               "args": {{"Input Dims": [[16, 512], [512, 512], [512]]}}}}
            ]}}"#,
            call_ts = ts - 1,
            lin = if rank == 0 { 10 } else { 60 },
        )
    }

    #[test]
    fn gloo_p2p_on_the_posting_thread_is_a_message_of_its_pair_and_not_compute() {
        let files = vec![
            parse_file("rank0.json", stage(0, "\"1\"").as_bytes()).unwrap(),
            parse_file("rank1.json", stage(1, "\"0\"").as_bytes()).unwrap(),
        ];
        // Compute: the linear, named with its shapes; not the `Forward 0` span that holds
        // the transfer (and, on the receiver, the wait for it).
        for f in &files {
            let compute: Vec<&str> = f
                .kernels
                .iter()
                .filter(|k| k.nccl.is_none())
                .map(|k| f.names.names[k.name as usize].as_str())
                .collect();
            assert_eq!(compute, ["aten::linear [[16,512],[512,512],[512]]"]);
        }
        let (trace, stats) = assemble(files, &KinetoOptions::default(), "pp".into()).unwrap();
        assert_eq!(stats.cpu_p2p_without_peer, 0);
        let p2p: Vec<&Op> = trace
            .ranks
            .iter()
            .flat_map(|r| r.ops.iter())
            .filter(|o| o.kind.is_p2p())
            .collect();
        assert_eq!(p2p.len(), 2);
        let (send, recv) = (p2p[0], p2p[1]);
        assert_eq!((send.kind, recv.kind), (OpKind::Send, OpKind::Recv));
        // One message of the channel 0 -> 1: same communicator and sequence number.
        assert_eq!((send.comm, send.seq), (recv.comm, recv.seq));
        let channel = &trace.communicators[send.comm as usize];
        assert_eq!(channel.members, [0, 1]);
        assert!(channel.label.contains("p2p 0->1"), "{}", channel.label);
        assert_eq!((send.peer, recv.peer), (1, 0));
        // The send ends when the receive did, not when its sender waited.
        assert_eq!(send.end_ns, recv.end_ns);
        assert_eq!(recv.end_ns, 52_000);
        assert_eq!(send.start_ns, 30_000);
    }

    #[test]
    fn a_transfer_without_its_peer_is_counted_not_read() {
        // Shapes not recorded: the c10d call's arguments are empty strings.
        let files = vec![
            parse_file("rank0.json", stage(0, "\"\"").as_bytes()).unwrap(),
            parse_file("rank1.json", stage(1, "\"\"").as_bytes()).unwrap(),
        ];
        let (trace, stats) = assemble(files, &KinetoOptions::default(), "pp".into()).unwrap();
        assert_eq!(stats.cpu_p2p_without_peer, 2);
        assert!(trace
            .meta
            .notes
            .iter()
            .any(|n| n.contains("does not give their peer")));
        assert!(trace
            .ranks
            .iter()
            .all(|r| r.ops.iter().all(|o| !o.kind.is_p2p())));
    }
}
