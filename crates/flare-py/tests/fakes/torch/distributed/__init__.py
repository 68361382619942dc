"""TEST STAND-IN for torch.distributed (see torch/__init__.py).

Like the real package it re-exports distributed_c10d's functions, so the same function
object is reachable from both modules.
"""

from . import distributed_c10d  # noqa: F401
from .distributed_c10d import *  # noqa: F401,F403
from .distributed_c10d import GroupMember, P2POp, ProcessGroup, group  # noqa: F401


def is_available() -> bool:
    return True
