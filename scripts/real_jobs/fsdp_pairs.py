#!/usr/bin/env python
"""Pairs of real runs for `flare compare`, made independently of Flare's rules (written by
a helper that never read Flare's code): real FSDP2 (CPU, Gloo) training runs that differ by
exactly one known change, traced with torch.profiler and exported per rank with
export_chrome_trace (no Python stacks).

Usage:
  python fsdp_pairs.py --out OUT                 # every variant in turn, OUT/truth.json
  python fsdp_pairs.py --out OUT --only a,b      # a subset (truth.json is merged/updated)
  python fsdp_pairs.py --out OUT --variant NAME  # one variant (used internally; one process group)
  flare compare OUT/baseline/traces OUT/VARIANT/traces

Each variant writes OUT/<name>/traces/rank{0..3}.json (chrome traces) and
OUT/<name>/timing/rank{r}.json (own perf_counter step timings).
"""
import argparse
import json
import math
import os
import socket
import statistics
import subprocess
import sys
import time

WORLD = 4

# Model / data sizes.  On 2 CPU cores with 4 gloo processes every collective costs ~3-9 ms of
# latency, so FSDP2 per-block sharding has a floor of ~130 ms/step here; these sizes keep the
# step near that floor (~150-170 ms) while leaving enough compute for bf16 / recompute to show.
IN_DIM = 128
HIDDEN = 256
MLP_RATIO = 4
N_BLOCKS = 2
N_CLASSES = 32
TOKENS = 16          # each sample is a short sequence of TOKENS vectors (mean-pooled before the head)
BATCH = 16          # per rank, per micro-batch

WAIT, WARMUP, ACTIVE = 2, 2, 12
N_ITERS = WAIT + WARMUP + ACTIVE  # profiler schedule covers exactly these iterations

VARIANTS = {
    "baseline": dict(
        change="reference run: FSDP2 (fully_shard per block + root), fp32, 1 thread/process, "
               "AdamW(foreach=True, explicit), 1 micro-batch per step",
        label="none", role="reference"),
    "baseline_again": dict(
        change="identical job re-run (differs from baseline only by run-to-run noise)",
        label="none"),
    "threads": dict(
        change="torch.set_num_threads(2) in every process instead of 1 "
               "(4 processes x 2 threads oversubscribe the 2 CPU cores)",
        label="cpu_oversubscription"),
    "bf16": dict(
        change="forward pass (model + loss) under torch.autocast('cpu', dtype=torch.bfloat16)",
        label="dtype_change"),
    "grad_accum": dict(
        change="two micro-batches per optimizer step (forward+backward twice; first backward with "
               "model.set_requires_gradient_sync(False), second with sync re-enabled)",
        label="more_work_per_step"),
    "recompute": dict(
        change="activation checkpointing of every block via "
               "torch.utils.checkpoint.checkpoint(block, x, use_reentrant=False)",
        label="recomputation",
        note="on this 2-core host the extra forward of the 2 blocks is only ~5 ms of compute per step "
             "(~3%), comparable to run-to-run noise; it is visible as op counts per step in the trace "
             "(aten::addmm 6->10, aten::gelu 2->4, aten::native_layer_norm 3->5)"),
    "metrics_log": dict(
        change="after each optimizer step, compute 2,000 Python floats of metrics (float() of 2,000 "
               "logit elements + per-value Python math) and append a JSON line to a file with "
               "flush() and os.fsync()",
        label="host_between_steps"),
    "slow_rank": dict(
        change="rank 2 alone calls time.sleep(0.040) every iteration between optimizer.step() "
               "and fetching the next batch",
        label="straggler_rank_2"),
    "no_reshard": dict(
        change="fully_shard(block, reshard_after_forward=False) on the blocks "
               "(parameters stay unsharded after forward: no all-gathers in backward)",
        label="collective_change"),
    "optimizer_loop": dict(
        change="torch.optim.AdamW(..., foreach=False) (per-parameter for-loop implementation) "
               "instead of the foreach implementation used by every other run (AdamW(foreach=True); note that on CPU foreach=None would already mean the for-loop)",
        label="optimizer"),
}
ORDER = list(VARIANTS)


def free_port():
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


