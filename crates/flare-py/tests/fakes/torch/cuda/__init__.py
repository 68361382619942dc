"""TEST STAND-IN for torch.cuda (see torch/__init__.py)."""

SYNC_CALLS = []


def is_available() -> bool:
    return False


def synchronize(device=None) -> None:
    SYNC_CALLS.append(device)
