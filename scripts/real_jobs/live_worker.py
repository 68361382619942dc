"""A plain DDP job as a user writes it, for the live path: torchrun, Gloo, flare.init() and
flare.step(), nothing else traced by hand. Environment: MODEL (`ddp`, the default, or
`fsdp`: FSDP2 `fully_shard` per layer and the root, its all-gathers and reduce-scatters
called by FSDP itself), SLOW_RANK (default none), FAULT
(`extra`: 6 extra no-grad forward passes per step on the slow rank under DDP, 12 under
FSDP, about a fifth of a step; `stall`: it sleeps 30 ms per step outside anything traced; `hang`: after SECS/2
it stops for good before its forward pass, so its peers wait in DDP's all-reduce;
`gc_growth`: from SECS/2 on, every rank holds 300,000 more Python lists and keeps 20,000
new ones per step, so the garbage collector's full collections grow: a regression every
rank shares, in the middle of the job), SECS (how long).
"""

import os
import time

import flare
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
flare.init()
rank = dist.get_rank()
slow = int(os.environ.get("SLOW_RANK", "-1")) == rank
fault = os.environ.get("FAULT", "none")
torch.set_num_threads(1)
torch.manual_seed(0)
model = torch.nn.Sequential(*[torch.nn.Linear(512, 512) for _ in range(4)])
if os.environ.get("MODEL", "ddp") == "fsdp":
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    # A forward of the sharded model needs the peers: the extra work runs a local copy.
    local = torch.nn.Sequential(*[torch.nn.Linear(512, 512) for _ in range(4)])
    mesh = init_device_mesh("cpu", (dist.get_world_size(),))
    for layer in model:
        fully_shard(layer, mesh=mesh)
    ddp = fully_shard(model, mesh=mesh)
    # An FSDP step is mostly its gathers and reductions (about 3x a DDP step here): 12
    # passes weigh about a fifth of it, as 6 do of a DDP step.
    extra_passes = 12
else:
    local = model
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    extra_passes = 6
opt = torch.optim.SGD(ddp.parameters(), lr=0.01)
x = torch.randn(64, 512)
start = time.time()
step = 0
held = []
while True:
    if fault == "gc_growth" and time.time() - start > float(os.environ.get("SECS", "16")) / 2:
        if not held:
            held.append([[i] for i in range(300_000)])
        held.append([[step, k] for k in range(20_000)])
    if slow and fault == "stall":
        time.sleep(0.03)
    if slow and fault == "hang" and time.time() - start > float(os.environ.get("SECS", "16")) / 2:
        while True:
            time.sleep(1)
    if slow and fault == "extra":
        with torch.no_grad():
            for _ in range(extra_passes):
                local(x)
    ddp(x).pow(2).sum().backward()
    opt.step()
    opt.zero_grad()
    step += 1
    flare.step(step)
    if step == 1:
        # For the live tests: which window first holds steps.
        print(f"rank {rank}: first step done at {time.time():.3f}", flush=True)
    # Every rank stops after the same step: rank 0 decides.
    stop = torch.tensor([1.0 if rank == 0 and time.time() - start > float(os.environ.get("SECS", "16")) else 0.0])
    dist.all_reduce(stop)
    if stop.item() > 0:
        break
dist.destroy_process_group()
flare.shutdown()
print(f"rank {rank}: {step} steps", flush=True)
