"""Small real PyTorch jobs on Gloo, traced by the real torch.profiler, one fault each.

Usage: python jobs.py OUT_DIR JOB FAULT [--world N] [--slow-rank R] [--steps N]

JOB is one of
  ddp         DistributedDataParallel over an MLP, a real DataLoader
  allreduce   the same model, gradients averaged by an explicit `dist.all_reduce` per
              parameter after `backward`, as hand-written data parallelism does
  fsdp        the same model sharded by FSDP2 (`fully_shard` per layer and the root): each
              layer's parameters all-gathered in forward and backward, its gradients
              reduce-scattered
  pipeline    a deeper MLP cut into one stage per rank (`torch.distributed.pipelining`,
              `PipelineStage` + `ScheduleGPipe`, 4 microbatches per step): activations
              and their gradients go by point-to-point send/recv between neighbours; every
              rank pulls the step's batch from its DataLoader (as torchtitan's loop does),
              the first stage feeds it in, the last one computes the loss
FAULT is one of
  none        every rank alike
  extra_work  the slow rank runs four extra forward passes per step (a code path only it
              takes; under FSDP and pipelining through a local model of the same layers,
              since a forward of the sharded model or stage would need its peers)
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

JOBS = ("ddp", "allreduce", "fsdp", "pipeline")
FAULTS = ("none", "extra_work", "dataloader", "host_stall", "late")
EXPECTED = {
    "none": None,
    "extra_work": "extra_work",
    "dataloader": "host_stall",
    "host_stall": "slow_rank",
    "late": "slow_rank",
}


class Batches(Dataset):
    def __init__(self, n, slow_s, width):
        self.n, self.slow_s, self.width = n, slow_s, width

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        if self.slow_s:
            time.sleep(self.slow_s)
        g = torch.Generator().manual_seed(i)
        return torch.randn(64, self.width, generator=g)


MICROBATCHES = 4


def width(job):
    """Layer width. A step of FSDP or pipelining on Gloo is mostly communication (every
    layer gathered, 8 transfers per stage): with 256-wide layers a rank's compute is a few
    percent of it, and four extra forward passes are lost in the scheduling noise of 4
    processes on shared cores. 512-wide layers give the compute, and the fault, weight."""
    return 512 if job in ("fsdp", "pipeline") else 256


def mlp(layers, w=256):
    return torch.nn.Sequential(*[torch.nn.Linear(w, w) for _ in range(layers)])


def pipeline_stage(rank, a):
    """This rank's stage of a 2*world-layer MLP, and the GPipe schedule that runs it."""
    from torch.distributed.pipelining import PipelineStage, ScheduleGPipe

    torch.manual_seed(rank)
    stage_mod = mlp(2, width(a.job))
    # Shapes given, not inferred (inference sends pickled metadata, which needs NumPy).
    # Activations between stages carry gradients back, so their metadata requires grad.
    micro = torch.zeros(64 // MICROBATCHES, width(a.job))
    stage = PipelineStage(
        stage_mod,
        rank,
        a.world,
        torch.device("cpu"),
        input_args=(micro.clone().requires_grad_(rank > 0),),
        output_args=(micro.clone().requires_grad_(),),
    )
    sched = ScheduleGPipe(
        stage,
        MICROBATCHES,
        loss_fn=lambda out, _target: out.pow(2).mean(),
    )
    return stage_mod, sched


def run(rank, a, port):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("gloo", rank=rank, world_size=a.world)
    torch.set_num_threads(1)
    torch.manual_seed(0)
    sched = None
    if a.job == "pipeline":
        model, sched = pipeline_stage(rank, a)
        ddp = model
    else:
        model = mlp(4, width(a.job))
        if a.job == "ddp":
            ddp = torch.nn.parallel.DistributedDataParallel(model)
        elif a.job == "fsdp":
            from torch.distributed.device_mesh import init_device_mesh
            from torch.distributed.fsdp import fully_shard

            mesh = init_device_mesh("cpu", (a.world,))
            for layer in model:
                fully_shard(layer, mesh=mesh)
            ddp = fully_shard(model, mesh=mesh)
        else:
            ddp = model
    opt = torch.optim.SGD(ddp.parameters(), lr=0.01)
    slow = rank == a.slow_rank
    # A forward of the sharded model or of a pipeline stage needs the peers: a code path
    # that only one rank takes runs a local model of the same layers.
    local = mlp(len(model), width(a.job)) if slow and a.job in ("fsdp", "pipeline") else None
    loader = DataLoader(
        Batches(a.steps + 2, 0.03 if slow and a.fault == "dataloader" else 0.0, width(a.job)),
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
                    if local is not None:
                        local(x)
                    elif a.job == "ddp":
                        with ddp.no_sync():
                            ddp(x)
                    else:
                        ddp(x)
            if sched is not None:
                if rank == 0:
                    sched.step(x)
                elif rank == a.world - 1:
                    sched.step(target=x)
                else:
                    sched.step()
            else:
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
    p.add_argument("job", choices=JOBS)
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
