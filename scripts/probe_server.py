#!/usr/bin/env python3
"""Probes a real `flare serve` as a hostile or broken client would, and prints what
happened: the figures in BENCHMARKS.md ("The server under a hostile client").

    python3 scripts/probe_server.py target/release/flare [--attackers 10000] [--server-fds 4096]

Standard library only. Each probe starts its own server on a scratch database:
  slowloris   N connections from 127.0.0.1 that send half a header and stop; can a client
              on 127.0.0.2 still get /healthz? (the server runs with --server-fds
              descriptors, so N above it exhausts a server that accepts without bound)
  memory      120 posts of one 10,000-rank summary, each to a new window; the server's
              resident memory before and after
  world       a 1 KB summary declaring world_size 2^20; the size of a read of its window
  absurd      u64::MAX durations, a negative rate, a window ending before it starts
  second      a second server on the same database file
  headers     nosniff on JSON replies; the database file's mode
"""

import argparse
import json
import os
import resource
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

TOKEN = "probe-token-0123456789"


def start(flare, db, fds=None, extra=()):
    def limit():
        if fds:
            resource.setrlimit(resource.RLIMIT_NOFILE, (fds, fds))

    p = subprocess.Popen(
        [flare, "serve", "--listen", "127.0.0.1:0", "--db", db, "--token", TOKEN, *extra],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        preexec_fn=limit,
    )
    line = p.stdout.readline()
    if not line.startswith("listening on"):
        p.kill()
        raise SystemExit(f"server did not start: {line!r}")
    host, port = line.split("//")[1].strip().rsplit(":", 1)
    return p, (host, int(port))


def stop(p):
    p.terminate()
    try:
        p.wait(timeout=40)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()


def http(addr, method, path, body=None, token=TOKEN, timeout=10):
    req = urllib.request.Request(f"http://{addr[0]}:{addr[1]}{path}", data=body, method=method)
    if token:
        req.add_header("Authorization", f"Bearer {token}")
    if body is not None:
        req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read(), dict(r.headers)
    except urllib.error.HTTPError as e:
        return e.code, e.read(), dict(e.headers)


