#!/usr/bin/env python
"""Single long real PyTorch training runs with (or without) a slowdown that BEGINS mid-run.

What it makes
-------------
For every variant, one real distributed training job: 4 ranks, Gloo backend, CPU only,
started with torch.multiprocessing.spawn on a free localhost port. Each rank trains a small
convolutional image classifier (4 x Conv2d+BatchNorm2d+ReLU blocks with 3 max-pools, a
two-layer Linear head, ~330k parameters) wrapped in DistributedDataParallel, SGD with
momentum, one thread per rank (torch.set_num_threads(1)). Batches of synthetic 3x32x32
images come through a real torch.utils.data.DataLoader (num_workers=0) over a synthetic Dataset.

After WARMUP_STEPS unprofiled warm-up steps, ONE torch.profiler.profile per rank
(activities=[CPU], record_shapes=True, with_stack=True,
schedule=schedule(wait=0, warmup=1, active=N, repeat=1)) covers one profiler warm-up step
(not recorded) and then the N recorded steps; prof.step() is called once per step. The
recorded steps are the "profiled steps" 0..N-1 used everywhere below; in the trace, profiled
step i is the ProfilerStep#(i+1) span (ProfilerStep#0 is the unrecorded profiler warm-up).

For a changing variant the onset step K is drawn per variant from --seed, uniformly among
the integers in [ceil(N/3), floor(2N/3)], and the change applies to profiled steps K..N-1.

Outputs, per variant, under OUT/<variant>/:
  traces/rank<R>.json   chrome trace of rank R (prof.export_chrome_trace), all N steps
  truth.json            {"variant", "onset_step" (null for healthy*, transient),
                         "ranks_affected" ("all", or a list of ranks; [] when nothing changes),
                         "change" (one sentence), "blip_steps" (transient only), plus
                         "steps", "world_size", "seed", "trace_step_offset"}
  steps.json            the script's own clock: per rank, the wall time in ms of each
                        profiled step, from just before fetching the batch from the
                        DataLoader to after optimizer.step() and any injected extra work.
After each variant it prints one line: the variant, K, rank 0's median step time before K and
from K on, and their ratio (healthy runs: the same split at N//2; transient: split at K, and
the two blip steps' times; straggler: rank 1's split as well).

Variants and the injected amounts chosen
----------------------------------------
The baseline step is about 60-75 ms per rank on the 2-core machine this was tuned on
(4 ranks sharing the 2 cores, profiler on). Amounts were tuned so that rank 0's median step
time from K on is clearly >= 1.25x the median before K (two full runs, --seed 0, ratio of
medians on rank 0: gc_pressure 1.54/1.67, dataloader_heavy 1.66/1.76, bigger_batch 1.41/1.35,
straggler 1.59/1.52 (rank 1: 1.55/1.55), checkpoint 1.42/1.53, host_sleep 1.42/1.29 (its 30 ms
is fixed by design); healthy and healthy_b 0.97-1.03). Timings are only meaningful on an
otherwise idle machine: other CPU load during a run shows up as slowdowns of its own.
  healthy           no change.
  healthy_b         no change; a different data seed (--seed + 1000).
  gc_pressure       from K on, every rank appends GC_RECORDS_PER_STEP = 20,000 small records
                    per step (each a dict holding a small list and a tuple) to a list that is
                    kept alive to the end, so the population of GC-tracked objects grows by
                    40,000+ containers a step and the cyclic collector's full (generation 2)
                    collections get ever more expensive; gc stays enabled.
  dataloader_heavy  from K on, the Dataset's __getitem__ adds heavy per-sample preprocessing
                    on every rank: numpy colour jitter, then torch reflect-pad + random crop,
                    2x bilinear upsample, HEAVY_BLUR_PASSES = 4 depthwise 7x7 Gaussian blurs
                    (conv2d) and a 2x2 average-pool back to 32x32 (about 1.5 ms CPU a sample).
  bigger_batch      from K on, the batch size doubles, BATCH = 16 -> 32, on every rank.
  straggler         from K on, rank 1 alone runs STRAGGLER_MATMULS = 20 chained 512x512
                    matmuls (each followed by tanh, ~3 ms each single-threaded) before its
                    backward each step; the other ranks run unchanged code and wait for rank 1
                    in DDP's gradient all-reduce.
  checkpoint        from K on, every rank calls torch.save(model.state_dict(), f) into
                    CHECKPOINT_SAVES_PER_STEP = 2 temp files (model_0.pt, model_1.pt in a
                    per-rank temp dir, ~1.3 MB each), flushing and fsyncing each, after
                    optimizer.step() every step.
  host_sleep        from K on, every rank sleeps HOST_SLEEP_S = 30 ms after optimizer.step()
                    every step (a stand-in for blocking logging).
  transient         in steps K and K+1 only, every rank sleeps BLIP_SLEEP_S = 250 ms once
                    after optimizer.step(); the run then returns to normal (a blip, not a
                    persistent change; truth.json has onset_step null, blip_steps [K, K+1]).

How to run
----------
Use the test venv's interpreter (PyTorch CPU; scripts/python-env.sh makes it), e.g.:
  target/flare-venv/bin/python scripts/real_jobs/onset_runs.py --out OUT
  ... --out OUT --variants healthy,straggler --steps 40 --seed 0
Exit status is non-zero if any rank of any variant fails (other variants still run).
"""
import argparse
import json
import math
import os
import random
import socket
import statistics
import sys
import tempfile
import time
from datetime import timedelta

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.profiler import ProfilerActivity, profile, schedule
from torch.utils.data import DataLoader, Dataset, Sampler

