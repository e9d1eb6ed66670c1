"""A peer that never arrives, on CPUs: ranks 0 and 1 call an Allreduce on device buffers (the fake
CUDA layer's, so the staged path through host MPI) that rank 2 joins only after sleeping past
MPIGPU_TIMEOUT_S. Ranks 0 and 1 must raise mpigpu's CommunicatorBroken within the timeout and a few
seconds (their wait for rank 2's post on the placement board gives up), a later call on that
communicator must raise at once, rank 2's late call must learn at once that the others gave up, and
every rank must then Free it and run a correct Allreduce on a new communicator. Then an abort from
another thread ends a call that a peer never joins, at once, and the peers' calls on that communicator
raise. Run under mpiexec -n 3 with MPIGPU_TIMEOUT_S set (tests/test_mpi.py)."""
import threading
import time

import numpy as np
from mpi4py import MPI

from fake_device import FakeCAI, install

install()
import mpigpu  # noqa: E402
from mpigpu.errors import CommunicatorBroken  # noqa: E402

timeout = mpigpu.config.timeout_s
world = mpigpu.COMM_WORLD
rank, n = world.Get_rank(), world.Get_size()
assert n == 3, 'run on 3 ranks'

comm, victim = world.Dup(), world.Dup()
x, y = np.full(4, rank + 1.0), np.zeros(4)
for c in (comm, victim):  # every rank takes part in the first call: the setup is agreed before a peer goes missing
    c.Allreduce(FakeCAI(x), FakeCAI(y))
    assert (y == 6.0).all(), y
if rank == 2:
    time.sleep(timeout + 3)  # never arrives, as far as the others' deadline goes
    t0 = time.monotonic()
    try:  # the others gave up on this call: rank 2 learns the communicator is broken, at once
        comm.Allreduce(FakeCAI(x), FakeCAI(y))
        raise AssertionError('rank 2: a call the others gave up on returned')
    except CommunicatorBroken as exc:
        assert time.monotonic() - t0 < 1, 'the late rank waited for peers that had given up'
        assert 'gave up' in str(exc), str(exc)
else:
    t0 = time.monotonic()
    try:
        comm.Allreduce(FakeCAI(x), FakeCAI(y))
        raise AssertionError(f'rank {rank}: the call returned although rank 2 never arrived')
    except CommunicatorBroken as exc:
        took = time.monotonic() - t0
        # at its own deadline, or as soon as the other waiting rank gave up at its own
        assert 0.9 * timeout <= took < timeout + 3, f'rank {rank}: error after {took:.1f} s (timeout {timeout} s)'
        assert isinstance(exc, MPI.Exception) and exc.Get_error_class() == MPI.ERR_PROC_FAILED
        assert 'Allreduce' in str(exc) and f'(rank {rank})' in str(exc), str(exc)
    t0 = time.monotonic()
    try:
        comm.Bcast(FakeCAI(x), root=0)
        raise AssertionError('a call on a broken communicator returned')
    except CommunicatorBroken:
        assert time.monotonic() - t0 < 1, 'a call on a broken communicator did not raise at once'
comm.Free()

fresh = world.Dup()
out = np.zeros(4)
fresh.Allreduce(FakeCAI(np.full(4, rank + 1.0)), FakeCAI(out))
assert (out == 6.0).all(), out

# abort: rank 0 calls, ranks 1 and 2 do not yet; another thread aborts rank 0's communicator
if rank == 0:
    threading.Timer(0.5, mpigpu.abort, (victim,)).start()
    t0 = time.monotonic()
    try:
        victim.Allreduce(FakeCAI(x), FakeCAI(y))
        raise AssertionError('the aborted call returned')
    except CommunicatorBroken as exc:
        took = time.monotonic() - t0
        assert took < 0.5 + 0.5, f'abort took {took:.2f} s to end the call'
        assert 'aborted' in str(exc), str(exc)
fresh.Barrier()
if rank != 0:
    try:  # rank 0 aborted the communicator: its peers' calls learn it at once
        victim.Allreduce(FakeCAI(x), FakeCAI(y))
        raise AssertionError(f'rank {rank}: a call on the communicator rank 0 aborted returned')
    except CommunicatorBroken as exc:
        assert 'rank 0 gave up' in str(exc), str(exc)
victim.Free()
fresh.Allreduce(FakeCAI(np.full(4, rank + 1.0)), FakeCAI(out))
assert (out == 6.0).all(), out
fresh.Free()
world.Barrier()
if rank == 0:
    print(f'fault on {n} ranks: peers that never arrived and an abort ended in errors; ok')
