"""TEST STAND-IN for torch.distributed.distributed_c10d (see torch/__init__.py).

Signatures follow torch 2.x. Each call is appended to CALLS as (function, args, kwargs);
async variants return a Work whose wait() returns True.
"""

import functools

__all__ = [
    "ProcessGroup", "GroupMember", "group", "P2POp", "Work",
    "init_process_group", "destroy_process_group", "is_initialized", "new_group",
    "get_rank", "get_world_size", "get_global_rank",
    "all_reduce", "all_gather", "all_gather_into_tensor", "reduce_scatter",
    "reduce_scatter_tensor", "broadcast", "reduce", "all_to_all", "all_to_all_single",
    "all_gather_single", "reduce_scatter_single",
    "barrier", "send", "recv", "isend", "irecv", "batch_isend_irecv",
]

CALLS = []


class ProcessGroup:
    def __init__(self, name, ranks):
        self.group_name = name
        self.ranks = list(ranks)

    def size(self):
        return len(self.ranks)


class GroupMember:
    WORLD = None


group = GroupMember
_rank = None
_groups = 0


class Future:
    """A completed future: callbacks run at once, as torch runs them on a done one."""

    def then(self, callback):
        callback(self)
        return self

    def value(self):
        return None


class Work:
    def wait(self):
        return True

    def get_future(self):
        return Future()


def _exception_logger(func):
    # torch wraps its public functions like this: inspect.signature must see through it.
    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        return func(*args, **kwargs)

    return wrapper


def init_process_group(backend="fake", rank=0, world_size=1):
    global _rank, _groups
    _rank = rank
    _groups = 1
    GroupMember.WORLD = ProcessGroup("0", range(world_size))


def destroy_process_group():
    global _rank
    _rank = None
    GroupMember.WORLD = None


def is_initialized():
    return GroupMember.WORLD is not None


def _check():
    if GroupMember.WORLD is None:
        raise ValueError(
            "Default process group has not been initialized, "
            "please make sure to call init_process_group."
        )


def new_group(ranks):
    global _groups
    _check()
    g = ProcessGroup(str(_groups), ranks)
    _groups += 1
    return g


def get_rank(group=None):
    _check()
    return _rank


def get_world_size(group=None):
    _check()
    g = group or GroupMember.WORLD
    return g.size() if _rank in g.ranks else -1  # torch answers -1 to non-members


def get_global_rank(group, group_rank):
    return group.ranks[group_rank]


def _log(name, args, kwargs, async_op=False):
    _check()
    CALLS.append((name, args, kwargs))
    return Work() if async_op else None


@_exception_logger
def all_reduce(tensor, op="sum", group=None, async_op=False):
    return _log("all_reduce", (tensor,), {"group": group}, async_op)


@_exception_logger
def all_gather(tensor_list, tensor, group=None, async_op=False):
    return _log("all_gather", (tensor_list, tensor), {"group": group}, async_op)


@_exception_logger
def all_gather_into_tensor(output_tensor, input_tensor, group=None, async_op=False):
    return _log("all_gather_into_tensor", (output_tensor, input_tensor), {"group": group}, async_op)


@_exception_logger
def reduce_scatter(output, input_list, op="sum", group=None, async_op=False):
    return _log("reduce_scatter", (output, input_list), {"group": group}, async_op)


@_exception_logger
def reduce_scatter_tensor(output, input, op="sum", group=None, async_op=False):
    return _log("reduce_scatter_tensor", (output, input), {"group": group}, async_op)


@_exception_logger
def broadcast(tensor, src=None, group=None, async_op=False, group_src=None):
    return _log("broadcast", (tensor,), {"group": group}, async_op)


@_exception_logger
def reduce(tensor, dst=None, op="sum", group=None, async_op=False, group_dst=None):
    return _log("reduce", (tensor,), {"group": group}, async_op)


@_exception_logger
def all_gather_single(output_tensor, input_tensor, group=None, async_op=False):
    return _log("all_gather_single", (output_tensor, input_tensor), {"group": group}, async_op)


@_exception_logger
def reduce_scatter_single(output, input, op="sum", group=None, *, async_op=False):
    return _log("reduce_scatter_single", (output, input), {"group": group}, async_op)


@_exception_logger
def all_to_all(output_tensor_list, input_tensor_list, group=None, async_op=False):
    return _log("all_to_all", (output_tensor_list, input_tensor_list), {"group": group}, async_op)


@_exception_logger
def all_to_all_single(
    output, input, output_split_sizes=None, input_split_sizes=None, group=None, async_op=False
):
    return _log("all_to_all_single", (output, input), {"group": group}, async_op)


@_exception_logger
def barrier(group=GroupMember.WORLD, async_op=False, device_ids=None):
    return _log("barrier", (), {"group": group}, async_op)


# Like torch 2.x, the blocking P2P calls are implemented with the async ones (called
# through this module's globals, so through flare's wrappers once installed).
@_exception_logger
def send(tensor, dst=None, group=None, tag=0, group_dst=None):
    isend(tensor, dst, group, tag, group_dst).wait()


@_exception_logger
def recv(tensor, src=None, group=None, tag=0, group_src=None):
    irecv(tensor, src, group, tag, group_src).wait()
    return src if src is not None else 0


@_exception_logger
def isend(tensor, dst=None, group=None, tag=0, group_dst=None):
    return _log("isend", (tensor,), {"dst": dst}, True)


@_exception_logger
def irecv(tensor, src=None, group=None, tag=0, group_src=None):
    return _log("irecv", (tensor,), {"src": src}, True)


class P2POp:
    def __init__(self, op, tensor, peer=None, group=None, tag=0):
        # torch checks the op by identity against this module's globals.
        if op not in [isend, irecv]:
            raise ValueError(
                "Invalid ``op``. Expected ``op`` to be of type ``torch.distributed.isend`` "
                "or ``torch.distributed.irecv``."
            )
        self.op, self.tensor, self.peer, self.group, self.tag = op, tensor, peer, group, tag


def batch_isend_irecv(p2p_op_list):
    return [p.op(p.tensor, p.peer, p.group, p.tag) for p in p2p_op_list]
