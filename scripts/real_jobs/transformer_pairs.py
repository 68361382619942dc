#!/usr/bin/env python
"""Pairs of real runs for `flare compare`, made independently of Flare's rules: written by
a helper that never read Flare's code, to judge it on runs it was not built around. Real
4-process DDP (Gloo, CPU) training of a small decoder-only transformer LM (SDPA attention,
AdamW, a DataLoader with a DistributedSampler), each variant differing from the baseline by
exactly one change, traced the way users trace (torch.profiler with a schedule,
tensorboard_trace_handler, one file per rank, record_shapes and with_stack). The truth and
each run's own step clock go to OUT/truth.json.

Usage:
    python transformer_pairs.py --out OUT                      # every variant, in turn
    python transformer_pairs.py --out OUT --only baseline gc   # a subset (truth.json updated)
    flare compare OUT/baseline/traces OUT/VARIANT/traces
"""
import argparse
import gc
import json
import os
import shutil
import socket
import statistics
import sys
import tempfile
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.profiler import ProfilerActivity, profile, schedule, tensorboard_trace_handler
from torch.utils.data import DataLoader, Dataset, DistributedSampler

WORLD = 4

# ---------------------------------------------------------------- configuration
BASE = dict(
    vocab=2048,
    d_model=128,
    n_heads=4,
    n_layers=2,
    d_ff=512,
    seq=64,
    batch=4,
    tied=False,
    bucket_cap_mb=25.0,
    lr=3e-4,
    # profiler schedule
    wait=6,
    warmup=2,
    active=12,
    extra_steps=1,
    # the single-change switches
    item_sync=False,
    gc_pressure=False,
    heavy_data=False,
    checkpoint=False,
    extra_eval="none",  # none | all | rank1
)

VARIANTS = {
    "baseline": dict(
        change="reference run: 4-rank gloo DDP transformer LM, no change", label="none", cfg={}),
    "baseline_again": dict(
        change="identical re-run of the baseline job (healthy pair, differs only by noise)",
        label="none", cfg={}),
    "misaligned": dict(
        change="model d_model 128->124 and MLP width 512->500 (not multiples of 8; heads stay 4, head_dim 32->31)",
        label="tensor_core_misalignment", cfg=dict(d_model=124, d_ff=500)),
    "item_sync": dict(
        change="loss.item() called every step to log the loss (host-device sync; on CPU just .item())",
        label="device_synchronization", cfg=dict(item_sync=True)),
    "gc": dict(
        change="~500k live small Python objects kept alive plus many container objects built per step "
               "(a rolling history) so generation-2 garbage collections run during training",
        label="garbage_collection", cfg=dict(gc_pressure=True)),
    "dataloader": dict(
        change="Dataset.__getitem__ builds and tokenizes synthetic text in pure Python per sample "
               "(num_workers=0 as in baseline), so data loading per step grows",
        label="dataloader", cfg=dict(heavy_data=True)),
    "collective_size": dict(
        change="DDP bucket_cap_mb 25 -> 0.25 (model grads are ~3.6 MB), so gradients are all-reduced "
               "in many more, smaller buckets",
        label="collective_change", cfg=dict(bucket_cap_mb=0.25)),
    "checkpoint": dict(
        change="torch.save of model + optimizer state_dict (~11 MB) to a file every step, on every rank "
               "(each rank its own file, no rank-0 guard)",
        label="checkpoint", cfg=dict(checkpoint=True)),
    "extra_eval": dict(
        change="every step also runs an extra forward pass (+ loss) under torch.no_grad() on a fixed "
               "validation batch (4x the micro-batch) on all ranks",
        label="new_code_path", cfg=dict(extra_eval="all")),
    "straggler": dict(
        change="only rank 1 runs the extra no_grad forward pass (+ loss) on a validation batch "
               "(4x the micro-batch) each step; other ranks unchanged",
        label="new_code_path_on_rank_1", cfg=dict(extra_eval="rank1")),
}


