"""Automatic instrumentation installed by ``flare.init``.

- ``gc``: one ``gc`` span per garbage collection, named ``gc.gen0`` .. ``gc.gen2``.
- ``dataloader``: ``torch.utils.data.DataLoader.__iter__`` returns an iterator whose every
  ``next()`` is a ``dataloader`` span.
- ``cuda_sync``: ``torch.cuda.synchronize`` is a ``host`` span, and so is ``Tensor.item()``
  or ``Tensor.tolist()`` on a device tensor, named with the program's line that called it
  (``Tensor.item at train.py(57): step``).
- ``distributed``: the ``torch.distributed`` collectives and P2P calls are spans of the
  matching kind, with the bytes moved, the process group's name and size, and a sequence
  number per group (per rank pair for P2P, so both sides number their exchanges alike).
  ``DistributedDataParallel`` reduces gradients in C++, out of these wrappers' sight: each
  DDP module's gradient all-reduce becomes an async ``ddp_all_reduce`` span per bucket,
  from the bucket being ready (in ``backward``) to its reduction completing, through a
  communication hook: DDP's own all-reduce hook, or the user's hook wrapped.

Every hook keeps what it replaced and :func:`uninstall` puts it back, unless someone else
replaced our wrapper in the meantime (then theirs stays). The torch hooks record the
host-side time of each call: the CPU time to issue the op, which for a blocking
collective includes waiting for the slowest peer; GPU-side timing comes from the NCCL
profiler plugin.
"""

from __future__ import annotations

import functools
import gc as _gc
import importlib.util
import inspect
import itertools
import sys
import sysconfig
import threading
import warnings
from typing import Any, Callable, Dict, List, NamedTuple, Optional, Tuple

from . import _native, _startup
from ._core import KINDS, InstrumentedIterator, Span, span

_lock = threading.Lock()
# Hook name -> undo, in installation order.
_installed: Dict[str, Callable[[], None]] = {}

_WRAPPED = "__flare_wrapped__"


def install(*, gc: bool, dataloader: bool, cuda_sync: bool, distributed: bool, startup: bool = False) -> None:
    """Installs the requested hooks that are not installed yet. The torch hooks wait for
    the program to import torch: importing it for a program that does not use it (a
    numpy or JAX job) would cost every process seconds and hundreds of megabytes."""
    global _watcher
    with _lock:
        if gc and "gc" not in _installed:
            _installed["gc"] = _install_gc()
        if not (dataloader or cuda_sync or distributed or startup):
            return
        if "torch" not in sys.modules:
            if _watcher is None and importlib.util.find_spec("torch") is not None:
                _watcher = _TorchImportWatcher(
                    lambda: install(
                        gc=False, dataloader=dataloader, cuda_sync=cuda_sync, distributed=distributed, startup=startup
                    ),
                    timed=startup,
                )
                sys.meta_path.insert(0, _watcher)
            return
        torch = _import_torch()
        if torch is None:
            return
        if startup and "startup" not in _installed:
            undo = _install_startup(torch)
            if undo is not None:
                _installed["startup"] = undo
        if dataloader and "dataloader" not in _installed:
            undo = _install_dataloader(torch, first_batch=startup)
            if undo is not None:
                _installed["dataloader"] = undo
        if cuda_sync and "cuda_sync" not in _installed:
            undo = _install_cuda_sync(torch)
            if undo is not None:
                _installed["cuda_sync"] = undo
        if distributed and "distributed" not in _installed:
            undo = _install_distributed(torch)
            if undo is not None:
                _installed["distributed"] = undo


def uninstall() -> None:
    """Removes every installed hook, most recent first, and stops waiting for torch."""
    global _watcher
    with _lock:
        if _watcher is not None:
            _watcher.cancel()
            _watcher = None
        for name in reversed(list(_installed)):
            _installed.pop(name)()


