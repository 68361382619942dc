"""The user-facing API: init/shutdown, spans, steps, counters, iterators, reading rings.

Every recording call ends in one call into ``flare._native``, which copies 48 bytes into
the calling thread's shared-memory ring (no lock, no allocation, no system call). Before
``init`` (and in forked children) the same calls do nothing, so instrumented code runs
unchanged without the tracer.
"""

from __future__ import annotations

import atexit
import functools
import inspect
import operator
import os
import shutil
import tempfile
import threading
from typing import (
    Any,
    Callable,
    Dict,
    Iterable,
    Iterator,
    Optional,
    Tuple,
    TypeVar,
    Union,
    overload,
)

from . import _native, _startup

F = TypeVar("F", bound=Callable[..., Any])
T = TypeVar("T")

PathLike = Union[str, "os.PathLike[str]"]
Kind = Union[str, int]

#: Op kinds by name: compute, all_reduce, all_gather, reduce_scatter, all_to_all,
#: broadcast, reduce, barrier, send, recv, send_recv, dataloader, gc, optimizer,
#: checkpoint, host.
KINDS: Dict[str, int] = dict(_native.KINDS)


class Span(_native.Span):
    """A named span: ``with span: ...`` or ``@span`` on a function.

    Entering and leaving are native calls (one each); the object keeps no per-use state,
    so one instance may be reused, nested and shared between threads. Create spans with
    :func:`span`, which caches them by name and kind.
    """

    __slots__ = ()

    def __call__(self, func: F) -> F:
        """Decorates ``func`` so that each call is this span."""
        return _decorate(self, func)


# Spans without arguments are immutable and reusable: one object per (name, kind). The
# cap keeps programs that build names dynamically (f"layer{i}.{step}") from growing the
# cache without bound; past it spans are simply created per call.
_SPAN_CACHE: Dict[Tuple[str, Kind], Span] = {}
_SPAN_CACHE_MAX = 8192


def span(
    name: str,
    kind: Kind = "compute",
    *,
    amount: int = 0,
    group: Optional[str] = None,
    seq: int = 0,
    group_size: int = 0,
) -> Span:
    """A span named ``name`` of kind ``kind`` (see :data:`KINDS`).

    Use it as a context manager (``with flare.span("forward"): ...``) or a decorator
    (``@flare.span("forward")``). The span closes when the block or call ends, also when
    it raises; the exception propagates unchanged.

    ``amount`` is the bytes moved (communication) or the flops (compute); ``group``,
    ``seq`` and ``group_size`` describe the communicator of a collective or P2P op.
    Hoisting the span out of a hot loop (``FWD = flare.span("forward")``) saves the
    cache lookup.
    """
    if amount or group is not None or seq or group_size:
        return Span(name, kind, amount=amount, group=group, seq=seq, group_size=group_size)
    key = (name, kind)
    s = _SPAN_CACHE.get(key)
    if s is None:
        s = Span(name, kind)
        if len(_SPAN_CACHE) < _SPAN_CACHE_MAX:
            _SPAN_CACHE[key] = s
    return s


@overload
def trace(func: F) -> F: ...


@overload
def trace(
    func: None = None, *, name: Optional[str] = None, kind: Kind = "compute"
) -> Callable[[F], F]: ...


def trace(
    func: Optional[F] = None, *, name: Optional[str] = None, kind: Kind = "compute"
) -> Union[F, Callable[[F], F]]:
    """Decorator: each call of the function is a span named after it.

    ``@flare.trace`` uses the function's qualified name; ``@flare.trace(name=..., kind=...)``
    sets them.
    """
    if func is None:
        return lambda f: _trace(f, name, kind)
    return _trace(func, name, kind)


def _trace(func: F, name: Optional[str], kind: Kind) -> F:
    if not callable(func):
        raise TypeError(f"flare.trace decorates callables, got {type(func).__name__}")
    return span(name or getattr(func, "__qualname__", None) or repr(func), kind)(func)


