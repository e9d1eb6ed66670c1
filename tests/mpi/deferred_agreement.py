"""A non-blocking collective on device buffers never waits for its peers to reach the call (MPI: it
returns whatever the other ranks do), while its ranks still agree on its path (mpigpu/_state/agree.py).

Patterns, each on the device (every rank) and mixed (rank 1 on the host), each result checked:
- rank 0 starts the call and then sends rank 1 the message rank 1 waits for before it starts the
  same call (with a wait for the peers' posts inside the call, both ranks would wait for good);
- rank 0 starts several calls before its peers reach them, then another collective of another kind
  on the same communicator (host buffers), which must follow them in MPI's order;
- the requests completed through mpi4py's class-level Waitall (the request thread decides them);
- Test in a loop until done; a Barrier and a pickled bcast after an undecided call;
- a blocking call on another communicator after an undecided call (it starts first: launch order);
- two calls, the first waited for before the Send the peers need for the second;
- Ibarrier and host-buffer non-blocking collectives after an undecided call, before that Send.

Runs on CPUs with the fake CUDA layer (DEFERRED_ENGINE=1: the fake engine, whose device ranks meet in
shared memory and never in MPI; else the staged path) and on GPUs with MPIGPU_CHECK_ON_GPU=1 (CuPy),
under mpiexec -n 2..4; DEFERRED_NO_BOARD=1: ranks that cannot share the board's file (they agree
through MPI instead).
"""
import os
import time

import numpy as np
from mpi4py import MPI

from fake_device import install_unless_gpu

cp = install_unless_gpu()
if cp is None and os.environ.get('DEFERRED_ENGINE') == '1':
    from fake_engine import install_engine
    FakeCAI = install_engine()
elif cp is None:
    from fake_device import FakeCAI

import mpigpu  # noqa: E402

from mpigpu._state import agree as _agree  # noqa: E402

if os.environ.get('DEFERRED_NO_BOARD') == '1':
    _agree._board_dir = lambda: '/proc/mpigpu-no-such-dir'

deferred = [0]  # calls that returned undecided on this rank (rank 0 must have some: the peers are late)
_undecided_init = _agree.Undecided.__init__


def _counted(self, *args, **kwargs):
    deferred[0] += 1
    _undecided_init(self, *args, **kwargs)


_agree.Undecided.__init__ = _counted
world = mpigpu.COMM_WORLD
rank, n = world.Get_rank(), world.Get_size()
LATE_S = 0.05  # how long the late ranks stay away: far above the calls' spin for their peers' posts
checks = 0


def device(arr):
    return cp.asarray(arr) if cp is not None else FakeCAI(arr)


def values(obj):
    if cp is not None and isinstance(obj, cp.ndarray):
        return cp.asnumpy(obj)
    return obj.a if hasattr(obj, 'a') else np.asarray(obj)


def buf(arr, on_device):
    return device(arr.copy()) if on_device else arr.copy()


def check(got, expect, label):
    global checks
    if not np.array_equal(values(got), expect):
        raise AssertionError(f'rank {rank}: {label}: {values(got)} != {expect}')
    checks += 1


def warm_up(comm):
    """The communicator's first engine collective (its agreement's setup), blocking on every rank."""
    x = device(np.ones(4, np.int64))
    comm.Allreduce(MPI.IN_PLACE, x)
    check(x, np.full(4, n), 'warm-up')


def send_after_start(comm, on_device):
    """Rank 0: Ibcast, then the message; the others: the message, then Ibcast."""
    data = np.arange(8, dtype=np.int64) + 100
    b = buf(data if rank == 0 else np.zeros(8, np.int64), on_device)
    token = np.zeros(1, np.int64)
    if rank == 0:
        req = comm.Ibcast(b, root=0)
        for peer in range(1, n):
            comm.Send(np.array([7], np.int64), dest=peer, tag=11)
    else:
        comm.Recv(token, source=0, tag=11)
        req = comm.Ibcast(b, root=0)
    req.Wait()
    check(b, data, f'Ibcast then Send ({"device" if on_device else "mixed"})')