VARIANTS = ["healthy", "healthy_b", "gc_pressure", "dataloader_heavy", "bigger_batch",
            "straggler", "checkpoint", "host_sleep", "transient"]
HEALTHY = {"healthy", "healthy_b"}

WORLD = 4
BATCH = 16
IMG = 32
CLASSES = 10
WARMUP_STEPS = 3             # unprofiled warm-up steps before the profiler starts
DATASET_LEN = 1 << 20

# Injected amounts (tuned on a 2-core machine, 4 ranks sharing the cores).
GC_RECORDS_PER_STEP = 20000
HEAVY_BLUR_PASSES = 4
STRAGGLER_MATMULS = 20
CHECKPOINT_SAVES_PER_STEP = 2
HOST_SLEEP_S = 0.030
BLIP_SLEEP_S = 0.250


def change_sentence(variant, k=None):
    return {
        "healthy": "No change: the run is steady from start to end.",
        "healthy_b": "No change (different data seed): the run is steady from start to end.",
        "gc_pressure": f"From the onset step on, every rank keeps {GC_RECORDS_PER_STEP} more small "
                       "Python records (dict + list + tuple) alive per step in a growing list, so the "
                       "cyclic garbage collector's full collections get ever more expensive.",
        "dataloader_heavy": "From the onset step on, the Dataset's __getitem__ does heavy extra "
                            "per-sample preprocessing on every rank (colour jitter, reflect-pad and "
                            f"crop, 2x upsample, {HEAVY_BLUR_PASSES} 7x7 Gaussian blurs, downsample), "
                            "so fetching each batch takes much longer.",
        "bigger_batch": f"From the onset step on, the batch size doubles from {BATCH} to {2 * BATCH} "
                        "on every rank, so each step does twice the forward/backward work.",
        "straggler": f"From the onset step on, rank 1 alone runs {STRAGGLER_MATMULS} extra chained "
                     "512x512 matmuls before its backward each step, and the other ranks wait for "
                     "it in the gradient all-reduce.",
        "checkpoint": f"From the onset step on, every rank calls torch.save(model.state_dict()) into "
                      f"{CHECKPOINT_SAVES_PER_STEP} temp checkpoint files (each fsynced) after "
                      "optimizer.step() every step.",
        "host_sleep": f"From the onset step on, every rank sleeps {HOST_SLEEP_S * 1000:.0f} ms on the "
                      "host after optimizer.step() every step (blocking 'logging').",
        "transient": f"Only steps {k} and {None if k is None else k + 1} are slowed: every rank "
                     f"sleeps {BLIP_SLEEP_S * 1000:.0f} ms "
                     "once in each after optimizer.step(); the run then returns to normal.",
    }[variant]


# ----------------------------------------------------------------------------- data / model