def _decorate(s: Span, func: F) -> F:
    """Wraps ``func`` so that its execution is the span ``s``.

    Coroutine functions get an async span (coroutines on one thread interleave, which
    nested spans cannot represent). Generator functions get one span per resumption, so
    the consumer's work between items is not counted as the generator's.
    """
    if not callable(func):
        raise TypeError(f"a flare span decorates callables, got {type(func).__name__}")

    if inspect.iscoroutinefunction(func):

        @functools.wraps(func)
        async def coroutine_wrapper(*args: Any, **kwargs: Any) -> Any:
            span_id = s.begin_async()
            try:
                return await func(*args, **kwargs)
            finally:
                s.end_async(span_id)

        return coroutine_wrapper  # type: ignore[return-value]

    if inspect.isasyncgenfunction(func):

        @functools.wraps(func)
        async def async_generator_wrapper(*args: Any, **kwargs: Any) -> Any:
            agen = func(*args, **kwargs)
            to_send: Any = None
            to_throw: Optional[BaseException] = None
            try:
                while True:
                    span_id = s.begin_async()
                    try:
                        if to_throw is not None:
                            item = await agen.athrow(to_throw)
                        else:
                            item = await agen.asend(to_send)
                    except StopAsyncIteration:
                        return
                    finally:
                        s.end_async(span_id)
                    to_throw = None
                    try:
                        to_send = yield item
                    except GeneratorExit:
                        raise
                    except BaseException as e:  # forwarded into the wrapped generator
                        to_throw, to_send = e, None
            finally:
                await agen.aclose()

        return async_generator_wrapper  # type: ignore[return-value]

    if inspect.isgeneratorfunction(func):

        @functools.wraps(func)
        def generator_wrapper(*args: Any, **kwargs: Any) -> Any:
            gen = func(*args, **kwargs)
            to_send: Any = None
            to_throw: Optional[BaseException] = None
            try:
                while True:
                    with s:
                        try:
                            if to_throw is not None:
                                item = gen.throw(to_throw)
                            else:
                                item = gen.send(to_send)
                        except StopIteration as stop:
                            return stop.value
                    to_throw = None
                    try:
                        to_send = yield item
                    except GeneratorExit:
                        raise
                    except BaseException as e:  # forwarded into the wrapped generator
                        to_throw, to_send = e, None
            finally:
                gen.close()

        return generator_wrapper  # type: ignore[return-value]

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        with s:
            return func(*args, **kwargs)

    return wrapper  # type: ignore[return-value]


class InstrumentedIterator(Iterator[T]):
    """An iterator whose every ``next()`` is a span (see :func:`instrument_iterator`).

    Attributes it does not define are looked up on the wrapped iterator, so framework
    code that reaches into a loader's iterator keeps working.
    """

    __slots__ = ("_source", "_it", "_span")

    def __init__(self, iterable: Iterable[T], s: Span) -> None:
        self._source = iterable
        self._it = iter(iterable)
        self._span = s

    def __iter__(self) -> "InstrumentedIterator[T]":
        return self

    def __next__(self) -> T:
        with self._span:
            return next(self._it)

    def __len__(self) -> int:
        return len(self._source)  # type: ignore[arg-type]

    def __length_hint__(self) -> int:
        return operator.length_hint(self._it)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._it, name)

    def __repr__(self) -> str:
        return f"<flare.InstrumentedIterator {self._span.name!r} over {self._it!r}>"


def instrument_iterator(
    iterable: Iterable[T], name: str = "dataloader", kind: Kind = "dataloader"
) -> InstrumentedIterator[T]:
    """Wraps any iterable so that fetching each item is a span (kind ``dataloader`` by
    default): for data loaders other than PyTorch's, whose iteration ``init`` hooks."""
    return InstrumentedIterator(iterable, span(name, kind))


# Name ids of counters, interned once. Ids are cached only once the tracer exists (0
# before init means "no tracer", not a name).
_NAME_IDS: Dict[str, int] = {}


def _name_id(name: str) -> int:
    i = _NAME_IDS.get(name)
    if i is None:
        i = _native.intern(name)
        if i:
            _NAME_IDS[name] = i
    return i


def counter(name: str, value: int) -> None:
    """Records a sample of the counter ``name`` (an integer in 0..2**64)."""
    _native.counter(_name_id(name), value)


_step_lock = threading.Lock()
_next_step = 0


def step(n: Optional[int] = None) -> int:
    """Marks the start of a training iteration and returns its number.

    Call it at the top of each iteration. Without ``n`` the number is one more than the
    previous step's (0 first); an explicit ``n`` (e.g. when resuming from a checkpoint)
    sets the sequence.
    """
    global _next_step
    with _step_lock:
        if n is None:
            n = _next_step
        _native.step(n)
        _next_step = n + 1
    if _startup.active():
        _startup.on_step()
    return n


_init_lock = threading.RLock()
_atexit_registered = False


