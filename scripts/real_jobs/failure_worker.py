"""A small DistributedDataParallel job on Gloo (CPU) that fails in one real way.

Run under torchrun: failure_worker.py SCENARIO [--culprit R] [--steps N] [--fail-step N]
                                      [--data DIR] [--ckpt DIR]

Every message a failure prints comes from Python, PyTorch, Gloo or torchrun themselves;
the job only does what real training code does wrong. SCENARIO is one of
  healthy        trains and exits cleanly
  exception      the culprit indexes a tensor out of range (IndexError)
  host_oom       the culprit allocates more host memory than there is (DefaultCPUAllocator)
  sigkill        the culprit is killed with SIGKILL, as the kernel's OOM killer would
  hang           the culprit stops before a collective; the others time out (Gloo)
  mismatch       the culprit broadcasts where the others all-reduce
                 (run with TORCH_DISTRIBUTED_DEBUG=DETAIL)
  nan            the culprit's loss becomes NaN under autograd anomaly detection
  missing_file   the culprit's data shard does not exist
  checkpoint     rank 0 saves a checkpoint into a directory that does not exist
  bad_args       (the driver passes an argument the script does not accept)
Nothing here knows about Flare.

With TORCH_FR_BUFFER_SIZE and TORCH_FR_DUMP_TEMP_FILE set, PyTorch's Flight Recorder
records every collective, and each rank writes its dump (`<TORCH_FR_DUMP_TEMP_FILE><rank>`,
PyTorch's own pickle) the way a job that enables it does: when a collective fails or times
out, and when the launcher stops it with SIGTERM. A rank that crashes on its own writes
none, as in production.
"""

import argparse
import datetime
import logging
import os
import signal
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

log = logging.getLogger("train")


def dump_flight_recorder(rank):
    """Writes this rank's Flight Recorder dump, if the job enables it."""
    prefix = os.environ.get("TORCH_FR_DUMP_TEMP_FILE")
    if not prefix or not os.environ.get("TORCH_FR_BUFFER_SIZE"):
        return
    import torch._C._distributed_c10d as c10d

    with open(f"{prefix}{rank}", "wb") as f:
        f.write(c10d._dump_fr_trace(True, True, False))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("scenario")
    p.add_argument("--culprit", type=int, default=2)
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--fail-step", type=int, default=3)
    p.add_argument("--data", default=None)
    p.add_argument("--ckpt", default=None)
    a = p.parse_args()
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    rank = int(os.environ["RANK"])
    timeout = datetime.timedelta(seconds=int(os.environ.get("FAILURE_TIMEOUT_S", "20")))
    log.info("initializing process group (rank %d)", rank)
    dist.init_process_group("gloo", timeout=timeout)
    world = dist.get_world_size()
    culprit = a.culprit % world

    log.info("loading dataset")
    if a.scenario == "missing_file" and rank == culprit:
        with open(os.path.join(a.data or "/tmp", f"shard-{rank:05d}.bin"), "rb") as f:
            f.read()
    torch.manual_seed(rank)
    model = DDP(torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1)))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    if a.scenario == "nan":
        torch.autograd.set_detect_anomaly(True)

    def on_sigterm(signum, frame):
        dump_flight_recorder(rank)
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, on_sigterm)
    log.info("starting training")
    try:
        train(a, rank, culprit, model, opt)
    except RuntimeError as e:
        # a collective that failed or timed out: Gloo raises a RuntimeError that says so
        if any(w in str(e).lower() for w in ("timed out", "connection", "gloo", "monitoredbarrier")):
            dump_flight_recorder(rank)
        raise
    log.info("training completed")
    dist.barrier()
    dist.destroy_process_group()


def train(a, rank, culprit, model, opt):
    for step in range(a.steps):
        x = torch.randn(32, 64)
        failing = step == a.fail_step and rank == culprit
        if failing and a.scenario == "exception":
            lengths = torch.zeros(8)
            x = x[: int(lengths[10])]
        if failing and a.scenario == "host_oom":
            torch.empty(1 << 50, dtype=torch.uint8)
        if failing and a.scenario == "sigkill":
            os.kill(os.getpid(), signal.SIGKILL)
        if failing and a.scenario == "hang":
            time.sleep(3600)
        if step == a.fail_step and a.scenario == "barrier":
            # the culprit hangs; the others check on it with a monitored barrier, whose
            # rank 0 names the ranks that never came
            if rank == culprit:
                time.sleep(3600)
            dist.monitored_barrier(timeout=datetime.timedelta(seconds=10), wait_all_ranks=True)
        loss = model(x).pow(2).mean()
        if failing and a.scenario == "nan":
            loss = loss * torch.tensor(float("nan"))
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step == a.fail_step and a.scenario == "mismatch":
            t = torch.ones(16)
            if rank == culprit:
                dist.broadcast(t, src=0)
            else:
                dist.all_reduce(t)
        log.info("step %d | loss %.4f", step, loss.item())
        if step == a.fail_step and a.scenario == "checkpoint":
            log.info("saving checkpoint at step %d", step)
            if rank == 0:
                torch.save(model.state_dict(), os.path.join(a.ckpt or "/nonexistent/ckpt", f"step-{step}.pt"))
            dist.barrier()
            log.info("saved checkpoint at step %d", step)


if __name__ == "__main__":
    main()
