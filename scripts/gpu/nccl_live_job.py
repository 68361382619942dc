"""A real NCCL job traced live by Flare's plugin and agent, on a machine with a GPU.

Two ranks (as in nccl_plugin_job.py: one GPU is enough) run all_reduce with NCCL's proxy
steps recorded: 40 calls on time, then 15 where rank 1 arrives 20 ms late, then rank 1
never joins the last call while rank 0 waits in it (a hang) until this script kills it.
The agent (started by nccl_live_check.sh) summarises each window; its summaries say what
happened inside the collectives.

Usage: python3 nccl_live_job.py PLUGIN_SO SHM_DIR [HANG_SECONDS]
"""

import os
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

# Two ranks on however many GPUs there are: the same set-up as the plugin check.
from nccl_plugin_job import free_port, setup


def worker(rank, world, port, plugin, shm, hang_s):
    setup(
        rank,
        world,
        port,
        dict(
            NCCL_PROFILER_PLUGIN=plugin,
            FLARE_NCCL_EVENT_MASK="default,proxystep",
            FLARE_JOB_ID="gpu-live",
            FLARE_SHM_DIR=shm,
            FLARE_RING_EVENTS=str(1 << 18),
            FLARE_MAX_THREADS="16",
        ),
    )
    x = torch.ones((1 << 20) // 4, device="cuda")
    for _ in range(40):
        dist.all_reduce(x)
        torch.cuda.synchronize()
    print(f"rank {rank}: on time done", flush=True)
    for _ in range(15):
        if rank == 1:
            time.sleep(0.020)
        dist.all_reduce(x)
        torch.cuda.synchronize()
    print(f"rank {rank}: late phase done", flush=True)
    if rank == 0:
        open(os.path.join(shm, ".hang"), "w").close()
    if rank == 1:
        time.sleep(hang_s + 30)  # never joins; killed by the parent
    else:
        dist.all_reduce(x)  # waits for rank 1 forever
        torch.cuda.synchronize()


def main():
    plugin, shm = os.path.abspath(sys.argv[1]), sys.argv[2]
    hang_s = float(sys.argv[3]) if len(sys.argv) > 3 else 15
    port = free_port()
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=worker, args=(r, 2, port, plugin, shm, hang_s)) for r in range(2)]
    for p in procs:
        p.start()
    start = time.time()
    # Both ranks reach the hang well within a minute; then it lasts hang_s.
    while time.time() - start < 120 and not os.path.exists(os.path.join(shm, ".hang")):
        time.sleep(0.5)
        if all(not p.is_alive() for p in procs):
            break
    time.sleep(hang_s)
    for p in procs:
        p.kill()
        p.join()
    print(f"job ran {time.time() - start:.0f} s", flush=True)


if __name__ == "__main__":
    main()