class _TorchImportWatcher:
    """A one-shot import finder: when the program imports ``torch``, it lets the other
    finders find it, and calls ``on_import`` once the module has run."""

    def __init__(self, on_import: Callable[[], None], timed: bool = False) -> None:
        self._on_import: Optional[Callable[[], None]] = on_import
        # Whether torch's import is a start-up phase (``import_torch``).
        self._timed = timed

    def cancel(self) -> None:
        self._on_import = None
        if self in sys.meta_path:
            sys.meta_path.remove(self)

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        if name != "torch" or self._on_import is None:
            return None
        on_import = self._on_import
        self.cancel()
        spec = importlib.util.find_spec(name)
        loader = getattr(spec, "loader", None)
        exec_module = getattr(loader, "exec_module", None)
        if exec_module is None:
            return spec

        timed = self._timed and _startup.active()

        def exec_then_hook(module: Any) -> None:
            span_id = _native.startup_begin("import_torch") if timed else None
            try:
                exec_module(module)
            finally:
                if span_id is not None:
                    _native.startup_end("import_torch", span_id)
            try:
                on_import()
            except Exception as e:  # tracing must never break the program's import
                warnings.warn(f"flare: torch hooks not installed ({e})", stacklevel=2)

        loader.exec_module = exec_then_hook
        return spec


_watcher: Optional[_TorchImportWatcher] = None


def installed() -> List[str]:
    """The names of the hooks currently installed."""
    with _lock:
        return list(_installed)


def _import_torch() -> Optional[Any]:
    torch = sys.modules.get("torch")
    if torch is not None:
        return torch
    if importlib.util.find_spec("torch") is None:
        return None
    try:
        import torch  # noqa: F811  (imported only when present)
    except Exception as e:  # a broken install must not stop tracing the rest
        warnings.warn(
            f"flare: torch is installed but does not import ({e}); torch hooks are off",
            stacklevel=3,
        )
        return None
    return torch


def _replace(owner: Any, attr: str, wrapper: Any) -> Callable[[], None]:
    """Sets ``owner.attr = wrapper`` and returns the undo."""
    original = getattr(owner, attr)
    setattr(owner, attr, wrapper)

    def undo() -> None:
        if getattr(owner, attr, None) is wrapper:
            setattr(owner, attr, original)

    return undo


def _undo_all(undos: List[Callable[[], None]]) -> Callable[[], None]:
    def undo() -> None:
        for u in reversed(undos):
            u()

    return undo


# --- gc ---------------------------------------------------------------------------------


def _install_gc() -> Callable[[], None]:
    gc_kind = KINDS["gc"]
    names = [_native.intern(f"gc.gen{g}") for g in range(3)]
    # A collection that starts before init or the hook ends without a begin; the reader
    # counts it as unmatched, nothing else.
    open_ids: List[int] = []

    def on_gc(phase: str, info: Dict[str, Any]) -> None:
        if phase == "start":
            g = info.get("generation", 2)
            name = names[g] if 0 <= g < len(names) else _native.intern(f"gc.gen{g}")
            open_ids.append(name)
            _native.begin(name, gc_kind)
        elif phase == "stop" and open_ids:
            _native.end(open_ids.pop(), gc_kind)

    _gc.callbacks.append(on_gc)

    def undo() -> None:
        try:
            _gc.callbacks.remove(on_gc)
        except ValueError:
            pass

    return undo


# --- DataLoader -------------------------------------------------------------------------


def _install_dataloader(torch: Any, first_batch: bool = False) -> Optional[Callable[[], None]]:
    try:
        loader_cls = torch.utils.data.DataLoader
    except AttributeError:
        return None
    original = loader_cls.__iter__
    if getattr(original, _WRAPPED, False):
        return None
    batch = span("dataloader", "dataloader")

    @functools.wraps(original)
    def __iter__(self: Any) -> Any:
        it = InstrumentedIterator(original(self), batch)
        if first_batch and _startup.take_first_batch():
            return _startup.FirstBatchIterator(it)
        return it

    setattr(__iter__, _WRAPPED, True)
    return _replace(loader_cls, "__iter__", __iter__)


