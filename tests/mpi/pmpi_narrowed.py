"""MPI-4's large-count forms on a library without them (Open MPI 4.1, the GPU hosts' MPI): the interposer
defines MPI_<name>_c, so mpi4py (which looks each one up at run time) and C callers reach its definition;
with none below, the call is made as the library's int form, counts and displacements narrowed
(pmpi/narrow.c). Here the library below has them (MPICH) and is taken for one without
(mpigpu_pmpi_without_large_count). Host buffers on every rank, no GPU needed: mpi4py's own calls (each a
large-count call in mpi4py 4) and ctypes calls of the _c forms (through the handler, then mpigpu's methods,
then mpi4py's) give mpi4py's results; a count an int cannot hold fails with the interposer's error.
Run under mpiexec -n 1..4 through `python -m mpigpu` (tests/test_pmpi.py)."""
import ctypes
import mmap

import numpy as np
from mpi4py import MPI

import pmpi_calls
from pmpi_calls import L, call, counted, h, p, same

from mpigpu import _interpose

assert _interpose.status() == 'on', _interpose.status()
_interpose.library().mpigpu_pmpi_without_large_count()
comm = MPI.COMM_WORLD
rank, n = comm.Get_rank(), comm.Get_size()
nxt, prv = (rank + 1) % n, (rank - 1) % n



counts = np.arange(1, n + 1)
displs = np.concatenate([[0], np.cumsum(counts)[:-1]])
gathered = np.concatenate([np.full(j + 1, j, np.float64) for j in range(n)])

