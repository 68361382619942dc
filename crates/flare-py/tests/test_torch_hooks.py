"""The torch hooks, against a stand-in torch package (tests/fakes/torch: NOT PyTorch) and,
when it is installed, against real PyTorch (gloo, two processes on this host)."""

from __future__ import annotations

import importlib.util
import re

import pytest

from conftest import spans_named

FAKE_SCRIPT = """
import torch, flare
import torch.distributed as dist
assert torch.IS_FLARE_TEST_STAND_IN
from torch.distributed import distributed_c10d as c10d

# Before init_process_group the original raises; the hook must not change that.
try:
    dist.all_reduce(torch.empty(4))
except ValueError as e:
    pre_init_error = str(e)

dist.init_process_group(rank=1, world_size=4)
original_all_reduce = c10d.all_reduce
flare.init()
assert dist.all_reduce is c10d.all_reduce is not original_all_reduce
assert dist.all_reduce.__wrapped__ is not None and dist.all_reduce.__name__ == "all_reduce"

t = torch.empty(1024)                        # 4096 bytes
dist.all_reduce(t)
dist.all_reduce(t, "sum", None)              # positional group
tp = dist.new_group([0, 1])
dist.all_reduce(t, group=tp)
work = dist.all_reduce(torch.empty(8, "float16"), group=tp, async_op=True)
assert work.wait()
dist.all_gather([torch.empty(10) for _ in range(4)], torch.empty(10))
dist.all_gather_into_tensor(torch.empty(40), torch.empty(10))
dist.reduce_scatter(torch.empty(10), [torch.empty(10) for _ in range(4)])
dist.reduce_scatter_tensor(torch.empty(10), torch.empty(40, "bfloat16"))
dist.broadcast(t, src=0)
dist.reduce(t, dst=0)
dist.all_to_all([torch.empty(5)] * 4, [torch.empty(6, "int64")] * 4)
dist.all_to_all_single(torch.empty(20), torch.empty(24))
# FSDP2's calls: posted ahead, waited for later (the op lasts until its work completes).
dist.all_gather_single(torch.empty(40), torch.empty(10), async_op=True).wait()
dist.reduce_scatter_single(torch.empty(10), torch.empty(40), async_op=True).wait()
dist.barrier()
dist.send(t, dst=2)
assert dist.recv(t, src=2) == 2
dist.isend(t, 0).wait()
dist.irecv(t, src=0).wait()
dist.recv(t)                                 # any source
dist.send(t, group=tp, group_dst=0)          # group-relative peer: global rank 0
elsewhere = dist.new_group([2, 3])             # this rank is not a member
dist.all_reduce(t, group=elsewhere)
reqs = dist.batch_isend_irecv([dist.P2POp(dist.isend, t, 2), dist.P2POp(dist.irecv, t, 2)])
assert len(reqs) == 2

torch.cuda.synchronize()
torch.cuda.synchronize("cuda:0")
# Read-backs: a device tensor's is a sync at this line; a CPU tensor's is nothing.
assert torch.empty(1, device="cuda").item() == 0.5
assert torch.empty(2, device="cuda").tolist() == [0.5, 0.5]
assert torch.empty(1).item() == 0.5
loader = torch.utils.data.DataLoader([1, 2, 3])
it = iter(loader)
assert len(it) == 3
assert list(it) == [1, 2, 3]
it._shutdown_workers()                       # private attributes reach the real iterator
assert it.shut_down

n_calls = len(c10d.CALLS)
flare.shutdown()
restored = dist.all_reduce is original_all_reduce and c10d.all_reduce is original_all_reduce
emit({"pre_init_error": pre_init_error, "n_calls": n_calls, "restored": restored,
      "syncs": torch.cuda.SYNC_CALLS,
      "loader_restored": "__flare_wrapped__" not in vars(torch.utils.data.DataLoader.__iter__),
      "item_restored": "item" not in vars(torch.Tensor) or not hasattr(torch.Tensor.item, "__flare_wrapped__")})
"""


