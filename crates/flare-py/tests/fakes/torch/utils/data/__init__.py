"""TEST STAND-IN for torch.utils.data (see torch/__init__.py)."""


class _LoaderIter:
    """Like torch's _BaseDataLoaderIter: sized, with private methods callers reach for."""

    def __init__(self, loader: "DataLoader") -> None:
        self._loader = loader
        self._items = iter(loader.dataset)
        self.shut_down = False

    def __iter__(self):
        return self

    def __next__(self):
        return next(self._items)

    def __len__(self) -> int:
        return len(self._loader.dataset)

    def _shutdown_workers(self) -> None:
        self.shut_down = True


class DataLoader:
    def __init__(self, dataset, batch_size: int = 1) -> None:
        self.dataset = dataset
        self.batch_size = batch_size

    def __iter__(self) -> _LoaderIter:
        return _LoaderIter(self)

    def __len__(self) -> int:
        return len(self.dataset)
