"""What the live end-to-end tests share: free ports, and the server's API with a token."""

import json
import random
import socket
import urllib.request


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def free_port_range(n):
    """A base port with n consecutive free ports after it (the workers' ring), below the
    kernel's ephemeral range: a port there is never taken as some connection's source port
    while a late rank has not bound it yet, nor connected to itself by a rank retrying (in
    a CI run the ring of the staggered start never formed and its workers hung: the likely
    cause; in another, the Slurm test's second rank found its port, one past an ephemeral
    port, taken)."""
    with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
        ephemeral_low = int(f.read().split()[0])
    rng = random.Random()
    for _ in range(200):
        base = rng.randrange(10_000, max(ephemeral_low - n, 10_001))
        socks = []
        try:
            for p in range(base, base + n):
                t = socket.socket()
                socks.append(t)
                t.bind(("127.0.0.1", p))
            return base
        except OSError:
            continue
        finally:
            for t in socks:
                t.close()
    raise RuntimeError("no free port range")


def api_get(url, token):
    """A GET to the server's API, its JSON answer."""
    req = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"})
    with urllib.request.urlopen(req, timeout=5) as r:
        return json.loads(r.read())


def window_figures(url, token, job_id, windows=None):
    """What the agents reported of each rank in each window, one line per rank, for a
    failure message: a false warning must be explainable from the test's log alone."""
    try:
        summaries = api_get(f"{url}/api/jobs/{job_id}/summaries", token)
    except Exception as e:  # the figures are a courtesy; the assertion is what fails
        return f"(summaries unavailable: {e})"
    lines = []
    for s in summaries:
        if windows is not None and s["window"] not in windows:
            continue
        lines.append(f"window {s['window']} ({s['node']}):")
        for r in s["ranks"]:
            its = sorted(i["duration_ns"] / 1e6 for i in r["iterations"])
            st = r.get("stepping") or {}
            ms = lambda v: "-" if v is None else f"{v / 1e6:.0f}"
            lines.append(
                f"  rank {r['rank']}: {len(its)} its"
                + (f" (median {its[len(its) // 2]:.1f} ms, max {its[-1]:.1f})" if its else "")
                + f", observed {ms(r['observed_ns'])} ms, busy {ms(r['busy_ns'])}, sync {ms(r.get('sync_busy_ns'))}"
                + f", stepping {ms(st.get('span_ns'))} (sync {ms(st.get('sync_ns'))})"
                + f", cpu {ms(r.get('cpu_ns'))}, run queue {ms(r.get('runqueue_ns'))}"
            )
    return "\n".join(lines)


def evidence_of(findings):
    """Each finding's summary with its evidence rows, for a failure message."""
    out = []
    for f in findings:
        out.append(f"{f['severity']} {f['kind']}: {f['summary']}")
        out.extend(f"    {e['metric']} = {e['value']:.4g} (baseline {e.get('baseline')}): {e['detail']}" for e in f["evidence"])
    return "\n".join(out)