# --- start-up phases ----------------------------------------------------------------------


def _phase_wrapper(phase: str, original: Callable[..., Any], only_in_startup: bool) -> Callable[..., Any]:
    """``original`` with each call recorded as start-up phase ``phase`` (while start-up
    lasts, when ``only_in_startup``)."""

    @functools.wraps(original)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if only_in_startup and not _startup.active():
            return original(*args, **kwargs)
        span_id = _native.startup_begin(phase)
        try:
            return original(*args, **kwargs)
        finally:
            _native.startup_end(phase, span_id)

    setattr(wrapper, _WRAPPED, True)
    return wrapper


def _install_startup(torch: Any) -> Optional[Callable[[], None]]:
    """``init_process_group`` (every call: a job initializes once), and before the first
    step ``torch.load`` and ``torch.distributed.checkpoint.load`` (checkpoint loads)."""
    undos: List[Callable[[], None]] = []
    dist = getattr(torch, "distributed", None)
    c10d = getattr(dist, "distributed_c10d", None)
    targets = [
        ("init_process_group", "init_process_group", [dist, c10d], False),
        ("load", "checkpoint_load", [torch], True),
    ]
    for attr, phase, owners, only_in_startup in targets:
        owners = [o for o in owners if o is not None]
        original = next((getattr(o, attr, None) for o in owners if getattr(o, attr, None) is not None), None)
        if original is None or getattr(original, _WRAPPED, False):
            continue
        wrapper = _phase_wrapper(phase, original, only_in_startup)
        for owner in owners:
            if getattr(owner, attr, None) is original:
                undos.append(_replace(owner, attr, wrapper))
    # Distributed checkpoints: only where the program already imported the module (importing
    # it here would cost every job its import).
    dcp = sys.modules.get("torch.distributed.checkpoint")
    for attr in ("load", "load_state_dict"):
        original = getattr(dcp, attr, None) if dcp is not None else None
        if original is not None and not getattr(original, _WRAPPED, False):
            undos.append(_replace(dcp, attr, _phase_wrapper("checkpoint_load", original, True)))
    return _undo_all(undos) if undos else None


# --- torch.cuda.synchronize ---------------------------------------------------------------


def _install_cuda_sync(torch: Any) -> Optional[Callable[[], None]]:
    cuda = getattr(torch, "cuda", None)
    original = getattr(cuda, "synchronize", None)
    if original is None or getattr(original, _WRAPPED, False):
        return None
    sync = span("cuda.synchronize", "host")

    @functools.wraps(original)
    def synchronize(*args: Any, **kwargs: Any) -> Any:
        with sync:
            return original(*args, **kwargs)

    setattr(synchronize, _WRAPPED, True)
    undos = [_replace(cuda, "synchronize", synchronize)]
    tensor = getattr(torch, "Tensor", None)
    for method in _READ_BACKS:
        original_method = getattr(tensor, method, None)
        if original_method is not None and not getattr(original_method, _WRAPPED, False):
            undos.append(_replace_method(tensor, method, _read_back(method, original_method)))
    return _undo_all(undos)


#: Tensor methods that copy a value to the host: on a device tensor the host waits for the
#: device to finish what produces it (``loss.item()`` to log a loss is the usual one).
_READ_BACKS = ("item", "tolist")

#: Where the interpreter's and installed packages' code lives: a read-back's site is the
#: innermost frame outside them, the program's own line (as a trace's site is read).
_LIBRARY_DIRS = tuple(
    sorted({p for k, p in sysconfig.get_paths().items() if k in ("stdlib", "platstdlib", "purelib", "platlib")})
)


def _program_site(frame: Any) -> str:
    """``train.py(57): step`` for the innermost frame of the program's own code at or above
    ``frame`` (the first one if every frame is a library's)."""
    first = frame
    for _ in range(16):
        if frame is None:
            break
        if not frame.f_code.co_filename.startswith(_LIBRARY_DIRS):
            first = frame
            break
        frame = frame.f_back
    code = first.f_code
    return f"{code.co_filename.rsplit('/', 1)[-1]}({first.f_lineno}): {code.co_name}"


