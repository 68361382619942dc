"""The deployment files in deploy/ as a cluster team would apply them.

- Kubernetes: every manifest validates strictly (no unknown field) against Kubernetes'
  own schemas (kubernetes-validate bundles them) for the oldest and newest versions we
  support, and the pieces fit: the agent's rings directory is the one training pods mount,
  the tokens come from the one Secret, the server never runs twice on one database.
- systemd: `systemd-analyze verify` finds nothing to say about the units.
- Slurm: the real prolog starts a real agent for the job, the task prolog gives the
  job's traced processes its id, two traced processes run, the epilog stops the agent
  after it delivered their windows to a real server.
"""

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
import yaml

import kubernetes_validate

from live_helpers import api_get, free_port, free_port_range

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
FLARE = Path(os.environ.get("FLARE_BIN", ROOT / "target" / "release" / "flare")).resolve()
K8S_VERSIONS = ["1.28", "1.33"]

needs_flare = pytest.mark.skipif(
    not FLARE.exists() and os.environ.get("FLARE_E2E_REQUIRED") != "1",
    reason=f"{FLARE} not built (cargo build --release -p flare-cli)",
)


def manifests():
    docs = []
    for f in sorted((DEPLOY / "kubernetes").glob("*.yaml")):
        for d in yaml.safe_load_all(f.read_text()):
            if d:
                docs.append((f.name, d))
    return docs


def find(kind, name):
    for _, d in manifests():
        if d["kind"] == kind and d["metadata"]["name"] == name:
            return d
    raise AssertionError(f"no {kind} {name} in deploy/kubernetes")


@pytest.mark.parametrize("version", K8S_VERSIONS)
def test_every_manifest_validates_strictly_against_kubernetes_schemas(version):
    docs = manifests()
    assert {d["kind"] for _, d in docs} >= {"Namespace", "Deployment", "Service", "DaemonSet", "PersistentVolumeClaim"}
    for name, d in docs:
        kubernetes_validate.validate(d, version, strict=True)


def test_a_mistyped_field_is_caught():
    d = find("DaemonSet", "flare-agent")
    d["spec"]["template"]["spec"]["hostPid"] = True
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(d, K8S_VERSIONS[-1], strict=True)


def test_the_pieces_fit_together():
    agent = find("DaemonSet", "flare-agent")["spec"]["template"]["spec"]
    assert agent["hostPID"] is True, "stack capture needs the host's PIDs"
    c = agent["containers"][0]
    assert "SYS_PTRACE" in c["securityContext"]["capabilities"]["add"]
    args = dict(a.removeprefix("--").split("=", 1) for a in c["args"][1:])
    rings = args["shm-dir"]
    assert any(m["mountPath"] == rings for m in c["volumeMounts"])
    host_dirs = {v["hostPath"]["path"] for v in agent["volumes"] if "hostPath" in v}
    # The example training pod mounts the same host directory and points the tracer at it.
    job = find("Job", "train-example")["spec"]["template"]["spec"]
    w = job["containers"][0]
    env = {e["name"]: e.get("value") for e in w["env"]}
    assert env["FLARE_SHM_DIR"] == rings
    assert {v["hostPath"]["path"] for v in job["volumes"] if "hostPath" in v} == host_dirs
    # The agent posts to the server's Service, with the ingest token.
    server = find("Deployment", "flare-server")
    svc = find("Service", "flare-server")
    assert args["server"] == f"http://{svc['metadata']['name']}.{svc['metadata']['namespace']}.svc:{svc['spec']['ports'][0]['port']}"
    agent_env = {e["name"]: e.get("valueFrom", {}).get("secretKeyRef", {}) for e in c["env"]}
    assert agent_env["FLARE_TOKEN"] == {"name": "flare-tokens", "key": "ingest"}
    # One server on one database: never two pods at once.
    assert server["spec"]["replicas"] == 1
    assert server["spec"]["strategy"]["type"] == "Recreate"
    sc = server["spec"]["template"]["spec"]["containers"][0]
    server_env = {e["name"]: e["valueFrom"]["secretKeyRef"]["key"] for e in sc["env"]}
    assert server_env == {"FLARE_TOKEN": "operator", "FLARE_INGEST_TOKEN": "ingest", "FLARE_READ_TOKEN": "read"}
    db = next(a for a in sc["args"] if a.startswith("--db=")).removeprefix("--db=")
    assert any(db.startswith(m["mountPath"] + "/") for m in sc["volumeMounts"])
    assert sc["readinessProbe"]["httpGet"]["path"] == "/healthz"


@needs_flare
def test_the_flags_the_files_pass_exist(tmp_path):
    """Every --flag the manifests, units and Slurm scripts give `flare` is one it takes."""
    helps = {
        sub: subprocess.run([str(FLARE), sub, "--help"], capture_output=True, text=True, check=True).stdout
        for sub in ("serve", "agent")
    }
    uses = []
    for _, d in manifests():
        for c in d.get("spec", {}).get("template", {}).get("spec", {}).get("containers", []):
            a = c.get("args", [])
            if a and a[0] in helps:
                uses += [(a[0], x.split("=", 1)[0]) for x in a[1:]]
    for unit in (DEPLOY / "systemd").glob("*.service"):
        line = next(l for l in unit.read_text().splitlines() if l.startswith("ExecStart="))
        words = line.split()
        sub = words[1]
        uses += [(sub, w) for w in words[2:] if w.startswith("--")]
    prolog = (DEPLOY / "slurm" / "prolog.sh").read_text()
    uses += [("agent", w) for w in prolog.split() if w.startswith("--") and w[2:3].isalpha()]
    assert len(uses) > 15
    for sub, flag in uses:
        assert f"{flag} " in helps[sub] or f"{flag}\n" in helps[sub], f"flare {sub} has no {flag}"


