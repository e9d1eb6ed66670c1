"""Host buffers below Python in a `python -m mpigpu` process: what the interposer adds to a C caller's
MPI_Allreduce on NumPy arrays (a loop in C, benchmarks/pmpi_caller_loop.c) against the same loop on
PMPI_Allreduce (the library alone), and comm.Allreduce from Python for scale. The interposer sends a
host-buffer call through mpigpu too, whose peers must learn where its buffers are: the engine's entry
posts it on the communicator's board and the library makes it, or the interposer posts it in the call's
wrapper from the routes the entry kept of the communicator, with no GIL (pmpi/host_routes.h), or, with
those turned off for a round ("through Python"), the entry posts it from its
Python objects under the GIL, as before it existed. Runs on CPUs (a build with the CUDA layer) and GPU
hosts alike:
    mpirun -n 2 python -m mpigpu benchmarks/pmpi_host_caller.py
The process is armed as one with GPU arrays is (a GPU array library loaded, or a stub module of such a
name where none is): its communicators agree through their boards, so each host call is posted there.
Prints the slowest rank's median of rounds, us per call, and the share of calls posted without
the GIL (rank 0); checks the sums."""
import ctypes
import statistics
import sys
import time
import types

from mpigpu import _cuda

if not _cuda.armed():
    sys.modules.setdefault('cuda', types.ModuleType('cuda'))  # imported by nothing: arms the agreement

import numpy as np  # noqa: E402
from mpi4py import MPI  # noqa: E402

from mpigpu import _interpose  # noqa: E402
from mpigpu._face import interposed as handler  # noqa: E402
from pmpi_loop import c_loops, handles  # noqa: E402

assert _interpose.status() == 'on', f'run under python -m mpigpu (interposer: {_interpose.status()})'
comm = MPI.COMM_WORLD
rank, n = comm.Get_rank(), comm.Get_size()
loop, library_loop = c_loops()
words = handles(MPI.FLOAT, MPI.SUM, comm)
posted_calls = getattr(_cuda.device, 'pmpi_entry_host_fast_calls', lambda: 0)
lib = handler._installed.lib
host_routes = getattr(_cuda.device, 'pmpi_host_routes_address', None)
can_switch = host_routes is not None and hasattr(lib, 'mpigpu_pmpi_set_host_routes')


def no_gil_posts(on):
    """Turns the interposer's post from the routes the entry keeps on or off (mpigpu_pmpi_set_host_routes)."""
    lib.mpigpu_pmpi_set_host_routes(ctypes.c_void_p(host_routes() if on else None))


def through_python(*args):
    no_gil_posts(False)
    try:
        return loop(*args)
    finally:
        no_gil_posts(True)


ROUNDS, ITERS = 15, 2000


def slowest(x):
    return comm.allreduce(x, op=MPI.MAX)


def python_loop(a, b, iters):
    comm.Barrier()
    t0 = time.perf_counter()
    for _ in range(iters):
        comm.Allreduce(a, b)
    return (time.perf_counter() - t0) / iters * 1e6


rows = []
for nbytes in [8, 1024, 65536]:
    count = nbytes // 4
    a, b = np.arange(count, dtype=np.float32) + rank, np.zeros(count, np.float32)
    args = (a.ctypes.data, b.ctypes.data, count) + words
    loop(*args, 1)  # the first call of a function on a communicator is the handler's: it binds it
    posted = posted_calls()
    times = {'library': [], 'interposer': [], 'through Python': [], 'python': []}
    loops = [('library', library_loop), ('interposer', loop)]
    if can_switch:
        loops.append(('through Python', through_python))
    for k in range(ROUNDS):
        for key, fn in loops if k % 2 == 0 else loops[::-1]:  # (the order alternated: no loop always first)
            comm.Barrier()
            s = fn(*args, ITERS)
            assert s >= 0, f'rank {rank}: MPI_Allreduce of host buffers from C failed ({nbytes} B)'
            times[key].append(s / ITERS * 1e6)
        times['python'].append(python_loop(a, b, ITERS))
    assert (b == np.arange(count, dtype=np.float32) * n + n * (n - 1) / 2).all(), f'rank {rank}: wrong host sum'
    share = (posted_calls() - posted) / (ROUNDS * ITERS)  # (the interposer's rounds: the no-GIL posts)

    def added(key):
        """The median over rounds of key's time less the library's in the same round (the host's drift
        between rounds cancels), slowest rank."""
        if not times[key]:
            return float('nan')
        return slowest(statistics.median(t - base for t, base in zip(times[key], times['library'])))

    rows.append((nbytes,) + tuple(slowest(statistics.median(times[k]) if times[k] else float('nan'))
                                  for k in ('library', 'interposer', 'through Python', 'python'))
                + (added('interposer'), added('through Python'), share))
if rank == 0:
    mode = handler._installed.comms[comm.handle][1].agreement.describe()
    print(f'# host buffers, {n} ranks ({mode}): MPI_Allreduce from a C loop on the library (PMPI_Allreduce) and '
          f'through the interposer, and comm.Allreduce from Python; us per call, slowest rank, median of {ROUNDS} '
          f'rounds of {ITERS}; added: the median of each round\'s difference to the library in that round')
    print('| bytes | library | interposer | added | through Python | added | from Python | posted without the GIL |')
    print('|---|---|---|---|---|---|---|---|')
    for nbytes, base, via, slow, py, via_added, slow_added, share in rows:
        print(f'| {nbytes} | {base:.2f} | {via:.2f} | {via_added * 1000:+.0f} ns | {slow:.2f} | '
              f'{slow_added * 1000:+.0f} ns | {py:.2f} | {share:.0%} |')
    sys.stdout.flush()