def _read_back(method: str, original: Callable[..., Any]) -> Callable[..., Any]:
    """``Tensor.<method>`` that, on a tensor off the CPU, is a ``host`` span named
    ``Tensor.item at train.py(57): step``: a synchronization with its site. On CPU tensors
    it only adds the check."""
    by_site: Dict[str, Span] = {}

    @functools.wraps(original)
    def read_back(self: Any, *args: Any, **kwargs: Any) -> Any:
        if not self.is_cuda:
            return original(self, *args, **kwargs)
        site = _program_site(sys._getframe(1))
        sp = by_site.get(site)
        if sp is None:
            sp = span(f"Tensor.{method} at {site}", "host")
            if len(by_site) < 1024:
                by_site[site] = sp
        with sp:
            return original(self, *args, **kwargs)

    setattr(read_back, _WRAPPED, True)
    return read_back


def _replace_method(cls: Any, attr: str, wrapper: Any) -> Callable[[], None]:
    """Sets a class's method ``cls.attr = wrapper``; the undo deletes it again where the
    class only inherited it (torch.Tensor's methods are its C base's)."""
    own = attr in vars(cls)
    undo_set = _replace(cls, attr, wrapper)

    def undo() -> None:
        if own:
            undo_set()
        elif vars(cls).get(attr) is wrapper:
            delattr(cls, attr)

    return undo


# --- torch.distributed --------------------------------------------------------------------


class _OpSpec(NamedTuple):
    kind: str
    #: The parameter whose tensor (or list of tensors) sizes the op, None for barrier.
    sized_by: Optional[str]
    #: The peer's global rank parameter (P2P), and the group-relative one newer torch has.
    peer: Optional[str] = None
    group_peer: Optional[str] = None


# Bytes follow NCCL's size convention, the one bus-bandwidth factors assume: the whole
# buffer (all_gather: the gathered output; reduce_scatter, all_to_all: the whole input).
_OPS: Dict[str, _OpSpec] = {
    "all_reduce": _OpSpec("all_reduce", "tensor"),
    "all_gather": _OpSpec("all_gather", "tensor_list"),
    "all_gather_into_tensor": _OpSpec("all_gather", "output_tensor"),
    "reduce_scatter": _OpSpec("reduce_scatter", "input_list"),
    "reduce_scatter_tensor": _OpSpec("reduce_scatter", "input"),
    "broadcast": _OpSpec("broadcast", "tensor"),
    "reduce": _OpSpec("reduce", "tensor"),
    "all_to_all": _OpSpec("all_to_all", "input_tensor_list"),
    "all_to_all_single": _OpSpec("all_to_all", "input"),
    # torch 2.15's single-tensor forms, which FSDP2 calls for its all-gathers and
    # reduce-scatters.
    "all_gather_single": _OpSpec("all_gather", "output_tensor"),
    "reduce_scatter_single": _OpSpec("reduce_scatter", "input"),
    "barrier": _OpSpec("barrier", None),
    "send": _OpSpec("send", "tensor", "dst", "group_dst"),
    "recv": _OpSpec("recv", "tensor", "src", "group_src"),
    "isend": _OpSpec("send", "tensor", "dst", "group_dst"),
    "irecv": _OpSpec("recv", "tensor", "src", "group_src"),
}

