"""``python -m flare PATH...``: prints what ring files (live or dumped) contain, as JSON.

Reading consumes the events of a live ring (as the node agent does); pass ``--keep`` to
read a copy instead.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Dict, List, Optional, Tuple

from ._core import read_ring


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="python -m flare", description=__doc__.splitlines()[0])
    p.add_argument("paths", nargs="+", help="ring files or dumps")
    p.add_argument("--keep", action="store_true", help="read a copy; leave the file as it is")
    p.add_argument("--summary", action="store_true", help="counts per span name instead of every event")
    args = p.parse_args(argv)
    status = 0
    for path in args.paths:
        try:
            ring = read_ring(path, consume=not args.keep)
        except (OSError, ValueError) as e:
            print(f"flare: {e}", file=sys.stderr)
            status = 1
            continue
        if args.summary:
            per_name: Dict[str, Tuple[int, int]] = {}
            for s in ring["spans"]:
                n, total = per_name.get(s["name"], (0, 0))
                per_name[s["name"]] = (n + 1, total + s["duration_ns"])
            ring = {
                "info": ring["info"],
                "spans": {k: {"count": n, "total_ns": t} for k, (n, t) in sorted(per_name.items())},
                "steps": len(ring["steps"]),
                "counters": len(ring["counters"]),
                "open_spans": ring["open_spans"],
                "drops": ring["drops"],
            }
        json.dump(ring, sys.stdout, indent=1)
        sys.stdout.write("\n")
    return status


if __name__ == "__main__":
    sys.exit(main())