class SyntheticImages(Dataset):
    """Deterministic synthetic 3x32x32 images with a weak class-dependent pattern."""

    def __init__(self, seed):
        self.seed = seed
        self.heavy = False  # flipped by the training loop (num_workers=0: same process)
        g = np.random.default_rng(seed)
        self.patterns = g.standard_normal((CLASSES, 3, IMG, IMG)).astype(np.float32)
        self.mean = np.array([0.1, 0.0, -0.1], np.float32).reshape(3, 1, 1)
        self.std = np.array([1.1, 1.0, 0.9], np.float32).reshape(3, 1, 1)
        g = torch.exp(-torch.arange(-3, 4, dtype=torch.float32) ** 2 / 4.5)
        g = g / g.sum()
        self.blur = (g[:, None] * g[None, :]).expand(3, 1, 7, 7).contiguous()  # 7x7 Gaussian

    def __len__(self):
        return DATASET_LEN

    def __getitem__(self, idx):
        rng = np.random.default_rng((self.seed, int(idx)))
        label = int(rng.integers(CLASSES))
        img = rng.standard_normal((3, IMG, IMG), dtype=np.float32) + 0.5 * self.patterns[label]
        if rng.random() < 0.5:
            img = img[:, :, ::-1]
        img = (img - self.mean) / self.std
        if self.heavy:
            return self._augment(img, rng), label
        return torch.from_numpy(np.ascontiguousarray(img, dtype=np.float32)), label

    def _augment(self, img, rng):
        """The heavy per-sample preprocessing of dataloader_heavy."""
        # numpy colour jitter, then torch: reflect-pad + random crop, 2x bilinear upsample,
        # HEAVY_BLUR_PASSES depthwise 7x7 Gaussian blurs, 2x2 average-pool back to 32x32
        img = img * rng.uniform(0.8, 1.2, (3, 1, 1)).astype(np.float32) \
            + rng.uniform(-0.1, 0.1, (3, 1, 1)).astype(np.float32)
        dy, dx = (int(v) for v in rng.integers(0, 9, size=2))
        x = torch.from_numpy(np.ascontiguousarray(img, dtype=np.float32))[None]
        x = F.pad(x, (4, 4, 4, 4), mode="reflect")[:, :, dy:dy + IMG, dx:dx + IMG]
        x = F.interpolate(x, scale_factor=2, mode="bilinear", align_corners=False)
        for _ in range(HEAVY_BLUR_PASSES):
            x = F.conv2d(F.pad(x, (3, 3, 3, 3), mode="reflect"), self.blur, groups=3)
        return F.avg_pool2d(x, 2)[0].clamp_(-4.0, 4.0).contiguous()


class ResizableBatchSampler(Sampler):
    """Endless random batches; batch_size may be changed between batches (read lazily)."""

    def __init__(self, n, batch_size, seed):
        self.n = n
        self.batch_size = batch_size
        self.rng = random.Random(seed)

    def __iter__(self):
        while True:
            yield [self.rng.randrange(self.n) for _ in range(self.batch_size)]


def conv_block(cin, cout):
    return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1, bias=False),
                         nn.BatchNorm2d(cout), nn.ReLU(inplace=True))


class ConvNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(
            conv_block(3, 16), nn.MaxPool2d(2),                         # 16x16
            conv_block(16, 32), nn.MaxPool2d(2),                        # 8x8
            conv_block(32, 64), conv_block(64, 64), nn.MaxPool2d(2),    # 4x4
        )
        self.head = nn.Sequential(nn.Flatten(), nn.Linear(64 * 4 * 4, 256), nn.ReLU(inplace=True),
                                  nn.Linear(256, CLASSES))

    def forward(self, x):
        return self.head(self.features(x))


# ----------------------------------------------------------------------------- one rank

def worker(rank, cfg):
    torch.set_num_threads(1)
    torch.manual_seed(cfg["seed"])
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{cfg['port']}", rank=rank,
                            world_size=WORLD, timeout=timedelta(seconds=180))
    try:
        steps_ms = _train(rank, cfg)
        with open(os.path.join(cfg["vdir"], f".steps_rank{rank}.json"), "w") as f:
            json.dump(steps_ms, f)
        dist.barrier()
    finally:
        dist.destroy_process_group()


