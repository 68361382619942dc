"""A DDP job as a user writes it, traced from its first line (`flare.init()` before
anything else, so that its start-up phases are recorded), for the start-up tests:
torchrun, Gloo, a checkpoint loaded, DDP, a DataLoader, a few seconds of steps.

Environment: LATE_RANK (default none) and FAULT, what makes that rank late:
`imports` (it spends LATE_S seconds before flare.init, as a rank importing from a slow
filesystem does: the others wait for it in init_process_group), `untraced` (it spends
LATE_S seconds between init_process_group and DDP's constructor in work nothing marks,
as a rank still tokenizing does: the others wait in DDP's parameter broadcast); SECS
(seconds of steps, default 6).
"""

import os
import time

LATE = int(os.environ.get("LATE_RANK", "-1")) == int(os.environ["RANK"])
FAULT = os.environ.get("FAULT", "none")
LATE_S = float(os.environ.get("LATE_S", "8"))
if LATE and FAULT == "imports":
    time.sleep(LATE_S)

import flare  # noqa: E402

flare.init()

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

dist.init_process_group("gloo")
rank = dist.get_rank()
torch.set_num_threads(1)
torch.manual_seed(0)
model = torch.nn.Sequential(*[torch.nn.Linear(256, 256) for _ in range(3)])
ckpt = os.path.join(os.environ.get("CKPT_DIR", "."), f"start-rank{rank}.pt")
torch.save(model.state_dict(), ckpt)
model.load_state_dict(torch.load(ckpt))
if LATE and FAULT == "untraced":
    time.sleep(LATE_S)
ddp = torch.nn.parallel.DistributedDataParallel(model)
opt = torch.optim.SGD(ddp.parameters(), lr=0.01)
loader = torch.utils.data.DataLoader(torch.randn(4096, 256), batch_size=64)
print(f"rank {rank}: training from {time.time():.3f}", flush=True)
start = time.time()
step = 0
done = False
while not done:
    for x in loader:
        flare.step()
        ddp(x).pow(2).sum().backward()
        opt.step()
        opt.zero_grad()
        step += 1
        # Every rank stops after the same step: rank 0 decides.
        stop = torch.tensor([1.0 if rank == 0 and time.time() - start > float(os.environ.get("SECS", "6")) else 0.0])
        dist.all_reduce(stop)
        if stop.item() > 0:
            done = True
            break
dist.destroy_process_group()
flare.shutdown()
print(f"rank {rank}: {step} steps", flush=True)
