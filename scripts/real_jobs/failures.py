"""Runs real failing PyTorch jobs under torchrun and keeps their logs, labelled, in the
layout of the failure-log corpus (tests/fixtures/logs/corpus/README.md), so that
`flare bench logs-corpus --dir OUT_DIR` scores `flare logs diagnose` on them.

Usage: python failures.py OUT_DIR [--world 4] [--only SCENARIO,...]

Each scenario runs failure_worker.py on `--world` Gloo processes (CPU) with torchrun.
Half of them keep torchrun's console (`console.log`, every rank's output interleaved);
the other half run with `--log-dir`, one stdout/stderr file per local rank as torchrun
writes them, beside the launcher's own console. The truth (category, culprit rank,
stage, whether a restart helps, a fragment of the line that shows the cause) is what
was injected; a run whose logs do not hold its root-cause fragment is reported and
left without a truth.json, so nothing unverified is scored. Flight Recorder is on: the
ranks that see a collective fail, time out or get stopped write their dumps into `fr/`
(`flare diagnose CASE/fr --logs CASE` reads both).
"""

import argparse
import json
import os
import random
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
WORKER = os.path.join(HERE, "failure_worker.py")

# scenario: (category, culprit rank or None, stage, restart helps, root-line fragments,
#            per-rank log files, extra worker args, extra environment)
SCENARIOS = {
    "exception": ("user_code", 2, "training", False, ["IndexError: index 10 is out of bounds"], False, [], {}),
    "host_oom": ("out_of_memory", 1, "training", False, ["DefaultCPUAllocator: can't allocate memory"], True, [], {}),
    "sigkill": ("unknown", 3, "training", None, ["exitcode: -9", "Signal 9 (SIGKILL)"], False, [], {}),
    "hang": ("unknown", 1, "training", None, [], True, [], {"FAILURE_TIMEOUT_S": "15"}),
    # a monitored barrier (Gloo) times out on the rank that hangs: rank 0 names it
    "barrier": ("unknown", 2, "training", None, [], True, [], {}),
    # Gloo times the all-reduces out while the culprit waits in its broadcast: the ranks'
    # tracebacks show the different calls (TORCH_DISTRIBUTED_DEBUG=DETAIL would name the
    # mismatch, but with Gloo and DDP it crashes torch 2.15 at start-up)
    "mismatch": ("collective_mismatch", 2, "training", False, ["[rank2]: RuntimeError"], False, [], {}),
    "nan": ("numerical", 2, "training", False, ["returned nan values"], True, [], {}),
    "missing_file": ("data_storage", 3, "loading", False, ["FileNotFoundError"], False, ["--data", "/nonexistent/shards"], {}),
    "checkpoint": ("data_storage", 0, "checkpointing", False, ["Parent directory"], True, ["--ckpt", "/nonexistent/ckpt"], {}),
    "bad_args": ("user_code", None, "launch", False, ["error: unrecognized arguments"], False, ["--bogus-flag"], {}),
    "healthy": (None, None, None, None, [], True, [], {}),
}


def free_port():
    return random.randint(20000, 40000)


def run(out, name, world):
    category, culprit, stage, restart, fragments, per_rank, extra, env_extra = SCENARIOS[name]
    d = os.path.join(out, name)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "1", "--nproc-per-node", str(world),
           "--master-port", str(free_port())]
    if per_rank:
        cmd += ["--log-dir", os.path.join(d, "logs"), "--redirects", "3"]
    cmd += [WORKER, name if name != "bad_args" else "healthy"]
    if culprit is not None:
        cmd += ["--culprit", str(culprit)]
    cmd += extra
    # Flight Recorder on, its dumps in fr/ (see failure_worker.py)
    fr = os.path.join(d, "fr")
    os.makedirs(fr)
    env = dict(os.environ, OMP_NUM_THREADS="1", TORCH_FR_BUFFER_SIZE="2000",
               TORCH_FR_DUMP_TEMP_FILE=os.path.join(fr, "nccl_trace_rank_"), **env_extra)
    with open(os.path.join(d, "console.log"), "wb") as f:
        p = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, env=env, timeout=300)
    text = ""
    for root, _, files in os.walk(d):
        for fn in files:
            if fn.endswith(".log"):
                with open(os.path.join(root, fn), errors="replace") as f:
                    text += f.read()
    if not os.listdir(fr):
        os.rmdir(fr)
    missing = [x for x in fragments if x not in text]
    ok_exit = (p.returncode == 0) == (category is None)
    if missing or not ok_exit:
        print(f"{name}: NOT LABELLED (exit {p.returncode}, fragments missing: {missing})")
        return False
    truth = {
        "id": f"real-{name}",
        "source": "scripts/real_jobs/failures.py",
        "title": f"real torchrun job, {world} Gloo processes: {name}",
        "category": category or "none",
        "root_cause": f"injected: {name}",
        "evidence_of_truth": "the fault was injected by scripts/real_jobs/failure_worker.py",
        "root_lines": fragments,
        "cascade_lines": [],
        "culprit": {"rank": culprit, "node": None},
        "stage": stage or "none",
        "restart_helps": restart,
    }
    with open(os.path.join(d, "truth.json"), "w") as f:
        json.dump(truth, f, indent=2)
    print(f"{name}: exit {p.returncode}, labelled")
    return True


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--world", type=int, default=4)
    ap.add_argument("--only", default="")
    a = ap.parse_args()
    names = [n for n in SCENARIOS if not a.only or n in a.only.split(",")]
    bad = [n for n in names if not run(a.out, n, a.world)]
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
