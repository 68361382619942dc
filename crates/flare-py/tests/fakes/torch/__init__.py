"""TEST STAND-IN FOR PYTORCH -- NOT THE REAL PACKAGE.

A few dozen lines that imitate the parts of PyTorch's API the flare hooks touch, so the
hooks can be tested where torch is not installed: tensors with ``numel()`` and
``element_size()``, ``item()`` and ``tolist()``, ``is_cuda``, ``torch.utils.data.DataLoader``, ``torch.cuda.synchronize`` and the
``torch.distributed`` functions with torch 2.x signatures. Nothing is computed; calls are
logged in ``torch.distributed.distributed_c10d.CALLS`` and friends. Tests put its parent
directory on ``sys.path`` of a child interpreter only.
"""

from . import cuda, distributed, utils  # noqa: F401

IS_FLARE_TEST_STAND_IN = True

_SIZES = {"float32": 4, "float16": 2, "bfloat16": 2, "int64": 8, "uint8": 1}


class Tensor:
    def __init__(self, numel: int, dtype: str = "float32", device: str = "cpu") -> None:
        self._numel = numel
        self.dtype = dtype
        self.is_cuda = device.startswith("cuda")

    def item(self) -> float:
        return 0.5

    def tolist(self) -> list:
        return [0.5] * self._numel

    def numel(self) -> int:
        return self._numel

    def element_size(self) -> int:
        return _SIZES[self.dtype]

    def __repr__(self) -> str:
        return f"FakeTensor({self._numel}, {self.dtype})"


def empty(numel: int, dtype: str = "float32", device: str = "cpu") -> Tensor:
    return Tensor(numel, dtype, device)