def _train(rank, cfg):
    variant, n, k = cfg["variant"], cfg["steps"], cfg["onset"]
    blip = set(cfg["blip"])
    dataset = SyntheticImages(cfg["data_seed"] * 100 + rank)
    sampler = ResizableBatchSampler(len(dataset), BATCH, seed=cfg["data_seed"] * 100 + 50 + rank)
    loader = DataLoader(dataset, batch_sampler=sampler, num_workers=0)
    batches = iter(loader)

    model = DDP(ConvNet())
    opt = torch.optim.SGD(model.parameters(), lr=0.02, momentum=0.9, weight_decay=5e-4)
    loss_fn = nn.CrossEntropyLoss()

    hoard = []                                   # gc_pressure: kept alive to the end
    mat = torch.randn(512, 512) / math.sqrt(512)  # straggler's extra operand
    ckpt_dir = tempfile.mkdtemp(prefix=f"onset_ckpt_r{rank}_")
    ckpt_paths = [os.path.join(ckpt_dir, f"model_{s}.pt") for s in range(CHECKPOINT_SAVES_PER_STEP)]

    def step(i):
        """One training step; i is the profiled step index, or None when not recorded."""
        on = k is not None and i is not None and i >= k
        if variant == "dataloader_heavy":
            dataset.heavy = on
        if variant == "bigger_batch":
            sampler.batch_size = 2 * BATCH if on else BATCH
        t0 = time.perf_counter()
        x, y = next(batches)
        out = model(x)
        loss = loss_fn(out, y)
        opt.zero_grad(set_to_none=True)
        if variant == "straggler" and on and rank == 1:
            z = torch.randn(512, 512)
            for _ in range(STRAGGLER_MATMULS):
                z = torch.tanh(torch.mm(mat, z))
            _ = float(z.sum())
        loss.backward()
        opt.step()
        if variant == "gc_pressure" and on:
            lv = float(loss.detach())
            hoard.append([{"step": i, "rank": rank, "j": j, "hist": [lv, j], "tag": (i, j)}
                          for j in range(GC_RECORDS_PER_STEP)])
        if variant == "checkpoint" and on:
            for path in ckpt_paths:
                with open(path, "wb") as f:
                    torch.save(model.state_dict(), f)
                    f.flush()
                    os.fsync(f.fileno())
        if variant == "host_sleep" and on:
            time.sleep(HOST_SLEEP_S)
        if variant == "transient" and i in blip:
            time.sleep(BLIP_SLEEP_S)
        return (time.perf_counter() - t0) * 1000.0

    try:
        model.train()
        for _ in range(WARMUP_STEPS):
            step(None)
        dist.barrier()
        trace_path = os.path.join(cfg["vdir"], "traces", f"rank{rank}.json")
        steps_ms = []
        with profile(activities=[ProfilerActivity.CPU], record_shapes=True, with_stack=True,
                     schedule=schedule(wait=0, warmup=1, active=n, repeat=1),
                     on_trace_ready=lambda p: p.export_chrome_trace(trace_path)) as prof:
            step(None)          # profiler warm-up step (ProfilerStep#0, not recorded)
            prof.step()
            for i in range(n):
                steps_ms.append(step(i))
                prof.step()
        if not os.path.exists(trace_path):
            raise RuntimeError(f"rank {rank}: profiler did not write {trace_path}")
        return steps_ms
    finally:
        try:
            for path in ckpt_paths:
                if os.path.exists(path):
                    os.remove(path)
            os.rmdir(ckpt_dir)
        except OSError:
            pass


# ----------------------------------------------------------------------------- driver

def free_port():
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def onset_step(seed, variant, n):
    lo, hi = math.ceil(n / 3), (2 * n) // 3
    return random.Random(f"onset/{seed}/{variant}").randint(lo, hi)


def split(ms, at):
    before, after = statistics.median(ms[:at]), statistics.median(ms[at:])
    return before, after, after / before


