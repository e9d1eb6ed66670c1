"""What the probes share (benchmarks/exchange_probe.py, benchmarks/p2p_probe.py; not a user tool): NCCL
from CuPy on the same ranks, a part timed in rounds of back-to-back calls, and the table of the slowest
rank's medians that rank 0 prints."""
import time

import numpy as np
from mpi4py import MPI

ROUNDS, ITERS = 5, 50


def nccl_comm(comm):
    """(cupy.cuda.nccl, a communicator over comm's ranks), or (None, None) without CuPy's NCCL."""
    try:
        from cupy.cuda import nccl
    except ImportError:
        return None, None
    rank = comm.Get_rank()
    uid = comm.bcast(nccl.get_unique_id() if rank == 0 else None)
    return nccl, nccl.NcclCommunicator(comm.Get_size(), uid, rank)


def timed(comm, fn, sync, iters=ITERS):
    """The median over ROUNDS of fn's time per call (us), each round `iters` calls back to back after a
    barrier, then sync() (the GPU work they left)."""
    best = []
    for _ in range(ROUNDS):
        comm.Barrier()
        t0 = time.perf_counter()
        for _ in range(iters):
            fn()
        sync()
        best.append((time.perf_counter() - t0) / iters * 1e6)
    return float(np.median(best))


def table(comm, title, sizes, measure):
    """measure(nbytes) -> {part: us} for each size; rank 0 prints the slowest rank's, one row a size."""
    rows = []
    for nbytes in sizes:
        got = measure(nbytes)
        rows.append((nbytes, {k: comm.allreduce(v, op=MPI.MAX) for k, v in got.items()}))
    if comm.Get_rank() == 0:
        keys = list(rows[0][1])
        print(title)
        print('| bytes | ' + ' | '.join(keys) + ' |')
        print('|---' * (len(keys) + 1) + '|')
        for nbytes, worst in rows:
            print(f'| {nbytes} | ' + ' | '.join(f'{worst[k]:.1f}' for k in keys) + ' |')
