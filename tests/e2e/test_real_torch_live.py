"""End to end on real PyTorch: torchrun, 4 Gloo processes running DistributedDataParallel
under `flare.init()` (scripts/real_jobs/live_worker.py, a job as a user writes it), the
real agent (2-s windows) and the real server, on this machine. Nothing is injected into
Flare: it sees what its Python hooks and tracer saw of a real framework.

- one rank does about a fifth of a step more compute: named, as a compute problem of its
  own, within two windows of the first one with steps, and in every later window;
- one rank sleeps 30 ms per step outside anything traced: named, as a host stall;
- one rank stops for good before its forward pass, so the others wait in DDP's
  all-reduce: the hang is reported, the stuck rank named with its own stack, in every
  window until the job is stopped;
- a healthy run: no warning in any window.

The same job under FSDP2 (`MODEL=fsdp`): the slower rank named the same way, and a
healthy run with no warning.
"""

import os
import re
import signal
import subprocess
import sys
import time
import urllib.error
from pathlib import Path

import pytest

from findings_schema import validate
from live_helpers import api_get, evidence_of, free_port, window_figures

torch = pytest.importorskip("torch", reason="PyTorch not installed (scripts/python-env.sh installs it)")

ROOT = Path(__file__).resolve().parents[2]
FLARE = Path(os.environ.get("FLARE_BIN", ROOT / "target" / "release" / "flare")).resolve()
WORKER = ROOT / "scripts" / "real_jobs" / "live_worker.py"
TOKEN = "real-torch"
SLOW = 2
WINDOW_S = 2
HANG_TIMEOUT_S = 6

pytestmark = pytest.mark.skipif(
    not FLARE.exists() and os.environ.get("FLARE_E2E_REQUIRED") != "1",
    reason=f"{FLARE} not built (cargo build --release -p flare-cli)",
)


def get(url):
    return api_get(url, TOKEN)


