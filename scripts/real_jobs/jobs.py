"""Small real PyTorch jobs on Gloo, traced by the real torch.profiler, one fault each.

Usage: python jobs.py OUT_DIR JOB FAULT [--world N] [--slow-rank R] [--steps N]

JOB is `ddp` (DistributedDataParallel over an MLP, a real DataLoader) or `allreduce`
(the same model, gradients averaged by an explicit `dist.all_reduce` per parameter after
`backward`, as hand-written data parallelism does). FAULT is one of
  none        every rank alike
  extra_work  the slow rank runs four extra forward passes per step (a code path only it takes)
  dataloader  the slow rank's DataLoader takes 30 ms longer per batch (a slow __getitem__)
  host_stall  the slow rank sleeps 30 ms per step outside any traced op
  late        the slow rank sleeps 5 ms before every collective it joins (allreduce only)
Each rank writes OUT_DIR/traces/rank<R>.json (Chrome trace of the CPU activity, shapes
recorded); OUT_DIR/truth.json says what was injected. Nothing here knows about Flare.
"""

import argparse
import json
import os
import socket
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.profiler import ProfilerActivity, profile, schedule
from torch.utils.data import DataLoader, Dataset

FAULTS = ("none", "extra_work", "dataloader", "host_stall", "late")
EXPECTED = {
    "none": None,
    "extra_work": "extra_work",
    "dataloader": "host_stall",
    "host_stall": "slow_rank",
    "late": "slow_rank",
}


class Batches(Dataset):
    def __init__(self, n, slow_s):
        self.n, self.slow_s = n, slow_s

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        if self.slow_s:
            time.sleep(self.slow_s)
        g = torch.Generator().manual_seed(i)
        return torch.randn(64, 256, generator=g)


def run(rank, a, port):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("gloo", rank=rank, world_size=a.world)
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = torch.nn.Sequential(*[torch.nn.Linear(256, 256) for _ in range(4)])
    ddp = torch.nn.parallel.DistributedDataParallel(model) if a.job == "ddp" else model
    opt = torch.optim.SGD(ddp.parameters(), lr=0.01)
    slow = rank == a.slow_rank
    loader = DataLoader(
        Batches(a.steps + 2, 0.03 if slow and a.fault == "dataloader" else 0.0),
        batch_size=None,
    )
    active = a.steps - 2
    with profile(
        activities=[ProfilerActivity.CPU],
        record_shapes=True,
        schedule=schedule(wait=1, warmup=1, active=active),
    ) as prof:
        for step, x in enumerate(loader):
            if step == a.steps:
                break
            if slow and a.fault == "host_stall":
                time.sleep(0.03)
            if slow and a.fault == "extra_work":
                for _ in range(4):
                    if a.job == "ddp":
                        with ddp.no_sync():
                            ddp(x)
                    else:
                        ddp(x)
            loss = ddp(x).pow(2).mean()
            loss.backward()
            if a.job == "allreduce":
                for p in model.parameters():
                    if slow and a.fault == "late":
                        time.sleep(0.005)
                    dist.all_reduce(p.grad)
                    p.grad /= a.world
            opt.step()
            opt.zero_grad()
            prof.step()
    prof.export_chrome_trace(os.path.join(a.out, "traces", f"rank{rank}.json"))
    dist.destroy_process_group()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("out")
    p.add_argument("job", choices=["ddp", "allreduce"])
    p.add_argument("fault", choices=FAULTS)
    p.add_argument("--world", type=int, default=4)
    p.add_argument("--slow-rank", type=int, default=2)
    p.add_argument("--steps", type=int, default=8)
    a = p.parse_args()
    if a.fault == "none":
        a.slow_rank = -1
    if a.fault == "late" and a.job != "allreduce":
        p.error("late is for the allreduce job")
    os.makedirs(os.path.join(a.out, "traces"), exist_ok=True)
    mp.spawn(run, args=(a, free_port()), nprocs=a.world)
    truth = {
        "job": a.job,
        "fault": a.fault,
        "world": a.world,
        "rank": None if a.fault == "none" else a.slow_rank,
        "expected_kind": EXPECTED[a.fault],
        "torch": torch.__version__,
    }
    with open(os.path.join(a.out, "truth.json"), "w") as f:
        json.dump(truth, f, indent=1)
    print(json.dumps(truth))


if __name__ == "__main__":
    sys.exit(main())