def test_fake_torch_hooks_record_kind_bytes_group_and_sequence(child):
    out = child.result(FAKE_SCRIPT, fake_torch=True)
    assert "not been initialized" in out["pre_init_error"]
    assert out["n_calls"] == 24  # every op reached the original function
    assert out["restored"] and out["loader_restored"] and out["item_restored"]
    assert out["syncs"] == [None, "cuda:0"]

    ring = child.read_dump()
    assert ring["open_spans"] == [] and ring["unmatched_ends"] == 0
    # send/recv call isend/irecv inside: only the outer call is an op.
    assert all(s["depth"] == 0 for s in ring["spans"] if s["kind"] != "gc")

    def row(s):
        return (s["kind"], s["bytes"], s["group"], s["group_size"], s["seq"])

    ar = spans_named(ring, "all_reduce")
    # The call made before init_process_group failed inside the original and is absent:
    # flare was not initialized yet.
    assert [row(s) for s in ar] == [
        ("all_reduce", 4096, "0", 4, 1),
        ("all_reduce", 4096, "0", 4, 2),
        ("all_reduce", 4096, "1", 2, 1),
        ("all_reduce", 16, "1", 2, 2),
        ("all_reduce", 0, None, 0, 0),  # a group this rank is not in: recorded undescribed
    ]
    one = {name: row(spans_named(ring, name)[0]) for name in (
        "all_gather", "all_gather_into_tensor", "reduce_scatter", "reduce_scatter_tensor",
        "broadcast", "reduce", "all_to_all", "all_to_all_single", "all_gather_single",
        "reduce_scatter_single", "barrier")}
    assert one == {
        "all_gather": ("all_gather", 160, "0", 4, 3),
        "all_gather_into_tensor": ("all_gather", 160, "0", 4, 4),
        "reduce_scatter": ("reduce_scatter", 160, "0", 4, 5),
        "reduce_scatter_tensor": ("reduce_scatter", 80, "0", 4, 6),
        "broadcast": ("broadcast", 4096, "0", 4, 7),
        "reduce": ("reduce", 4096, "0", 4, 8),
        "all_to_all": ("all_to_all", 192, "0", 4, 9),
        "all_to_all_single": ("all_to_all", 96, "0", 4, 10),
        "all_gather_single": ("all_gather", 160, "0", 4, 11),
        "reduce_scatter_single": ("reduce_scatter", 160, "0", 4, 12),
        "barrier": ("barrier", 0, "0", 4, 13),
    }
    # An async_op call is an async span, ended when its work completes.
    assert spans_named(ring, "all_gather_single")[0]["async_id"] != 0
    assert spans_named(ring, "all_reduce")[3]["async_id"] != 0
    # P2P: one channel per rank pair, numbered the same way on both ends.
    p2p = [(s["name"],) + row(s) for s in ring["spans"] if s["kind"] in ("send", "recv")]
    assert p2p == [
        ("send", "send", 4096, "0:p2p:1-2", 2, 1),
        ("recv", "recv", 4096, "0:p2p:1-2", 2, 2),
        ("isend", "send", 4096, "0:p2p:0-1", 2, 1),
        ("irecv", "recv", 4096, "0:p2p:0-1", 2, 2),
        ("recv", "recv", 4096, "0:p2p:any", 2, 1),
        ("send", "send", 4096, "1:p2p:0-1", 2, 1),
        ("isend", "send", 4096, "0:p2p:1-2", 2, 3),
        ("irecv", "recv", 4096, "0:p2p:1-2", 2, 4),
    ]
    syncs = spans_named(ring, "cuda.synchronize")
    assert len(syncs) == 2 and all(s["kind"] == "host" for s in syncs)
    reads = sorted(s["name"] for s in ring["spans"] if s["name"].startswith("Tensor."))
    assert [n.split(" at ")[0] for n in reads] == ["Tensor.item", "Tensor.tolist"], reads
    # the program's line that read the value back (the script's, not the hook's)
    assert all(re.fullmatch(r"Tensor\.\w+ at \S+\(\d+\): <module>", n) for n in reads), reads
    assert all(s["kind"] == "host" for s in ring["spans"] if s["name"] in reads)
    loads = spans_named(ring, "dataloader")
    assert len(loads) == 4 and all(s["kind"] == "dataloader" for s in loads)


