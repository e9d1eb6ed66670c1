"""A call made below Python against the same call from Python, on GPUs: MPI_Allreduce with device
pointers through the interposer (called with ctypes, as a C extension or mpi4jax calls it) and
comm.Allreduce on the same CuPy arrays, float32 sum, alternated in rounds in one process.

Run under `python -m mpigpu` (the interposer in place), one rank per GPU:
    mpirun -n 4 python -m mpigpu benchmarks/pmpi_caller.py
Prints a table (slowest rank, median of rounds, us per call): Python's call, the call below Python, the
same less ctypes' own cost of a call (what a C caller pays), their ratio, and the share of the calls below
Python that the engine's fast path ran (its C entry or, through the handler, its Python one; rank 0);
and checks the results.
"""
import ctypes
import statistics
import sys
import time

import cupy as cp
from mpi4py import MPI

from mpigpu import _interpose
from mpigpu import _cuda
from mpigpu._interpose import handler

assert _interpose.status() == 'on', f'run under python -m mpigpu (interposer: {_interpose.status()})'
comm = MPI.COMM_WORLD
rank, n = comm.Get_rank(), comm.Get_size()


def fast_calls():
    """Calls the engine's fast path ran: from Python, and through the interposer's entry (in C)."""
    return _cuda.device.engine_fast_calls() + _cuda.device.pmpi_entry_calls()


cp.cuda.Device(rank % cp.cuda.runtime.getDeviceCount()).use()
c = ctypes.CDLL(None)
W = ctypes.c_ssize_t
allreduce = c.MPI_Allreduce
allreduce.argtypes = (ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int, W, W, W)
noop = c.mpigpu_pmpi_count  # a C function that does nothing: ctypes' cost of one call
handles = (W(MPI.FLOAT.handle), W(MPI.SUM.handle), W(comm.handle))
ROUNDS, budget = 7, 0.05


def timed(fn, iters):
    comm.Barrier()
    t0 = time.perf_counter()
    for _ in range(iters):
        fn()
    cp.cuda.get_current_stream().synchronize()
    return (time.perf_counter() - t0) / iters * 1e6


def slowest(x):
    return comm.allreduce(x, op=MPI.MAX)


rows = []
for nbytes in [8, 1024, 8192, 65536, 1 << 20, 8 << 20, 64 << 20]:
    count = nbytes // 4
    a = (cp.arange(count, dtype=cp.float32) % 1000) + rank  # sums exact in float32 at every size
    b = cp.zeros(count, cp.float32)
    from_python = lambda: comm.Allreduce(a, b)  # noqa: E731
    below = lambda: allreduce(a.data.ptr, b.data.ptr, count, *handles)  # noqa: E731
    for fn in (from_python, below):
        fn()
    want = (cp.arange(count, dtype=cp.float32) % 1000) * n + n * (n - 1) / 2
    b.fill(0)
    cp.cuda.get_current_stream().synchronize()  # a C caller's stream work is done before it calls MPI
    below()
    assert bool(cp.all(b == want)), f'rank {rank}: MPI_Allreduce below Python gave a wrong result ({nbytes} B)'
    t = timed(from_python, 3)
    iters = max(3, min(2000, int(budget / max(t, 1) * 1e6)))
    iters = comm.allreduce(iters, op=MPI.MIN)
    py, cc, nop, fast = [], [], [], 0
    for _ in range(ROUNDS):
        py.append(timed(from_python, iters))
        f0 = fast_calls()
        cc.append(timed(below, iters))
        fast += fast_calls() - f0
        t0 = time.perf_counter()
        for _ in range(1000):
            noop()
        nop.append((time.perf_counter() - t0) * 1e3)
    p, q, z = slowest(statistics.median(py)), slowest(statistics.median(cc)), statistics.median(nop)
    rows.append((nbytes, p, q, q - z, (q - z) / p, fast / (ROUNDS * iters)))

if rank == 0:
    print(f'# MPI_Allreduce below Python (interposer handler) vs comm.Allreduce, {n} ranks, CuPy float32 sum, '
          f'us per call (slowest rank, median of {ROUNDS} rounds); {handler.calls()} calls handled on rank 0')
    print('| bytes | from Python | below Python (ctypes) | less ctypes (C caller) | C / Python | on the fast path |')
    print('|---|---|---|---|---|---|')
    for nbytes, p, q, r_, ratio, share in rows:
        print(f'| {nbytes} | {p:.1f} | {q:.1f} | {r_:.1f} | {ratio:.2f}x | {share:.0%} |')
    sys.stdout.flush()
