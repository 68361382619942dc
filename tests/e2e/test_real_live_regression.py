"""End to end on real PyTorch, a regression inside a live job: a DDP job traced live
(torchrun, 4 Gloo processes, the real agent and server) whose every rank starts holding
many Python objects halfway (scripts/real_jobs/live_worker.py, FAULT=gc_growth): no rank
is slower than the others, so nothing is a straggler, but the job is slower from then on.
`flare compare` of the job's address on the server finds the window where the step
changed, and names garbage collection as what grew; the job's first windows against its
last ones say the same.
"""

import json
import os
import subprocess

import pytest

from test_real_torch_live import FLARE, Live, TOKEN

pytest.importorskip("torch", reason="PyTorch not installed (scripts/python-env.sh installs it)")


@pytest.fixture
def live(tmp_path):
    lv = Live(tmp_path)
    yield lv
    lv.stop()


def compare(*sources):
    p = subprocess.run(
        [str(FLARE), "compare", *sources, "--json"],
        capture_output=True, text=True, timeout=120, env=dict(os.environ, FLARE_TOKEN=TOKEN),
    )
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout), p.stderr


def test_a_regression_every_rank_shares_is_found_in_the_live_job_and_explained(live):
    live.start("gc_growth", seconds=24)
    job = live.wait_job(limit=150)
    url = f"{live.url}/jobs/{job['job_id']}"
    doc, said = compare(url)
    assert "the step went from" in said, said
    causes = doc["comparison"].get("causes", [])
    assert "garbage_collection" in causes, (said, [f["summary"] for f in doc["findings"]])
    gc = next(r for r in doc["comparison"]["classes"] if r["class"] == "gc")
    assert gc["current_ms"] > gc["baseline_ms"] + 1.0, gc
    c = doc["comparison"]
    print(said.strip(), f"; step {c['baseline']['step_ms']:.2f} -> {c['current']['step_ms']:.2f} ms;",
          f"gc {gc['baseline_ms']:.2f} -> {gc['current_ms']:.2f} ms per step;", causes)
    # The job's first windows against its last ones, as two sources.
    first, last = job["first_window"], job["last_window"]
    half = (first + last) // 2
    doc, _ = compare(f"{url}?from={first}&to={half - 2}", f"{url}?from={half + 2}&to={last}")
    assert "garbage_collection" in doc["comparison"].get("causes", []), [f["summary"] for f in doc["findings"]]
    # The windows before the change cut in two, one a rerun of the other: the drift between
    # them measured (live windows are read as traces are), and the cause still named.
    start = live.first_step_window() + 1
    mid = (start + half - 2) // 2
    assert start < mid, (start, mid, half, job)
    doc, _ = compare(f"{url}?from={mid + 1}&to={half - 2}", f"{url}?from={half + 2}&to={last}",
                     "--baseline-rerun", f"{url}?from={start}&to={mid}")
    drift = doc["comparison"]["reruns"]
    assert [len(drift["baseline"]), len(drift["current"])] == [2, 1], drift
    assert "garbage_collection" in doc["comparison"].get("causes", []), (
        [f["summary"] for f in doc["findings"]], drift)
    # A range with nothing in it is said so.
    p = subprocess.run([str(FLARE), "compare", f"{url}?from={last + 100}&to={last + 200}"],
                       capture_output=True, text=True, timeout=60, env=dict(os.environ, FLARE_TOKEN=TOKEN))
    assert p.returncode != 0 and "no stored window" in p.stderr, p.stderr
