"""MPI calls made below Python (through ctypes, as a C extension or mpi4jax makes them) with device
pointers, in a process run by `python -m mpigpu`: the interposer hands them to mpigpu's handler, which
runs them on mpigpu's paths. On CPUs: the fake CUDA layer plays device memory for mpigpu, the fake
driver (FAKE_LIBCUDA, tests/pmpi/fake_libcuda.c) tells the interposer where it is. Each result is
compared with mpi4py's on host buffers. Run under mpiexec -n 1..4 (tests/test_pmpi.py)."""
import ctypes
import mmap
import os

import numpy as np

fake_driver = ctypes.CDLL(os.environ['FAKE_LIBCUDA'], mode=os.RTLD_GLOBAL)
fake_driver.cuInit(0)
fake_driver.fake_cuda_register.argtypes = (ctypes.c_size_t, ctypes.c_size_t)
fake_driver.fake_cuda_unregister.argtypes = (ctypes.c_size_t,)

from fake_device import install, register_device  # noqa: E402

install()
from mpi4py import MPI  # noqa: E402

import pmpi_calls  # noqa: E402
from pmpi_calls import IN_PLACE, L, W, c, call, counted, h, p, same  # noqa: E402

from mpigpu import _interpose  # noqa: E402
from mpigpu._face import interposed as handler  # noqa: E402

assert _interpose.status() == 'on', _interpose.status()
# the interposer's MPIX_Query_cuda_support() says yes; mpigpu asks the library below it, which is not
from mpigpu._base import host_mpi as _host_mpi  # noqa: E402

assert not _host_mpi.cuda_aware()
# mpi4py's own calls (from anywhere in its extension) pass untouched; a ctypes call (libffi) does not
lib = _interpose.library()
lib.mpigpu_pmpi_caller_passes.argtypes = (ctypes.c_void_p,)
assert lib.mpigpu_pmpi_caller_passes(ctypes.cast(ctypes.CDLL(MPI.__file__).PyInit_MPI, ctypes.c_void_p))
assert not lib.mpigpu_pmpi_caller_passes(ctypes.cast(ctypes.CDLL(None).mpigpu_pmpi_count, ctypes.c_void_p))
comm = MPI.COMM_WORLD
rank, n = comm.Get_rank(), comm.Get_size()
kept = []


def device(a):
    """A copy of `a` (a NumPy array) in its own mapping, from now on device memory for mpigpu's layer and
    the interposer alike (a mapping: device memory never lies in the brk heap, which the interposer knows
    is host memory without asking the driver)."""
    mapped = np.frombuffer(mmap.mmap(-1, max(a.nbytes, 1)), dtype=a.dtype, count=a.size).reshape(a.shape)
    mapped[...] = a
    a = mapped
    register_device(a.ctypes.data, a.nbytes)
    fake_driver.fake_cuda_register(a.ctypes.data, a.nbytes)
    kept.append(a)
    return a



before = handler.calls()
N = 1000
x = np.arange(N, dtype=np.float32) * (rank + 1)
for op in (MPI.SUM, MPI.MAX):
    s, r = device(x.copy()), device(np.zeros(N, np.float32))
    call('Allreduce', p(s), p(r), N, h(MPI.FLOAT), h(op), h(comm))
    want = np.zeros(N, np.float32)
    comm.Allreduce(x, want, op)
    same(r, want, f'Allreduce {op}')
r = device(x.copy())
call('Allreduce', IN_PLACE, p(r), N, h(MPI.FLOAT), h(MPI.SUM), h(comm))
want = x.copy()
comm.Allreduce(MPI.IN_PLACE, want)
same(r, want, 'Allreduce in place')

b = device(x.copy() if rank == 0 else np.zeros(N, np.float32))
call('Bcast', p(b), N, h(MPI.FLOAT), 0, h(comm))
same(b, np.arange(N, dtype=np.float32), 'Bcast')