# Positions of the parameters in torch 2.x, for functions whose signature cannot be read.
_FALLBACK_POSITIONS: Dict[str, Tuple[str, ...]] = {
    "all_reduce": ("tensor", "op", "group", "async_op"),
    "all_gather": ("tensor_list", "tensor", "group", "async_op"),
    "all_gather_into_tensor": ("output_tensor", "input_tensor", "group", "async_op"),
    "reduce_scatter": ("output", "input_list", "op", "group", "async_op"),
    "reduce_scatter_tensor": ("output", "input", "op", "group", "async_op"),
    "broadcast": ("tensor", "src", "group", "async_op"),
    "reduce": ("tensor", "dst", "op", "group", "async_op"),
    "all_to_all": ("output_tensor_list", "input_tensor_list", "group", "async_op"),
    "all_to_all_single": ("output", "input", "output_split_sizes", "input_split_sizes", "group"),
    "all_gather_single": ("output_tensor", "input_tensor", "group", "async_op"),
    "reduce_scatter_single": ("output", "input", "op", "group"),
    "barrier": ("group", "async_op", "device_ids"),
    "send": ("tensor", "dst", "group", "tag"),
    "recv": ("tensor", "src", "group", "tag"),
    "isend": ("tensor", "dst", "group", "tag"),
    "irecv": ("tensor", "src", "group", "tag"),
}


def _positions(func: Callable[..., Any], op: str) -> Dict[str, int]:
    try:
        params = list(inspect.signature(func).parameters.values())
        names = tuple(
            p.name
            for p in params
            if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
        )
    except (TypeError, ValueError):
        names = _FALLBACK_POSITIONS[op]
    return {n: i for i, n in enumerate(names)}


def _arg(args: Tuple[Any, ...], kwargs: Dict[str, Any], pos: Dict[str, int], name: str) -> Any:
    i = pos.get(name)
    if i is not None and i < len(args):
        return args[i]
    return kwargs.get(name)


def _nbytes(obj: Any) -> int:
    if obj is None:
        return 0
    if isinstance(obj, (list, tuple)):
        return sum(_nbytes(t) for t in obj)
    return int(obj.numel()) * int(obj.element_size())


class _Group:
    """What the hooks know about one process group."""

    __slots__ = ("name", "name_id", "size", "rank", "seq", "pairs")

    def __init__(self, name: str, size: int, rank: int) -> None:
        self.name = name
        self.name_id = _native.intern(name)
        self.size = size
        self.rank = rank
        self.seq = itertools.count(1)
        # P2P: (lo, hi) global ranks, or None for "any source" -> (name id, name, counter).
        self.pairs: Dict[Optional[Tuple[int, int]], Tuple[int, str, "itertools.count[int]"]] = {}

    def pair(self, peer: Optional[int]) -> Tuple[int, str, int]:
        """Name id, name and next sequence number of the P2P channel with ``peer``."""
        key = None if peer is None else (min(self.rank, peer), max(self.rank, peer))
        entry = self.pairs.get(key)
        if entry is None:
            label = "any" if key is None else f"{key[0]}-{key[1]}"
            channel = f"{self.name}:p2p:{label}"
            entry = (_native.intern(channel), channel, itertools.count(1))
            self.pairs[key] = entry
        return entry[0], entry[1], next(entry[2])


class _Distributed:
    """Describes calls for the collective wrappers: group identity, sizes, sequence."""

    def __init__(self, dist: Any) -> None:
        self.dist = dist
        self.c10d = getattr(dist, "distributed_c10d", None)
        # Keyed by the group object itself (a strong reference: groups live as long as
        # the job, and an id() could be reused by a new group after one is destroyed).
        self.groups: Dict[Any, _Group] = {}

    def world(self) -> Any:
        member = getattr(self.dist, "GroupMember", None)
        w = getattr(member, "WORLD", None)
        if w is None:
            w = getattr(getattr(self.dist, "group", None), "WORLD", None)
        return w

    def group(self, g: Any) -> _Group:
        if g is None:
            g = self.world()
        try:
            info = self.groups.get(g)
        except TypeError:  # an unhashable group object: describe it each time
            return self._describe(g)
        if info is None:
            info = self._describe(g)
            self.groups[g] = info
        return info

    def _describe(self, g: Any) -> _Group:
        name = getattr(g, "group_name", None)
        if not (isinstance(name, str) and name):
            try:
                name = self.c10d._get_process_group_name(g)  # type: ignore[union-attr]
            except Exception:
                name = None
        if not (isinstance(name, str) and name):
            name = "world" if g is self.world() else f"group@{id(g):x}"
        size = self.dist.get_world_size(g)
        rank = self.dist.get_rank()
        return _Group(name, int(size), int(rank))

    def peer_rank(self, g: Any, peer: Any, group_peer: Any) -> Optional[int]:
        if peer is not None:
            return int(peer)
        if group_peer is not None:
            try:
                return int(self.dist.get_global_rank(g if g is not None else self.world(), group_peer))
            except Exception:
                return int(group_peer)
        return None


