"""The dashboard end to end, in a real browser: Debian's Chromium, headless, driven over
WebDriver (chromedriver; scripts/browser-env.sh installs both), against the real server
fed by the real agent tracing an 8-process job (worker.py: rank 5 does more work).

- the job's page names the culprit, with its evidence and action, and updates itself as
  windows arrive (the page is never reloaded); the ranks are laid out by the parallel
  groups the job states (`FLARE_PARALLEL`, read by the agent from the ranks' environment),
  and its windows are linked as one Perfetto timeline, saved or handed to a Perfetto UI
  through Perfetto's postMessage handshake (a local page that speaks it stands in for
  ui.perfetto.dev: there is no network here);
- the jobs list shows the job and its health;
- job ids, node names, op names and stack frames cannot inject markup or script; a
  hang's stacks are merged into a flame graph with the odd rank out in red.
"""

import http.server
import json
import os
import shutil
import subprocess
import threading
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from live_helpers import free_port
from test_live_job import FLARE, SLOW_RANK, TOKEN, procs, start_job  # noqa: F401 (procs: a fixture)

CHROMIUM = shutil.which("chromium")
CHROMEDRIVER = shutil.which("chromedriver")

pytestmark = [
    pytest.mark.skipif(
        not FLARE.exists() and os.environ.get("FLARE_E2E_REQUIRED") != "1",
        reason=f"{FLARE} not built (cargo build --release -p flare-cli)",
    ),
    pytest.mark.skipif(
        (CHROMIUM is None or CHROMEDRIVER is None) and os.environ.get("FLARE_E2E_REQUIRED") != "1",
        reason="chromium and chromedriver not installed (bash scripts/browser-env.sh)",
    ),
]


class Browser:
    """A headless Chromium session over WebDriver's HTTP protocol (stdlib only)."""

    def __init__(self, tmp):
        port = free_port()
        self.driver = subprocess.Popen(
            [CHROMEDRIVER, f"--port={port}"],
            stdout=open(tmp / "chromedriver.log", "w"), stderr=subprocess.STDOUT,
        )
        self.base = f"http://127.0.0.1:{port}"
        deadline = time.time() + 20
        while True:
            try:
                if self._call("GET", "/status")["ready"]:
                    break
            except OSError:
                pass
            assert time.time() < deadline, "chromedriver did not start"
            time.sleep(0.1)
        caps = {"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {
                "binary": CHROMIUM,
                "args": ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                         f"--user-data-dir={tmp / 'chromium-profile'}"],
            },
        }}}
        self.session = self._call("POST", "/session", caps)["sessionId"]

    def _call(self, method, path, body=None):
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.base + path, data=data, method=method,
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=60) as r:
            return json.loads(r.read())["value"]

    def go(self, url):
        self._call("POST", f"/session/{self.session}/url", {"url": url})

    def js(self, script, *args):
        return self._call("POST", f"/session/{self.session}/execute/sync", {"script": script, "args": list(args)})

    def click(self, selector):
        """A user's click (a gesture, so the page may open a window), not a script's."""
        found = self._call("POST", f"/session/{self.session}/element", {"using": "css selector", "value": selector})
        element = next(iter(found.values()))
        self._call("POST", f"/session/{self.session}/element/{element}/click", {})

    def windows(self):
        return self._call("GET", f"/session/{self.session}/window/handles")

    def switch_to(self, handle):
        self._call("POST", f"/session/{self.session}/window", {"handle": handle})

    def wait(self, script, what, timeout=40):
        """Evaluates `script` until it returns something truthy; returns that."""
        deadline = time.time() + timeout
        while True:
            v = self.js(script)
            if v:
                return v
            assert time.time() < deadline, f"timed out waiting for {what}: {self.js('return document.body.innerText')[:3000]}"
            time.sleep(0.5)

    def quit(self):
        try:
            self._call("DELETE", f"/session/{self.session}")
        finally:
            self.driver.terminate()
            self.driver.wait(timeout=10)


@pytest.fixture
def browser(tmp_path):
    b = Browser(tmp_path)
    yield b
    b.quit()


#: A stand-in for Perfetto's UI: it answers the opener's PING with PONG, as Perfetto
#: does, and shows the trace it is then sent.
PERFETTO_STUB = b"""<!DOCTYPE html><title>stub</title><pre id="trace"></pre><script>
window.addEventListener('message', function (e) {
  if (e.data === 'PING') { e.source.postMessage('PONG', e.origin); return; }
  if (e.data && e.data.perfetto) {
    document.getElementById('trace').textContent = new TextDecoder().decode(e.data.perfetto.buffer);
    document.body.dataset.title = e.data.perfetto.title;
    document.body.dataset.from = e.origin;
  }
});
</script>"""


@pytest.fixture
def perfetto_stub():
    class Page(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.end_headers()
            self.wfile.write(PERFETTO_STUB)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Page)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def text_of(selector):
    return f"const e = document.querySelector({json.dumps(selector)}); return e ? e.innerText : null;"


