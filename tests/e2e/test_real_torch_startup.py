"""End to end on real PyTorch, start-up: torchrun, 4 Gloo processes traced from their
first line (scripts/real_jobs/startup_worker.py), the real agent (2-s windows) and the
real server. One rank is late to the start, as ranks are in real jobs:

- it spends 12 s before `flare.init()` (a slow filesystem for its imports): the others
  wait in `init_process_group`; Flare names it while they wait (first as a rank nothing
  was heard from) and once it arrives, as late to `init_process_group` because of its
  launch;
- it spends 8 s after its checkpoint load in work nothing marks (tokenizing): the others
  wait in DDP's constructor; Flare names it, with that untraced time as the cause;
- a healthy start: nobody named; start-up broken down by phase once every rank finished
  its first step.

The agent also writes its window summaries to disk (`--out`): `flare diagnose` of that
directory says the same as the server did.
"""

import json
import subprocess

import pytest

from findings_schema import validate
from test_real_torch_live import FLARE, Live, ROOT, table

torch = pytest.importorskip("torch", reason="PyTorch not installed (scripts/python-env.sh installs it)")

WORKER = ROOT / "scripts" / "real_jobs" / "startup_worker.py"
LATE = 2
LATE_S = 8


@pytest.fixture
def live(tmp_path):
    lv = Live(tmp_path)
    yield lv
    lv.stop()


def run(live, fault, late_s=LATE_S):
    live.start(
        fault, 6, worker=WORKER,
        extra_env=dict(LATE_RANK=str(LATE if fault != "none" else -1), LATE_S=str(late_s), CKPT_DIR=str(live.tmp)),
        # The agent also writes its summaries to disk, for `flare diagnose` to read back.
        agent_args=("--out", live.tmp / "summaries"),
    )
    job = live.wait_job(120)
    return live.windows(job)


def startup_findings(windows, kind):
    return [(w, f) for w, d in windows for f in d["findings"] if f["kind"] == kind]


def check_late(live, windows, phase, cause_words, late_s=LATE_S):
    late = startup_findings(windows, "slow_startup")
    assert late, f"no slow_startup finding:\n{table(windows)}\n{live.logs()}"
    named = {c.get("rank") for _, f in late for c in f["culprits"]}
    assert named == {LATE}, f"named {named}:\n" + "\n".join(f["summary"] for _, f in late)
    # Once it arrived: late to `phase`, by about `late_s`, for the right reason.
    arrived = [f for _, f in late if f"entered {phase}" in f["summary"]]
    assert arrived, "\n".join(f["summary"] for _, f in late)
    f = arrived[-1]
    by = next(e["value"] for e in f["evidence"] if e["metric"] == "startup_late_s")
    assert late_s - 2 <= by <= late_s + 3, f["summary"]
    assert all(w in f["summary"] for w in cause_words), f["summary"]
    assert f["severity"] == "warning" and f["detector"] == "startup"
    return late


def check_breakdown(windows):
    info = startup_findings(windows, "startup")
    assert info, f"no start-up breakdown:\n{table(windows)}"
    f = info[-1][1]
    assert f["severity"] == "info" and "start-up took" in f["summary"]
    for phase in ("launch", "init_process_group", "checkpoint_load", "model_wrap", "first_batch", "first_step"):
        assert phase in f["summary"], f["summary"]
    return f


def test_a_rank_with_slow_imports_is_named_while_the_others_wait_and_after(live):
    # 12 s: windows (2 s) end while the others wait and it is not traced yet.
    windows = run(live, "imports", late_s=12)
    late = check_late(live, windows, "init_process_group", ["launch", "against"], late_s=12)
    # Named while the others waited too, before it entered: first as nothing heard from.
    waiting = [f for _, f in late if "has not entered init_process_group yet" in f["summary"]]
    assert waiting, "\n".join(f["summary"] for _, f in late)
    assert "nothing was heard from it" in waiting[0]["summary"], waiting[0]["summary"]
    check_breakdown(windows)

    # The same from the summaries on disk: `flare diagnose DIR` replays the live engine.
    out = subprocess.run([str(FLARE), "diagnose", str(live.tmp / "summaries"), "--json"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    validate(doc)
    assert doc["job"]["source"] == "agent summaries" and doc["job"]["world_size"] == 4
    replayed = [(doc["job"]["window"], doc)]
    check_late(live, replayed, "init_process_group", ["launch", "against"], late_s=12)
    check_breakdown(replayed)


def test_a_rank_with_untraced_work_before_ddp_is_named_with_it(live):
    windows = run(live, "untraced")
    # Its untraced time comes after its checkpoint load, the last phase before it.
    check_late(live, windows, "model_wrap", ["after checkpoint_load", "no phase covers"])
    check_breakdown(windows)


def test_a_healthy_start_names_nobody_and_is_broken_down(live):
    windows = run(live, "none")
    assert not startup_findings(windows, "slow_startup"), table(windows)
    f = check_breakdown(windows)
    total = next(e["value"] for e in f["evidence"] if e["metric"] == "startup_total_s")
    assert 0.5 < total < 60, f["summary"]
