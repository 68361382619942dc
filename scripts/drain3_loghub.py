#!/usr/bin/env python3
"""Drain3 (default config) on LogHub-2k, scored like `flare bench logs`.

Feeds Drain3 the Content column of each <System>_2k.log_structured_corrected.csv (as
Flare's benchmark does), scores grouping accuracy (a line is correct when its cluster
holds exactly the lines of its true EventId) and times add_log_message.

    python3 -m venv /tmp/drain3-venv && /tmp/drain3-venv/bin/pip install drain3
    /tmp/drain3-venv/bin/python scripts/drain3_loghub.py [DIR] [--repeat N]

DIR defaults to ../shared/data/loghub-2k (from the repository root). Not part of the
test suite.
"""
import csv
import logging
import os
import sys
import time
from collections import Counter

from drain3 import TemplateMiner

SYSTEMS = ["HDFS", "Hadoop", "Spark", "Zookeeper", "BGL", "HPC", "Thunderbird"]


def grouping_accuracy(pred, truth):
    ps, ts, pair = Counter(pred), Counter(truth), Counter(zip(pred, truth))
    ok = sum(n for (p, t), n in pair.items() if ps[p] == n and ts[t] == n)
    return ok / len(pred)


def main():
    logging.disable(logging.CRITICAL)
    args = sys.argv[1:]
    repeat = 1
    if "--repeat" in args:
        i = args.index("--repeat")
        repeat = int(args[i + 1])
        del args[i : i + 2]
    root = args[0] if args else os.path.join(os.path.dirname(__file__), "..", "..", "shared", "data", "loghub-2k")
    systems = SYSTEMS if not args else sorted(
        s for s in os.listdir(root) if os.path.exists(f"{root}/{s}/{s}_2k.log_structured_corrected.csv"))
    total_lines, total_s, gas = 0, 0.0, []
    print(f"{'system':12} {'GA':>6} {'clusters':>8} {'lines/s':>10}")
    for s in systems:
        with open(f"{root}/{s}/{s}_2k.log_structured_corrected.csv", newline="", encoding="utf-8") as f:
            rows = list(csv.DictReader(f))
        content = [r["Content"] for r in rows]
        truth = [r["EventId"] for r in rows]
        miner = TemplateMiner()  # default config: depth 4, sim_th 0.4, no masking
        t0 = time.perf_counter()
        pred = [miner.add_log_message(c)["cluster_id"] for c in content]
        dt = time.perf_counter() - t0
        # speed on repeats (a fresh miner each time would re-learn; reuse: steady state)
        for _ in range(repeat - 1):
            t1 = time.perf_counter()
            for c in content:
                miner.add_log_message(c)
            dt += time.perf_counter() - t1
        n = len(content) * repeat
        ga = grouping_accuracy(pred, truth)
        gas.append(ga)
        total_lines += n
        total_s += dt
        print(f"{s:12} {ga:6.4f} {len(miner.drain.clusters):8} {n / dt:10.0f}")
    print(f"{'mean':12} {sum(gas) / len(gas):6.4f} {'':8} {total_lines / total_s:10.0f}")


if __name__ == "__main__":
    main()
