#!/usr/bin/env python3
"""Drain3 (default config) on LogHub-2k, scored like `flare bench logs`.

Feeds Drain3 the Content column of each <System>_2k.log_structured_corrected.csv (as
Flare's benchmark does), scores grouping accuracy (a line is correct when its cluster
holds exactly the lines of its true EventId) and times add_log_message.

    python3 -m venv /tmp/drain3-venv && /tmp/drain3-venv/bin/pip install drain3
    /tmp/drain3-venv/bin/python scripts/drain3_loghub.py [DIR] [--mb 64]

DIR defaults to ../shared/data/loghub-2k (from the repository root). The speed figure,
like `flare bench logs`, mines all systems' content lines repeated to --mb megabytes with
one fresh miner (0 skips it). Not part of the test suite.
"""
import csv
import logging
import os
import sys
import time
from collections import Counter

from drain3 import TemplateMiner

SYSTEMS = ["HDFS", "Hadoop", "Spark", "Zookeeper", "BGL", "HPC", "Thunderbird"]


def truth_path(root, s):
    """The corrected ground truth, or LogHub's original one where there is no corrected."""
    for name in (f"{s}_2k.log_structured_corrected.csv", f"{s}_2k.log_structured.csv"):
        if os.path.exists(f"{root}/{s}/{name}"):
            return f"{root}/{s}/{name}"
    return None


def grouping_accuracy(pred, truth):
    ps, ts, pair = Counter(pred), Counter(truth), Counter(zip(pred, truth))
    ok = sum(n for (p, t), n in pair.items() if ps[p] == n and ts[t] == n)
    return ok / len(pred)


def main():
    logging.disable(logging.CRITICAL)
    args = sys.argv[1:]
    mb = 64
    if "--mb" in args:
        i = args.index("--mb")
        mb = int(args[i + 1])
        del args[i : i + 2]
    root = args[0] if args else os.path.join(os.path.dirname(__file__), "..", "..", "shared", "data", "loghub-2k")
    systems = SYSTEMS if not args else sorted(s for s in os.listdir(root) if truth_path(root, s))
    gas, all_content = [], []
    print(f"{'system':12} {'GA':>6} {'clusters':>8} {'lines/s (2k lines, fresh miner)':>32}")
    for s in systems:
        with open(truth_path(root, s), newline="", encoding="utf-8") as f:
            rows = list(csv.DictReader(f))
        content = [r["Content"] for r in rows]
        truth = [r["EventId"] for r in rows]
        miner = TemplateMiner()  # default config: depth 4, sim_th 0.4, no masking
        t0 = time.perf_counter()
        pred = [miner.add_log_message(c)["cluster_id"] for c in content]
        dt = time.perf_counter() - t0
        ga = grouping_accuracy(pred, truth)
        gas.append(ga)
        all_content.extend(content)
        print(f"{s:12} {ga:6.4f} {len(miner.drain.clusters):8} {len(content) / dt:32.0f}")
    print(f"{'mean':12} {sum(gas) / len(gas):6.4f}")
    if mb > 0:
        size = sum(len(c.encode()) + 1 for c in all_content)
        reps = max(1, -(-mb * (1 << 20) // size))
        lines = all_content * reps
        miner = TemplateMiner()
        t0, c0 = time.perf_counter(), time.thread_time()
        for c in lines:
            miner.add_log_message(c)
        dt, cpu = time.perf_counter() - t0, time.thread_time() - c0
        # wall clock, and this thread's CPU time (what a shared machine does not distort)
        print(f"speed: {len(lines)} content lines, {size * reps / 1e6:.1f} MB, one fresh miner: "
              f"{dt:.2f} s, {len(lines) / dt / 1e6:.3f} M lines/s; on CPU {cpu:.2f} s, "
              f"{len(lines) / cpu / 1e6:.3f} M lines/s; {len(miner.drain.clusters)} clusters")


if __name__ == "__main__":
    main()
