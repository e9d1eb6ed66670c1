"""A call made below Python against the same call from Python, on GPUs: MPI_Allreduce with device
pointers through the interposer, from a loop in C (benchmarks/pmpi_caller_loop.c, built here with the
C compiler and loaded into the process, as a C extension or mpi4jax calls MPI) and one call at a time
through ctypes, and comm.Allreduce on the same CuPy arrays, float32 sum, alternated in rounds in one
process.

Run under `python -m mpigpu` (the interposer in place), one rank per GPU:
    mpirun -n 4 python -m mpigpu benchmarks/pmpi_caller.py
Prints a table (slowest rank, median of rounds, us per call): Python's call, the C loop's call, their
ratio, the call through ctypes (a Python caller's cost of a C call on top), and the share of the calls
below Python that the engine's fast path ran (its C entry or, through the handler, its Python one;
rank 0); and checks the results of both callers below Python. Host buffers: benchmarks/pmpi_host_caller.py.
"""
import ctypes
import statistics
import sys
import time

import cupy as cp
from mpi4py import MPI

from mpigpu import _interpose
from mpigpu import _cuda
from mpigpu._face import interposed as handler
from pmpi_loop import W, c_loops, handles as handle_words

assert _interpose.status() == 'on', f'run under python -m mpigpu (interposer: {_interpose.status()})'
comm = MPI.COMM_WORLD
rank, n = comm.Get_rank(), comm.Get_size()


def fast_calls():
    """Calls the engine's fast path ran: from Python, and through the interposer's entry (in C)."""
    return _cuda.device.engine_fast_calls() + _cuda.device.pmpi_entry_calls()


cp.cuda.Device(rank % cp.cuda.runtime.getDeviceCount()).use()
c = ctypes.CDLL(None)
allreduce = c.MPI_Allreduce
allreduce.argtypes = (ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int, W, W, W)
handles = handle_words(MPI.FLOAT, MPI.SUM, comm)
loop, library_loop = c_loops()
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

    def from_c(iters):
        s = loop(a.data.ptr, b.data.ptr, count, *handles, iters)
        assert s >= 0, f'rank {rank}: MPI_Allreduce from C failed ({nbytes} B)'
        return s
    for fn in (from_python, below, lambda: from_c(1)):
        fn()
    want = (cp.arange(count, dtype=cp.float32) % 1000) * n + n * (n - 1) / 2
    for caller, fn in (('ctypes', below), ('a C loop', lambda: from_c(1))):
        b.fill(0)
        cp.cuda.get_current_stream().synchronize()  # a C caller's stream work is done before it calls MPI
        fn()
        assert bool(cp.all(b == want)), f'rank {rank}: MPI_Allreduce from {caller} gave a wrong result ({nbytes} B)'
    t = timed(from_python, 3)
    iters = max(3, min(2000, int(budget / max(t, 1) * 1e6)))
    iters = comm.allreduce(iters, op=MPI.MIN)
    py, cl, ct, fast = [], [], [], 0
    for _ in range(ROUNDS):
        py.append(timed(from_python, iters))
        f0 = fast_calls()
        comm.Barrier()
        cl.append(from_c(iters) / iters * 1e6)
        ct.append(timed(below, iters))
        fast += fast_calls() - f0
    p, q, z = (slowest(statistics.median(x)) for x in (py, cl, ct))
    rows.append((nbytes, p, q, q / p, z, fast / (2 * ROUNDS * iters)))

if rank == 0:
    print(f'# MPI_Allreduce below Python (interposer) vs comm.Allreduce, {n} ranks, CuPy float32 sum, us per '
          f'call (slowest rank, median of {ROUNDS} rounds); {handler.calls()} calls handled on rank 0')
    print('| bytes | from Python | from C (a loop in C) | C / Python | through ctypes | on the fast path |')
    print('|---|---|---|---|---|---|')
    for nbytes, p, q, ratio, z, share in rows:
        print(f'| {nbytes} | {p:.1f} | {q:.1f} | {ratio:.2f}x | {z:.1f} | {share:.0%} |')
    sys.stdout.flush()
