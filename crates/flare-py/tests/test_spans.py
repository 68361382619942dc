"""Spans, decorators, steps, counters, iterators and the gc hook."""

from __future__ import annotations

from conftest import spans_named


def test_context_manager_decorator_nesting_and_exceptions(child):
    child.run(
        """
        import flare
        flare.init()

        @flare.span("decorated")
        def decorated(x):
            with flare.span("inside"):
                return x * 2

        @flare.trace
        def bare():
            pass

        @flare.trace(name="opt", kind="optimizer")
        def named():
            pass

        class Model:
            @flare.span("method")
            def forward(self, x):
                return x + 1

        with flare.span("outer"):
            with flare.span("middle"):
                assert decorated(21) == 42
        bare(); named()
        assert Model().forward(1) == 2
        assert decorated.__name__ == "decorated"

        try:
            with flare.span("fails"):
                with flare.span("fails.inner"):
                    raise KeyError("boom")
        except KeyError:
            pass

        @flare.span("raises")
        def raises():
            raise ValueError("x")
        try:
            raises()
        except ValueError:
            pass
        with flare.span("after"):
            pass
        flare.shutdown()
        """
    )
    ring = child.read_dump()
    by = {s["name"]: s for s in ring["spans"]}
    assert by["outer"]["depth"] == 0
    assert by["middle"]["depth"] == 1
    assert by["decorated"]["depth"] == 2
    assert by["inside"]["depth"] == 3
    assert by["outer"]["start_ns"] <= by["middle"]["start_ns"] <= by["inside"]["start_ns"]
    assert by["inside"]["end_ns"] <= by["middle"]["end_ns"] <= by["outer"]["end_ns"]
    assert by["bare"]["kind"] == "compute" and by["bare"]["depth"] == 0
    assert by["opt"]["kind"] == "optimizer"
    assert by["method"]["depth"] == 0
    # Exceptions close every span they pass through, and later spans nest normally.
    assert by["fails"]["depth"] == 0 and by["fails.inner"]["depth"] == 1
    assert by["raises"]["depth"] == 0 and by["after"]["depth"] == 0
    assert ring["open_spans"] == []
    assert ring["unmatched_ends"] == 0 and ring["unclosed_begins"] == 0


def test_kinds_amounts_and_groups_are_recorded(child):
    child.run(
        """
        import flare
        flare.init()
        for kind in ("dataloader", "gc", "optimizer", "checkpoint", "host", "all_reduce", "send", 3):
            with flare.span(f"k.{kind}", kind):
                pass
        with flare.span("comm", "all_gather", amount=4096, group="tp0", seq=7, group_size=8):
            pass
        flare.shutdown()
        """
    )
    ring = child.read_dump()
    kinds = {s["name"]: s["kind"] for s in ring["spans"]}
    assert kinds["k.dataloader"] == "dataloader"
    assert kinds["k.gc"] == "gc"
    assert kinds["k.checkpoint"] == "checkpoint"
    assert kinds["k.host"] == "host"
    assert kinds["k.3"] == "reduce_scatter"
    (comm,) = spans_named(ring, "comm")
    assert (comm["kind"], comm["bytes"], comm["group"], comm["seq"], comm["group_size"]) == (
        "all_gather", 4096, "tp0", 7, 8,
    )


def test_unknown_kind_is_a_value_error_listing_the_kinds(child):
    msg = child.result(
        """
        import flare
        try:
            flare.span("x", "comptue")
        except ValueError as e:
            emit(str(e))
        """
    )
    assert "comptue" in msg and "all_reduce" in msg and "dataloader" in msg


def test_generators_and_coroutines(child):
    child.run(
        """
        import asyncio, flare
        flare.init()

        @flare.span("gen", "dataloader")
        def gen(n):
            got = []
            for i in range(n):
                got.append((yield i))
            return got

        g = gen(3)
        assert next(g) == 0
        assert g.send("a") == 1
        assert g.send("b") == 2
        try:
            g.send("c")
        except StopIteration as stop:
            assert stop.value == ["a", "b", "c"]

        @flare.span("coro")
        async def coro(d):
            await asyncio.sleep(d)
            return d

        async def main():
            return await asyncio.gather(coro(0.02), coro(0.01))
        assert asyncio.run(main()) == [0.02, 0.01]
        flare.shutdown()
        """
    )
    ring = child.read_dump()
    gens = spans_named(ring, "gen")
    assert len(gens) == 4  # three items and the final resumption that returns
    assert all(s["kind"] == "dataloader" and s["depth"] == 0 for s in gens)
    coros = spans_named(ring, "coro")
    assert len(coros) == 2 and all(s["async_id"] != 0 for s in coros)
    # Overlapping coroutines are told apart by their async ids.
    assert len({s["async_id"] for s in coros}) == 2
    assert sorted(round(s["duration_ns"] / 1e7) for s in coros) == [1, 2]