# --------------------------------------------------------------------------- model
def build_model(torch, nn):
    from torch.utils.checkpoint import checkpoint

    class Block(nn.Module):
        def __init__(self, d, ratio):
            super().__init__()
            self.norm = nn.LayerNorm(d)
            self.fc1 = nn.Linear(d, d * ratio)
            self.act = nn.GELU()
            self.fc2 = nn.Linear(d * ratio, d)

        def forward(self, x):
            return x + self.fc2(self.act(self.fc1(self.norm(x))))

    class ResMLP(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Linear(IN_DIM, HIDDEN)
            self.blocks = nn.ModuleList([Block(HIDDEN, MLP_RATIO) for _ in range(N_BLOCKS)])
            self.norm = nn.LayerNorm(HIDDEN)
            self.head = nn.Linear(HIDDEN, N_CLASSES)
            self.use_checkpoint = False

        def forward(self, x):
            x = self.embed(x)
            for blk in self.blocks:
                if self.use_checkpoint:
                    x = checkpoint(blk, x, use_reentrant=False)
                else:
                    x = blk(x)
            x = self.norm(x).mean(dim=1)
            return self.head(x)

    return ResMLP()


# --------------------------------------------------------------------------- worker
def worker(rank, variant, out_dir, port):
    import torch
    import torch.distributed as dist
    import torch.nn as nn
    import torch.nn.functional as F
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from torch.profiler import ProfilerActivity
    from torch.utils.data import DataLoader, TensorDataset
    from torch.utils.data.distributed import DistributedSampler

    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    torch.set_num_threads(2 if variant == "threads" else 1)
    dist.init_process_group("gloo", rank=rank, world_size=WORLD)
    mesh = init_device_mesh("cpu", (WORLD,))

    torch.manual_seed(0)
    model = build_model(torch, nn)
    model.use_checkpoint = variant == "recompute"
    reshard = variant != "no_reshard"
    for blk in model.blocks:
        fully_shard(blk, mesh=mesh, reshard_after_forward=reshard)
    fully_shard(model, mesh=mesh)

    # NOTE: on CPU, AdamW(foreach=None) resolves to the per-parameter for-loop implementation
    # (foreach kernels are only defaulted on cuda/xpu/mtia).  So the baseline requests the foreach
    # implementation explicitly, and the "optimizer_loop" variant switches it to foreach=False.
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=(variant != "optimizer_loop"))

    micro = 2 if variant == "grad_accum" else 1
    # synthetic classification data: labels from a fixed random linear teacher
    g = torch.Generator().manual_seed(1234)
    n_samples = WORLD * BATCH * micro * (N_ITERS + 2)
    xs = torch.randn(n_samples, TOKENS, IN_DIM, generator=g)
    teacher = torch.randn(IN_DIM, N_CLASSES, generator=g)
    ys = (xs.mean(dim=1) @ teacher).argmax(dim=1)
    ds = TensorDataset(xs, ys)
    sampler = DistributedSampler(ds, num_replicas=WORLD, rank=rank, shuffle=True, seed=0)
    loader = DataLoader(ds, batch_size=BATCH, sampler=sampler, num_workers=0, drop_last=True)

    def batches():
        epoch = 0
        while True:
            sampler.set_epoch(epoch)
            for b in loader:
                yield b
            epoch += 1

    it = batches()
    trace_dir = os.path.join(out_dir, variant, "traces")
    timing_dir = os.path.join(out_dir, variant, "timing")
    os.makedirs(trace_dir, exist_ok=True)
    os.makedirs(timing_dir, exist_ok=True)
    metrics_path = os.path.join(out_dir, variant, f"metrics_rank{rank}.jsonl")

    def fwd_loss(x, y):
        if variant == "bf16":
            with torch.autocast("cpu", dtype=torch.bfloat16):
                logits = model(x)
                loss = F.cross_entropy(logits, y)
        else:
            logits = model(x)
            loss = F.cross_entropy(logits, y)
        return logits, loss

    step_ms = []
    dist.barrier()
    with torch.profiler.profile(
        activities=[ProfilerActivity.CPU],
        schedule=torch.profiler.schedule(wait=WAIT, warmup=WARMUP, active=ACTIVE),
        record_shapes=True,
    ) as prof:
        for i in range(N_ITERS):
            t0 = time.perf_counter()
            if micro == 1:
                x, y = next(it)
                logits, loss = fwd_loss(x, y)
                loss.backward()
            else:
                for m in range(micro):
                    x, y = next(it)
                    model.set_requires_gradient_sync(m == micro - 1)
                    logits, loss = fwd_loss(x, y)
                    (loss / micro).backward()
            opt.step()
            opt.zero_grad(set_to_none=True)

            if variant == "metrics_log":
                flat = logits.detach().float().reshape(-1)
                vals = [float(flat[j % flat.numel()]) for j in range(2000)]
                ema, m2, out = 0.0, 0.0, []
                for j, v in enumerate(vals):
                    ema = 0.9 * ema + 0.1 * v
                    m2 += v * v
                    out.append(round(math.tanh(v) + ema / (1 + j) + math.sqrt(m2 / (j + 1)), 6))
                with open(metrics_path, "a") as f:
                    f.write(json.dumps({"step": i, "loss": float(loss.detach()), "metrics": out}) + "\n")
                    f.flush()
                    os.fsync(f.fileno())

            if variant == "slow_rank" and rank == 2:
                time.sleep(0.040)

            step_ms.append((time.perf_counter() - t0) * 1e3)
            prof.step()

    prof.export_chrome_trace(os.path.join(trace_dir, f"rank{rank}.json"))
    profiled = step_ms[WAIT + WARMUP:]
    with open(os.path.join(timing_dir, f"rank{rank}.json"), "w") as f:
        json.dump({"rank": rank, "variant": variant, "all_steps_ms": step_ms,
                   "profiled_steps_ms": profiled, "final_loss": float(loss.detach())}, f)
    dist.barrier()
    dist.destroy_process_group()


