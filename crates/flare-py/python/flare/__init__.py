"""Flare's in-process tracer for distributed training.

Typical use, in a script launched by torchrun or srun::

    import flare

    flare.init()                      # identity from RANK/WORLD_SIZE/SLURM_* ...
    for batch in loader:              # DataLoader batches are traced automatically
        flare.step()
        with flare.span("forward"):
            loss = model(batch)
        with flare.span("backward"):
            loss.backward()
        with flare.span("optimizer", kind="optimizer"):
            opt.step()

Recording costs one native call per event: the event goes into a per-thread ring in
shared memory that Flare's node agent drains. Without ``init`` every call is a no-op.
"""

from __future__ import annotations

from ._core import (
    KINDS,
    InstrumentedIterator,
    Span,
    counter,
    init,
    instrument_iterator,
    is_initialized,
    now_ns,
    read_ring,
    ring_path,
    shutdown,
    span,
    startup_phase,
    stats,
    step,
    trace,
)

from importlib.metadata import PackageNotFoundError, version as _version

try:
    __version__ = _version("flare-tracer")
except PackageNotFoundError:  # imported from a source tree, not installed
    __version__ = "0+unknown"

__all__ = [
    "KINDS",
    "InstrumentedIterator",
    "Span",
    "counter",
    "init",
    "instrument_iterator",
    "is_initialized",
    "now_ns",
    "read_ring",
    "ring_path",
    "shutdown",
    "span",
    "startup_phase",
    "stats",
    "step",
    "trace",
    "__version__",
]