def test_the_job_page_names_the_culprit_and_updates_itself(tmp_path, procs, browser, perfetto_stub):  # noqa: F811
    # Long enough for the checks below to end while it still runs (the jobs list shows
    # the latest window's health, and a finished job's last window holds a fraction of a
    # step).
    # The job states its layout as a Megatron job's ranks would (TP 2 x PP 2 x DP 2): rank
    # 5 is tensor rank 1 of stage 1 in the first replica.
    url, workers = start_job(tmp_path, procs, slow_rank=SLOW_RANK, seconds=30,
                             extra_env={"FLARE_PARALLEL": "tp=2,pp=2"},
                             server_args=["--perfetto-url", perfetto_stub])
    browser.go(f"{url}/jobs/e2e#token={TOKEN}")
    # The token left the address bar (kept for the tab).
    assert "token" not in browser.js("return location.href")
    first = browser.wait(text_of("#job"), "the job's first content")
    browser.js("window.flareMarker = 'still the same page';")
    findings = browser.wait(
        f"const t = document.querySelector('#findings'); return t && t.innerText.includes('rank {SLOW_RANK}') ? t.innerText : null;",
        f"rank {SLOW_RANK} named on the page",
    )
    # Its decisive evidence and its action are shown with it.
    assert "Recommended action" in findings or "Action" in findings, findings
    # Updated in place: the same page, refreshed several times, showing newer windows.
    browser.wait("return Number(document.getElementById('content').dataset.refreshes) >= 3", "three refreshes")
    assert browser.js("return window.flareMarker") == "still the same page"
    assert browser.js(text_of("#job")) != first
    assert browser.js("return document.querySelectorAll('#iterations svg, #heatmap svg').length") == 2
    # The ranks laid out by parallel group, the culprit's row marked.
    layout = browser.wait(text_of("#layout"), "the heatmap by parallel group")
    assert "TP 2 × PP 2 × DP 2" in layout, layout
    marked = browser.js(
        "return [...document.querySelectorAll('#layout svg text[font-weight=\"700\"]')].map(t => t.textContent)")
    assert marked == ["stage 1 · tp 1"], marked
    # The windows shown as one Perfetto timeline: the page fetches it with the tab's
    # token and saves it; the API gives the same file, the culprit named on its rank.
    browser.js("document.querySelector('#timeline a[data-action=\"save\"]').click();")
    saved = browser.wait("return document.body.dataset.timelineSaved", "the timeline saved")
    assert saved.startswith("flare-e2e-windows-") and saved.endswith(".json"), saved
    link = browser.js("return document.querySelector('#timeline a').dataset.timeline")
    req = urllib.request.Request(url + link, headers={"Authorization": f"Bearer {TOKEN}"})
    with urllib.request.urlopen(req, timeout=30) as r:
        timeline = json.loads(r.read())
    names = {e["pid"]: e["args"]["name"] for e in timeline["traceEvents"] if e.get("name") == "process_name"}
    assert len(names) == 8, names
    assert names[SLOW_RANK].startswith(f"rank {SLOW_RANK} · stage 1 · dp 0 · tp 1 · node node0 ◀ culprit"), names
    steps = [e for e in timeline["traceEvents"] if e.get("cat") == "iteration" and e["pid"] == SLOW_RANK]
    assert steps and all(e["dur"] > 0 for e in steps), steps[:3]
    # "Open it in Perfetto": the page opens the UI (here the stand-in), pings it until it
    # answers, then posts it the timeline, to that origin only.
    page = browser.windows()
    browser.click('#timeline a[data-action="perfetto"]')
    deadline = time.time() + 20
    while len(browser.windows()) == len(page):
        assert time.time() < deadline, "no window opened"
        time.sleep(0.2)
    browser.switch_to(next(h for h in browser.windows() if h not in page))
    title = browser.wait("return document.body && document.body.dataset.title", "the timeline posted to Perfetto")
    assert title.startswith("flare-e2e-windows-"), title
    assert browser.js("return document.body.dataset.from") == url
    posted = json.loads(browser.js("return document.getElementById('trace').textContent"))
    posted_names = {e["pid"]: e["args"]["name"] for e in posted["traceEvents"] if e.get("name") == "process_name"}
    assert posted_names[SLOW_RANK].startswith(f"rank {SLOW_RANK} · stage 1"), posted_names
    browser.switch_to(page[0])
    # The jobs list: the job, its health, a link to its page.
    browser.go(f"{url}/")
    row = browser.wait(text_of("table.jobs tbody"), "the jobs table")
    assert "e2e" in row
    health = browser.wait(
        "const h = document.querySelector('table.jobs .health');"
        " return h && /warning|critical/.test(h.className) ? h.className : null;",
        "the job's health shown as a warning",
    )
    assert f"rank {SLOW_RANK}" in browser.js(text_of("table.jobs tbody")), health
    assert browser.js("return document.querySelector('table.jobs a').getAttribute('href')") == "/jobs/e2e"
    for w in workers:
        w.wait(timeout=60)