def run_variant(variant, out_dir):
    import torch.multiprocessing as mp
    port = free_port()
    mp.spawn(worker, args=(variant, out_dir, port), nprocs=WORLD, join=True)


# --------------------------------------------------------------------------- driver
def summarize(out_dir, name):
    pooled, per_rank = [], {}
    for r in range(WORLD):
        with open(os.path.join(out_dir, name, "timing", f"rank{r}.json")) as f:
            d = json.load(f)
        pooled += d["profiled_steps_ms"]
        per_rank[r] = round(statistics.median(d["profiled_steps_ms"]), 2)
    return round(statistics.median(pooled), 2), per_rank


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--variant")
    ap.add_argument("--only")
    a = ap.parse_args()
    out_dir = os.path.abspath(a.out)
    os.makedirs(out_dir, exist_ok=True)

    if a.variant:
        run_variant(a.variant, out_dir)
        return

    names = a.only.split(",") if a.only else ORDER
    truth_path = os.path.join(out_dir, "truth.json")
    truth = {}
    if os.path.exists(truth_path):
        with open(truth_path) as f:
            truth = json.load(f)
    truth.setdefault("variants", {})
    truth["setup"] = dict(
        world_size=WORLD, backend="gloo", parallelism="FSDP2 fully_shard per block + root, "
        "mesh=init_device_mesh('cpu',(4,))", model=f"residual MLP blocks with LayerNorm: in={IN_DIM}, "
        f"hidden={HIDDEN}, mlp_ratio={MLP_RATIO}, blocks={N_BLOCKS}, classes={N_CLASSES}, tokens={TOKENS}",
        batch_per_rank=BATCH, optimizer="AdamW lr=1e-3, foreach=True (except optimizer_loop)",
        profiler=f"CPU activities, schedule(wait={WAIT}, warmup={WARMUP}, active={ACTIVE}), record_shapes=True",
        step_time="median of perf_counter around each whole iteration (excluding prof.step()), "
                  "pooled over 4 ranks x profiled (active) steps",
        comparison="every non-baseline variant is to be compared against 'baseline'")
    def cpu_ticks():
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:]]
        return sum(v), v[7] if len(v) > 7 else 0

    for name in names:
        t = time.time()
        tot0, st0 = cpu_ticks()
        print(f"=== {name}", flush=True)
        subprocess.run([sys.executable, os.path.abspath(__file__), "--out", out_dir,
                        "--variant", name], check=True)
        med, per_rank = summarize(out_dir, name)
        entry = {k: v for k, v in VARIANTS[name].items()}
        entry.update(dict(median_step_ms=med, per_rank_median_ms=per_rank,
                          traces=os.path.join(out_dir, name, "traces"),
                          wall_s=round(time.time() - t, 1)))
        tot1, st1 = cpu_ticks()
        entry["host_steal_pct_during_run"] = round(100.0 * (st1 - st0) / max(1, tot1 - tot0), 2)
        if name != "baseline":
            entry["compare_to"] = "baseline"
        truth["variants"][name] = entry
        print(f"    median {med} ms  per-rank {per_rank}  wall {entry['wall_s']} s", flush=True)
        with open(truth_path, "w") as f:
            json.dump(truth, f, indent=2)


if __name__ == "__main__":
    main()
