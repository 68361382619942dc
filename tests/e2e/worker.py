"""One rank of a small real training-like job for the end-to-end test.

Each iteration: a `compute` span holding real matrix work (numpy matmuls) and a wait of
E2E_DEVICE_MS that stands for the device time a training process spends waiting on its GPU
kernels (this machine has no GPU; the wait keeps 8 processes from saturating 2 cores, so
the timing reflects each rank's own work rather than the scheduler), then a real
ring all-reduce of a gradient-sized array over TCP (reduce-scatter then all-gather, every
rank sending to its right neighbour and receiving from its left, so every rank does the
same work) inside an `all_reduce` span, then `flare.step()`.
One rank (E2E_SLOW_RANK) does E2E_SLOW_EXTRA more matmuls per iteration: the straggler the
server must name. Ranks not in E2E_EARLY_RANKS start E2E_LATE_MS later; E2E_STALL_RANK pauses
once for E2E_STALL_MS after E2E_STALL_AFTER_S (starting at a phase of the windows in
E2E_STALL_PHASE, "from,to,window" seconds). Nothing here knows about Flare's analysis; it only traces.
"""

import gc
import os
import socket
import struct
import sys
import time

import numpy as np

import flare

RANK = int(os.environ["RANK"])
WORLD = int(os.environ["WORLD_SIZE"])
PORT = int(os.environ["E2E_PORT"])
SLOW_RANK = int(os.environ.get("E2E_SLOW_RANK", "-1"))
SLOW_EXTRA = int(os.environ.get("E2E_SLOW_EXTRA", "12"))
SECONDS = float(os.environ.get("E2E_SECONDS", "10"))
MATMULS = int(os.environ.get("E2E_MATMULS", "1"))
DEVICE_S = float(os.environ.get("E2E_DEVICE_MS", "25")) / 1e3
STALL_RANK = int(os.environ.get("E2E_STALL_RANK", "-1"))
STALL_AFTER_S = float(os.environ.get("E2E_STALL_AFTER_S", "4"))
STALL_MS = float(os.environ.get("E2E_STALL_MS", "0"))
# Where in the agent's windows (Unix time modulo E2E_WINDOW_S) the stall may begin: by
# default anywhere; a test that needs the stall inside one window picks its start.
STALL_PHASE = tuple(float(x) for x in os.environ.get("E2E_STALL_PHASE", "0,1e9,1e9").split(","))
N = 256
GRAD = 1 << 15  # float32 elements: 128 KiB per all-reduce


def recv_exact(sock, n):
    buf = bytearray(n)
    view = memoryview(buf)
    got = 0
    while got < n:
        k = sock.recv_into(view[got:])
        if k == 0:
            raise ConnectionError("peer closed")
        got += k
    return bytes(buf)


def connect_ring():
    """Each rank listens on PORT + rank for its left neighbour and connects to its right
    neighbour (retrying while it starts). Returns (left, right) sockets."""
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("127.0.0.1", PORT + RANK))
    srv.listen(1)
    right_port = PORT + (RANK + 1) % WORLD
    deadline = time.time() + 30
    while True:
        try:
            right = socket.create_connection(("127.0.0.1", right_port))
            break
        except OSError:
            if time.time() > deadline:
                raise
            time.sleep(0.05)
    left, _ = srv.accept()
    srv.close()
    for s in (left, right):
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return left, right


def all_reduce(ring, grad):
    """Ring all-reduce (sum): WORLD-1 reduce-scatter steps, then WORLD-1 all-gather steps.
    A chunk is small enough to sit in the socket buffer, so send-then-receive cannot
    deadlock."""
    left, right = ring
    chunks = np.array_split(grad.copy(), WORLD)
    for s in range(WORLD - 1):
        send = chunks[(RANK - s) % WORLD]
        right.sendall(send.tobytes())
        i = (RANK - s - 1) % WORLD
        chunks[i] = chunks[i] + np.frombuffer(recv_exact(left, chunks[i].nbytes), dtype=np.float32)
    for s in range(WORLD - 1):
        right.sendall(chunks[(RANK - s + 1) % WORLD].tobytes())
        i = (RANK - s) % WORLD
        chunks[i] = np.frombuffer(recv_exact(left, chunks[i].nbytes), dtype=np.float32)
    return np.concatenate(chunks)


def main():
    # Ranks that start late (E2E_LATE_MS, all but E2E_EARLY_RANKS): the early ones wait,
    # untraced, in the ring's connect, as ranks of a real job wait for the slowest to
    # load. That wait is start-up, not an iteration's work.
    early = {int(r) for r in os.environ.get("E2E_EARLY_RANKS", "").split(",") if r}
    if early and RANK not in early:
        time.sleep(float(os.environ.get("E2E_LATE_MS", "0")) / 1e3)
    # As Megatron's --manual-gc does: no automatic cyclic GC passes at random points of a
    # step (one rank's 1-2 ms pass is a real, if small, host stall that Flare reports).
    gc.collect()
    gc.freeze()
    gc.disable()
    flare.init()
    ring = connect_ring()
    rng = np.random.default_rng(RANK)
    a = rng.standard_normal((N, N), dtype=np.float32)
    b = rng.standard_normal((N, N), dtype=np.float32)
    grad = rng.standard_normal(GRAD, dtype=np.float32)
    work = MATMULS + (SLOW_EXTRA if RANK == SLOW_RANK else 0)
    # Everyone stops after the same number of iterations: rank 0 decides when and says so
    # in the all-reduced array (element 0 is 1 on rank 0 at the end, 0 elsewhere).
    start = time.time()
    step = 0
    stalled = False
    while True:
        with flare.span("forward_backward", kind="compute"):
            c = a
            for _ in range(work):
                c = np.tanh(c @ b)
            time.sleep(DEVICE_S)
        if (
            RANK == STALL_RANK
            and not stalled
            and time.time() - start > STALL_AFTER_S
            and STALL_PHASE[0] <= time.time() % STALL_PHASE[2] < STALL_PHASE[1]
        ):
            # One pause outside any span (a process descheduled or paging once).
            stalled = True
            time.sleep(STALL_MS / 1e3)
        grad[0] = 1.0 if (RANK == 0 and time.time() - start > SECONDS) else 0.0
        with flare.span("all_reduce", kind="all_reduce", amount=grad.nbytes, group="world", group_size=WORLD):
            total = all_reduce(ring, grad)
        step += 1
        flare.step(step)
        if total[0] >= 1.0:
            break
    flare.shutdown()
    print(f"rank {RANK}: {step} iterations", file=sys.stderr)


if __name__ == "__main__":
    main()