def _begin_async(
    name: str, kind: str, describe: Callable[[], Tuple[int, int, str, int, int]]
) -> Optional[Callable[[], None]]:
    """Opens an async span for an op whose work completes later (``describe`` gives its
    bytes, group name id and name, sequence and size) and returns what ends it; ``None``
    when it cannot be described or recorded: the op must run all the same, untraced.
    Ending never raises (it runs in torch's future callbacks)."""
    try:
        amount, _, group, seq, size = describe()
        span = _native.Span(name, kind, amount=amount, group=group, seq=seq, group_size=size)
        span_id = span.begin_async()
    except Exception:
        return None

    def end() -> None:
        try:
            span.end_async(span_id)
        except Exception:
            pass

    return end


# Per thread: whether a wrapped torch.distributed call is running.
_inside_op = threading.local()


def _wrap_op(d: _Distributed, op: str, spec: _OpSpec, original: Callable[..., Any]) -> Callable[..., Any]:
    kind = KINDS[spec.kind]
    name_id = _native.intern(op)
    pos = _positions(original, op)
    p2p = spec.peer is not None
    begin, end = _native.begin, _native.end

    def describe(args: Tuple[Any, ...], kwargs: Dict[str, Any]) -> Tuple[int, int, str, int, int]:
        """Bytes, the group's (or P2P channel's) name id and name, sequence, size."""
        amount = _nbytes(_arg(args, kwargs, pos, spec.sized_by)) if spec.sized_by else 0
        g = _arg(args, kwargs, pos, "group")
        info = d.group(g)
        if p2p:
            peer = d.peer_rank(
                g,
                _arg(args, kwargs, pos, spec.peer),  # type: ignore[arg-type]
                _arg(args, kwargs, pos, spec.group_peer) if spec.group_peer else None,
            )
            channel_id, channel, seq = info.pair(peer)
            return amount, channel_id, channel, seq, 2
        return amount, info.name_id, info.name, next(info.seq), info.size

    def call_async(args: Tuple[Any, ...], kwargs: Dict[str, Any]) -> Any:
        """An ``async_op=True`` call: the op runs until its work completes, not until the
        call returns (FSDP posts its all-gathers ahead and waits for them later)."""
        end = _begin_async(op, spec.kind, lambda: describe(args, kwargs))
        work = original(*args, **kwargs)
        if end is None:
            return work
        try:
            work.get_future().then(lambda f: end())
        except Exception:
            # A work without a future: the call's own time is all that can be known.
            end()
        return work

    @functools.wraps(original)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        # torch implements some ops with others (send with isend, ...): only the
        # outermost call is the op, or it would be counted, and numbered, twice.
        if getattr(_inside_op, "active", False):
            return original(*args, **kwargs)
        _inside_op.active = True
        try:
            if _arg(args, kwargs, pos, "async_op") is True:
                return call_async(args, kwargs)
            try:
                amount, group_id, _, seq, size = describe(args, kwargs)
                begin(name_id, kind, amount, group_id, seq, size)
            except Exception:
                # Never change the op's behaviour: record it undescribed (arguments it
                # cannot read, a group this rank is not in) and let the original call
                # raise whatever it raises about its arguments.
                begin(name_id, kind)
            try:
                return original(*args, **kwargs)
            finally:
                end(name_id, kind)
        finally:
            _inside_op.active = False

    setattr(wrapper, _WRAPPED, True)
    return wrapper