def test_steps_auto_increment_and_accept_explicit_numbers(child):
    out = child.result(
        """
        import flare
        flare.init()
        got = [flare.step(), flare.step(), flare.step(100), flare.step(), flare.step()]
        flare.shutdown()
        emit(got)
        """
    )
    assert out == [0, 1, 100, 101, 102]
    assert [s["step"] for s in child.read_dump()["steps"]] == [0, 1, 100, 101, 102]


def test_counters(child):
    child.run(
        """
        import flare
        flare.init()
        flare.counter("tokens", 4096)
        flare.counter("mem.allocated", 2**40)
        flare.counter("tokens", 8192)
        for bad, error in ((-1, ValueError), (2**64, ValueError), (1.5, TypeError)):
            try:
                flare.counter("tokens", bad)
            except error as e:
                assert "counter value" in str(e), e
            else:
                raise AssertionError(f"{bad!r} accepted")
        flare.shutdown()
        """
    )
    counters = [(c["name"], c["value"]) for c in child.read_dump()["counters"]]
    assert counters == [("tokens", 4096), ("mem.allocated", 2**40), ("tokens", 8192)]


def test_instrument_iterator(child):
    out = child.result(
        """
        import flare
        flare.init()
        items = list(flare.instrument_iterator([10, 20, 30]))
        it = flare.instrument_iterator(range(5), name="loader.val")
        n = len(it)
        first = next(it)
        flare.shutdown()
        emit([items, n, first])
        """
    )
    assert out == [[10, 20, 30], 5, 0]
    ring = child.read_dump()
    loads = spans_named(ring, "dataloader")
    assert len(loads) == 4  # three items and the StopIteration
    assert all(s["kind"] == "dataloader" for s in loads)
    assert len(spans_named(ring, "loader.val")) == 1


def test_gc_hook_records_collections_with_their_generation(child):
    child.run(
        """
        import gc, flare
        flare.init()
        gc.collect()
        gc.collect(0)
        flare.shutdown()
        """
    )
    ring = child.read_dump()
    gcs = [s for s in ring["spans"] if s["kind"] == "gc"]
    names = {s["name"] for s in gcs}
    assert {"gc.gen2", "gc.gen0"} <= names, names
    assert all(s["end_ns"] >= s["start_ns"] for s in gcs)


def test_gc_hook_can_be_disabled(child):
    child.run(
        """
        import gc, flare
        flare.init(gc=False)
        gc.collect()
        flare.shutdown()
        """
    )
    assert not [s for s in child.read_dump()["spans"] if s["kind"] == "gc"]


def test_spans_before_init_are_no_ops_and_work_after_init(child):
    child.run(
        """
        import flare
        early = flare.span("early")         # created at import time, before init
        with early:
            pass
        flare.counter("c", 1)
        flare.step()
        assert flare.stats()["written"] == 0 and not flare.is_initialized()
        flare.init(gc=False)
        with early:
            pass
        flare.counter("c", 2)
        flare.shutdown()
        """
    )
    ring = child.read_dump()
    assert [s["name"] for s in ring["spans"]] == ["early"]
    assert [(c["name"], c["value"]) for c in ring["counters"]] == [("c", 2)]


def test_threads_record_into_their_own_rings(child):
    child.run(
        """
        import threading, flare
        flare.init()
        def work(i):
            with flare.span(f"t{i}"):
                with flare.span("inner"):
                    pass
        ts = [threading.Thread(target=work, args=(i,)) for i in range(4)]
        for t in ts: t.start()
        for t in ts: t.join()
        assert flare.stats()["rings_in_use"] >= 4
        flare.shutdown()
        """
    )
    ring = child.read_dump()
    outer = [s for s in ring["spans"] if s["name"].startswith("t")]
    assert len(outer) == 4 and len({s["ring"] for s in outer}) == 4
    assert all(s["depth"] == 1 for s in spans_named(ring, "inner"))