def run_variant(variant, args):
    n = args.steps
    k = None if variant in HEALTHY else onset_step(args.seed, variant, n)
    vdir = os.path.join(args.out, variant)
    os.makedirs(os.path.join(vdir, "traces"), exist_ok=True)
    stale = [os.path.join(vdir, "traces", f"rank{r}.json") for r in range(WORLD)]
    stale += [os.path.join(vdir, f".steps_rank{r}.json") for r in range(WORLD)]
    stale += [os.path.join(vdir, "truth.json"), os.path.join(vdir, "steps.json")]
    for p in stale:
        if os.path.exists(p):
            os.remove(p)
    cfg = {
        "variant": variant, "steps": n, "seed": args.seed,
        "data_seed": args.seed + (1000 if variant == "healthy_b" else 0),
        "onset": None if variant == "transient" else k,
        "blip": [k, k + 1] if variant == "transient" else [],
        "vdir": vdir, "port": free_port(),
    }
    t0 = time.time()
    try:
        mp.spawn(worker, args=(cfg,), nprocs=WORLD, join=True)
    except Exception as e:  # ProcessRaisedException / ProcessExitedException
        print(f"{variant}: FAILED after {time.time() - t0:.1f}s: {e}", file=sys.stderr, flush=True)
        return False

    ranks = {}
    for r in range(WORLD):
        p = os.path.join(vdir, f".steps_rank{r}.json")
        with open(p) as f:
            ranks[str(r)] = [round(v, 3) for v in json.load(f)]
        os.remove(p)
    with open(os.path.join(vdir, "steps.json"), "w") as f:
        json.dump({"variant": variant, "unit": "ms", "steps": n,
                   "measure": "per profiled step: wall time from just before fetching the batch "
                              "to after optimizer.step() and any injected extra work",
                   "trace_step_offset": 1, "ranks": ranks}, f, indent=1)

    truth = {"variant": variant,
             "onset_step": None if variant in HEALTHY or variant == "transient" else k,
             "ranks_affected": [] if variant in HEALTHY else ([1] if variant == "straggler" else "all"),
             "change": change_sentence(variant, k)}
    if variant == "transient":
        truth["blip_steps"] = [k, k + 1]
    truth.update({"steps": n, "world_size": WORLD, "seed": args.seed, "trace_step_offset": 1})
    with open(os.path.join(vdir, "truth.json"), "w") as f:
        json.dump(truth, f, indent=1)

    at = n // 2 if k is None else k
    b, a, ratio = split(ranks["0"], at)
    line = (f"{variant:17s} K={'-' if k is None else k:>2} split@{at:<2} rank0 before={b:7.1f}ms "
            f"after={a:7.1f}ms ratio={ratio:5.2f}")
    if variant == "straggler":
        b1, a1, r1 = split(ranks["1"], at)
        line += f" | rank1 before={b1:7.1f}ms after={a1:7.1f}ms ratio={r1:5.2f}"
    if variant == "transient":
        line += " | blip steps " + ", ".join(f"{s}:{ranks['0'][s]:.1f}ms" for s in (k, k + 1))
    sizes = [os.path.getsize(os.path.join(vdir, "traces", f"rank{r}.json")) for r in range(WORLD)]
    line += f" | traces {sum(sizes) / 1e6:.1f} MB | {time.time() - t0:.1f}s"
    if variant not in HEALTHY and variant != "transient" and ratio < 1.25:
        line += "  (WARNING: ratio < 1.25)"
    print(line, flush=True)
    return True


def parse_args(argv):
    ap = argparse.ArgumentParser(description="Real 4-rank Gloo CPU training runs with a "
                                             "slowdown that begins mid-run (see the docstring).")
    ap.add_argument("--out", required=True, help="output folder (OUT/<variant>/...)")
    ap.add_argument("--variants", default=None,
                    help="comma-separated subset of: " + ",".join(VARIANTS))
    ap.add_argument("--steps", type=int, default=40, help="number of profiled steps N (>= 6)")
    ap.add_argument("--seed", type=int, default=0, help="seed for the onset steps and the data")
    args = ap.parse_args(argv)
    if args.steps < 6:
        ap.error(f"--steps must be at least 6 (got {args.steps}): the onset is drawn from "
                 "[N/3, 2N/3] and the transient needs steps K and K+1 before the end")
    if args.variants is None:
        args.variant_list = list(VARIANTS)
    else:
        names = [v.strip() for v in args.variants.split(",") if v.strip()]
        if not names:
            ap.error("--variants is empty")
        bad = [v for v in names if v not in VARIANTS]
        if bad:
            ap.error(f"unknown variant(s): {', '.join(bad)}; choose from {', '.join(VARIANTS)}")
        args.variant_list = list(dict.fromkeys(names))
    if os.path.exists(args.out) and not os.path.isdir(args.out):
        ap.error(f"--out {args.out} exists and is not a directory")
    return args


def main(argv=None):
    args = parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    t0 = time.time()
    failed = [v for v in args.variant_list if not run_variant(v, args)]
    print(f"total {time.time() - t0:.1f}s for {len(args.variant_list)} variant(s)", flush=True)
    if failed:
        print(f"FAILED variants: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