def test_fake_torch_hooks_can_be_disabled(child):
    out = child.result(
        """
        import torch, flare
        import torch.distributed as dist
        dist.init_process_group(rank=0, world_size=2)
        original = dist.all_reduce
        flare.init(distributed=False, dataloader=False, cuda_sync=False)
        emit([dist.all_reduce is original,
              "__flare_wrapped__" in vars(torch.utils.data.DataLoader.__iter__),
              hasattr(torch.cuda.synchronize, "__flare_wrapped__")])
        """,
        fake_torch=True,
    )
    assert out == [True, False, False]


def test_init_does_not_import_torch_and_hooks_it_when_the_program_does(child):
    out = child.result(
        """
        import importlib.util, sys, flare
        from flare import _hooks
        has_torch = importlib.util.find_spec("torch") is not None
        flare.init()
        before = [_hooks.installed(), "torch" in sys.modules]
        if has_torch:
            import torch
        emit([has_torch, before, _hooks.installed()])
        """
    )
    has_torch, before, after = out
    # A program that has not imported torch does not pay for its import at init.
    assert before == [["gc"], False]
    if has_torch:
        # Importing it later installs the torch hooks then.
        assert after == ["gc", "startup", "dataloader", "cuda_sync", "distributed"], after
    else:
        assert after == ["gc"]


def test_errors_in_the_original_propagate_and_close_the_span(child):
    out = child.result(
        """
        import torch, flare
        import torch.distributed as dist
        dist.init_process_group(rank=0, world_size=2)
        flare.init()
        dist.destroy_process_group()
        try:
            dist.all_reduce(torch.empty(4))
        except ValueError as e:
            emit(str(e))
        flare.shutdown()
        """,
        fake_torch=True,
    )
    assert "not been initialized" in out
    ring = child.read_dump()
    (ar,) = spans_named(ring, "all_reduce")
    assert ring["open_spans"] == []


# --- real PyTorch -----------------------------------------------------------------------

HAS_TORCH = importlib.util.find_spec("torch") is not None

REAL_SCRIPT = """
import os, sys, torch, flare
import torch.distributed as dist
rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
dist.init_process_group("gloo", init_method=os.environ["INIT"], rank=rank, world_size=world)
flare.init()
t = torch.ones(1024, dtype=torch.float32)
dist.all_reduce(t)
assert t[0].item() == world
sub = dist.new_group([0, 1])
dist.all_reduce(t, group=sub)
out = torch.empty(world * 16)
dist.all_gather_into_tensor(out, torch.ones(16)) if hasattr(dist, "all_gather_into_tensor") else None
dist.all_gather([torch.empty(8) for _ in range(world)], torch.ones(8))
dist.broadcast(t, src=0)
if rank == 0:
    dist.send(torch.ones(32), dst=1)
    dist.recv(t[:32], src=1)
else:
    dist.recv(t[:32], src=0)
    dist.send(torch.ones(32), dst=0)
reqs = dist.batch_isend_irecv([dist.P2POp(dist.isend, torch.ones(4), 1 - rank),
                               dist.P2POp(dist.irecv, torch.empty(4), 1 - rank)])
for r in reqs:
    r.wait()
dist.barrier()
# DDP reduces gradients in C++: its all-reduces are traced through a comm hook, and the
# gradients are what DDP computes without Flare (here every rank has the same batch).
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.Linear(256, 4))
reference = [p.detach().clone() for p in model.parameters()]
ddp = torch.nn.parallel.DistributedDataParallel(model, bucket_cap_mb=0.1)
x = torch.ones(8, 256)
for _ in range(2):
    ddp.zero_grad()
    ddp(x).pow(2).sum().backward()
local = torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.Linear(256, 4))
with torch.no_grad():
    for p, r in zip(local.parameters(), reference):
        p.copy_(r)
local(x).pow(2).sum().backward()
for p, q in zip(model.parameters(), local.parameters()):
    assert torch.allclose(p.grad, q.grad, rtol=1e-4, atol=1e-5), (p.grad, q.grad)
loader = torch.utils.data.DataLoader(list(range(6)), batch_size=2)
assert [b.tolist() for b in loader] == [[0, 1], [2, 3], [4, 5]]
# A CPU tensor's read-back through the hook: its value, and no span (nothing to wait for).
assert torch.tensor(2.5).item() == 2.5 and torch.tensor([1, 2]).tolist() == [1, 2]
torch.cuda.synchronize() if torch.cuda.is_available() else None
dist.destroy_process_group()
flare.shutdown()
"""