s, r = device(np.arange(N, dtype=np.int64) + rank), device(np.zeros(N, np.int64))
call('Reduce', p(s), p(r), N, h(MPI.INT64_T), h(MPI.SUM), 0, h(comm))
if rank == 0:
    same(r, np.arange(N, dtype=np.int64) * n + n * (n - 1) // 2, 'Reduce')

s, r = device(np.full(3, rank, np.int32)), device(np.zeros(3 * n, np.int32))
call('Allgather', p(s), 3, h(MPI.INT), p(r), 3, h(MPI.INT), h(comm))
same(r, np.repeat(np.arange(n, dtype=np.int32), 3), 'Allgather')

counts = np.arange(1, n + 1, dtype=np.int32)
displs = np.concatenate(([0], np.cumsum(counts)[:-1])).astype(np.int32)
sendcounts = np.full(n, rank + 1, np.int32)
sdispls = (np.arange(n) * (rank + 1)).astype(np.int32)
sv = device(np.repeat(np.arange(n, dtype=np.float64) + 100 * rank, rank + 1))
rv = device(np.zeros(int(counts.sum()), np.float64))
rcounts = np.full(n, 0, np.int32)
rcounts[:] = np.arange(1, n + 1)
call('Alltoallv', p(sv), p(sendcounts), p(sdispls), h(MPI.DOUBLE), p(rv), p(rcounts), p(displs), h(MPI.DOUBLE), h(comm))
want = np.zeros_like(rv)
comm.Alltoallv([sv.copy(), (sendcounts, sdispls), MPI.DOUBLE], [want, (rcounts, displs), MPI.DOUBLE])
same(rv, want, 'Alltoallv')

nxt, prv = (rank + 1) % n, (rank - 1) % n
s, r = device(np.full(17, rank, np.int16)), device(np.zeros(17, np.int16))
status = (ctypes.c_byte * MPI._sizeof(MPI.Status))()
call('Sendrecv', p(s), 17, h(MPI.SHORT), nxt, 4, p(r), 17, h(MPI.SHORT), MPI.ANY_SOURCE, MPI.ANY_TAG, h(comm), status)
st = MPI.Status()
ctypes.memmove(MPI._addressof(st), status, len(status))
same(r, np.full(17, prv, np.int16), 'Sendrecv')
assert (st.Get_source(), st.Get_tag(), st.Get_count(MPI.SHORT)) == (prv, 4, 17), (st.Get_source(), st.Get_tag())
counted()

s, r = device(np.full(64, rank + 1.5)), device(np.zeros(64))
reqs = [(ctypes.c_byte * MPI._sizeof(MPI.Request))() for _ in range(2)]
call('Irecv', p(r), 64, h(MPI.DOUBLE), prv, 8, h(comm), reqs[0])
call('Isend', p(s), 64, h(MPI.DOUBLE), nxt, 8, h(comm), reqs[1])
handles = []
for raw in reqs:
    req = MPI.Request()
    ctypes.memmove(MPI._addressof(req), raw, len(raw))
    handles.append(req)
MPI.Request.Waitall(handles)
same(r, np.full(64, prv + 1.5), 'Isend/Irecv')

# non-blocking collectives: their requests are MPI requests, completed by mpi4py's Waitall
def request(raw):
    req = MPI.Request()
    ctypes.memmove(MPI._addressof(req), raw, len(raw))
    return req


s, r = device(np.full(5, rank + 1, np.int32)), device(np.zeros(5, np.int32))
sg = device(np.full(rank + 1, rank, np.float64))
rg = device(np.zeros(int(counts.sum()), np.float64))
raws = [(ctypes.c_byte * MPI._sizeof(MPI.Request))() for _ in range(2)]
call('Iscan', p(s), p(r), 5, h(MPI.INT), h(MPI.SUM), h(comm), raws[0])
call('Iallgatherv', p(sg), rank + 1, h(MPI.DOUBLE), p(rg), p(counts), p(displs), h(MPI.DOUBLE), h(comm), raws[1])
MPI.Request.Waitall([request(x) for x in raws])
same(r, np.full(5, (rank + 1) * (rank + 2) // 2, np.int32), 'Iscan')
same(rg, np.concatenate([np.full(j + 1, j, np.float64) for j in range(n)]), 'Iallgatherv')

# neighbourhood collectives on a periodic ring (2 neighbours each, itself twice on one rank)
cart = comm.Create_cart([n], periods=[True])
x = (np.arange(6, dtype=np.int32) + 10 * rank)
s, r = device(x), device(np.zeros(6, np.int32))
call('Neighbor_alltoall', p(s), 3, h(MPI.INT), p(r), 3, h(MPI.INT), h(cart))
want = np.zeros(6, np.int32)
cart.Neighbor_alltoall(x.copy(), want)
same(r, want, 'Neighbor_alltoall')
nc, nd = np.array([1, 2], np.int32), np.array([0, 1], np.int32)
s, r = device(np.arange(3, dtype=np.float64) + rank), device(np.zeros(3))
call('Neighbor_alltoallv', p(s), p(nc), p(nd), h(MPI.DOUBLE), p(r), p(nc), p(nd), h(MPI.DOUBLE), h(cart))
want = np.zeros(3)
cart.Neighbor_alltoallv([np.arange(3, dtype=np.float64) + rank, (nc, nd), MPI.DOUBLE], [want, (nc, nd), MPI.DOUBLE])
same(r, want, 'Neighbor_alltoallv')
# its large-count form: MPI_Count counts and MPI_Aint displacements, as long as the ring's degrees
lc, ld = nc.astype(np.int64), nd.astype(np.int64)
s, r = device(np.arange(3, dtype=np.float64) + rank), device(np.zeros(3))
call('Neighbor_alltoallv_c', p(s), p(lc), p(ld), h(MPI.DOUBLE), p(r), p(lc), p(ld), h(MPI.DOUBLE), h(cart))
same(r, want, 'Neighbor_alltoallv_c')
s, r = device(np.full(2, rank, np.int64)), device(np.zeros(4, np.int64))
raw = (ctypes.c_byte * MPI._sizeof(MPI.Request))()
call('Ineighbor_allgather', p(s), 2, h(MPI.INT64_T), p(r), 2, h(MPI.INT64_T), h(cart), raw)
request(raw).Wait()
want = np.zeros(4, np.int64)
cart.Neighbor_allgather(np.full(2, rank, np.int64), want)
same(r, want, 'Ineighbor_allgather')
cart.Free()

# a derived datatype (every other element): a buffer specification over the bytes it reaches
vec = MPI.DOUBLE.Create_vector(4, 1, 2).Commit()
b = device(np.arange(8, dtype=np.float64) if rank == 0 else np.full(8, -1.0))
call('Bcast', p(b), 1, h(vec), 0, h(comm))
same(b, np.arange(8, dtype=np.float64) if rank == 0 else np.where(np.arange(8) % 2 == 0, np.arange(8.0), -1.0),
     'Bcast of a vector datatype')
vec.Free()

s, r = device(np.arange(8, dtype=np.float32)), device(np.ones(8, np.float32))
call('Reduce_local', p(s), p(r), 8, h(MPI.FLOAT), h(MPI.SUM))
same(r, np.arange(8, dtype=np.float32) + 1, 'Reduce_local')

# errors in handled calls come back as MPI errors (mpi4py's COMM_WORLD returns them): MPI's own with its
# class; one of the handler's with a new code whose string names the call and the rank
s, r = device(np.zeros(4, np.float32)), device(np.zeros(4, np.float32))
rc = c.MPI_Allreduce(p(s), p(r), 4, h(MPI.FLOAT), h(MPI.REPLACE), h(comm))
assert rc != MPI.SUCCESS and MPI.Get_error_class(rc) == MPI.ERR_OP, (rc, MPI.Get_error_string(rc))
rc = c.MPI_Allreduce(p(s), None, 4, h(MPI.FLOAT), h(MPI.SUM), h(comm))
text = MPI.Get_error_string(rc) if rc != MPI.SUCCESS else ''
assert 'MPI_Allreduce' in text and f'rank {rank}' in text and 'null pointer' in text, (rc, text)
# the same failure again and again reuses its code (an MPI library has a few thousand)
codes = {c.MPI_Allreduce(p(s), None, 4, h(MPI.FLOAT), h(MPI.SUM), h(comm)) for _ in range(3000)}
assert codes == {rc}, codes
counted(3)

# a Cython extension's own calls through mpi4py.libmpi (CYTHON_CALLER: where tests/test_pmpi.py built it)
if os.environ.get('CYTHON_CALLER'):
    import sys
    sys.path.insert(0, os.environ['CYTHON_CALLER'])
    import cython_caller
    s, r = device(np.arange(N, dtype=np.float64) * (rank + 1)), device(np.zeros(N))
    assert cython_caller.allreduce(s.ctypes.data, r.ctypes.data, N, MPI.DOUBLE, MPI.SUM, comm) == MPI.SUCCESS
    same(r, np.arange(N, dtype=np.float64) * (n * (n + 1) // 2), 'Cython MPI_Allreduce')
    b = device(np.arange(N, dtype=np.float64) if rank == n - 1 else np.zeros(N))
    assert cython_caller.bcast(b.ctypes.data, N, MPI.DOUBLE, n - 1, comm) == MPI.SUCCESS
    same(b, np.arange(N, dtype=np.float64), 'Cython MPI_Bcast')

# in place, MPICH's MPI_IN_PLACE ((void *)-1) as the handler reads it
r = device(np.arange(3 * n, dtype=np.float32) + rank)
call('Reduce_scatter_block', IN_PLACE, p(r), 3, h(MPI.FLOAT), h(MPI.SUM), h(comm))
want = np.arange(3 * n, dtype=np.float32) + rank
comm.Reduce_scatter_block(MPI.IN_PLACE, want)
same(r[:3], want[:3], 'Reduce_scatter_block in place')
rc_counts = np.arange(1, n + 1, dtype=np.int32)
r = device(np.arange(int(rc_counts.sum()), dtype=np.float64) * (rank + 1))
call('Reduce_scatter', IN_PLACE, p(r), p(rc_counts), h(MPI.DOUBLE), h(MPI.SUM), h(comm))
want = np.arange(int(rc_counts.sum()), dtype=np.float64) * (rank + 1)
comm.Reduce_scatter(MPI.IN_PLACE, want, rc_counts)
same(r[:rank + 1], want[:rank + 1], 'Reduce_scatter in place')
g = device(np.where(np.arange(2 * n) // 2 == rank, 5.0 + rank, -1.0))
call('Gather', IN_PLACE if rank == 0 else p(g[2 * rank:]), 2, h(MPI.DOUBLE), p(g), 2, h(MPI.DOUBLE), 0, h(comm))
if rank == 0:
    same(g, np.repeat(5.0 + np.arange(n), 2), 'Gather in place')

# ranks that disagree on where their buffers are: rank 0 device memory, the others host memory. Every
# call from below Python goes to the handler, so the ranks agree on the call's path there
a = device(np.full(4, rank + 1.0)) if rank == 0 else np.full(4, rank + 1.0)
b = device(np.zeros(4)) if rank == 0 else np.zeros(4)
call('Allreduce', p(a), p(b), 4, h(MPI.DOUBLE), h(MPI.SUM), h(comm))
same(b, np.full(4, n * (n + 1) / 2), 'Allreduce, device on rank 0 only')
b = device(np.arange(6.0)) if rank == n - 1 else np.zeros(6)
call('Bcast', p(b), 6, h(MPI.DOUBLE), n - 1, h(comm))
same(b, np.arange(6.0), 'Bcast, device on the root only')

# MPI_Pack and MPI_Unpack: two vectors of 4 doubles (every other one) from device memory into a device
# buffer at a position, and back into zeroed device memory, against mpi4py's on host copies; the position
# read from and written to the caller's int. With host buffers they go straight to the library (they talk
# to no other rank): the handler does not see them.
vec = MPI.DOUBLE.Create_vector(4, 1, 2).Commit()
src = np.arange(16, dtype=np.float64) + 100 * rank
want = np.zeros(80, np.uint8)
wpos = vec.Pack(src, want, 8, comm)
assert wpos == 72, wpos
packed, pos = device(np.zeros(80, np.uint8)), ctypes.c_int(8)
call('Pack', p(device(src)), 2, h(vec), p(packed), 80, ctypes.byref(pos), h(comm))
same(np.array([pos.value]), np.array([wpos]), 'Pack position')
same(packed, want, 'Pack')
back, pos = device(np.zeros(16)), ctypes.c_int(8)
call('Unpack', p(packed), 72, ctypes.byref(pos), p(back), 2, h(vec), h(comm))
wback = np.zeros(16)
vec.Unpack(want, 8, wback, comm)
same(np.array([pos.value]), np.array([wpos]), 'Unpack position')
same(back, wback, 'Unpack')
# MPI-4's large-count forms of the same: MPI_Count sizes and position
packed, pos = device(np.zeros(80, np.uint8)), ctypes.c_int64(8)
call('Pack_c', p(device(src)), L(2), h(vec), p(packed), L(80), ctypes.byref(pos), h(comm))
same(np.array([pos.value]), np.array([wpos]), 'Pack_c position')
same(packed, want, 'Pack_c')
back, pos = device(np.zeros(16)), ctypes.c_int64(8)
call('Unpack_c', p(packed), L(72), ctypes.byref(pos), p(back), L(2), h(vec), h(comm))
same(np.array([pos.value]), np.array([wpos]), 'Unpack_c position')
same(back, wback, 'Unpack_c')
seen = handler.calls()
host_packed, pos = np.zeros(80, np.uint8), ctypes.c_int(8)
call('Pack', p(src), 2, h(vec), p(host_packed), 80, ctypes.byref(pos), h(comm))
same(host_packed, want, 'Pack of host buffers')
assert handler.calls() == seen, 'a Pack of host buffers went to the handler'
vec.Free()

# Persistent requests: a ring of MPI_Send_init/MPI_Recv_init and an MPI_Allreduce_init on device buffers,
# three rounds of MPI_Startall and MPI_Start, completed by MPI_Waitall (with a host MPI_Isend of the
# library's among them), MPI_Wait and MPI_Test, MPI_Testany and MPI_Waitsome; the caller's handles are
# proxies the library knows, unchanged by every round, until MPI_Request_free.
lib = _interpose.library()
lib.mpigpu_pmpi_proxy_count.restype = ctypes.c_size_t
RQ = MPI._sizeof(MPI.Request)
reqs = (ctypes.c_byte * (3 * RQ))()
at = [ctypes.addressof(reqs) + k * RQ for k in range(3)]
ring_s, ring_r = device(np.zeros(32)), device(np.zeros(32))
call('Recv_init', p(ring_r), 32, h(MPI.DOUBLE), prv, 21, h(comm), ctypes.c_void_p(at[0]))
call('Send_init', p(ring_s), 32, h(MPI.DOUBLE), nxt, 21, h(comm), ctypes.c_void_p(at[1]))
ar_s, ar_r = device(np.zeros(16, np.float32)), device(np.zeros(16, np.float32))
call('Allreduce_init', p(ar_s), p(ar_r), 16, h(MPI.FLOAT), h(MPI.SUM), h(comm), h(MPI.INFO_NULL),
     ctypes.c_void_p(at[2]))
assert lib.mpigpu_pmpi_proxy_count() == 3, lib.mpigpu_pmpi_proxy_count()
proxies = bytes(reqs)
host_out, host_in = np.full(4, rank, np.int32), np.zeros(4, np.int32)
for k in range(3):
    ring_s[...] = rank + 10 * k
    ar_s[...] = rank + k
    c.MPI_Startall(2, reqs)
    call('Start', ctypes.c_void_p(at[2]))
    both = (ctypes.c_byte * (3 * RQ))()
    ctypes.memmove(both, reqs, 2 * RQ)
    host_req = comm.Irecv(host_in, source=prv, tag=22)
    c.MPI_Isend(p(host_out), 4, h(MPI.INT), nxt, 22, h(comm), ctypes.c_void_p(ctypes.addressof(both) + 2 * RQ))
    statuses = (ctypes.c_byte * (3 * MPI._sizeof(MPI.Status)))()
    assert c.MPI_Waitall(3, both, statuses) == MPI.SUCCESS
    host_req.Wait()
    st = MPI.Status()
    ctypes.memmove(MPI._addressof(st), statuses, MPI._sizeof(MPI.Status))
    assert (st.Get_source(), st.Get_tag()) == (prv, 21), (st.Get_source(), st.Get_tag())
    lib_req = MPI.Request()
    ctypes.memmove(MPI._addressof(lib_req), ctypes.addressof(both) + 2 * RQ, RQ)
    assert lib_req == MPI.REQUEST_NULL, 'the library\'s request was not written back completed'
    flag = ctypes.c_int(0)
    while not flag.value:
        assert c.MPI_Test(ctypes.c_void_p(at[2]), ctypes.byref(flag), None) == MPI.SUCCESS
    same(ring_r, np.full(32, prv + 10.0 * k), f'Send_init/Recv_init, round {k}')
    same(ar_r, np.full(16, n * (n - 1) / 2 + n * k, np.float32), f'Allreduce_init, round {k}')
    same(host_in, np.full(4, prv, np.int32), f'a host Isend among them, round {k}')
    assert bytes(reqs) == proxies, 'a round changed the caller\'s handles'
# MPI_Testany and MPI_Waitsome over the persistent ring
c.MPI_Startall(2, reqs)
index, flag, outcount = ctypes.c_int(-1), ctypes.c_int(0), ctypes.c_int(0)
indices = (ctypes.c_int * 2)()
while not flag.value:
    assert c.MPI_Testany(2, reqs, ctypes.byref(index), ctypes.byref(flag), None) == MPI.SUCCESS
assert index.value in (0, 1), index.value
assert c.MPI_Waitsome(2, reqs, ctypes.byref(outcount), indices, None) == MPI.SUCCESS
assert outcount.value == 1 and indices[0] == 1 - index.value, (outcount.value, list(indices))
counted(3)
for k in range(3):
    call('Request_free', ctypes.c_void_p(at[k]))
# a v-collective's and a neighbourhood collective's persistent forms, two rounds each
gc = np.arange(1, n + 1, dtype=np.int32)
gd = np.concatenate([[0], np.cumsum(gc)[:-1]]).astype(np.int32)
gs, gr = device(np.zeros(rank + 1)), device(np.zeros(int(gc.sum())))
cart = comm.Create_cart([n], periods=[True])
ns_, nr_ = device(np.zeros(4, np.int32)), device(np.zeros(4, np.int32))
call('Gatherv_init', p(gs), rank + 1, h(MPI.DOUBLE), p(gr), p(gc), p(gd), h(MPI.DOUBLE), 0, h(comm),
     h(MPI.INFO_NULL), ctypes.c_void_p(at[0]))
call('Neighbor_alltoall_init', p(ns_), 2, h(MPI.INT), p(nr_), 2, h(MPI.INT), h(cart), h(MPI.INFO_NULL),
     ctypes.c_void_p(at[1]))
for k in range(2):
    gs[...] = rank + 100 * k
    ns_[...] = np.arange(4, dtype=np.int32) + 10 * rank + 100 * k
    call('Startall', 2, reqs)
    call('Waitall', 2, reqs, None)
    if rank == 0:
        same(gr, np.concatenate([np.full(j + 1, j + 100.0 * k) for j in range(n)]), f'Gatherv_init, round {k}')
    want = np.zeros(4, np.int32)
    cart.Neighbor_alltoall(np.arange(4, dtype=np.int32) + 10 * rank + 100 * k, want)
    same(nr_, want, f'Neighbor_alltoall_init, round {k}')
for k in range(2):
    call('Request_free', ctypes.c_void_p(at[k]))
cart.Free()
# partitioned (MPI-4): 4 partitions of 8 doubles around the ring, each sent partition made ready (one,
# a range, a list), the received ones polled with MPI_Parrived, two rounds
ps, pr = device(np.zeros(32)), device(np.zeros(32))
call('Precv_init', p(pr), 4, ctypes.c_longlong(8), h(MPI.DOUBLE), prv, 23, h(comm), h(MPI.INFO_NULL),
     ctypes.c_void_p(at[0]))
call('Psend_init', p(ps), 4, ctypes.c_longlong(8), h(MPI.DOUBLE), nxt, 23, h(comm), h(MPI.INFO_NULL),
     ctypes.c_void_p(at[1]))
cell = ctypes.c_int32 if RQ == 4 else ctypes.c_int64
recv_h, send_h = (cell.from_address(a).value for a in at[:2])
for k in range(2):
    ps[...] = np.repeat(np.arange(4.0), 8) + 10 * rank + 100 * k
    call('Startall', 2, reqs)
    call('Pready', 0, cell(send_h))
    call('Pready_range', 1, 2, cell(send_h))
    call('Pready_list', 1, (ctypes.c_int * 1)(3), cell(send_h))
    arrived = ctypes.c_int(0)
    while not arrived.value:
        call('Parrived', cell(recv_h), 3, ctypes.byref(arrived))
    call('Waitall', 2, reqs, None)
    same(pr, np.repeat(np.arange(4.0), 8) + 10 * prv + 100 * k, f'Psend_init/Precv_init, round {k}')
for k in range(2):
    call('Request_free', ctypes.c_void_p(at[k]))
assert lib.mpigpu_pmpi_proxy_count() == 0, lib.mpigpu_pmpi_proxy_count()
for a in at:
    freed = MPI.Request()
    ctypes.memmove(MPI._addressof(freed), a, RQ)
    assert freed == MPI.REQUEST_NULL, 'MPI_Request_free left a handle'
counted()

# proxies seen from Python (mpi4py's own Start and Wait reach mpigpu), MPI_Request_get_status_all, MPI_Cancel
# of a receive no send meets, and MPI_Request_free of a running round (the handle is null at once)
ring_s, ring_r = device(np.zeros(8)), device(np.zeros(8))
call('Recv_init', p(ring_r), 8, h(MPI.DOUBLE), prv, 24, h(comm), ctypes.c_void_p(at[0]))
call('Send_init', p(ring_s), 8, h(MPI.DOUBLE), nxt, 24, h(comm), ctypes.c_void_p(at[1]))
from_python = [MPI.Prequest.fromhandle(cell.from_address(a).value & ((1 << 64) - 1)) for a in at[:2]]
ring_s[...] = rank + 0.25
MPI.Prequest.Startall(from_python)
flag = ctypes.c_int(0)
while not flag.value:
    call('Request_get_status_all', 2, reqs, ctypes.byref(flag), None)
MPI.Request.Waitall(from_python)
same(ring_r, np.full(8, prv + 0.25), 'a round started and completed from Python on proxies')
call('Start', ctypes.c_void_p(at[0]))
call('Cancel', ctypes.c_void_p(at[0]))
call('Wait', ctypes.c_void_p(at[0]), None)
counted()
comm.Barrier()
call('Start', ctypes.c_void_p(at[0]))
call('Request_free', ctypes.c_void_p(at[0]))  # its round still runs: the send below ends it
freed = MPI.Request()
ctypes.memmove(MPI._addressof(freed), at[0], RQ)
assert freed == MPI.REQUEST_NULL, 'MPI_Request_free of a running round left a handle'
call('Start', ctypes.c_void_p(at[1]))
call('Wait', ctypes.c_void_p(at[1]), None)
call('Request_free', ctypes.c_void_p(at[1]))
counted()
comm.Barrier()

# MPI-4's large-count forms: the count an MPI_Count
s, r = device(np.arange(40, dtype=np.float64) * (rank + 1)), device(np.zeros(40))
call('Allreduce_c', p(s), p(r), L(40), h(MPI.DOUBLE), h(MPI.SUM), h(comm))
same(r, np.arange(40, dtype=np.float64) * (n * (n + 1) // 2), 'Allreduce_c')
b = device(np.arange(9, dtype=np.int32) if rank == 0 else np.zeros(9, np.int32))
call('Bcast_c', p(b), L(9), h(MPI.INT), 0, h(comm))
same(b, np.arange(9, dtype=np.int32), 'Bcast_c')
s, r = device(np.repeat(np.arange(n, dtype=np.int64) + 10 * rank, 2)), device(np.zeros(2 * n, np.int64))
call('Alltoall_c', p(s), L(2), h(MPI.INT64_T), p(r), L(2), h(MPI.INT64_T), h(comm))
same(r, np.repeat(np.arange(n, dtype=np.int64) * 10 + rank, 2), 'Alltoall_c')
s, r = device(np.full(7, rank + 0.5)), device(np.zeros(7))
call('Sendrecv_c', p(s), L(7), h(MPI.DOUBLE), nxt, 9, p(r), L(7), h(MPI.DOUBLE), prv, 9, h(comm), None)
same(r, np.full(7, prv + 0.5), 'Sendrecv_c')
cc = np.arange(1, n + 1, dtype=np.int64)  # MPI_Count counts, MPI_Aint displacements
dd = np.concatenate([[0], np.cumsum(cc)[:-1]]).astype(np.int64)
s, r = device(np.full(rank + 1, rank, np.float32)), device(np.zeros(int(cc.sum()), np.float32))
call('Allgatherv_c', p(s), L(rank + 1), h(MPI.FLOAT), p(r), p(cc), p(dd), h(MPI.FLOAT), h(comm))
same(r, np.concatenate([np.full(j + 1, j, np.float32) for j in range(n)]), 'Allgatherv_c')
s, r = device(np.arange(int(cc.sum()), dtype=np.float64) * (rank + 1)), device(np.zeros(rank + 1))
call('Reduce_scatter_c', p(s), p(r), p(cc), h(MPI.DOUBLE), h(MPI.SUM), h(comm))
want = np.zeros(rank + 1)
comm.Reduce_scatter(np.arange(int(cc.sum()), dtype=np.float64) * (rank + 1), want, cc.astype(np.int32))
same(r, want, 'Reduce_scatter_c')

# the large-count forms derived from the int forms (functions.LARGE_COUNT): non-blocking, persistent,
# w-form, local, in-place point-to-point
mark = handler.calls()
s, r = device(np.arange(24, dtype=np.float32) + rank), device(np.zeros(24, np.float32))
call('Iallreduce_c', p(s), p(r), L(24), h(MPI.FLOAT), h(MPI.MAX), h(comm), ctypes.c_void_p(at[0]))
call('Wait', ctypes.c_void_p(at[0]), (ctypes.c_byte * MPI._sizeof(MPI.Status))())  # an MPI request: a status
same(r, np.arange(24, dtype=np.float32) + n - 1, 'Iallreduce_c')
s, r = device(np.full(6, rank + 1, np.int64)), device(np.zeros(6, np.int64))
call('Allreduce_init_c', p(s), p(r), L(6), h(MPI.INT64_T), h(MPI.SUM), h(comm), h(MPI.INFO_NULL),
     ctypes.c_void_p(at[0]))
for k in range(2):
    call('Start', ctypes.c_void_p(at[0]))
    call('Wait', ctypes.c_void_p(at[0]), None)
    same(r, np.full(6, n * (n + 1) // 2, np.int64), f'Allreduce_init_c, round {k}')
call('Request_free', ctypes.c_void_p(at[0]))
wc = np.full(n, 2, np.int64)  # MPI_Count counts, MPI_Aint byte displacements, a type per rank
wd = np.arange(n, dtype=np.int64) * 2 * 4
DT = ctypes.c_int32 if MPI._sizeof(MPI.Datatype) == 4 else ctypes.c_uint64  # an MPI_Datatype array's items
wt = (DT * n)(*([MPI.INT.handle] * n))
s, r = device(np.repeat(np.arange(n, dtype=np.int32) + 10 * rank, 2)), device(np.zeros(2 * n, np.int32))
call('Alltoallw_c', p(s), p(wc), p(wd), wt, p(r), p(wc), p(wd), wt, h(comm))
same(r, np.repeat(np.arange(n, dtype=np.int32) * 10 + rank, 2), 'Alltoallw_c')
a, b = device(np.arange(10, dtype=np.float64)), device(np.full(10, 2.0))
call('Reduce_local_c', p(a), p(b), L(10), h(MPI.DOUBLE), h(MPI.PROD))
same(b, np.arange(10, dtype=np.float64) * 2, 'Reduce_local_c')
b = device(np.full(5, rank, np.int32))
call('Sendrecv_replace_c', p(b), L(5), h(MPI.INT), nxt, 6, prv, 6, h(comm), None)
same(b, np.full(5, prv, np.int32), 'Sendrecv_replace_c')
# matched receives: a message from a matched probe (mpi4py's Mprobe / Improbe: the library's own is not
# global here) in the caller's MPI_Message, then MPI_Mrecv_c and MPI_Imrecv_c into device buffers; the
# caller's message handle is MPI_MESSAGE_NULL after each
MSG = ctypes.c_byte * MPI._sizeof(MPI.Message)
ST = ctypes.c_byte * MPI._sizeof(MPI.Status)
null = bytes((ctypes.c_byte * MPI._sizeof(MPI.Message)).from_address(MPI._addressof(MPI.MESSAGE_NULL)))
for k, (probe, receive) in enumerate((('Mprobe', 'Mrecv_c'), ('Improbe', 'Imrecv_c'))):
    sent = np.full(5, 100.0 * rank + k)
    sreq = comm.Isend(sent, nxt, 30 + k)  # (to itself on one rank: a blocking Send need not return first)
    msg, st = MSG(), ST()
    probed = comm.Mprobe(prv, 30 + k) if probe == 'Mprobe' else None
    while probed is None:
        probed = comm.Improbe(prv, 30 + k)
    ctypes.memmove(msg, MPI._addressof(probed), MPI._sizeof(MPI.Message))
    r = device(np.zeros(5))
    if receive == 'Mrecv_c':
        call('Mrecv_c', p(r), L(5), h(MPI.DOUBLE), msg, st)
    else:
        call('Imrecv_c', p(r), L(5), h(MPI.DOUBLE), msg, ctypes.c_void_p(at[0]))
        call('Wait', ctypes.c_void_p(at[0]), ST())
    sreq.Wait()
    same(r, np.full(5, 100.0 * prv + k), receive)
    assert bytes(msg) == null, f'rank {rank}: {receive} left the caller\'s message {bytes(msg)!r}'
# a non-blocking v-form's count arrays (MPI_Count) and displacements (MPI_Aint), completed by MPI_Wait
vc, vd = np.full(n, 3, np.int64), np.arange(n, dtype=np.int64) * 3
s, r = device(np.repeat(np.arange(n, dtype=np.float32) + 10 * rank, 3)), device(np.zeros(3 * n, np.float32))
call('Ialltoallv_c', p(s), p(vc), p(vd), h(MPI.FLOAT), p(r), p(vc), p(vd), h(MPI.FLOAT), h(comm),
     ctypes.c_void_p(at[0]))
call('Wait', ctypes.c_void_p(at[0]), (ctypes.c_byte * MPI._sizeof(MPI.Status))())
same(r, np.repeat(np.arange(n, dtype=np.float32) * 10 + rank, 3), 'Ialltoallv_c')
# (the fake driver's device memory is host memory: the results alone would not show who made the calls)
assert handler.calls() - mark == 8, f'rank {rank}: {handler.calls() - mark} of the 8 large-count calls were handled'

# one-sided: a C caller's Put, Get, Accumulate and Get_accumulate with device origin buffers on a window of
# host memory (MPI_Win_allocate's), completed by MPI_Win_fence, and a Get in a passive-target epoch
# completed by MPI_Win_unlock (MPI_Win_lock: the library's own, not intercepted); each window as mpi4py's
# host calls leave it. MPI may read a Put's origin until the fence and write a Get's until then: mpigpu's
# Win keeps their host copies to the synchronization, which copies the results back.
C = 6
A = C * n  # the atomics' element, past the ranks' slots
win = MPI.Win.Allocate(4 * (A + 1), 4, comm=comm)
mem = np.frombuffer(win.tomemory(), dtype=np.int32)
T, WH = h(MPI.INT), h(win)
mark = handler.calls()
mem[:] = -1
comm.Barrier()
call('Win_fence', 0, WH)
src = device(np.arange(C, dtype=np.int32) + 10 * rank)
call('Put', p(src), C, T, nxt, W(rank * C), C, T, WH)
src[:] = -7  # mpigpu's Win took the origin's bytes at the call
kept_win = handler._installed.windows[handler._installed.handle(MPI.Win, WH.value)]
assert len(kept_win._pending()) == 1, f'rank {rank}: the Put\'s host copy is not kept to the fence'
call('Win_fence', 0, WH)
assert not kept_win._pending()
counted()
want = np.full(C * n, -1, np.int32)
want[prv * C:(prv + 1) * C] = np.arange(C, dtype=np.int32) + 10 * prv
same(mem[:A], want, 'Put')
got = device(np.zeros(C, np.int32))
call('Get', p(got), C, T, nxt, W(rank * C), C, T, WH)  # rank nxt's slot `rank`: this rank's Put
call('Win_fence', 0, WH)
same(got, np.arange(C, dtype=np.int32) + 10 * rank, 'Get')
src = device(np.arange(C, dtype=np.int32) + 20 * rank)  # the large-count forms: MPI_Count counts
call('Put_c', p(src), L(C), T, nxt, W(rank * C), L(C), T, WH)
call('Win_fence', 0, WH)
got = device(np.zeros(C, np.int32))
call('Get_c', p(got), L(C), T, nxt, W(rank * C), L(C), T, WH)
call('Win_fence', 0, WH)
same(got, np.arange(C, dtype=np.int32) + 20 * rank, 'Put_c and Get_c')
mem[:] = 0
comm.Barrier()
call('Win_fence', 0, WH)
add = device(np.full(C, rank + 1, np.int32))
call('Accumulate', p(add), C, T, 0, W(0), C, T, h(MPI.SUM), WH)
call('Win_fence', 0, WH)
if rank == 0:
    want = np.zeros(C * n, np.int32)
    want[:C] = n * (n + 1) // 2
    same(mem[:A], want, 'Accumulate')
before_acc = comm.bcast(mem[:C].copy() if rank == 0 else None, root=0)
call('Win_fence', 0, WH)
comm.Barrier()
one, old = device(np.ones(C, np.int32)), device(np.zeros(C, np.int32))
if rank == 1 % n:  # one rank fetches and adds on rank 0, alone: its result is what was there
    call('Get_accumulate', p(one), C, T, p(old), C, T, 0, W(0), C, T, h(MPI.SUM), WH)
call('Win_fence', 0, WH)
if rank == 1 % n:
    same(old, before_acc, 'Get_accumulate')
if rank == 0:
    same(mem[:C], before_acc + 1, 'Get_accumulate at the target')
# the atomics, one element each: every rank adds rank + 1 to rank 0's element A and fetches what was there
# (a permutation of partial sums, so the fetched values are checked by their set), then one rank swaps
call('Win_fence', 0, WH)
one, old = device(np.full(1, rank + 1, np.int32)), device(np.zeros(1, np.int32))
call('Fetch_and_op', p(one), p(old), T, 0, W(A), h(MPI.SUM), WH)
call('Win_fence', 0, WH)
seen = comm.allgather(int(old[0]))
total = comm.bcast(int(mem[A]) if rank == 0 else None, root=0)
counted()
assert total == n * (n + 1) // 2 and 0 in seen, f'rank {rank}: Fetch_and_op {seen} -> {total}'
# an atomic read (MPI_NO_OP, a null origin, which MPI does not read), then a Get from C completed by a
# Python caller's fence on the same window: a window's operations are completed by whichever object syncs it
cur = device(np.zeros(1, np.int32))
call('Fetch_and_op', None, p(cur), T, 0, W(A), h(MPI.NO_OP), WH)
call('Win_fence', 0, WH)
same(cur, np.full(1, total, np.int32), 'Fetch_and_op, MPI_NO_OP')
call('Get', p(cur), 1, T, 0, W(A), 1, T, WH)
win.Fence()
same(cur, np.full(1, total, np.int32), 'Get completed by a Python caller\'s Fence')
# the request-based forms in a passive-target epoch on rank 0's window (MPI_Win_lock_all: the library's),
# each completed by MPI_Wait (the library's, on mpigpu's generalized request)
win.Lock_all()
rq, rs = (ctypes.c_byte * MPI._sizeof(MPI.Request))(), (ctypes.c_byte * MPI._sizeof(MPI.Status))()
got = device(np.zeros(1, np.int32))
call('Rget', p(got), 1, T, 0, W(A), 1, T, WH, rq)
call('Wait', rq, rs)
same(got, np.full(1, total, np.int32), 'Rget')
got = device(np.zeros(1, np.int32))
call('Rget_c', p(got), L(1), T, 0, W(A), L(1), T, WH, rq)
call('Wait', rq, rs)
same(got, np.full(1, total, np.int32), 'Rget_c')
win.Unlock_all()
comm.Barrier()  # every rank's Rget done before any adds
win.Lock_all()
plus = device(np.full(1, 5, np.int32))
call('Raccumulate', p(plus), 1, T, 0, W(A), 1, T, h(MPI.SUM), WH, rq)
call('Wait', rq, rs)
win.Unlock_all()
comm.Barrier()
win.Lock_all()
call('Rget_accumulate', None, 0, T, p(got), 1, T, 0, W(A), 1, T, h(MPI.NO_OP), WH, rq)
call('Wait', rq, rs)
win.Unlock_all()
same(got, np.full(1, total + 5 * n, np.int32), 'Raccumulate, then Rget_accumulate (MPI_NO_OP)')
comm.Barrier()
win.Lock_all()
if rank == 0:
    mem[A] = total  # (the element as before the request-based forms)
call('Rput', p(plus), 1, T, rank, W(rank * C), 1, T, WH, rq)
call('Wait', rq, rs)
win.Unlock_all()
comm.Barrier()
same(mem[rank * C:rank * C + 1], np.full(1, 5, np.int32), 'Rput')
win.Fence()
new, expect, was = device(np.full(1, 77, np.int32)), device(np.full(1, total, np.int32)), device(np.zeros(1, np.int32))
if rank == n - 1:
    call('Compare_and_swap', p(new), p(expect), p(was), T, 0, W(A), WH)
call('Win_fence', 0, WH)
if rank == n - 1:
    same(was, np.full(1, total, np.int32), 'Compare_and_swap: what was there')
if rank == 0:
    same(mem[A:A + 1], np.full(1, 77, np.int32), 'Compare_and_swap at the target')
win.Fence(MPI.MODE_NOSUCCEED)
win.Lock(rank)  # each rank's own slot of its own window, in an epoch of its own
mem[rank * C:(rank + 1) * C] = 1000 + rank
win.Unlock(rank)
comm.Barrier()
got = device(np.zeros(C, np.int32))
win.Lock(nxt, MPI.LOCK_SHARED)
call('Get', p(got), C, T, nxt, W(nxt * C), C, T, WH)
call('Win_unlock', nxt, WH)
same(got, np.full(C, 1000 + nxt, np.int32), 'Get completed by MPI_Win_unlock')
assert handler.calls() - mark == 28 + (rank == 1 % n) + (rank == n - 1), f'rank {rank}: {handler.calls() - mark} one-sided calls handled'
comm.Barrier()
win.Free()

handled = handler.calls() - before
assert handled >= 3023, f'rank {rank}: the handler ran {handled} calls'

import mpigpu  # noqa: E402

st = mpigpu.interposer_status()
assert st['state'] == 'on' and st['handled_calls'] == handler.calls() and st['mpi_below_cuda_aware'] is False, st
total = comm.allreduce(pmpi_calls.checks)
if rank == 0:
    print(f'pmpi handler on {n} ranks: {total} checks identical to mpi4py, {handled} calls handled per rank')