def rss_mb(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def summary(job, window, ranks, world=None, ops=4):
    t0 = 1_700_000_000_000_000_000 + window * 10_000_000_000
    return {
        "version": 1, "job_id": job, "node": "n0", "window": window,
        "window_ns": 10_000_000_000, "start_unix_ns": t0, "end_unix_ns": t0 + 10_000_000_000,
        "world_size": world if world is not None else ranks,
        "ranks": [
            {
                "rank": r, "local_rank": r % 8, "pid": 1000 + r,
                "iterations": [{"step": window, "start_unix_ns": t0, "duration_ns": 900_000_000}],
                "ops": [
                    {"name": f"op{i}", "kind": "compute", "count": 10, "total_ns": 5_000_000,
                     "p50_ns": 400_000, "p99_ns": 900_000, "max_ns": 1_000_000, "bytes": 0, "flops": 0}
                    for i in range(ops)
                ],
                "busy_ns": 9_000_000_000, "observed_ns": 10_000_000_000, "events": 40,
                "dropped_total": 0,
            }
            for r in range(ranks)
        ],
    }


def healthz_from(local, addr, timeout=2.0):
    s = socket.socket()
    s.settimeout(timeout)
    try:
        s.bind((local, 0))
        s.connect(addr)
        s.sendall(b"GET /healthz HTTP/1.1\r\nHost: flare\r\nConnection: close\r\n\r\n")
        return s.recv(64).split(b"\r\n")[0].decode() or None
    except OSError:
        return None
    finally:
        s.close()


def probe_slowloris(flare, tmp, n, server_fds):
    p, addr = start(flare, os.path.join(tmp, "slow.db"), fds=server_fds)
    held, refused, failed_in_a_row = [], 0, 0
    t = time.time()
    for _ in range(n):
        s = socket.socket()
        s.settimeout(0.2)
        try:
            s.bind(("127.0.0.1", 0))
            s.connect(addr)
            s.sendall(b"POST /api/v1/summaries HTTP/1.1\r\nHost: flare\r\nX-Slow: ")
            held.append(s)
            failed_in_a_row = 0
        except OSError:
            refused += 1
            failed_in_a_row += 1
            s.close()
            if failed_in_a_row >= 50:
                # The server accepts no more (its backlog is full): it is saturated.
                break
    opened = time.time() - t
    time.sleep(1.0)
    served, tries = None, 0
    t = time.time()
    while time.time() - t < 30 and not served:
        tries += 1
        served = healthz_from("127.0.0.2", addr)
    waited = time.time() - t
    # Connections the server closed by now (reads end at once).
    closed = 0
    time.sleep(1.0)
    for s in held:
        s.setblocking(False)
        try:
            if s.recv(1) == b"":
                closed += 1
        except BlockingIOError:
            pass
        except OSError:
            closed += 1
        s.close()
    stop(p)
    return {
        "attacker_connections_tried": len(held) + refused, "connected": len(held), "opening_s": round(opened, 1),
        "other_client_served": served, "other_client_wait_s": round(waited, 2),
        "tries": tries, "attacker_connections_closed_by_server_after": closed,
    }


def probe_memory(flare, tmp, posts=240, ranks=10_000, cache=None):
    extra = ["--cache-bytes", cache] if cache else []
    p, addr = start(flare, os.path.join(tmp, "mem.db"), extra=extra)
    base = rss_mb(p.pid)
    t = time.time()
    sizes = []
    statuses = set()
    curve = []
    for w in range(posts):
        body = json.dumps(summary("big", w, ranks)).encode()
        sizes.append(len(body))
        st, _, _ = http(addr, "POST", "/api/v1/summaries", body, timeout=120)
        statuses.add(st)
        if (w + 1) % 20 == 0:
            curve.append(round(rss_mb(p.pid)))
    took = time.time() - t
    after = rss_mb(p.pid)
    stop(p)
    return {
        "posts": posts, "ranks_per_summary": ranks, "json_mb_per_post": round(sizes[0] / 1e6, 2),
        "statuses": sorted(statuses), "rss_before_mb": round(base), "rss_after_mb": round(after),
        "rss_every_20_posts_mb": curve,
        "seconds": round(took, 1),
    }


def probe_world(flare, tmp):
    p, addr = start(flare, os.path.join(tmp, "world.db"))
    body = json.dumps(summary("wide", 0, 1, world=1 << 20, ops=1)).encode()
    st, _, _ = http(addr, "POST", "/api/v1/summaries", body)
    t = time.time()
    st2, reply, _ = http(addr, "GET", "/api/jobs/wide/findings")
    took = time.time() - t
    stop(p)
    return {"post_bytes": len(body), "post_status": st, "read_status": st2,
            "read_bytes": len(reply), "read_ms": round(took * 1000, 1)}


def probe_absurd(flare, tmp):
    p, addr = start(flare, os.path.join(tmp, "absurd.db"))
    out = {}
    cases = {
        "u64_max_duration": lambda s: s["ranks"][0]["ops"][0].update(total_ns=2**64 - 1),
        "negative_tflops": lambda s: s["ranks"][0]["ops"][0].update(tflops=-5.0),
        "end_before_start": lambda s: s.update(end_unix_ns=s["start_unix_ns"] - 1),
    }
    for name, edit in cases.items():
        s = summary("absurd", 0, 2)
        edit(s)
        st, reply, _ = http(addr, "POST", "/api/v1/summaries", json.dumps(s).encode())
        out[name] = f"{st} {reply[:160].decode(errors='replace')}"
    st, jobs, _ = http(addr, "GET", "/api/jobs")
    out["jobs_stored"] = len(json.loads(jobs))
    stop(p)
    return out


def probe_second(flare, tmp):
    db = os.path.join(tmp, "two.db")
    p, addr = start(flare, db)
    q = subprocess.Popen(
        [flare, "serve", "--listen", "127.0.0.1:0", "--db", db, "--token", TOKEN],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        out, err = q.communicate(timeout=5)
        second = f"exited {q.returncode}: {err.strip().splitlines()[-1] if err.strip() else out.strip()}"
    except subprocess.TimeoutExpired:
        q.kill()
        q.communicate()
        second = "started and kept running beside the first"
    stop(p)
    return {"second_server": second}


def probe_headers(flare, tmp):
    db = os.path.join(tmp, "hdr.db")
    p, addr = start(flare, db)
    st, _, headers = http(addr, "GET", "/api/jobs")
    nosniff = {k.lower(): v for k, v in headers.items()}.get("x-content-type-options")
    mode = oct(os.stat(db).st_mode & 0o777)
    stop(p)
    return {"x_content_type_options": nosniff, "db_mode": mode}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("flare")
    ap.add_argument("--attackers", type=int, default=10_000)
    ap.add_argument("--server-fds", type=int, default=4096)
    ap.add_argument("--only", nargs="*")
    ap.add_argument("--cache-bytes", help="the memory probe's --cache-bytes (default: the server's)")
    a = ap.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    probes = {
        "slowloris": lambda t: probe_slowloris(a.flare, t, a.attackers, a.server_fds),
        "memory": lambda t: probe_memory(a.flare, t, cache=a.cache_bytes),
        "world": lambda t: probe_world(a.flare, t),
        "absurd": lambda t: probe_absurd(a.flare, t),
        "second": lambda t: probe_second(a.flare, t),
        "headers": lambda t: probe_headers(a.flare, t),
    }
    with tempfile.TemporaryDirectory() as tmp:
        for name, run in probes.items():
            if a.only and name not in a.only:
                continue
            print(f"{name}: {json.dumps(run(tmp))}", flush=True)


if __name__ == "__main__":
    sys.exit(main())