def init(
    *,
    job_id: Optional[str] = None,
    rank: Optional[int] = None,
    local_rank: Optional[int] = None,
    world_size: Optional[int] = None,
    shm_dir: Optional[PathLike] = None,
    dump: Optional[PathLike] = None,
    ring_events: Optional[int] = None,
    max_threads: Optional[int] = None,
    gc: bool = True,
    dataloader: bool = True,
    cuda_sync: bool = True,
    distributed: bool = True,
    startup: bool = True,
    shutdown_at_exit: bool = True,
) -> str:
    """Starts tracing this process and returns the path of its ring file.

    Identity and sizes come from the launcher's environment: torchrun (``RANK``,
    ``LOCAL_RANK``, ``WORLD_SIZE``, ``TORCHELASTIC_RUN_ID``; plain torchrun, whose run id
    is ``none`` for every job, is named ``torchrun-MASTER_ADDR-MASTER_PORT``), Slurm
    (``SLURM_PROCID``, ``SLURM_LOCALID``, ``SLURM_NTASKS``, ``SLURM_JOB_ID``), Open MPI,
    and Flare's own ``FLARE_JOB_ID``, ``FLARE_SHM_DIR``, ``FLARE_RING_EVENTS``,
    ``FLARE_MAX_THREADS``, ``FLARE_DUMP``. Keyword arguments override the environment.

    Hooks installed (each can be turned off): ``gc`` spans for garbage collections,
    ``dataloader`` spans for each batch of ``torch.utils.data.DataLoader``, ``cuda_sync``
    host spans for ``torch.cuda.synchronize``, ``distributed`` spans for the
    ``torch.distributed`` collectives and P2P calls, ``startup`` phases from the process's
    launch to its first step (see :func:`startup_phase`). The torch hooks are installed
    only when torch is importable. With ``shutdown_at_exit``, :func:`shutdown` runs at
    interpreter exit.

    Raises ``ValueError`` for a bad configuration (naming the variable or argument),
    ``OSError`` when the ring file cannot be created, ``RuntimeError`` when the tracer
    already runs with another identity or in a forked child. Calling it again with the
    same identity returns the same path.
    """
    global _atexit_registered
    with _init_lock:
        # NCCL's profiler plugin (libnccl-profiler-flare.so), loaded later into this
        # process, finds this tracer through FLARE_LIBRARY instead of starting its own.
        os.environ.setdefault("FLARE_LIBRARY", _native.__file__)
        path = _native.init(
            job_id=job_id,
            rank=rank,
            local_rank=local_rank,
            world_size=world_size,
            shm_dir=shm_dir,
            dump=dump,
            ring_events=ring_events,
            max_threads=max_threads,
        )
        if shutdown_at_exit and not _atexit_registered:
            atexit.register(shutdown)
            _atexit_registered = True
        from . import _hooks

        _startup.enable(startup)
        _startup.record_launch()
        _hooks.install(
            gc=gc, dataloader=dataloader, cuda_sync=cuda_sync, distributed=distributed, startup=startup
        )
        return path


def shutdown() -> Optional[str]:
    """Stops tracing: removes the hooks, writes the dump file if one was configured
    (returns its path) and releases the ring file. Safe to call more than once."""
    with _init_lock:
        from . import _hooks

        _hooks.uninstall()
        return _native.shutdown()


def is_initialized() -> bool:
    """Whether :func:`init` ran in this process (false in a forked child)."""
    return _native.is_initialized()


def ring_path() -> Optional[str]:
    """The ring file's path, or None before :func:`init`."""
    return _native.ring_path()


def stats() -> Dict[str, Any]:
    """Events written and dropped so far: ``written``, ``dropped_full`` (a ring was full:
    no agent, or one that fell behind), ``dropped_no_ring`` (more threads than rings),
    ``dropped``, ``rings_in_use``, ``initialized``, ``recording``."""
    return _native.stats()


def startup_phase(name: str) -> "_startup.Phase":
    """A start-up phase the program marks: ``with flare.startup_phase("model_build"):``
    or as a decorator. Flare records launch, ``import torch``, ``init_process_group``,
    checkpoint loads, DDP's constructor, the first batch and the first step by itself;
    mark what else a rank does before its first step (building the model, tokenizing),
    so that a rank that is late to the start is explained, not only named. Names Flare
    knows (``model_build``, ``checkpoint_load``, ...) are its phases; others are
    recorded under their own name. Does nothing after the first step."""
    return _startup.phase(name)


def now_ns() -> int:
    """The tracer's clock (``CLOCK_MONOTONIC`` nanoseconds)."""
    return _native.now_ns()


def read_ring(path: PathLike, consume: bool = True) -> Dict[str, Any]:
    """Reads a ring file, live or dumped: ``info`` (job_id, rank, local_rank, world_size,
    pid, clock anchor, ...), ``spans`` (name, kind, start_ns, end_ns, duration_ns, depth,
    bytes, group, group_size, seq, ring), ``steps``, ``counters``, ``open_spans``,
    ``threads``, ``drops``.

    Reading marks the returned events consumed in the file, as the node agent does. With
    ``consume=False`` a private copy is read instead, leaving the file as it was (use it
    to read a dump more than once; it costs a copy of the file).
    """
    if consume:
        return _native.read_ring(path)
    with tempfile.TemporaryDirectory(prefix="flare-read-") as tmp:
        copy = os.path.join(tmp, os.path.basename(os.fspath(path)) or "ring")
        shutil.copyfile(path, copy)
        out = _native.read_ring(copy)
        out["info"]["path"] = os.fspath(path)
        return out