def _install_distributed(torch: Any) -> Optional[Callable[[], None]]:
    try:
        dist = torch.distributed
        if hasattr(dist, "is_available") and not dist.is_available():
            return None
    except (AttributeError, ImportError):
        return None
    d = _Distributed(dist)
    # torch.distributed re-exports distributed_c10d's functions; both must hold the same
    # wrapper (P2POp checks its op against distributed_c10d.isend/irecv by identity).
    owners = [dist] + ([d.c10d] if d.c10d is not None and d.c10d is not dist else [])
    undos: List[Callable[[], None]] = []
    for op, spec in _OPS.items():
        original = getattr(dist, op, None)
        if original is None or getattr(original, _WRAPPED, False):
            continue
        wrapper = _wrap_op(d, op, spec, original)
        for owner in owners:
            if getattr(owner, op, None) is original:
                undos.append(_replace(owner, op, wrapper))
    ddp_undo = _install_ddp(torch, d)
    if ddp_undo is not None:
        undos.append(ddp_undo)
    return _undo_all(undos) if undos else None


_DDP_OP = "ddp_all_reduce"


def _traced_comm_hook(d: _Distributed, module: Any, hook: Callable[..., Any]) -> Callable[..., Any]:
    """``hook`` (a DDP communication hook) inside an async all-reduce span per bucket."""

    @functools.wraps(hook)
    def flare_comm_hook(state: Any, bucket: Any) -> Any:
        def describe() -> Tuple[int, int, str, int, int]:
            info = d.group(getattr(module, "process_group", None))
            return _nbytes(bucket.buffer()), info.name_id, info.name, next(info.seq), info.size

        # Never change the reduction: undescribed, it runs untraced.
        end = _begin_async(_DDP_OP, "all_reduce", describe)
        # The hook's own torch.distributed call is this span, not another op.
        outer = getattr(_inside_op, "active", False)
        _inside_op.active = True
        try:
            fut = hook(state, bucket)
        finally:
            _inside_op.active = outer
        if end is None:
            return fut

        def done(f: Any) -> Any:
            end()
            return f.value()

        return fut.then(done)

    return flare_comm_hook


def _install_ddp(torch: Any, d: _Distributed) -> Optional[Callable[[], None]]:
    try:
        ddp_class = torch.nn.parallel.DistributedDataParallel
        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
    except (AttributeError, ImportError):
        return None
    original_init = ddp_class.__init__
    original_register = ddp_class.register_comm_hook
    if getattr(original_register, _WRAPPED, False):
        return None

    @functools.wraps(original_register)
    def register_comm_hook(self: Any, state: Any, hook: Any) -> Any:
        # DDP takes one hook per module: the user's, traced; ours only if they set none.
        self.__dict__["_flare_comm_hook"] = True
        return original_register(self, state, _traced_comm_hook(d, self, hook))

    @functools.wraps(original_init)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        # Its constructor broadcasts rank 0's parameters: a start-up phase the ranks meet in.
        span_id = _native.startup_begin("model_wrap") if _startup.active() else None
        try:
            original_init(self, *args, **kwargs)
        finally:
            if span_id is not None:
                _native.startup_end("model_wrap", span_id)

        def first_forward(module: Any, inputs: Any) -> None:
            handle.remove()
            if module.__dict__.get("_flare_comm_hook"):
                return
            try:
                register_comm_hook(module, module.process_group, default_hooks.allreduce_hook)
            except Exception as e:  # a DDP variant that takes no hook: it runs untraced
                warnings.warn(f"flare: DDP gradient all-reduces are not traced: {e}", stacklevel=2)

        handle = self.register_forward_pre_hook(first_forward)

    setattr(register_comm_hook, _WRAPPED, True)
    setattr(__init__, _WRAPPED, True)
    return _undo_all([
        _replace(ddp_class, "__init__", __init__),
        _replace(ddp_class, "register_comm_hook", register_comm_hook),
    ])
