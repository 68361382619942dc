"""Every producer of findings prints one document that follows the committed schema.

Runs the real `flare` binary on real data (Flight Recorder dumps and Kineto traces from
../shared/data) and on a small simulated job, and validates each `--json` output with
jsonschema against schema/findings.schema.json. The live server's documents are validated
by test_live_job.py.
"""

import json
import os
import subprocess
from pathlib import Path

import pytest

from findings_schema import validate

ROOT = Path(__file__).resolve().parents[2]
FLARE = Path(os.environ.get("FLARE_BIN", ROOT / "target" / "release" / "flare")).resolve()
SHARED = ROOT.parent / "shared" / "data"

pytestmark = pytest.mark.skipif(
    not FLARE.exists() and os.environ.get("FLARE_E2E_REQUIRED") != "1",
    reason=f"{FLARE} not built (cargo build --release -p flare-cli)",
)


def run_json(*args):
    out = subprocess.run(
        [str(FLARE), *args, "--json"], capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_flight_recorder_document():
    doc = run_json("diagnose", str(SHARED / "flight-recorder" / "gpu_error_2nd"))
    validate(doc)
    assert doc["verdict"] == "unhealthy"
    assert doc["culprit_ranks"] == [9, 14]


def test_kineto_document():
    doc = run_json("diagnose", str(SHARED / "kineto" / "nccl_data.json.gz"))
    validate(doc)
    assert doc["verdict"] in ("healthy", "unhealthy", "inconclusive")
    assert doc["healthy"] == (doc["verdict"] == "healthy")


def test_simulated_job_document(tmp_path):
    out = tmp_path / "job"
    sim = subprocess.run(
        [str(FLARE), "sim", "--fault", "slow_gpu", "--tp", "2", "--pp", "2", "--dp", "4",
         "--iterations", "8", "--out", str(out)],
        capture_output=True, text=True, timeout=300,
    )
    assert sim.returncode == 0, sim.stderr
    doc = run_json("diagnose", str(out))
    validate(doc)
    truth = json.loads((out / "truth.json").read_text())
    assert doc["verdict"] == "unhealthy"
    assert doc["findings"][0]["culprits"][0]["rank"] == doc["culprit_ranks"][0]
    assert doc["rank_breakdown"], "traces carry the per-rank breakdown"
    print(truth.get("description"))


def test_log_diagnosis_documents():
    """`flare logs diagnose` on every labelled real failing job follows the schema too."""
    jobs = sorted((ROOT / "tests" / "fixtures" / "logs" / "real_jobs").iterdir())
    assert jobs
    for job in jobs:
        if not job.is_dir():
            continue
        doc = run_json("logs", "diagnose", str(job))
        validate(doc)
        truth = json.loads((job / "truth.json").read_text())
        if truth["category"] == "none":
            assert doc["verdict"] == "healthy", job.name
        else:
            assert doc["verdict"] == "unhealthy", job.name
            assert doc["findings"][0]["failure"]["category"] == truth["category"], job.name
        if (job / "fr").is_dir():
            # the dumps and the logs of the same job: one document, the same schema
            merged = run_json("diagnose", str(job / "fr"), "--logs", str(job))
            validate(merged)
            assert merged["findings"][0]["failure"]["category"] == truth["category"], job.name
