"""Host-buffer calls made below Python (ctypes, as mpi4jax's staging mode or a C extension makes them) in a
`python -m mpigpu` process on a CPU build with the CUDA layer (no fake layer): the engine's entry
(_device's _pmpi_entry.pxi) posts each for its peers as mpigpu's method of the same name would and the
library makes it, without the handler's Python, where the method does no more than that (the engine
collectives, the generated collective methods, the sends); receives and methods of their own still go to
the handler. Each result is compared with mpi4py's. Run under mpiexec -n 1..4 (tests/test_pmpi.py)."""
import sys
import types

# Armed, as a process with a GPU array library loaded is (mpigpu._cuda.armed): its communicators agree on
# each call's path through their boards, so a host call's post is a store into the board (a stub module of
# one of those names, imported by nothing)
sys.modules.setdefault('cuda', types.ModuleType('cuda'))

import numpy as np  # noqa: E402
from mpi4py import MPI  # noqa: E402

import pmpi_calls  # noqa: E402
from pmpi_calls import call, counted, h, p, same  # noqa: E402

from mpigpu import _cuda, _interpose  # noqa: E402
from mpigpu._face import interposed as handler  # noqa: E402
from mpigpu._ext._board import routes_changed  # noqa: E402

assert _interpose.status() == 'on', _interpose.status()
device = _cuda.device
if handler._installed.engine_entry is None:
    print('pmpi host entry: no engine entry in this build (CUDA layer not built)')
    sys.exit(0)
comm = MPI.COMM_WORLD
rank, n = comm.Get_rank(), comm.Get_size()



def rounds(k, *steps):
    """Each step k times (the first call of a function on a communicator is the handler's: it binds it)."""
    for _ in range(k):
        for step in steps:
            step()


x = np.arange(12, dtype=np.float64) + rank
nxt, prv = (rank + 1) % n, (rank - 1) % n
y, a2a, g, r = np.zeros(12), np.zeros(4 * n, np.int32), np.zeros(3 * n, np.float32), np.zeros(5, np.int64)
ss, sr = np.full(6, rank, np.int16), np.zeros(6, np.int16)
steps = [
    lambda: call('Allreduce', p(x), p(y), 12, h(MPI.DOUBLE), h(MPI.SUM), h(comm)),
    lambda: call('Alltoall', p(np.repeat(np.arange(n, dtype=np.int32) + 10 * rank, 4)), 4, h(MPI.INT), p(a2a), 4,
                 h(MPI.INT), h(comm)),
    lambda: call('Gather', p(np.full(3, rank, np.float32)), 3, h(MPI.FLOAT), p(g), 3, h(MPI.FLOAT), 0, h(comm)),
    lambda: call('Scan', p(np.full(5, rank + 1, np.int64)), p(r), 5, h(MPI.INT64_T), h(MPI.SUM), h(comm)),
]
handled, posted = handler.calls(), device.pmpi_entry_host_calls()
rounds(3, *steps)
same(y, np.arange(12, dtype=np.float64) * n + n * (n - 1) / 2, 'Allreduce')
same(a2a, np.repeat(np.arange(n, dtype=np.int32) * 10 + rank, 4), 'Alltoall')
if rank == 0:
    same(g, np.repeat(np.arange(n, dtype=np.float32), 3), 'Gather')
same(r, np.full(5, (rank + 1) * (rank + 2) // 2, np.int64), 'Scan')
# a send and a receive around the ring: the send passes, the receive is the handler's
handled_ring, posted_ring = handler.calls(), device.pmpi_entry_host_calls()
for k in range(3):
    req = comm.Irecv(sr, source=prv, tag=5)
    call('Send', p(ss), 6, h(MPI.SHORT), nxt, 5, h(comm))
    req.Wait()
    same(sr, np.full(6, prv, np.int16), f'Send, round {k}')
    ss2 = np.zeros(6, np.int16)
    sreq = comm.Isend(np.full(6, rank + 50, np.int16), dest=nxt, tag=6)
    call('Recv', p(ss2), 6, h(MPI.SHORT), prv, 6, h(comm), None)
    sreq.Wait()
    same(ss2, np.full(6, prv + 50, np.int16), f'Recv, round {k}')
ring_posted = device.pmpi_entry_host_calls() - posted_ring
ring_handled = handler.calls() - handled_ring
# the first call of each function went to the handler; the two later rounds to the entry
assert device.pmpi_entry_host_calls() - posted - ring_posted >= 2 * len(steps), \
    (device.pmpi_entry_host_calls() - posted - ring_posted)
assert ring_posted == 3 and ring_handled >= 3, (ring_posted, ring_handled)  # sends passed, receives handled
counted(2)

# The interposer's post from the routes the entry keeps (pmpi/host_routes.h), with no GIL: once a function's host call on a communicator went
# through the entry's Python (which keeps its routes), the next ones are posted from what it kept, until
# the routes' epoch moves (any communicator's routes changed), when the next goes through Python again.
fast = device.pmpi_entry_host_fast_calls
allreduce = steps[0]
allreduce()
agreement = handler._installed.comms[comm.handle][1].agreement
assert agreement.mode == ('board' if n > 1 else 'solo'), agreement.describe()
posts = (lambda: agreement.board.calls) if n > 1 else (lambda: 0)
f0, b0 = fast(), posts()
allreduce()
allreduce()
assert fast() - f0 == 2, fast() - f0
assert posts() - b0 == (2 if n > 1 else 0), posts() - b0  # posted on the board, as the method posts
routes_changed()  # what the entry kept is not used: the next call asks Python, which keeps it anew
f0 = fast()
allreduce()
assert fast() == f0, fast() - f0
allreduce()
assert fast() == f0 + 1, fast() - f0
counted(4)
# a communicator freed: the entry does not post a call of the next one (whose handle may be the same) from
# what it kept of the first; the results stay mpi4py's
reused = False  # whether a freed communicator's handle named the next (else this part shows less)
for k in range(2):
    d = comm.Dup()
    yd = np.zeros(12)
    rounds(3, lambda: call('Allreduce', p(x), p(yd), 12, h(MPI.DOUBLE), h(MPI.SUM), h(d)))
    same(yd, np.arange(12, dtype=np.float64) * n + n * (n - 1) / 2, f'Allreduce on a Dup, {k}')
    f0, h0, old = fast(), handler.calls(), d.handle
    d.Free()
    d = comm.Dup()
    reused = reused or d.handle == old
    call('Allreduce', p(x), p(yd), 12, h(MPI.DOUBLE), h(MPI.SUM), h(d))
    same(yd, np.arange(12, dtype=np.float64) * n + n * (n - 1) / 2, f'Allreduce on the next Dup, {k}')
    assert fast() == f0 and handler.calls() > h0, (fast() - f0, handler.calls() - h0)
    counted()
    d.Free()
total = comm.allreduce(pmpi_calls.checks)
if rank == 0:
    print(f'pmpi host entry on {n} ranks: {total} checks identical to mpi4py; the entry passed {posted} host '
          f'calls before, handled {handled} then; a freed communicator\'s handle reused: {reused}')