# ---------------------------------------------------------------- model
class Block(nn.Module):
    def __init__(self, d, h, dff):
        super().__init__()
        self.h = h
        self.ln1 = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.ln2 = nn.LayerNorm(d)
        self.fc1 = nn.Linear(d, dff)
        self.fc2 = nn.Linear(dff, d)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(C, dim=-1)
        q = q.view(B, T, self.h, C // self.h).transpose(1, 2)
        k = k.view(B, T, self.h, C // self.h).transpose(1, 2)
        v = v.view(B, T, self.h, C // self.h).transpose(1, 2)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        x = x + self.proj(y)
        x = x + self.fc2(F.gelu(self.fc1(self.ln2(x))))
        return x


class TinyGPT(nn.Module):
    def __init__(self, vocab, d, h, n_layers, dff, seq, tied):
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Embedding(seq, d)
        self.blocks = nn.ModuleList([Block(d, h, dff) for _ in range(n_layers)])
        self.ln_f = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)
        if tied:
            self.head.weight = self.tok.weight

    def forward(self, idx):
        B, T = idx.shape
        pos = torch.arange(T, device=idx.device)
        x = self.tok(idx) + self.pos(pos)
        for b in self.blocks:
            x = b(x)
        return self.head(self.ln_f(x))


# ---------------------------------------------------------------- data
WORDS = ("the of and to in is was for on that with as by at from his her an were are which this "
         "be or had not but have they one all their there been has when who will more no if out so "
         "said what up its about into than them can only other new some could time these two may "
         "then do first any my now such like our over man me even most made after also did many "
         "before must through back years where much your way well down should because each just "
         "those people how too little state good very make world still own see men work long get "
         "here between both life being under never day same another know while last might us great "
         "old year off come since against go came right used take three").split()


class SyntheticTokens(Dataset):
    """Synthetic LM data. Cheap path: slice a pre-generated token array. Heavy path: build a
    text string of words per sample and tokenize it in pure Python (byte-level rolling hash),
    the way a naive user pipeline would."""

    def __init__(self, n, seq, vocab, heavy):
        self.n, self.seq, self.vocab, self.heavy = n, seq, vocab, heavy
        rng = np.random.default_rng(1234)
        self.tokens = rng.integers(0, vocab, size=(n, seq + 1), dtype=np.int64)

    def __len__(self):
        return self.n

    WORDS_PER_TOKEN = 120

    def _tokenize(self, idx):
        # build a text of words for this sample and hash it byte by byte in pure Python
        # (FNV-1a over each chunk of WORDS_PER_TOKEN words -> one token id)
        rng = np.random.default_rng(idx)
        k = self.WORDS_PER_TOKEN
        text = " ".join([WORDS[i] for i in rng.integers(0, len(WORDS), size=(self.seq + 1) * k)]) + " "
        data = text.lower().encode("utf-8")
        ids = [0] * (self.seq + 1)
        h, w, n = 2166136261, 0, 0
        for b in data:
            if b == 32:
                w += 1
                if w == k:
                    ids[n] = h % self.vocab
                    n += 1
                    h, w = 2166136261, 0
            else:
                h = ((h ^ b) * 16777619) & 0xFFFFFFFF
        return ids

    def __getitem__(self, idx):
        if self.heavy:
            row = torch.tensor(self._tokenize(idx), dtype=torch.long)
        else:
            row = torch.from_numpy(self.tokens[idx])
        return row[:-1], row[1:]


# ---------------------------------------------------------------- worker
def worker(rank, world, port, cfg, run_dir, result_dir):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    torch.set_num_threads(1)
    torch.manual_seed(0)
    dist.init_process_group("gloo", rank=rank, world_size=world)

    total_steps = cfg["wait"] + cfg["warmup"] + cfg["active"] + cfg["extra_steps"]
    ds = SyntheticTokens(n=world * cfg["batch"] * (total_steps + 4), seq=cfg["seq"],
                         vocab=cfg["vocab"], heavy=cfg["heavy_data"])
    sampler = DistributedSampler(ds, num_replicas=world, rank=rank, shuffle=True, seed=0)
    loader = DataLoader(ds, batch_size=cfg["batch"], sampler=sampler, num_workers=0,
                        drop_last=True)

    model = TinyGPT(cfg["vocab"], cfg["d_model"], cfg["n_heads"], cfg["n_layers"], cfg["d_ff"],
                    cfg["seq"], cfg["tied"])
    ddp = DDP(model, bucket_cap_mb=cfg["bucket_cap_mb"])
    opt = torch.optim.AdamW(ddp.parameters(), lr=cfg["lr"])

    # ---- garbage-collection pressure (gc variant only)
    live_objects, history = None, []
    if cfg["gc_pressure"]:
        live_objects = [{"id": i, "tags": [i, i + 1]} for i in range(250_000)]  # ~500k containers

    ckpt_dir = tempfile.mkdtemp(prefix=f"flare_pairs_ckpt_r{rank}_") if cfg["checkpoint"] else None
    do_eval = cfg["extra_eval"] == "all" or (cfg["extra_eval"] == "rank1" and rank == 1)
    if do_eval:  # a fixed held-out validation batch (4x the training micro-batch)
        g = torch.Generator().manual_seed(99)
        val_x = torch.randint(0, cfg["vocab"], (4 * cfg["batch"], cfg["seq"]), generator=g)

    step_times, losses = [], []
    gen2_per_step = []
    trace_dir = os.path.join(run_dir, "traces")
    prof = profile(
        activities=[ProfilerActivity.CPU],
        schedule=schedule(wait=cfg["wait"], warmup=cfg["warmup"], active=cfg["active"], repeat=1),
        on_trace_ready=tensorboard_trace_handler(trace_dir),
        record_shapes=True,
        with_stack=True,
    )
    dist.barrier()
    it = iter(loader)
    with prof:
        for step in range(total_steps):
            t0 = time.perf_counter()
            n_gen2_before = gc.get_stats()[2]["collections"]
            x, y = next(it)

            if cfg["gc_pressure"]:
                # per-step scratch objects kept in a short rolling history, then discarded
                history.append([{"step": step, "k": j, "v": [j, j]} for j in range(40_000)])
                if len(history) > 3:
                    history.pop(0)

            logits = ddp(x)
            loss = F.cross_entropy(logits.view(-1, logits.size(-1)), y.reshape(-1))
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()

            if do_eval:
                with torch.no_grad():
                    val_logits = ddp.module(val_x)
                    val_loss = F.cross_entropy(val_logits.view(-1, val_logits.size(-1)),
                                               val_x.reshape(-1))

            if cfg["item_sync"]:
                if torch.cuda.is_available():
                    torch.cuda.synchronize()
                losses.append(loss.item())

            if cfg["checkpoint"]:
                torch.save({"model": ddp.module.state_dict(), "optim": opt.state_dict(),
                            "step": step}, os.path.join(ckpt_dir, "ckpt.pt"))

            prof.step()
            step_times.append((time.perf_counter() - t0) * 1e3)
            gen2_per_step.append(gc.get_stats()[2]["collections"] - n_gen2_before)

    dist.barrier()
    if ckpt_dir:
        shutil.rmtree(ckpt_dir, ignore_errors=True)
    first_active = cfg["wait"] + cfg["warmup"]
    active_times = step_times[first_active:first_active + cfg["active"]]
    res = dict(rank=rank, step_ms=step_times, active_step_ms=active_times,
               median_active_ms=statistics.median(active_times),
               gen2_collections_active=sum(gen2_per_step[first_active:first_active + cfg["active"]]),
               unprofiled_step_ms=step_times[2:cfg["wait"]],
               n_params=sum(p.numel() for p in model.parameters()))
    with open(os.path.join(result_dir, f"rank{rank}.json"), "w") as f:
        json.dump(res, f)
    dist.destroy_process_group()


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_variant(name, out):
    spec = VARIANTS[name]
    cfg = dict(BASE, **spec["cfg"])
    run_dir = os.path.join(out, name)
    if os.path.exists(run_dir):
        shutil.rmtree(run_dir)
    os.makedirs(os.path.join(run_dir, "traces"))
    result_dir = tempfile.mkdtemp(prefix="flare_pairs_res_")
    t0 = time.time()
    mp.spawn(worker, args=(WORLD, free_port(), cfg, run_dir, result_dir), nprocs=WORLD, join=True)
    wall = time.time() - t0
    ranks = [json.load(open(os.path.join(result_dir, f"rank{r}.json"))) for r in range(WORLD)]
    shutil.rmtree(result_dir, ignore_errors=True)
    # step time: median over all ranks' active (profiled) steps, from our own perf_counter timer
    pooled = [t for r in ranks for t in r["active_step_ms"]]
    per_step_max = [max(r["active_step_ms"][i] for r in ranks) for i in range(cfg["active"])]
    summary = dict(
        change=spec["change"], label=spec["label"], config_delta=spec["cfg"],
        median_step_ms=round(statistics.median(pooled), 2),
        median_of_slowest_rank_per_step_ms=round(statistics.median(per_step_max), 2),
        median_unprofiled_step_ms=round(statistics.median(
            [t for r in ranks for t in r["unprofiled_step_ms"]]), 2),
        median_step_ms_per_rank=[round(r["median_active_ms"], 2) for r in ranks],
        gen2_collections_in_active_steps_per_rank=[r["gen2_collections_active"] for r in ranks],
        wall_s=round(wall, 1), n_params=ranks[0]["n_params"],
    )
    with open(os.path.join(run_dir, "step_times.json"), "w") as f:
        json.dump(dict(summary, ranks=ranks), f, indent=1)
    return summary


def check_traces(run_dir):
    tdir = os.path.join(run_dir, "traces")
    files = sorted(f for f in os.listdir(tdir) if f.endswith(".json"))
    info = []
    for f in files:
        d = json.load(open(os.path.join(tdir, f)))
        n = sum(1 for e in d.get("traceEvents", []) if str(e.get("name", "")).startswith("ProfilerStep#"))
        info.append((f, n, d.get("distributedInfo", {}).get("rank")))
    return info


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--only", nargs="*", default=None)
    ap.add_argument("--set", nargs="*", default=[], help="tuning only: override BASE key=int")
    a = ap.parse_args()
    for kv in a.set:
        k, v = kv.split("=")
        BASE[k] = type(BASE[k])(v)
    os.makedirs(a.out, exist_ok=True)
    names = a.only or list(VARIANTS)
    truth_path = os.path.join(a.out, "truth.json")
    truth = json.load(open(truth_path)) if os.path.exists(truth_path) else {}
    truth["baseline"] = "baseline"
    truth["pairs"] = [["baseline", n] for n in VARIANTS if n != "baseline"]
    truth["notes"] = (
        "4 ranks, torch.distributed gloo on 127.0.0.1, CPU only (2 cores shared by 4 ranks, "
        "torch.set_num_threads(1)). Traces: OUT/<name>/traces/*.pt.trace.json, one per rank (rank in "
        "distributedInfo). median_step_ms: median over all ranks of the 12 profiled steps, from a "
        "perf_counter timer around each whole iteration (data fetch .. prof.step()); "
        "median_unprofiled_step_ms: same timer over un-profiled wait steps 2..5. Base config: "
        + json.dumps({k: v for k, v in BASE.items()}))
    truth.setdefault("variants", {})
    ok = True
    for name in names:
        s = run_variant(name, a.out)
        info = check_traces(os.path.join(a.out, name))
        good = len(info) == WORLD and all(n > 0 for _, n, _ in info) and \
            sorted(r for _, _, r in info) == list(range(WORLD))
        ok &= good
        s["trace_files"] = [f for f, _, _ in info]
        s["trace_check"] = "ok" if good else f"BAD {info}"
        truth["variants"][name] = s
        print(f"{name:16s} median_step_ms={s['median_step_ms']:8.2f} "
              f"unprofiled={s['median_unprofiled_step_ms']:8.2f} per_rank={s['median_step_ms_per_rank']} "
              f"gen2={s['gen2_collections_in_active_steps_per_rank']} wall={s['wall_s']}s "
              f"traces={[(n, r) for _, n, r in info]} {s['trace_check'] if not good else 'ok'}",
              flush=True)
        with open(truth_path, "w") as f:
            json.dump(truth, f, indent=1)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
