"""TEST STAND-IN for torch.utils (see torch/__init__.py)."""

from . import data  # noqa: F401
