"""OTLP/HTTP export, checked against OpenTelemetry's own protocol definitions.

A real agent traces two real processes and exports each window's metrics to an HTTP
receiver here; every request must parse strictly (no unknown field, every type right) as
an `ExportMetricsServiceRequest` with the `opentelemetry-proto` package's generated
classes, as a collector would, and carry what the processes did.
"""

import http.server
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from google.protobuf import json_format
from live_helpers import free_port_range
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest

ROOT = Path(__file__).resolve().parents[2]
FLARE = Path(os.environ.get("FLARE_BIN", ROOT / "target" / "release" / "flare")).resolve()


class Receiver(http.server.BaseHTTPRequestHandler):
    requests = []

    def do_POST(self):
        body = self.rfile.read(int(self.headers["Content-Length"]))
        Receiver.requests.append((self.path, self.headers.get("Content-Type"), self.headers.get("X-Tenant"), body))
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(b"{}")

    def log_message(self, *args):
        pass



@pytest.mark.skipif(
    not FLARE.exists() and os.environ.get("FLARE_E2E_REQUIRED") != "1",
    reason=f"{FLARE} not built (cargo build --release -p flare-cli)",
)
def test_each_window_reaches_an_otlp_receiver_as_valid_otlp(tmp_path):
    Receiver.requests = []
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    shm = tmp_path / "shm"
    shm.mkdir()
    env = dict(os.environ, OTEL_EXPORTER_OTLP_ENDPOINT=f"http://127.0.0.1:{httpd.server_port}",
               OTEL_EXPORTER_OTLP_HEADERS="x-tenant=team%20a")
    agent = subprocess.Popen(
        [str(FLARE), "agent", "--shm-dir", str(shm), "--job", "otlp", "--node", "node0",
         "--window", "2s", "--poll", "50ms", "--metrics-listen", "off"],
        env=env, stderr=open(tmp_path / "agent.log", "w"),
    )
    workers = []
    try:
        port = free_port_range(2)
        for r in range(2):
            wenv = dict(os.environ, FLARE_JOB_ID="otlp", FLARE_SHM_DIR=str(shm), RANK=str(r), LOCAL_RANK=str(r),
                        WORLD_SIZE="2", E2E_PORT=str(port), E2E_SECONDS="6", OMP_NUM_THREADS="1",
                        OPENBLAS_NUM_THREADS="1")
            workers.append(subprocess.Popen([sys.executable, str(Path(__file__).with_name("worker.py"))],
                                            env=wenv, stderr=open(tmp_path / f"worker{r}.log", "w")))
        for w in workers:
            assert w.wait(timeout=60) == 0, (tmp_path / "worker0.log").read_text()[-2000:]
        time.sleep(2.5)
        agent.send_signal(signal.SIGTERM)
        assert agent.wait(timeout=30) == 0, (tmp_path / "agent.log").read_text()[-2000:]
    finally:
        for p in workers + [agent]:
            if p.poll() is None:
                p.kill()
        httpd.shutdown()

    assert len(Receiver.requests) >= 2, (tmp_path / "agent.log").read_text()[-2000:]
    iterations = {}
    kinds = set()
    for path, ctype, tenant, body in Receiver.requests:
        assert path == "/v1/metrics" and ctype == "application/json" and tenant == "team a"
        req = json_format.Parse(body, ExportMetricsServiceRequest())  # strict: unknown fields fail
        (rm,) = req.resource_metrics
        res = {a.key: a.value.string_value for a in rm.resource.attributes}
        assert res["service.name"] == "flare-agent" and res["host.name"] == "node0"
        (sm,) = rm.scope_metrics
        for m in sm.metrics:
            if m.name == "flare.iteration.duration":
                for p in m.gauge.data_points:
                    rank = next(a.value.int_value for a in p.attributes if a.key == "flare.rank")
                    iterations.setdefault(rank, []).append(p.as_double)
            if m.name == "flare.op.duration":
                assert m.sum.aggregation_temporality == 1 and m.sum.is_monotonic
                for p in m.sum.data_points:
                    assert p.start_time_unix_nano < p.time_unix_nano
                    kinds.add(next(a.value.string_value for a in p.attributes if a.key == "flare.op.kind"))
    # Both ranks' iterations (a 25-ms device wait, matrix work and a real all-reduce:
    # tens of milliseconds), and the span kinds the workers open.
    assert set(iterations) == {0, 1}, iterations
    for rank, values in iterations.items():
        assert all(0.02 < v < 2.0 for v in values), (rank, values)
    assert {"compute", "all_reduce"} <= kinds, kinds
