"""Start-up phases: launch, the program's own phases and the first step without torch;
with real PyTorch (two Gloo ranks), the phases Flare records by itself."""

from __future__ import annotations

import importlib.util

import pytest


def phases(ring):
    return [(p["phase"], p["name"]) for p in ring["startup"]]


def test_launch_program_phases_and_the_first_step(child):
    out = child.result(
        """
        import os, time, flare
        time.sleep(0.2)                      # the program's own work before tracing
        t_init = flare.now_ns()
        flare.init(gc=False)
        with flare.startup_phase("model_build"):
            time.sleep(0.05)

        @flare.startup_phase("tokenize")
        def tokenize():
            time.sleep(0.02)

        tokenize()
        flare.step()
        time.sleep(0.05)
        flare.step()                         # the first step ends: start-up is over
        with flare.startup_phase("late"):    # nothing recorded any more
            pass
        flare.step()
        try:
            flare.startup_phase("")
            bad = None
        except ValueError as e:
            bad = str(e)
        flare.shutdown()
        emit({"t_init": t_init, "bad": bad})
        """
    )
    ring = child.read_dump()
    assert phases(ring) == [
        ("launch", None),
        ("model_build", None),
        ("custom", "tokenize"),
        ("first_step", None),
    ], ring["startup"]
    launch, build, tokenize, first = ring["startup"]
    # Launch runs from the process's start (before the 0.2-s sleep) to init.
    assert launch["end_ns"] - launch["start_ns"] >= 0.2e9
    assert launch["start_ns"] < out["t_init"] <= launch["end_ns"]
    assert build["end_ns"] - build["start_ns"] >= 0.05e9
    assert tokenize["end_ns"] - tokenize["start_ns"] >= 0.02e9
    steps = [s["ts_ns"] for s in ring["steps"]]
    assert (first["start_ns"], first["end_ns"]) == pytest.approx((steps[0], steps[1]), abs=1e6)
    assert out["bad"] and "non-empty" in out["bad"]
    # Start-up phases are not spans of the program's work.
    assert not [s for s in ring["spans"] if s["kind"] == "host" and not s["name"]]


def test_start_up_is_not_recorded_when_turned_off(child):
    child.run(
        """
        import flare
        flare.init(startup=False)
        with flare.startup_phase("model_build"):
            pass
        flare.step(); flare.step()
        flare.shutdown()
        """
    )
    assert child.read_dump()["startup"] == []


HAS_TORCH = importlib.util.find_spec("torch") is not None

REAL_SCRIPT = """
import os, flare, torch
import torch.distributed as dist
rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
flare.init(gc=False)
dist.init_process_group("gloo", init_method=os.environ["INIT"], rank=rank, world_size=world)
model = torch.nn.Linear(64, 4)
path = os.path.join(os.environ["TMP"], f"ckpt{rank}.pt")
torch.save(model.state_dict(), path)
model.load_state_dict(torch.load(path))
ddp = torch.nn.parallel.DistributedDataParallel(model)
opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
loader = torch.utils.data.DataLoader(torch.ones(6, 64), batch_size=2)
for epoch in range(2):
    for x in loader:
        flare.step()
        ddp(x).sum().backward()
        opt.step()
        opt.zero_grad()
torch.load(path)                              # after start-up: not a start-up phase
dist.destroy_process_group()
flare.shutdown()
"""


@pytest.mark.skipif(not HAS_TORCH, reason="PyTorch is not installed")
def test_real_torch_start_up_phases(child):
    for ring in child.gloo_ranks(REAL_SCRIPT, "startup-test"):
        got = [p["phase"] for p in ring["startup"]]
        assert got == [
            "launch", "init_process_group", "checkpoint_load", "model_wrap", "first_batch", "first_step",
        ], ring["startup"]
        assert all(p["end_ns"] is not None and p["end_ns"] >= p["start_ns"] for p in ring["startup"])
        starts = [p["start_ns"] for p in ring["startup"]]
        assert starts == sorted(starts)
        # The first batch is fetched before the first step starts; the first step is the
        # first two flare.step() calls apart.
        steps = [s["ts_ns"] for s in ring["steps"]]
        first = ring["startup"][-1]
        assert ring["startup"][-2]["end_ns"] <= first["start_ns"]
        assert (first["start_ns"], first["end_ns"]) == pytest.approx((steps[0], steps[1]), abs=1e6)
        # The DataLoader's batches are still dataloader spans (the first one included).
        assert len([s for s in ring["spans"] if s["kind"] == "dataloader"]) == 8