@needs_flare
def test_systemd_finds_nothing_wrong_with_the_units(tmp_path):
    assert shutil.which("systemd-analyze"), "systemd-analyze (Debian package systemd) is needed"
    for unit in (DEPLOY / "systemd").glob("*.service"):
        # The units name the installed binary; verify checks that it exists.
        (tmp_path / unit.name).write_text(unit.read_text().replace("/usr/local/bin/flare", str(FLARE)))
    units = sorted(str(p) for p in tmp_path.glob("*.service"))
    assert len(units) == 2
    r = subprocess.run(["systemd-analyze", "verify", *units], capture_output=True, text=True)
    assert r.returncode == 0 and r.stderr.strip() == "", r.stderr
    # And it does speak up about a mistake.
    bad = tmp_path / "bad.service"
    bad.write_text(Path(units[0]).read_text().replace("Restart=", "Restrat="))
    r = subprocess.run(["systemd-analyze", "verify", str(bad)], capture_output=True, text=True)
    assert "Restrat" in r.stderr



@needs_flare
def test_slurm_prolog_and_epilog_run_an_agent_for_the_job(tmp_path):
    token = "slurm-ingest-token"
    server = subprocess.Popen(
        [str(FLARE), "serve", "--listen", "127.0.0.1:0", "--db", str(tmp_path / "flare.db"),
         "--token", "slurm-operator-token", "--ingest-token", token],
        stdout=subprocess.PIPE, stderr=open(tmp_path / "server.log", "w"), text=True,
    )
    workers = []
    try:
        url = server.stdout.readline().strip().removeprefix("listening on ")
        assert url.startswith("http://"), url
        (tmp_path / "token").write_text(token + "\n")
        os.chmod(tmp_path / "token", 0o600)
        metrics = f"127.0.0.1:{free_port()}"
        conf = tmp_path / "slurm.env"
        conf.write_text(
            f"FLARE_BIN={FLARE}\nFLARE_SERVER={url}\nFLARE_TOKEN_FILE={tmp_path / 'token'}\n"
            f"FLARE_SHM_DIR={tmp_path / 'shm'}\nFLARE_METRICS_LISTEN={metrics}\n"
            f"FLARE_WINDOW=2s\nFLARE_STATE_DIR={tmp_path / 'state'}\n"
        )
        slurm = dict(os.environ, FLARE_SLURM_ENV=str(conf), SLURM_JOB_ID="4242")
        t = time.time()
        subprocess.run(["bash", str(DEPLOY / "slurm" / "prolog.sh")], env=slurm, check=True, timeout=10)
        assert time.time() - t < 2, "the prolog must return at once"
        pid = int((tmp_path / "state" / "agent-4242.pid").read_text())
        os.kill(pid, 0)
        # The task prolog's exports enter each task's environment.
        out = subprocess.run(["bash", str(DEPLOY / "slurm" / "task-prolog.sh")], env=slurm,
                             capture_output=True, text=True, check=True).stdout
        exports = dict(l.removeprefix("export ").split("=", 1) for l in out.splitlines())
        assert exports == {"FLARE_JOB_ID": "4242", "FLARE_SHM_DIR": str(tmp_path / "shm")}
        port = free_port_range(2)
        for r in range(2):
            env = dict(os.environ, **exports, RANK=str(r), LOCAL_RANK=str(r), WORLD_SIZE="2",
                       E2E_PORT=str(port), E2E_SECONDS="6", OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
            workers.append(subprocess.Popen([sys.executable, str(Path(__file__).with_name("worker.py"))],
                                            env=env, stderr=open(tmp_path / f"worker{r}.log", "w")))
        for w in workers:
            assert w.wait(timeout=60) == 0, (tmp_path / "worker0.log").read_text()[-2000:]
        # The agent's metrics while it runs (the Grafana dashboard's source).
        with urllib.request.urlopen(f"http://{metrics}/metrics", timeout=5) as r:
            exposition = r.read().decode()
        assert 'flare_iteration_seconds{rank="0"}' in exposition
        t = time.time()
        subprocess.run(["bash", str(DEPLOY / "slurm" / "epilog.sh")], env=slurm, check=True, timeout=30)
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
        assert not (tmp_path / "state" / "agent-4242.pid").exists()
        # What the job's two ranks did reached the server under the Slurm job's id.
        jobs = api_get(f"{url}/api/jobs", "slurm-operator-token")
        job = next(j for j in jobs if j["job_id"] == "4242")
        doc = api_get(f"{url}/api/jobs/4242/findings", "slurm-operator-token")
        assert doc["job"]["ranks_with_data"] == 2, json.dumps(doc["job"])
        # A repeated epilog, and one for a job without an agent, do nothing and succeed.
        subprocess.run(["bash", str(DEPLOY / "slurm" / "epilog.sh")], env=slurm, check=True, timeout=5)
        subprocess.run(["bash", str(DEPLOY / "slurm" / "epilog.sh")], env=dict(slurm, SLURM_JOB_ID="1"), check=True, timeout=5)
    finally:
        for w in workers:
            if w.poll() is None:
                w.kill()
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=40)
