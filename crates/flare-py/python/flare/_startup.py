"""Start-up phases: where a rank's time went between its launch and its first step.

Recorded automatically (``flare.init(startup=True)``, the default):

- ``launch``: from the process's start (``/proc``) to ``flare.init()``: the interpreter,
  imports, and whatever the program ran before tracing;
- ``import_torch``: ``import torch``, when the program imports it after ``flare.init()``;
- ``init_process_group``: ``torch.distributed.init_process_group``, where every rank waits
  for the last one;
- ``checkpoint_load``: ``torch.load`` and ``torch.distributed.checkpoint.load`` before the
  first step;
- ``model_wrap``: ``DistributedDataParallel``'s constructor (it broadcasts rank 0's
  parameters: the ranks meet there);
- ``first_batch``: the first batch of the first DataLoader iterated before the first step;
- ``first_step``: from the first ``flare.step()`` to the second.

Anything else (building the model, tokenizing) is a phase the program marks with
:func:`phase` (``with flare.startup_phase("model_build"): ...``); time between phases
that nobody marked is reported as such. Start-up ends with the first step: after it the
hooks cost one attribute read per call.
"""

from __future__ import annotations

import threading
from typing import Any, Optional

from . import _native

_lock = threading.Lock()
# Whether start-up is recorded (``flare.init(startup=...)``).
_enabled = False
# Set once the first step ended: nothing more is recorded as start-up.
_done = False
# The first step's span id, between the first and second flare.step().
_first_step: Optional[int] = None
_first_batch_taken = False
_launch_recorded = False


def active() -> bool:
    """Whether start-up is recorded and not over (the first step has not ended)."""
    return _enabled and not _done


def enable(on: bool) -> None:
    """``flare.init``: whether to record start-up."""
    global _enabled
    _enabled = on


def record_launch() -> None:
    """The launch phase, from the process's start to now (``flare.init``); once."""
    global _launch_recorded
    with _lock:
        if _launch_recorded or not active():
            return
        start = _native.process_start_ns()
        if start is None:
            return
        now = _native.now_ns()
        _native.startup_span("launch", min(start, now), now)
        _launch_recorded = True


def on_step() -> None:
    """``flare.step()``: the first call opens the first step, the second closes it and
    ends start-up."""
    global _first_step, _done
    if not active():
        return
    with _lock:
        if _done:
            return
        if _first_step is None:
            _first_step = _native.startup_begin("first_step")
        else:
            _native.startup_end("first_step", _first_step)
            _done = True


def take_first_batch() -> bool:
    """True once: for the first DataLoader iteration before the first step."""
    global _first_batch_taken
    if not active() or _first_batch_taken:
        return False
    with _lock:
        if _first_batch_taken:
            return False
        _first_batch_taken = True
        return True


class Phase:
    """A start-up phase as a context manager (``with flare.startup_phase("model_build")``)
    or a decorator. Phases Flare knows (``model_build``, ``checkpoint_load``, ...) keep
    their name; any other name is recorded as the program's own phase. Outside start-up
    (after the first step) it records nothing."""

    __slots__ = ("_phase", "_name_id", "_name", "_ids")

    def __init__(self, name: str) -> None:
        known = name in _native.STARTUP_PHASES and name != "custom"
        self._phase = name if known else "custom"
        self._name = None if known else name
        self._name_id = 0
        # Span ids of this object's open uses, innermost last (it may be nested or
        # reused).
        self._ids: list = []

    def __enter__(self) -> "Phase":
        if not active():
            self._ids.append(None)
            return self
        if self._name is not None and not self._name_id:
            self._name_id = _native.intern(self._name)
        self._ids.append(_native.startup_begin(self._phase, self._name_id))
        return self

    def __exit__(self, *exc: Any) -> None:
        span_id = self._ids.pop() if self._ids else None
        if span_id is not None:
            _native.startup_end(self._phase, span_id, self._name_id)

    def __call__(self, func: Any) -> Any:
        import functools

        @functools.wraps(func)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            with Phase(self._name or self._phase):
                return func(*args, **kwargs)

        return wrapper


def phase(name: str) -> Phase:
    """A start-up phase named ``name`` (see :class:`Phase`)."""
    if not isinstance(name, str) or not name:
        raise ValueError("a start-up phase needs a non-empty name")
    return Phase(name)


class FirstBatchIterator:
    """Wraps the first DataLoader iterator of start-up: its first ``next()`` is the
    ``first_batch`` phase, the rest are passed through."""

    __slots__ = ("_it", "_first")

    def __init__(self, it: Any) -> None:
        self._it = it
        self._first = True

    def __iter__(self) -> "FirstBatchIterator":
        return self

    def __next__(self) -> Any:
        if self._first:
            self._first = False
            span_id = _native.startup_begin("first_batch")
            try:
                return next(self._it)
            finally:
                _native.startup_end("first_batch", span_id)
        return next(self._it)

    def __len__(self) -> int:
        return len(self._it)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._it, name)


def reset_for_tests() -> None:
    """Forgets what was recorded (the package's tests start several tracers in one
    process)."""
    global _enabled, _done, _first_step, _first_batch_taken, _launch_recorded
    with _lock:
        _enabled = False
        _done = False
        _first_step = None
        _first_batch_taken = False
        _launch_recorded = False
