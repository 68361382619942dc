#!/usr/bin/env python3
"""An independent Kineto trace generator (not Flare's simulator), for testing that Flare's
importer and detectors generalise: an 8-rank PyTorch DDP job with gradient buckets whose
all-reduces run on a separate NCCL stream overlapping the backward pass, no `Seq` args,
per-host clock offsets, and one rank whose GPU is slower.

usage: gen_ddp_kineto.py OUT_DIR [--slow-rank R] [--factor F] [--seed S]
Stdlib only; deterministic for a seed."""

import argparse
import gzip
import json
import os
import random

p = argparse.ArgumentParser()
p.add_argument("out")
p.add_argument("--slow-rank", type=int, default=5)
p.add_argument("--factor", type=float, default=1.25)
p.add_argument("--seed", type=int, default=7)
p.add_argument("--ranks", type=int, default=8)
p.add_argument("--steps", type=int, default=6)
a = p.parse_args()
rng = random.Random(a.seed)
W = a.ranks
FWD, BWD, BUCKET = 24, 48, 12
ranks_str = "[" + ", ".join(str(r) for r in range(W)) + "]"
events = {r: [] for r in range(W)}
corr = {r: 1000 for r in range(W)}
offset = {r: rng.uniform(-3000.0, 3000.0) for r in range(W)}  # host clock skew, us
t = {r: 0.0 for r in range(W)}  # per-rank GPU compute-stream time, true clock, us


def add(r, ev):
    ev["ts"] = round(ev["ts"] + offset[r] + 1.7e12, 3)
    events[r].append(ev)


def kernel(r, name, start, dur, stream, args=None):
    corr[r] += 1
    c = corr[r]
    launch = start - rng.uniform(20, 200)
    add(r, {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 100 + r,
            "tid": 100 + r, "ts": launch, "dur": 4.0, "args": {"correlation": c}})
    base = {"correlation": c, "device": r, "stream": stream}
    base.update(args or {})
    add(r, {"ph": "X", "cat": "kernel", "name": name, "pid": r, "tid": stream, "ts": start,
            "dur": round(dur, 3), "args": base})


for step in range(a.steps):
    step_start = {r: t[r] for r in range(W)}
    for r in range(W):
        speed = a.factor if r == a.slow_rank else 1.0
        for i in range(FWD):
            d = 900.0 * speed * rng.lognormvariate(0, 0.02)
            kernel(r, "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x256x64", t[r], d, 7)
            t[r] += d + rng.uniform(2, 6)
    # Backward with DDP buckets: an all-reduce per bucket once its gradients are ready.
    ready = {r: [] for r in range(W)}
    for r in range(W):
        speed = a.factor if r == a.slow_rank else 1.0
        for i in range(BWD):
            d = 1800.0 * speed * rng.lognormvariate(0, 0.02)
            kernel(r, "sm90_xmma_gemm_bf16bf16_bf16f32_f32_nt_n_tilesize256x128x64", t[r], d, 7)
            t[r] += d + rng.uniform(2, 6)
            if (i + 1) % BUCKET == 0:
                ready[r].append(t[r])
    comm_free = {r: 0.0 for r in range(W)}
    ends = {r: 0.0 for r in range(W)}
    for b in range(BWD // BUCKET):
        starts = {r: max(ready[r][b], comm_free[r]) for r in range(W)}
        end = max(starts.values()) + 2500.0 * rng.lognormvariate(0, 0.03)
        for r in range(W):
            kernel(r, "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevComm*, unsigned long, ncclWork*)",
                   starts[r], end - starts[r] + rng.uniform(0, 3), 20,
                   {"Collective name": "allreduce", "In msg nelems": 25_000_000,
                    "Out msg nelems": 25_000_000, "Group size": W, "dtype": "BFloat16",
                    "Process Group Name": "0", "Process Group Description": "default_pg",
                    "Process Group Ranks": ranks_str})
            comm_free[r] = end
            ends[r] = end
    for r in range(W):
        t[r] = max(t[r], ends[r])  # optimizer waits for the last bucket
        for i in range(6):
            d = 300.0 * rng.lognormvariate(0, 0.02)
            kernel(r, "multi_tensor_apply_kernel", t[r], d, 7)
            t[r] += d + 3
        add(r, {"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{100 + step}",
                "pid": 100 + r, "tid": 100 + r, "ts": step_start[r] - 300.0,
                "dur": round(t[r] - step_start[r] + 300.0, 3), "args": {}})
    # Steps start together after the optimizer (DDP keeps ranks in lockstep).
    nxt = max(t.values()) + 500.0
    for r in range(W):
        t[r] = nxt

os.makedirs(a.out, exist_ok=True)
for r in range(W):
    doc = {"schemaVersion": 1,
           "distributedInfo": {"backend": "nccl", "rank": r, "world_size": W, "pg_count": 1,
                               "pg_config": [{"pg_name": "0", "pg_desc": "default_pg",
                                              "backend_config": "cuda:nccl", "pg_size": W,
                                              "ranks": list(range(W))}]},
           "traceEvents": sorted(events[r], key=lambda e: e["ts"])}
    with gzip.open(os.path.join(a.out, f"worker{r}.1700000000.pt.trace.json.gz"), "wt") as f:
        json.dump(doc, f)
print(f"wrote {W} ranks to {a.out} (slow rank {a.slow_rank} x{a.factor})")
