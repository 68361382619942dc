"""Ring files: live reading, dumps, drops when nobody drains, errors, fork safety."""

from __future__ import annotations

import os

import pytest

from conftest import spans_named


def test_live_ring_is_readable_and_reading_consumes(child):
    out = child.result(
        """
        import os, flare
        path = flare.init(gc=False)
        for i in range(3):
            with flare.span("a"):
                pass
        first = flare.read_ring(path)
        with flare.span("b"):
            pass
        copy = flare.read_ring(path, consume=False)
        second = flare.read_ring(path)
        third = flare.read_ring(path)
        flare.shutdown()
        emit({
            "first": [s["name"] for s in first["spans"]],
            "copy": [s["name"] for s in copy["spans"]],
            "second": [s["name"] for s in second["spans"]],
            "third": len(third["spans"]),
            "info": first["info"],
            "pid": os.getpid(),
            "exists_after_shutdown": os.path.exists(path),
        })
        """
    )
    assert out["first"] == ["a", "a", "a"]
    assert out["copy"] == ["b"] and out["second"] == ["b"] and out["third"] == 0
    assert out["info"]["pid"] == out["pid"] and out["info"]["exited"] is False
    assert out["info"]["process_alive"] is True
    # Without an agent attached, shutdown removes the shared-memory file.
    assert out["exists_after_shutdown"] is False


def test_open_spans_are_reported(child):
    out = child.result(
        """
        import flare
        path = flare.init()
        s = flare.span("stuck", "all_reduce", amount=8, group="dp", seq=3, group_size=4)
        s.begin()
        emit(flare.read_ring(path))
        """
    )
    (o,) = out["open_spans"]
    assert (o["name"], o["kind"], o["group"], o["seq"], o["bytes"]) == ("stuck", "all_reduce", "dp", 3, 8)


def test_full_ring_drops_and_counts_events(child):
    out = child.result(
        """
        import flare
        flare.init(gc=False, startup=False)  # only the spans below, so the counts are exact
        for i in range(1000):
            with flare.span("s"):
                pass
        st = flare.stats()
        flare.shutdown()
        emit(st)
        """,
        env={"FLARE_RING_EVENTS": "64"},
    )
    assert out["written"] == 64
    assert out["dropped_full"] == 2000 - 64 and out["dropped"] == out["dropped_full"]
    ring = child.read_dump()
    assert ring["info"]["ring_capacity"] == 64
    assert ring["drops"]["ring_full"] == out["dropped_full"]
    assert len(spans_named(ring, "s")) == 32  # the first 64 events, kept whole


def test_threads_beyond_the_ring_limit_are_dropped_and_counted(child):
    out = child.result(
        """
        import threading, flare
        flare.init(max_threads=1, gc=False)
        with flare.span("main"):
            pass
        t = threading.Thread(target=lambda: [flare.span("other").begin() for _ in range(5)])
        t.start(); t.join()
        st = flare.stats()
        flare.shutdown()
        emit(st)
        """
    )
    assert out["dropped_no_ring"] == 5 and out["rings_in_use"] == 1
    ring = child.read_dump()
    assert ring["drops"]["no_ring"] == 5
    assert [s["name"] for s in ring["spans"]] == ["main"]


def test_shutdown_writes_a_readable_dump_once(child):
    out = child.result(
        """
        import flare
        flare.init(gc=False)
        with flare.span("x"):
            pass
        emit([flare.shutdown(), flare.shutdown()])
        """
    )
    assert out == [str(child.dump), None]
    ring = child.read_dump()
    assert [s["name"] for s in ring["spans"]] == ["x"]
    assert ring["info"]["exited"] is True


def test_atexit_shutdown_writes_the_dump(child):
    child.run(
        """
        import flare
        flare.init(gc=False)
        with flare.span("at-exit"):
            pass
        """
    )
    assert [s["name"] for s in child.read_dump()["spans"]] == ["at-exit"]


def test_reading_bad_files_raises_os_or_value_errors(tmp_path):
    from flare import _native

    with pytest.raises(FileNotFoundError) as e:
        _native.read_ring(str(tmp_path / "missing.ring"))
    assert "missing.ring" in str(e.value)
    junk = tmp_path / "junk.ring"
    junk.write_bytes(b"not a ring" * 1000)
    with pytest.raises(ValueError, match="not a readable Flare tracer file"):
        _native.read_ring(junk)
    short = tmp_path / "short.ring"
    short.write_bytes(b"x")
    with pytest.raises(ValueError):
        _native.read_ring(short)


def test_forked_child_does_not_record_into_the_parents_rings(child):
    out = child.result(
        """
        import os, flare
        path = flare.init(gc=False)
        with flare.span("parent.before"):
            pass
        pid = os.fork()
        if pid == 0:
            code = 0
            try:
                with flare.span("child"):
                    pass
                flare.step()
                flare.counter("child", 1)
                if flare.shutdown() is not None or flare.is_initialized():
                    code = 3
                try:
                    flare.init()
                    code = 4
                except RuntimeError:
                    pass
            except BaseException:
                code = 5
            os._exit(code)
        _, status = os.waitpid(pid, 0)
        with flare.span("parent.after"):
            pass
        ring = flare.read_ring(path)
        emit([os.waitstatus_to_exitcode(status), os.path.exists(path),
              [s["name"] for s in ring["spans"]], ring["steps"], ring["counters"]])
        """
    )
    code, exists, names, steps, counters = out
    assert code == 0
    assert exists  # the child's shutdown left the parent's file alone
    assert names == ["parent.before", "parent.after"]
    assert steps == [] and counters == []


def test_discover_lists_ring_files(child):
    out = child.result(
        """
        import flare
        from flare import _native
        path = flare.init(job_id="disc")
        emit([path, _native.discover(flare.ring_path().rsplit("/", 1)[0], "disc"),
              _native.discover(flare.ring_path().rsplit("/", 1)[0], "other")])
        """
    )
    assert out[1] == [out[0]] and out[2] == []


def test_python_m_flare_prints_the_dump(child):
    import json
    import subprocess
    import sys

    child.run("import flare; flare.init(); flare.span('cli').begin(); flare.span('cli').end()")
    proc = subprocess.run(
        [sys.executable, "-m", "flare", "--summary", "--keep", str(child.dump)],
        capture_output=True, text=True, check=True,
    )
    summary = json.loads(proc.stdout)
    assert summary["spans"]["cli"]["count"] == 1
    assert os.path.exists(child.dump)