@pytest.mark.skipif(not HAS_TORCH, reason="PyTorch is not installed")
def test_real_torch_two_ranks_with_gloo(child):
    rings = child.gloo_ranks(REAL_SCRIPT, "gloo-test")
    for r, ring in enumerate(rings):
        assert ring["info"]["rank"] == r and ring["info"]["job_id"] == "gloo-test"
        ars = spans_named(ring, "all_reduce")
        assert [(s["bytes"], s["group_size"]) for s in ars] == [(4096, 2), (4096, 2)]
        assert ars[0]["group"] != ars[1]["group"]
        comm = [s for s in ring["spans"] if s["kind"] not in ("dataloader", "gc", "host", "compute")]
        assert comm and all(s["group"] for s in comm)
        # torch implements send/recv with isend/irecv: counted once, at the outer call.
        assert all(s["depth"] == 0 or s["name"] == "ddp_all_reduce" for s in comm)
        # Two backward passes, each reducing the gradients in buckets: every bucket an
        # async all-reduce span of the world group (the hook's own all_reduce call is not
        # another op), all gradient bytes covered.
        ddp = spans_named(ring, "ddp_all_reduce")
        grad_bytes = (256 * 256 + 256 + 256 * 4 + 4) * 4
        assert len(ddp) >= 2 and len(ddp) % 2 == 0, ddp
        assert sum(s["bytes"] for s in ddp) == 2 * grad_bytes, ddp
        assert all(s["async_id"] and s["group_size"] == 2 and s["kind"] == "all_reduce" for s in ddp), ddp
        assert ddp[0]["group"] == ars[0]["group"]
        assert [s["name"] for s in comm if s["kind"] in ("send", "recv")][:2] == (
            ["send", "recv"] if r == 0 else ["recv", "send"])
        assert len(spans_named(ring, "dataloader")) == 4
        assert not [s for s in ring["spans"] if s["name"].startswith("Tensor.")]
        assert ring["open_spans"] == []

    def sync_ops(ring):
        return [(s["name"], s["kind"], s["group"], s["seq"], s["bytes"])
                for s in ring["spans"] if s["kind"] not in ("dataloader", "gc", "host", "compute")]

    def collectives(ops):
        return [(n, g, q) for n, k, g, q, _ in ops if k not in ("send", "recv")]

    def p2p(ops):
        return sorted((g, q, y) for _, k, g, q, y in ops if k in ("send", "recv"))

    a, b = sync_ops(rings[0]), sync_ops(rings[1])
    # Collectives: the same (group, seq) on both ranks.
    assert collectives(a) == collectives(b)
    # P2P: rank 0's send is rank 1's recv with the same channel and sequence number.
    assert p2p(a) == p2p(b)