def then_other_collective(comm, on_device):
    """Rank 0 starts two calls while the others stay away, then an Alltoall on host buffers."""
    if rank != 0:
        time.sleep(LATE_S)
    a = buf(np.full(4, rank + 1, np.int64), on_device)
    g = buf(np.zeros(4 * n, np.int64), on_device)
    r1 = comm.Iallreduce(MPI.IN_PLACE, a)
    r2 = comm.Iallgather(buf(np.full(4, rank, np.int64), on_device), g)
    sent = np.arange(n, dtype=np.int64) + 10 * rank
    got = np.zeros(n, np.int64)
    comm.Alltoall(sent, got)
    check(got, np.arange(n, dtype=np.int64) * 10 + rank, 'Alltoall after undecided calls')
    MPI.Request.Waitall([r1, r2])
    check(a, np.full(4, n * (n + 1) // 2), 'Iallreduce before Alltoall')
    check(g, np.repeat(np.arange(n, dtype=np.int64), 4), 'Iallgather before Alltoall')


def class_level_waitall(comm, on_device):
    """Rank 0 starts three calls before the others; mpi4py's Waitall (MPI handles only) completes them."""
    if rank != 0:
        time.sleep(LATE_S)
    xs = [buf(np.full(3, rank + k, np.int64), on_device) for k in range(3)]
    reqs = [comm.Iallreduce(MPI.IN_PLACE, x) for x in xs]
    MPI.Request.Waitall(reqs)
    for k, x in enumerate(xs):
        check(x, np.full(3, n * (n - 1) // 2 + n * k), f'Waitall of undecided call {k}')


def test_until_done(comm, on_device):
    if rank != 0:
        time.sleep(LATE_S)
    x = buf(np.full(5, rank, np.int64), on_device)
    req = comm.Iallreduce(MPI.IN_PLACE, x)
    while not req.Test():
        time.sleep(1e-4)
    check(x, np.full(5, n * (n - 1) // 2), 'Test until done')


def then_blocking_barrier(comm, on_device):
    """An undecided call, then a Barrier and a pickled bcast (collectives without buffers)."""
    if rank != 0:
        time.sleep(LATE_S)
    x = buf(np.full(2, 1, np.int64), on_device)
    req = comm.Iallreduce(MPI.IN_PLACE, x)
    comm.Barrier()
    assert comm.bcast('hello' if rank == 0 else None, root=0) == 'hello'
    req.Wait()
    check(x, np.full(2, n), 'Iallreduce before Barrier')


def then_another_communicator(comm, other, on_device):
    """Rank 0 starts a call while the others stay away, then a blocking call on another communicator:
    the undecided call starts first (the engine's kernels meet their peers' in launch order)."""
    if rank != 0:
        time.sleep(LATE_S)
    a = buf(np.full(4, rank + 1, np.int64), on_device)
    b = buf(np.full(4, 2 * rank, np.int64), on_device)
    req = comm.Iallreduce(MPI.IN_PLACE, a)
    other.Allreduce(MPI.IN_PLACE, b)
    req.Wait()
    check(a, np.full(4, n * (n + 1) // 2), 'Iallreduce before a call on another communicator')
    check(b, np.full(4, n * (n - 1)), 'the call on another communicator')


def wait_first_then_send(comm, on_device):
    """Rank 0: two Ibcasts, waits for the first, then sends what the others wait for before their
    second (the second must not be waited for by the first's Wait)."""
    data = [np.arange(6, dtype=np.int64) + 10 * k for k in range(2)]
    bufs = [buf(d if rank == 0 else np.zeros(6, np.int64), on_device) for d in data]
    if rank == 0:
        r0 = comm.Ibcast(bufs[0], root=0)
        r1 = comm.Ibcast(bufs[1], root=0)
        r0.Wait()
        for peer in range(1, n):
            comm.Send(np.array([1], np.int64), dest=peer, tag=12)
        r1.Wait()
    else:
        comm.Ibcast(bufs[0], root=0).Wait()
        comm.Recv(np.zeros(1, np.int64), source=0, tag=12)
        comm.Ibcast(bufs[1], root=0).Wait()
    for k in range(2):
        check(bufs[k], data[k], f'Ibcast {k} of two, the first waited for before a Send')


def followers_never_wait(comm, on_device):
    """Rank 0: a device Ibcast, then Ibarrier, a host-buffer Iallreduce and Ialltoall, then the message
    its peers wait for before they start any: none of rank 0's calls waits (each later one follows the
    undecided Ibcast in MPI's order)."""
    data = np.arange(5, dtype=np.int64) + 40
    b = buf(data if rank == 0 else np.zeros(5, np.int64), on_device)
    x, sent, got = np.full(3, rank + 1, np.int64), np.arange(n, dtype=np.int64) + 10 * rank, np.zeros(n, np.int64)
    if rank != 0:
        comm.Recv(np.zeros(1, np.int64), source=0, tag=13)
    reqs = [comm.Ibcast(b, root=0), comm.Ibarrier(), comm.Iallreduce(MPI.IN_PLACE, x), comm.Ialltoall(sent, got)]
    if rank == 0:
        for peer in range(1, n):
            comm.Send(np.array([1], np.int64), dest=peer, tag=13)
    MPI.Request.Waitall(reqs)
    check(b, data, 'Ibcast followed by Ibarrier, Iallreduce, Ialltoall')
    check(x, np.full(3, n * (n + 1) // 2), 'host Iallreduce after an undecided call')
    check(got, np.arange(n, dtype=np.int64) * 10 + rank, 'Ialltoall after an undecided call')


def main():
    comm, other = world.Dup(), world.Dup()
    warm_up(comm)
    warm_up(other)
    for on_device in (True, False):
        # mixed: rank 1 passes host buffers, so the ranks agree on the host MPI call
        mine = on_device or rank != 1
        for pattern in (send_after_start, then_other_collective, class_level_waitall, test_until_done,
                        then_blocking_barrier, then_another_communicator, wait_first_then_send,
                        followers_never_wait):
            before = deferred[0]
            if pattern is then_another_communicator:
                pattern(comm, other, mine)
            else:
                pattern(comm, mine)
            comm.Barrier()
            if rank == 0 and n > 1 and deferred[0] == before:
                raise AssertionError(f'{pattern.__name__}: no call of rank 0 returned undecided')
    status = comm.agreement_status()
    comm.Free()
    other.Free()
    counts = world.gather(checks, root=0)
    if rank == 0:
        print(f'{sum(counts)} checks passed; agreed by {status}', flush=True)


main()
