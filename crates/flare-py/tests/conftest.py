"""Shared helpers: every test that initializes the tracer runs it in a subprocess (the
tracer is one per process), with its own FLARE_SHM_DIR and FLARE_DUMP under tmp_path."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any, Dict, Optional

import pytest

HERE = Path(__file__).resolve().parent
#: Directory holding the stand-in `torch` package (see fakes/torch/__init__.py).
FAKES = HERE / "fakes"

# Launcher variables a developer's shell (or CI running under Slurm) may carry; a test
# sets the ones it wants explicitly.
_LAUNCHER_PREFIXES = ("SLURM_", "OMPI_", "FLARE_", "TORCHELASTIC_")
_LAUNCHER_VARS = {"RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"}

RESULT = "FLARE-TEST-RESULT:"


class Child:
    """Runs Python snippets in fresh interpreters with a clean launcher environment."""

    def __init__(self, tmp_path: Path) -> None:
        self.tmp = tmp_path
        self.shm = tmp_path / "shm"
        self.shm.mkdir()
        self.dump = tmp_path / "dump.ring"
        self.env = {
            k: v
            for k, v in os.environ.items()
            if k not in _LAUNCHER_VARS and not k.startswith(_LAUNCHER_PREFIXES)
        }
        self.env["FLARE_SHM_DIR"] = str(self.shm)
        self.env["FLARE_DUMP"] = str(self.dump)
        self.env["PYTHONDONTWRITEBYTECODE"] = "1"

    def run(
        self,
        code: str,
        env: Optional[Dict[str, str]] = None,
        fake_torch: bool = False,
        expect_ok: bool = True,
        timeout: float = 120,
    ) -> subprocess.CompletedProcess:
        full_env = dict(self.env)
        if fake_torch:
            full_env["PYTHONPATH"] = os.pathsep.join(
                [str(FAKES)] + ([full_env["PYTHONPATH"]] if full_env.get("PYTHONPATH") else [])
            )
        full_env.update(env or {})
        prelude = f"import json as _json\ndef emit(x):\n    print({RESULT!r} + _json.dumps(x), flush=True)\n"
        proc = subprocess.run(
            [sys.executable, "-c", prelude + textwrap.dedent(code)],
            env=full_env,
            cwd=self.tmp,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if expect_ok and proc.returncode != 0:
            pytest.fail(
                f"child exited {proc.returncode}\n--- stdout\n{proc.stdout}\n--- stderr\n{proc.stderr}"
            )
        return proc

    def result(self, code: str, **kw: Any) -> Any:
        """Runs ``code``, which calls ``emit(obj)`` once; returns ``obj``."""
        proc = self.run(code, **kw)
        lines = [line for line in proc.stdout.splitlines() if line.startswith(RESULT)]
        assert len(lines) == 1, f"expected one result line\n{proc.stdout}\n{proc.stderr}"
        return json.loads(lines[0][len(RESULT):])

    def gloo_ranks(self, script: str, run_id: str, world: int = 2) -> list:
        """Runs `script` as `world` ranks of a real torch.distributed job (the script
        reads RANK, WORLD_SIZE and INIT, a tcp:// rendezvous), each dumping its ring to
        rank<R>.ring; returns the rings, read in this process."""
        import socket

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        procs = []
        for rank in range(world):
            env = dict(self.env)
            env.update(
                RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(world), TORCHELASTIC_RUN_ID=run_id,
                INIT=f"tcp://127.0.0.1:{port}", FLARE_DUMP=str(self.tmp / f"rank{rank}.ring"),
                TMP=str(self.tmp),
            )
            procs.append(subprocess.Popen(
                [sys.executable, "-c", textwrap.dedent(script)], env=env, cwd=self.tmp,
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            ))
        for p in procs:
            out, err = p.communicate(timeout=300)
            assert p.returncode == 0, f"{out}\n{err}"
        from flare import _native

        return [_native.read_ring(str(self.tmp / f"rank{r}.ring")) for r in range(world)]

    def read_dump(self) -> Dict[str, Any]:
        """The dump the child wrote at shutdown, read in this (never traced) process."""
        from flare import _native

        assert self.dump.exists(), f"no dump at {self.dump}"
        return _native.read_ring(str(self.dump))


@pytest.fixture
def child(tmp_path: Path) -> Child:
    return Child(tmp_path)


def spans_named(ring: Dict[str, Any], name: str) -> list:
    return [s for s in ring["spans"] if s["name"] == name]