def test_agent_strings_cannot_inject_markup_or_script(tmp_path, procs, browser):  # noqa: F811
    server = subprocess.Popen(
        [str(FLARE), "serve", "--listen", "127.0.0.1:0", "--db", str(tmp_path / "flare.db"), "--token", TOKEN],
        stdout=subprocess.PIPE, stderr=open(tmp_path / "server.log", "w"), text=True,
    )
    procs.append(server)
    url = server.stdout.readline().strip().removeprefix("listening on ")
    job = "<img src=x onerror=\"window.pwned=1\">'\""
    op = "<script>window.pwned=2</script>"
    node = "<marquee onstart=window.pwned=3>n</marquee>"
    ms = 1_000_000
    for window in (1, 2, 3):
        summary = {
            "version": 1, "job_id": job, "node": node, "window": window, "window_ns": 2000 * ms,
            "start_unix_ns": window * 2000 * ms, "end_unix_ns": (window + 1) * 2000 * ms, "world_size": 4,
            "ranks": [{
                "rank": r, "local_rank": r, "pid": 100 + r,
                "iterations": [{"step": window * 10 + i, "start_unix_ns": window * 2000 * ms + i * 100 * ms,
                                "duration_ns": 100 * ms} for i in range(10)],
                "ops": [
                    {"name": op, "kind": "compute", "count": 10, "total_ns": (60 if r == 3 else 40) * 10 * ms,
                     "p50_ns": 0, "p99_ns": 0, "max_ns": 0},
                    {"name": "allreduce", "kind": "all_reduce", "group": op, "count": 10,
                     "total_ns": (40 if r == 3 else 60) * 10 * ms,
                     "p50_ns": 0, "p99_ns": 0, "max_ns": 0},
                ],
                "busy_ns": 1000 * ms, "observed_ns": 1000 * ms, "events": 40, "dropped_total": 0,
            } for r in range(4)],
        }
        req = urllib.request.Request(f"{url}/api/v1/summaries", data=json.dumps(summary).encode(), method="POST",
                                     headers={"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=10) as r:
            assert r.status == 200
    browser.go(f"{url}/#token={TOKEN}")
    shown = browser.wait(text_of("table.jobs tbody a"), "the job's link")
    assert shown == job
    browser.js("document.querySelector('table.jobs a').click();")
    browser.wait(text_of("#job h2"), "the job's page")
    assert browser.js("return location.pathname") == "/jobs/" + urllib.parse.quote(job, safe="")
    browser.wait(f"const t = document.querySelector('#findings'); return t && t.innerText.includes('rank 3');",
                 "the slow rank named")
    page = browser.js("return document.getElementById('content').innerHTML")
    assert browser.js("return window.pwned === undefined")
    assert browser.js("return document.querySelectorAll('#content img, #content script, #content marquee').length") == 0
    assert "&lt;script&gt;" in page or op not in page, page[:2000]

    # A hang: ranks 0-2 stuck in the all-reduce, rank 3 elsewhere; the stacks the agent
    # took are merged into a flame graph, rank 3's path in red, frame names inert.
    def thread(frames):
        return [{"thread": "MainThread", "frames": frames}]
    stuck = ["all_reduce (dist.py:10)", op, "train (train.py:40)", "<module> (train.py:99)"]
    summary["window"] = 4
    summary["hangs"] = [{"rank": r, "pid": 100 + r, "op": "allreduce", "kind": "all_reduce", "in_flight_ns": 9_000 * ms,
                         "detected_unix_ns": 9 * 2000 * ms, "stacks": thread(stuck), "stack_source": "py-spy"}
                        for r in range(3)]
    summary["peer_stacks"] = [{"rank": 3, "pid": 103, "captured_unix_ns": 9 * 2000 * ms, "stack_source": "py-spy",
                               "stacks": thread(["read (io.py:5)", "load_batch <img src=x onerror=window.pwned=4>",
                                                 "train (train.py:40)", "<module> (train.py:99)"])}]
    req = urllib.request.Request(f"{url}/api/v1/summaries", data=json.dumps(summary).encode(), method="POST",
                                 headers={"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=10) as r:
        assert r.status == 200
    browser.wait("return document.querySelector('#stacks svg.flame') !== null", "the merged stacks")
    titles = browser.js("return Array.from(document.querySelectorAll('#stacks rect title')).map(t => t.textContent)")
    assert any(t.startswith("<module> (train.py:99) — ranks 0–3 (4 of 4)") for t in titles), titles
    odd = browser.js("""return Array.from(document.querySelectorAll('#stacks rect'))
        .filter(r => r.querySelector('title').textContent.startsWith('load_batch'))
        .map(r => r.getAttribute('fill'))""")
    assert odd == ["#dc2626"], odd
    assert browser.js("return window.pwned === undefined")
    assert browser.js("return document.querySelectorAll('#content img, #content script, #content marquee').length") == 0
