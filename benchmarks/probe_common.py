"""What the probes share (benchmarks/exchange_probe.py, p2p_probe.py, hier_probe.py, rail_probe.py; not a
user tool): NCCL from CuPy on the same ranks, a part timed in rounds of back-to-back calls, and the table
of the slowest rank's medians that rank 0 prints; forms of one call timed in alternating rounds, NCCL's
among them where the baseline is there."""
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


def with_nccl(forms, impl, b, op, rank):
    """`forms` with the baseline `impl` (mpigpu.perf.baselines) of buffers b as 'nccl', where it runs."""
    from mpigpu.perf import baselines
    try:
        forms['nccl'] = impl.make(b, op)
    except baselines.Unavailable as exc:
        if rank == 0:
            print('nccl unavailable:', exc)
    return forms


def alternating(comm, forms, rounds, calls, warm=1):
    """{form: us per call}: the best of `rounds` rounds in which each form in turn runs `calls` calls back
    to back (after `warm` calls and a barrier), the slowest rank's time of each round."""
    best = {k: float('inf') for k in forms}
    for _ in range(rounds):
        for k, fn in forms.items():
            for _ in range(warm):
                fn()
            comm.Barrier()
            t0 = time.perf_counter()
            for _ in range(calls):
                fn()
            best[k] = min(best[k], comm.allreduce((time.perf_counter() - t0) / calls * 1e6, op=MPI.MAX))
    return best
