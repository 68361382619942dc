"""Flare's NCCL profiler plugin in a real NCCL, on a machine with a GPU.

Two ranks (torch.distributed, NCCL backend) share the machine's GPUs; with one GPU each
rank is told it is on a host of its own (NCCL_HOSTID), so NCCL accepts two ranks on one
GPU and connects them with its network transport (sockets on loopback): the proxy thread,
proxy ops and steps and per-channel kernels all run as on a two-node job.

Two measurements, written as JSON lines to OUT/results.jsonl:
  overhead  all_reduce time per call at three sizes, without the plugin and with it
            (default event mask), alternating runs so drift hits both alike;
  events    one run with every event type on, NCCL's log at INFO, and each rank's
            recorded events dumped (FLARE_DUMP) to OUT/rank<r>.ring: 40 calls, then 20
            where rank 1 sleeps 20 ms before each (rank 0 waits inside the collective).

Usage: python3 nccl_plugin_job.py PLUGIN_SO OUT [--rounds N]
"""

import argparse
import json
import os
import socket
import sys
import tarfile
import tempfile
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

SIZES = (8 << 10, 1 << 20, 32 << 20)  # bytes per all_reduce (float32)
LATE_RANK, LATE_S = 1, 0.020


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def setup(rank, world, port, env):
    os.environ.update(
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
        RANK=str(rank),
        WORLD_SIZE=str(world),
        LOCAL_RANK=str(rank),
        NCCL_SOCKET_IFNAME="lo",
        NCCL_IB_DISABLE="1",
    )
    if torch.cuda.device_count() < world:
        os.environ["NCCL_HOSTID"] = f"flare-gpu-check-{rank}"
        os.environ["NCCL_MULTI_RANK_GPU_ENABLE"] = "1"
    os.environ.update(env)
    dev = rank % torch.cuda.device_count()
    torch.cuda.set_device(dev)
    dist.init_process_group("nccl", rank=rank, world_size=world, device_id=torch.device("cuda", dev))
    return dev


def time_calls(x, n):
    torch.cuda.synchronize()
    dist.barrier()
    t0 = time.perf_counter()
    for _ in range(n):
        dist.all_reduce(x)
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) / n


def overhead_worker(rank, world, port, env, q):
    setup(rank, world, port, env)
    out = {}
    for size in SIZES:
        x = torch.ones(size // 4, device="cuda")
        n = 400 if size <= 1 << 20 else 40
        time_calls(x, max(n // 10, 5))  # warm-up: connections, buffers
        out[size] = min(time_calls(x, n) for _ in range(3))
    dist.barrier()
    dist.destroy_process_group()
    if rank == 0:
        q.put(out)


def events_worker(rank, world, port, env, q):
    setup(rank, world, port, env)
    x = torch.ones((1 << 20) // 4, device="cuda")
    for _ in range(40):
        dist.all_reduce(x)
    torch.cuda.synchronize()
    for _ in range(20):
        if rank == LATE_RANK:
            time.sleep(LATE_S)
        dist.all_reduce(x)
        torch.cuda.synchronize()
    dist.barrier()
    dist.destroy_process_group()
    if rank == 0:
        q.put({"nccl": ".".join(map(str, torch.cuda.nccl.version())), "torch": torch.__version__})


def run(worker, world, env):
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    port = free_port()
    procs = [ctx.Process(target=worker, args=(r, world, port, env, q)) for r in range(world)]
    for p in procs:
        p.start()
    result = q.get(timeout=180)
    for p in procs:
        p.join(timeout=120)
        if p.exitcode != 0:
            raise SystemExit(f"a rank exited with {p.exitcode}")
    return result


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("plugin")
    ap.add_argument("out")
    ap.add_argument("--rounds", type=int, default=2)
    a = ap.parse_args()
    plugin = os.path.abspath(a.plugin)
    os.makedirs(a.out, exist_ok=True)
    world = 2
    results = open(os.path.join(a.out, "results.jsonl"), "w")

    def emit(obj):
        results.write(json.dumps(obj) + "\n")
        results.flush()
        print(json.dumps(obj), flush=True)

    emit({"gpus": torch.cuda.device_count(), "gpu": torch.cuda.get_device_name(0)})
    shm = tempfile.mkdtemp(prefix="flare-shm-")
    base = {"FLARE_JOB_ID": "gpu-check", "FLARE_SHM_DIR": shm}

    # Events first: a failure here says the most. The dumps are sparse files the size of
    # the tracer's rings: kept small, then packed into one archive.
    ev_env = dict(
        base,
        NCCL_PROFILER_PLUGIN=plugin,
        FLARE_NCCL_EVENT_MASK="all",
        FLARE_RING_EVENTS=str(1 << 17),
        FLARE_MAX_THREADS="16",
        FLARE_DUMP=os.path.join(shm, "rank%d.ring"),
        NCCL_DEBUG="INFO",
        NCCL_DEBUG_SUBSYS="INIT,NET,PROFILE,ENV",
        NCCL_DEBUG_FILE=os.path.join(a.out, "nccl.%p.log"),
    )
    # FLARE_DUMP names one file per process: give each rank its own.
    info = run(events_worker_with_dump, world, ev_env)
    emit(dict(run="events", **info))
    with tarfile.open(os.path.join(a.out, "dumps.tar.gz"), "w:gz") as tar:
        for r in range(world):
            tar.add(os.path.join(shm, f"rank{r}.ring"), arcname=f"rank{r}.ring")

    for rnd in range(a.rounds):
        for mode in ("off", "on"):
            env = dict(base)
            if mode == "on":
                env["NCCL_PROFILER_PLUGIN"] = plugin
            t = run(overhead_worker, world, env)
            emit({"run": "overhead", "round": rnd, "plugin": mode,
                  "us_per_call": {str(k): round(v * 1e6, 2) for k, v in t.items()}})


def events_worker_with_dump(rank, world, port, env, q):
    env = dict(env, FLARE_DUMP=env["FLARE_DUMP"] % rank)
    events_worker(rank, world, port, env, q)


if __name__ == "__main__":
    sys.exit(main())