# mpi4py's own calls
x, y = np.arange(20, dtype=np.float64) + rank, np.zeros(20)
comm.Allreduce(x, y)
same(y, np.arange(20, dtype=np.float64) * n + n * (n - 1) // 2, 'Allreduce')
b = np.arange(5, dtype=np.int32) if rank == n - 1 else np.zeros(5, np.int32)
comm.Bcast(b, root=n - 1)
same(b, np.arange(5, dtype=np.int32), 'Bcast')
r = np.zeros(int(counts.sum()))
comm.Allgatherv(np.full(rank + 1, rank, np.float64), [r, counts, displs, MPI.DOUBLE])
same(r, gathered, 'Allgatherv')
r = np.zeros(int(counts.sum())) if rank == 0 else None  # root-only arrays: None elsewhere
comm.Gatherv(np.full(rank + 1, rank, np.float64), [r, counts, displs, MPI.DOUBLE] if rank == 0 else None, root=0)
if rank == 0:
    same(r, gathered, 'Gatherv')
r = np.zeros(rank + 1)
comm.Scatterv([gathered, counts, displs, MPI.DOUBLE] if rank == n - 1 else None, r, root=n - 1)
same(r, np.full(rank + 1, rank, np.float64), 'Scatterv')
send = np.concatenate([np.full(j + 1, 100 * rank + j, np.int64) for j in range(n)])
r = np.zeros(n * (rank + 1), np.int64)
comm.Alltoallv([send, counts, displs, MPI.INT64_T], [r, np.full(n, rank + 1), np.arange(n) * (rank + 1), MPI.INT64_T])
same(r, np.repeat(np.arange(n, dtype=np.int64) * 100 + rank, rank + 1), 'Alltoallv')
r = np.zeros(rank + 1)
comm.Reduce_scatter(np.arange(int(counts.sum()), dtype=np.float64) * (rank + 1), r, counts)
same(r, np.arange(displs[rank], displs[rank] + rank + 1, dtype=np.float64) * (n * (n + 1) // 2), 'Reduce_scatter')
r = np.zeros(3)
comm.Sendrecv(np.full(3, rank + 0.25), nxt, 4, r, prv, 4)
same(r, np.full(3, prv + 0.25), 'Sendrecv')

# the v-forms non-blocking and persistent: the library reads their arrays until the request completes (or
# is freed), so the interposer narrows them into mpi4py's own arrays, which mpi4py keeps with the request
r = np.zeros(int(counts.sum()))
comm.Iallgatherv(np.full(rank + 1, rank, np.float64), [r, counts, displs, MPI.DOUBLE]).Wait()
same(r, gathered, 'Iallgatherv')
r = np.zeros(int(counts.sum())) if rank == 0 else None
comm.Igatherv(np.full(rank + 1, rank, np.float64), [r, counts, displs, MPI.DOUBLE] if rank == 0 else None,
              root=0).Wait()
if rank == 0:
    same(r, gathered, 'Igatherv')
r = np.zeros(rank + 1)
comm.Iscatterv([gathered, counts, displs, MPI.DOUBLE] if rank == n - 1 else None, r, root=n - 1).Wait()
same(r, np.full(rank + 1, rank, np.float64), 'Iscatterv')
r = np.zeros(n * (rank + 1), np.int64)
comm.Ialltoallv([send := np.concatenate([np.full(j + 1, 100 * rank + j, np.int64) for j in range(n)]), counts,
                 displs, MPI.INT64_T], [r, np.full(n, rank + 1), np.arange(n) * (rank + 1), MPI.INT64_T]).Wait()
same(r, np.repeat(np.arange(n, dtype=np.int64) * 100 + rank, rank + 1), 'Ialltoallv')
r = np.zeros(rank + 1)
comm.Ireduce_scatter(np.arange(int(counts.sum()), dtype=np.float64) * (rank + 1), r, counts).Wait()
same(r, np.arange(displs[rank], displs[rank] + rank + 1, dtype=np.float64) * (n * (n + 1) // 2), 'Ireduce_scatter')
ring = comm.Create_cart([n], periods=[True])
r = np.zeros(2)
ring.Ineighbor_alltoallv([np.array([rank, -rank], np.float64), [1, 1], [0, 1], MPI.DOUBLE],
                         [r, [1, 1], [0, 1], MPI.DOUBLE]).Wait()
same(r, np.array([-prv, nxt], np.float64) if n > 1 else np.array([-rank, rank], np.float64), 'Ineighbor_alltoallv')
ring.Free()
r = np.zeros(int(counts.sum()))
mine = np.full(rank + 1, rank, np.float64)
try:
    req = comm.Allgatherv_init(mine, [r, counts, displs, MPI.DOUBLE])
except NotImplementedError:  # Open MPI 4.1 has no persistent collectives
    req = None
for k in range(2 if req is not None else 0):
    r[:] = 0
    req.Start()
    req.Wait()
    same(r, gathered, f'Allgatherv_init round {k}')
if req is not None:
    req.Free()

# the other large-count forms mpi4py makes (functions.LARGE_COUNT): non-blocking, persistent, w-form,
# neighbourhood, local, in-place point-to-point, buffered
r = np.zeros(20)
comm.Iallreduce(x, r, MPI.MAX).Wait()
same(r, np.arange(20, dtype=np.float64) + n - 1, 'Iallreduce')


def persistent_allreduce():
    """A persistent Allreduce's two rounds; False where the library has no MPI_Allreduce_init (Open MPI
    4.1): mpi4py raises NotImplementedError there, as without the interposer."""
    r = np.zeros(20)
    try:
        req = comm.Allreduce_init(x, r)
    except NotImplementedError:
        return False
    for k in range(2):
        req.Start()
        req.Wait()
        same(r, np.arange(20, dtype=np.float64) * n + n * (n - 1) // 2, f'Allreduce_init round {k}')
    req.Free()
    return True


persistent_allreduce()
wsend = np.repeat(np.arange(n, dtype=np.int32) + 10 * rank, 2)
r = np.zeros(2 * n, np.int32)
wspec = (np.full(n, 2), np.arange(n) * 8, [MPI.INT] * n)
comm.Alltoallw([wsend, *wspec], [r, *wspec])
same(r, np.repeat(np.arange(n, dtype=np.int32) * 10 + rank, 2), 'Alltoallw')
cart = comm.Create_cart([n], periods=[True])
r = np.zeros(2, np.int64)
cart.Neighbor_alltoall(np.array([rank, rank], np.int64), r)
same(r, np.array([prv, nxt], np.int64), 'Neighbor_alltoall')
cart.Free()
b = np.full(4, rank, np.int32)
comm.Sendrecv_replace(b, nxt, 6, prv, 6)
same(b, np.full(4, prv, np.int32), 'Sendrecv_replace')
acc = np.full(6, 3.0)
MPI.PROD.Reduce_local(np.arange(6, dtype=np.float64), acc)
same(acc, np.arange(6, dtype=np.float64) * 3, 'Reduce_local')
attached = bytearray(1 << 16)
MPI.Attach_buffer(attached)
comm.Bsend(np.full(3, rank, np.int16), nxt, 8)
r = np.zeros(3, np.int16)
comm.Recv(r, prv, 8)
MPI.Detach_buffer()
same(r, np.full(3, prv, np.int16), 'Bsend')

# ctypes calls of the _c forms (a C caller's): MPI_Count counts, MPI_Aint displacements
cc, dd = counts.astype(np.int64), displs.astype(np.int64)
s, r = np.arange(40, dtype=np.float64) * (rank + 1), np.zeros(40)
call('Allreduce_c', p(s), p(r), L(40), h(MPI.DOUBLE), h(MPI.SUM), h(comm))
same(r, np.arange(40, dtype=np.float64) * (n * (n + 1) // 2), 'Allreduce_c')
s, r = np.full(rank + 1, rank, np.float64), np.zeros(int(cc.sum()))
call('Allgatherv_c', p(s), L(rank + 1), h(MPI.DOUBLE), p(r), p(cc), p(dd), h(MPI.DOUBLE), h(comm))
same(r, gathered, 'Allgatherv_c')
s, r = np.full(7, rank + 0.5), np.zeros(7)
call('Sendrecv_c', p(s), L(7), h(MPI.DOUBLE), nxt, 9, p(r), L(7), h(MPI.DOUBLE), prv, 9, h(comm), None)
same(r, np.full(7, prv + 0.5), 'Sendrecv_c')

# MPI_Pack_c and MPI_Unpack_c: the MPI_Count position narrowed to the int form's and written back (mpi4py's
# own Datatype.Pack, the reference, is a Pack_c call too)
vec = MPI.DOUBLE.Create_vector(4, 1, 2).Commit()
src = np.arange(16, dtype=np.float64) + rank
want = np.zeros(80, np.uint8)
wpos = vec.Pack(src, want, 8, comm)
assert wpos == 72, wpos
got, pos = np.zeros(80, np.uint8), ctypes.c_int64(8)
call('Pack_c', p(src), L(2), h(vec), p(got), L(80), ctypes.byref(pos), h(comm))
same(np.array([pos.value]), np.array([wpos]), 'Pack_c position')
same(got, want, 'Pack_c')
back, pos = np.zeros(16), ctypes.c_int64(8)
call('Unpack_c', p(got), L(72), ctypes.byref(pos), p(back), L(2), h(vec), h(comm))
wback = np.zeros(16)
vec.Unpack(want, 8, wback, comm)
same(np.array([pos.value]), np.array([wpos]), 'Unpack_c position')
same(back, wback, 'Unpack_c')
pos = ctypes.c_int64(2**31 + 8)  # a position an int cannot hold: the interposer's error, the position kept
rc = pmpi_calls.c.MPI_Pack_c(p(src), L(2), h(vec), p(got), L(80), ctypes.byref(pos), h(comm))
assert rc != MPI.SUCCESS and 'large-count form' in MPI.Get_error_string(rc), (rc, MPI.Get_error_string(rc))
assert pos.value == 2**31 + 8, pos.value
counted()
vec.Free()

# the neighbourhood v- and w-forms: arrays as long as the topology's in- and out-degree (a periodic ring,
# whose ranks have two neighbours each; a complete graph; a distributed graph of one in- and two
# out-edges), mpi4py's own calls and ctypes calls against pickled neighbour exchanges (another route).
# Cartesian and graph topologies are told apart by MPI_Topo_test, whose codes differ by library.
graph_edges = [[q2 for q2 in range(n) if q2 != q] for q in range(n)]
graph = comm.Create_graph(np.cumsum([len(e) for e in graph_edges]).tolist(), sum(graph_edges, []))
for topo in (comm.Create_cart([n], [True]),
             *([graph] if graph != MPI.COMM_NULL else []),  # MPICH: no graph of one rank without edges
             comm.Create_dist_graph_adjacent([prv], sorted({nxt, (rank + 2) % n}))):
    srcs, dsts = (list(e) for e in topo.inoutedges)
    k = 3
    blocks = [np.full(k, 100.0 * rank + j, np.float64) for j in range(len(dsts))]
    want = np.concatenate(topo.neighbor_alltoall(blocks))
    s, r = np.concatenate(blocks), np.zeros(k * len(srcs))
    counts_out, counts_in = np.full(len(dsts), k, np.int64), np.full(len(srcs), k, np.int64)
    displs_out, displs_in = np.arange(len(dsts), dtype=np.int64) * k, np.arange(len(srcs), dtype=np.int64) * k
    call('Neighbor_alltoallv_c', p(s), p(counts_out), p(displs_out), h(MPI.DOUBLE), p(r), p(counts_in),
         p(displs_in), h(MPI.DOUBLE), h(topo))
    same(r, want, 'Neighbor_alltoallv_c')
    r = np.zeros(k * len(srcs))
    topo.Neighbor_alltoallv([s, (list(counts_out), list(displs_out)), MPI.DOUBLE],
                            [r, (list(counts_in), list(displs_in)), MPI.DOUBLE])
    same(r, want, 'Neighbor_alltoallv')
    r = np.zeros(k * len(srcs))
    topo.Neighbor_alltoallw([s, (list(counts_out), list(displs_out * 8)), [MPI.DOUBLE] * len(dsts)],
                            [r, (list(counts_in), list(displs_in * 8)), [MPI.DOUBLE] * len(srcs)])
    same(r, want, 'Neighbor_alltoallw')
    mine = np.full(rank + 1, rank, np.float64)
    gathered = np.concatenate(topo.neighbor_allgather(mine))
    sizes = np.array([q + 1 for q in srcs], np.int64)
    at = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
    r = np.zeros(int(sizes.sum()))
    call('Neighbor_allgatherv_c', p(mine), L(rank + 1), h(MPI.DOUBLE), p(r), p(sizes), p(at), h(MPI.DOUBLE), h(topo))
    same(r, gathered, 'Neighbor_allgatherv_c')
    topo.Free()

# a count an int cannot hold: the interposer's error, raised as mpi4py's exception (the bytes are never
# touched: an untouched mapping, broadcast on a communicator of one)
huge = mmap.mmap(-1, 2**31 + 8)
try:
    MPI.COMM_SELF.Bcast([huge, MPI.BYTE], 0)
except MPI.Exception as e:
    assert 'large-count form' in e.Get_error_string(), e.Get_error_string()
    counted()
else:
    raise AssertionError(f'rank {rank}: a Bcast of 2**31 + 8 bytes passed an int count to the library')
huge.close()

# a function the library has in neither form (MPI_Allreduce_init taken out, as Open MPI 4.1 lacks it):
# mpi4py's NotImplementedError, as without the interposer, and no error handler run (it would abort)
assert _interpose.library().mpigpu_pmpi_without(b'PMPI_Allreduce_init') == 1
comm.Set_errhandler(MPI.ERRORS_ARE_FATAL)
assert not persistent_allreduce(), f'rank {rank}: Allreduce_init ran without the library\'s function'
counted()
comm.Set_errhandler(MPI.ERRORS_RETURN)

total = comm.allreduce(pmpi_calls.checks)
if rank == 0:
    print(f'pmpi narrowed large-count forms on {n} ranks: {total} checks')