class Live:
    """A server, an agent and a torchrun job; stopped (and their logs kept) at the end."""

    def __init__(self, tmp):
        self.tmp = tmp
        self.procs = []

    def start(self, fault, seconds, model="ddp", worker=WORKER, extra_env=None, agent_args=()):
        shm = self.tmp / "shm"
        shm.mkdir()
        server = self.spawn(
            [FLARE, "serve", "--listen", "127.0.0.1:0", "--db", self.tmp / "flare.db", "--token", TOKEN],
            "server",
            stdout=subprocess.PIPE,
        )
        line = server.stdout.readline().strip()
        assert line.startswith("listening on http://"), line
        self.url = line.removeprefix("listening on ")
        self.spawn(
            [FLARE, "agent", "--shm-dir", shm, "--node", "node0", "--server", self.url,
             "--token", TOKEN, "--window", f"{WINDOW_S}s", "--poll", "50ms",
             "--hang-timeout", f"{HANG_TIMEOUT_S}s", *agent_args],
            "agent",
        )
        env = dict(os.environ, FLARE_SHM_DIR=str(shm), SLOW_RANK=str(SLOW if fault != "none" else -1),
                   FAULT=fault, SECS=str(seconds), OMP_NUM_THREADS="1", MODEL=model, **(extra_env or {}))
        # torchrun as a user runs it, from the interpreter's environment.
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "4",
               "--master-port", str(free_port()), worker]
        self.job = self.spawn(cmd, "job", env=env, stderr=subprocess.STDOUT, new_session=True)
        self.started = time.time()

    def spawn(self, cmd, name, stdout=None, stderr=None, env=None, new_session=False):
        log = open(self.tmp / f"{name}.log", "w")
        p = subprocess.Popen(
            [str(c) for c in cmd],
            stdout=stdout or log,
            stderr=stderr or log,
            env=env,
            text=True,
            start_new_session=new_session,
        )
        self.procs.append(p)
        return p

    def wait_job(self, limit):
        """Waits for the job to end, then for the agent to push its last window and the
        server to analyse it."""
        deadline = self.started + limit
        while self.job.poll() is None and time.time() < deadline:
            time.sleep(0.5)
        assert self.job.poll() is not None, "the job did not end in time\n" + self.logs()
        last, settled = None, 0
        end = time.time() + 30
        while time.time() < end and settled < 2:
            time.sleep(WINDOW_S)
            jobs = get(f"{self.url}/api/jobs")
            now = jobs[0] if jobs else None
            done = now and now["latest_analysed_window"] == now["last_window"]
            settled = settled + 1 if done and now == last else 0
            last = now
        assert last, "no window reached the server\n" + self.logs()
        return last

    def windows(self, job):
        """(window, findings document) of every window the server analysed."""
        out = []
        for w in range(job["first_window"], job["last_window"] + 1):
            try:
                doc = get(f"{self.url}/api/jobs/{job['job_id']}/findings?window={w}")
            except urllib.error.HTTPError as e:
                assert e.code == 404, e
                continue
            validate(doc)
            out.append((w, doc))
        return out

    def first_step_window(self):
        """The window in which the last rank finished its first step (the workers print
        when), in the server's numbering: Unix time over the window length."""
        done = [float(m) for m in re.findall(r"first step done at ([0-9.]+)", (self.tmp / "job.log").read_text())]
        assert done, "no worker reported its first step\n" + self.logs()
        return int(max(done) // WINDOW_S)

    def logs(self):
        return "\n".join(f"--- {p.name}\n{p.read_text()[-3000:]}" for p in sorted(self.tmp.glob("*.log")))

    def stop(self):
        for p in self.procs:
            if p.poll() is None:
                if p is getattr(self, "job", None):
                    os.killpg(p.pid, signal.SIGKILL)
                else:
                    p.terminate()
        for p in self.procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()


@pytest.fixture
def live(tmp_path):
    lv = Live(tmp_path)
    yield lv
    lv.stop()


def warnings(doc):
    return [f for f in doc["findings"] if f["severity"] != "info"]


def table(windows):
    """One line per window, for failure messages; each warning's summary under it."""
    rows = []
    for w, d in windows:
        ws = [(f["kind"], [c.get("rank") for c in f["culprits"]][:3]) for f in warnings(d)]
        rows.append(f"{w} {d['verdict']} {ws}")
        rows.extend(f"    {f['summary']}" for f in warnings(d))
    return "\n".join(rows)


def slow_rank_windows(windows, kinds):
    """Indexes of the windows with a warning that names the slow rank first, as one of
    `kinds` (a job-wide finding, such as the iteration time rising, may come beside it)."""
    return [
        i
        for i, (_, d) in enumerate(windows)
        if any(f["kind"] in kinds and f["culprits"] and f["culprits"][0].get("rank") == SLOW for f in warnings(d))
    ]


def check_named_from_early_on(live, job, kinds):
    windows = live.windows(job)
    named = slow_rank_windows(windows, kinds)
    assert named, f"the slow rank was never named as {kinds}:\n{table(windows)}\n{live.logs()}"
    stepping = live.first_step_window()
    first = next(i for i, (w, _) in enumerate(windows) if w >= stepping)
    # The first window with steps holds a part of one: named within two windows after it.
    assert named[0] - first <= 2, f"named first in window #{named[0]}, steps from #{first}:\n{table(windows)}"
    # Every later window with steps names it too (the job's last window may hold a
    # fraction of a step: one the engine calls inconclusive is not held against it).
    active = [i for i, (_, d) in enumerate(windows) if d["verdict"] != "inconclusive"]
    missed = [i for i in active if i > named[0] and i not in named and i != len(windows) - 1]
    assert not missed, f"not named in windows {missed}:\n{table(windows)}"
    blamed = {c.get("rank") for _, d in windows for f in warnings(d) for c in f["culprits"]}
    assert blamed <= {SLOW}, f"other ranks blamed: {blamed}\n{table(windows)}"
    return windows


def test_a_slower_rank_of_a_real_ddp_job_is_named_in_every_window(live):
    live.start("extra", seconds=16)
    job = live.wait_job(limit=150)
    # Its CPU did more per step (the trace holds no compute ops to say whether more work
    # or the same work slower): a compute cause on its CPU, never a GPU on a CPU job.
    windows = check_named_from_early_on(live, job, {"slow_cpu", "extra_work"})
    f = next(f for _, d in windows for f in warnings(d))
    # A CPU-only job: the process, not a GPU, with no GPU advice.
    assert "nvidia-smi" not in f["action"] and "Xid" not in f["action"], f["action"]


def test_a_host_stall_of_a_real_ddp_job_is_named_as_one(live):
    live.start("stall", seconds=16)
    job = live.wait_job(limit=150)
    windows = check_named_from_early_on(live, job, {"host_stall"})
    f = next(f for _, d in windows for f in warnings(d))
    assert "drain" not in f["action"].lower(), f["action"]


def test_a_hung_real_ddp_job_names_the_stuck_rank_with_its_stack_until_it_ends(live):
    # Rank 2 stops for good 8 s into the job; the job is stopped once four windows have
    # reported the hang (as an operator would, after reading them).
    live.start("hang", seconds=16)
    deadline = time.time() + 120
    while time.time() < deadline and live.job.poll() is None:
        time.sleep(1)
        jobs = get(f"{live.url}/api/jobs")
        reported = jobs and sum(
            any(f["kind"] == "hang" for f in d["findings"]) for _, d in live.windows(jobs[0])
        )
        if reported and reported >= 4:
            break
    killed = int(time.time() // WINDOW_S)
    os.killpg(live.job.pid, signal.SIGINT)
    job = live.wait_job(limit=150)
    # The window the job is stopped in shows its ranks dying one by one: not judged.
    windows = [(w, d) for w, d in live.windows(job) if w < killed]
    hung = [i for i, (_, d) in enumerate(windows) if any(f["kind"] == "hang" for f in d["findings"])]
    assert hung, f"no hang reported:\n{table(windows)}\n{live.logs()}"
    # From the first report until the job was stopped, every window: the job stays hung.
    assert len(hung) >= 3, f"hang reported in {len(hung)} windows:\n{table(windows)}"
    assert hung == list(range(hung[0], len(windows))), f"not in every window:\n{table(windows)}"
    for i in hung:
        f = next(f for f in windows[i][1]["findings"] if f["kind"] == "hang")
        assert f["culprits"][0].get("rank") == SLOW, f"{f}\n{table(windows)}"
        assert f["severity"] == "critical"
        # Its own stack, from py-spy: where it is in the user's script.
        assert f["action"].startswith(f"rank {SLOW} is at "), f["action"]
        assert "live_worker.py" in f["action"], f["action"]
        stacks = [e["detail"] for e in f["evidence"] if e["metric"] == "stack"]
        assert any(s.startswith(f"rank {SLOW} on") and "not stuck" in s for s in stacks), stacks
        assert "Xid" not in f["action"] and "nvidia-smi" not in f["action"], f["action"]
    # Before the watchdog's limit, only the rank that stopped may be named (the window in
    # which it stopped shows it as stalling), and no window before that warns.
    before = [(i, f) for i, (_, d) in enumerate(windows[: hung[0]]) for f in warnings(d)]
    assert all(f["culprits"][0].get("rank") == SLOW for _, f in before), table(windows)
    steps = [i for i, (_, d) in enumerate(windows[: hung[0]]) if d["verdict"] == "healthy"]
    assert len(steps) >= 2 and all(i > steps[-1] for i, _ in before), table(windows)


def assert_no_warning(live, job, windows):
    """No warning in any window; else the warnings' evidence and what the agent reported
    of the ranks in those windows."""
    bad = [f for _, d in windows for f in warnings(d)]
    at = {w for w, d in windows if warnings(d)}
    assert not bad, f"{table(windows)}\n{evidence_of(bad)}\n{window_figures(live.url, TOKEN, job['job_id'], at)}"


def test_a_healthy_real_ddp_job_gets_no_warning(live):
    live.start("none", seconds=16)
    job = live.wait_job(limit=150)
    windows = live.windows(job)
    assert sum(d["verdict"] == "healthy" for _, d in windows) >= 4, table(windows)
    assert_no_warning(live, job, windows)


# FSDP2: its all-gathers and reduce-scatters are called by FSDP itself
# (`dist.all_gather_single` / `reduce_scatter_single`, posted ahead and waited for later).
def test_a_slower_rank_of_a_real_fsdp_job_is_named_in_every_window(live):
    live.start("extra", seconds=16, model="fsdp")
    job = live.wait_job(limit=150)
    windows = check_named_from_early_on(live, job, {"slow_cpu", "extra_work"})
    f = next(f for _, d in windows for f in warnings(d))
    assert "nvidia-smi" not in f["action"] and "Xid" not in f["action"], f["action"]


def test_a_healthy_real_fsdp_job_gets_no_warning(live):
    live.start("none", seconds=16, model="fsdp")
    job = live.wait_job(limit=150)
    windows = live.windows(job)
    assert sum(d["verdict"] == "healthy" for _, d in windows) >= 4, table(windows)
    assert_no_warning(live, job, windows)
