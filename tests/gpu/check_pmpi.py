"""MPI calls made below Python with CuPy arrays' device pointers (ctypes, as a C extension or mpi4jax
makes them) under `python -m mpigpu` on GPUs: the interposer's handler runs them on mpigpu's paths.

    mpirun -n N python -m mpigpu tests/gpu/check_pmpi.py      (MPIGPU_SHARED_GPU=1 on one GPU)

Each call's result is compared, byte for byte, with mpi4py's same call on host copies: Allreduce (out of
place, in place, host to device, host buffers, host on one rank and device on the others), Bcast, Reduce, Allgather, Reduce_scatter_block, Alltoall(v), Gatherv,
Scatter, Scan, Sendrecv with its status, Isend/Irecv, Iallgatherv, Neighbor_alltoall(v) on a Cart, Bcast
of a vector datatype, Reduce_local, Pack and Unpack, persistent Send_init/Recv_init and Allreduce_init, and
the one-sided Put, Get and Accumulate (fence and passive-target epochs). Then how many calls the handler ran and which of the engine's and
the exchange's fast paths took them. Exits 1 on any failure; the last line is the summary.
"""
import ctypes
import sys

import cupy as cp
import numpy as np
from mpi4py import MPI

import mpigpu
from mpigpu._ext._board import Board
from mpigpu._face import interposed as handler
from mpigpu._state.comm_state import state_of

comm = MPI.COMM_WORLD
rank, n = comm.Get_rank(), comm.Get_size()
cp.cuda.Device(rank % cp.cuda.runtime.getDeviceCount()).use()
c = ctypes.CDLL(None)  # the global scope: the interposer's MPI_*
W = ctypes.c_ssize_t
IN_PLACE = ctypes.c_void_p(int(MPI.IN_PLACE) & (2 ** 64 - 1))
failures, checks = [], 0


def h(obj):
    return W(obj.handle)


def p(a):
    return ctypes.c_void_p(a.data.ptr if isinstance(a, cp.ndarray) else a.ctypes.data)


def call(name, *args):
    cp.cuda.get_current_stream().synchronize()  # a C caller's stream work is done before it calls MPI
    rc = getattr(c, 'MPI_' + name)(*args)
    if rc != MPI.SUCCESS:
        failures.append(f'rank {rank}: MPI_{name} returned {rc}: {MPI.Get_error_string(rc)}')


def same(got, want, what):
    global checks
    checks += 1
    g = cp.asnumpy(got) if isinstance(got, cp.ndarray) else got
    if g.tobytes() != np.asarray(want).tobytes():
        failures.append(f'rank {rank}: {what}: {g.ravel()[:6]} != {np.asarray(want).ravel()[:6]}')


def request(raw):
    req = MPI.Request()
    ctypes.memmove(MPI._addressof(req), raw, len(raw))
    return req


def raw_request():
    return (ctypes.c_byte * MPI._sizeof(MPI.Request))()


before = handler.calls()
N = 4096
x = np.arange(N, dtype=np.float32) % 97 + rank
for op in (MPI.SUM, MPI.MAX):
    s, r = cp.asarray(x), cp.zeros(N, cp.float32)
    call('Allreduce', p(s), p(r), N, h(MPI.FLOAT), h(op), h(comm))
    want = np.zeros(N, np.float32)
    comm.Allreduce(x, want, op)
    same(r, want, f'Allreduce {op.Get_name() if hasattr(op, "Get_name") else op}')
r = cp.asarray(x)
call('Allreduce', IN_PLACE, p(r), N, h(MPI.FLOAT), h(MPI.SUM), h(comm))
want = x.copy()
comm.Allreduce(MPI.IN_PLACE, want)
same(r, want, 'Allreduce in place')
r = cp.zeros(N, cp.float32)
call('Allreduce', p(x), p(r), N, h(MPI.FLOAT), h(MPI.SUM), h(comm))
same(r, want, 'Allreduce host to device')

# Host buffers on every rank: the engine's entry posts the call for the peers and the library below makes
# it (no handler's Python); then host buffers on rank 0 and device buffers elsewhere in one call, which
# every rank makes on the library (the device ranks learn of rank 0's host buffers on the board).
entry_host = getattr(mpigpu._cuda.device, 'pmpi_entry_host_calls', None)
posted = entry_host() if entry_host is not None else 0
for k in range(3):
    r = np.zeros(N, np.float32)
    call('Allreduce', p(x), p(r), N, h(MPI.FLOAT), h(MPI.SUM), h(comm))
    same(r, want, f'Allreduce host buffers, call {k}')
s = x if rank == 0 else cp.asarray(x)
r = np.zeros(N, np.float32) if rank == 0 else cp.zeros(N, cp.float32)
call('Allreduce', p(s), p(r), N, h(MPI.FLOAT), h(MPI.SUM), h(comm))
same(r, want, 'Allreduce host buffers on rank 0, device buffers elsewhere')
if entry_host is not None and type(state_of(comm).host_hook) is Board:
    checks += 1
    posted = entry_host() - posted
    if posted < 3 + (rank == 0):
        failures.append(f'rank {rank}: the engine entry posted {posted} host-buffer calls of {3 + (rank == 0)}')

b = cp.asarray(x if rank == 0 else np.zeros(N, np.float32))
call('Bcast', p(b), N, h(MPI.FLOAT), 0, h(comm))
same(b, np.arange(N, dtype=np.float32) % 97, 'Bcast')

s, r = cp.arange(N, dtype=cp.int64) + rank, cp.zeros(N, cp.int64)
call('Reduce', p(s), p(r), N, h(MPI.INT64_T), h(MPI.SUM), 0, h(comm))
if rank == 0:
    same(r, np.arange(N, dtype=np.int64) * n + n * (n - 1) // 2, 'Reduce')

s, r = cp.full(3, rank, cp.int32), cp.zeros(3 * n, cp.int32)
call('Allgather', p(s), 3, h(MPI.INT), p(r), 3, h(MPI.INT), h(comm))
same(r, np.repeat(np.arange(n, dtype=np.int32), 3), 'Allgather')

s, r = cp.asarray(np.arange(5 * n, dtype=np.float32) + rank), cp.zeros(5, cp.float32)
call('Reduce_scatter_block', p(s), p(r), 5, h(MPI.FLOAT), h(MPI.SUM), h(comm))
want = np.zeros(5, np.float32)
comm.Reduce_scatter_block(np.arange(5 * n, dtype=np.float32) + rank, want)
same(r, want, 'Reduce_scatter_block')

host = np.repeat(np.arange(n, dtype=np.float64) + 100 * rank, 2)
s, r = cp.asarray(host), cp.zeros(2 * n)
call('Alltoall', p(s), 2, h(MPI.DOUBLE), p(r), 2, h(MPI.DOUBLE), h(comm))
want = np.zeros(2 * n)
comm.Alltoall(host, want)
same(r, want, 'Alltoall')

counts = np.arange(1, n + 1, dtype=np.int32)
displs = np.concatenate(([0], np.cumsum(counts)[:-1])).astype(np.int32)
sendcounts = np.full(n, rank + 1, np.int32)
sdispls = (np.arange(n) * (rank + 1)).astype(np.int32)
host = np.repeat(np.arange(n, dtype=np.float64) + 100 * rank, rank + 1)
s, r = cp.asarray(host), cp.zeros(int(counts.sum()))
call('Alltoallv', p(s), p(sendcounts), p(sdispls), h(MPI.DOUBLE), p(r), p(counts), p(displs), h(MPI.DOUBLE), h(comm))
want = np.zeros(int(counts.sum()))
comm.Alltoallv([host, (sendcounts, sdispls), MPI.DOUBLE], [want, (counts, displs), MPI.DOUBLE])
same(r, want, 'Alltoallv')

s, r = cp.full(rank + 1, rank, cp.float64), cp.zeros(int(counts.sum()))
call('Gatherv', p(s), rank + 1, h(MPI.DOUBLE), p(r), p(counts), p(displs), h(MPI.DOUBLE), n - 1, h(comm))
if rank == n - 1:
    same(r, np.concatenate([np.full(j + 1, j, np.float64) for j in range(n)]), 'Gatherv')

s, r = cp.arange(2 * n, dtype=cp.int32), cp.zeros(2, cp.int32)
call('Scatter', p(s), 2, h(MPI.INT), p(r), 2, h(MPI.INT), 0, h(comm))
same(r, np.array([2 * rank, 2 * rank + 1], np.int32), 'Scatter')

s, r = cp.full(7, rank + 1, cp.int32), cp.zeros(7, cp.int32)
call('Scan', p(s), p(r), 7, h(MPI.INT), h(MPI.SUM), h(comm))
same(r, np.full(7, (rank + 1) * (rank + 2) // 2, np.int32), 'Scan')

nxt, prv = (rank + 1) % n, (rank - 1) % n
s, r = cp.full(17, rank, cp.int16), cp.zeros(17, cp.int16)
status = (ctypes.c_byte * MPI._sizeof(MPI.Status))()
call('Sendrecv', p(s), 17, h(MPI.SHORT), nxt, 4, p(r), 17, h(MPI.SHORT), MPI.ANY_SOURCE, MPI.ANY_TAG, h(comm), status)
st = MPI.Status()
ctypes.memmove(MPI._addressof(st), status, len(status))
same(r, np.full(17, prv, np.int16), 'Sendrecv')
same(np.array([st.Get_source(), st.Get_tag(), st.Get_count(MPI.SHORT)]), np.array([prv, 4, 17]), 'Sendrecv status')

s, r = cp.full(1 << 16, rank + 1.5), cp.zeros(1 << 16)
raws = [raw_request(), raw_request()]
call('Irecv', p(r), 1 << 16, h(MPI.DOUBLE), prv, 8, h(comm), raws[0])
call('Isend', p(s), 1 << 16, h(MPI.DOUBLE), nxt, 8, h(comm), raws[1])
MPI.Request.Waitall([request(x) for x in raws])
same(r, np.full(1 << 16, prv + 1.5), 'Isend/Irecv 512 KB')

sg, rg = cp.full(rank + 1, rank, cp.float64), cp.zeros(int(counts.sum()))
raw = raw_request()
call('Iallgatherv', p(sg), rank + 1, h(MPI.DOUBLE), p(rg), p(counts), p(displs), h(MPI.DOUBLE), h(comm), raw)
request(raw).Wait()
same(rg, np.concatenate([np.full(j + 1, j, np.float64) for j in range(n)]), 'Iallgatherv')

cart = comm.Create_cart([n], periods=[True])
host = np.arange(6, dtype=np.int32) + 10 * rank
s, r = cp.asarray(host), cp.zeros(6, cp.int32)
call('Neighbor_alltoall', p(s), 3, h(MPI.INT), p(r), 3, h(MPI.INT), h(cart))
want = np.zeros(6, np.int32)
cart.Neighbor_alltoall(host, want)
same(r, want, 'Neighbor_alltoall')
# uneven blocks: block 0 to the left neighbour (1 element), block 1 to the right (2); so 2 come from the
# left (its block 1) and 1 from the right (its block 0). The result is written out: Open MPI 4.1's own
# call pairs the two messages of a 2-rank ring (left == right) in another order than MPI 4's.
sc, sd = np.array([1, 2], np.int32), np.array([0, 1], np.int32)
rc, rd = np.array([2, 1], np.int32), np.array([0, 2], np.int32)
s, r = cp.arange(3, dtype=cp.float64) + rank, cp.zeros(3)
call('Neighbor_alltoallv', p(s), p(sc), p(sd), h(MPI.DOUBLE), p(r), p(rc), p(rd), h(MPI.DOUBLE), h(cart))
left, right = (rank - 1) % n, (rank + 1) % n
same(r, np.array([1.0 + left, 2.0 + left, 0.0 + right]), 'Neighbor_alltoallv')
cart.Free()

vec = MPI.DOUBLE.Create_vector(4, 1, 2).Commit()
b = cp.asarray(np.arange(8, dtype=np.float64) if rank == 0 else np.full(8, -1.0))
call('Bcast', p(b), 1, h(vec), 0, h(comm))
same(b, np.arange(8.0) if rank == 0 else np.where(np.arange(8) % 2 == 0, np.arange(8.0), -1.0), 'Bcast of a vector')
vec.Free()

s, r = cp.arange(8, dtype=cp.float32), cp.ones(8, cp.float32)
call('Reduce_local', p(s), p(r), 8, h(MPI.FLOAT), h(MPI.SUM))
same(r, np.arange(8, dtype=np.float32) + 1, 'Reduce_local')

# MPI_Pack and MPI_Unpack of two vectors of 4 doubles (every other one), device memory on both sides,
# against mpi4py's on host copies; the position read from and written to the caller's int
vec = MPI.DOUBLE.Create_vector(4, 1, 2).Commit()
src = np.arange(16, dtype=np.float64) + 100 * rank
want = np.zeros(80, np.uint8)
wpos = vec.Pack(src, want, 8, comm)
packed, pos = cp.zeros(80, cp.uint8), ctypes.c_int(8)
call('Pack', p(cp.asarray(src)), 2, h(vec), p(packed), 80, ctypes.byref(pos), h(comm))
same(np.array([pos.value]), np.array([wpos]), 'Pack position')
same(packed, want, 'Pack')
back, pos = cp.zeros(16), ctypes.c_int(8)
call('Unpack', p(packed), 72, ctypes.byref(pos), p(back), 2, h(vec), h(comm))
wback = np.zeros(16)
vec.Unpack(want, 8, wback, comm)
same(back, wback, 'Unpack')
vec.Free()

# Persistent requests made below Python: MPI_Send_init/MPI_Recv_init on a ring and MPI_Allreduce_init, CuPy
# arrays, three rounds of MPI_Startall and MPI_Waitall; the caller's handles stay the same proxies until
# MPI_Request_free
RQ = MPI._sizeof(MPI.Request)
reqs = (ctypes.c_byte * (3 * RQ))()
at = [ctypes.addressof(reqs) + k * RQ for k in range(3)]
nxt, prv = (rank + 1) % n, (rank - 1) % n
ring_s, ring_r = cp.zeros(1024), cp.zeros(1024)
ar_s, ar_r = cp.zeros(4096, cp.float32), cp.zeros(4096, cp.float32)
call('Recv_init', p(ring_r), 1024, h(MPI.DOUBLE), prv, 31, h(comm), ctypes.c_void_p(at[0]))
call('Send_init', p(ring_s), 1024, h(MPI.DOUBLE), nxt, 31, h(comm), ctypes.c_void_p(at[1]))
call('Allreduce_init', p(ar_s), p(ar_r), 4096, h(MPI.FLOAT), h(MPI.SUM), h(comm), h(MPI.INFO_NULL),
     ctypes.c_void_p(at[2]))
proxies = bytes(reqs)
for k in range(3):
    ring_s.fill(rank + 10 * k)
    ar_s.fill(rank + k)
    cp.cuda.get_current_stream().synchronize()
    call('Startall', 3, reqs)
    call('Waitall', 3, reqs, None)
    same(ring_r, np.full(1024, prv + 10.0 * k), f'Send_init/Recv_init, round {k}')
    same(ar_r, np.full(4096, n * (n - 1) / 2 + n * k, np.float32), f'Allreduce_init, round {k}')
    if bytes(reqs) != proxies:
        failures.append(f'rank {rank}: round {k} changed the caller\'s request handles')
for k in range(3):
    call('Request_free', ctypes.c_void_p(at[k]))

# one-sided calls with CuPy origin buffers on a window of host memory (MPI_Win_allocate's): Put and Get
# completed by MPI_Win_fence, Accumulate onto rank 0, and a Get completed by MPI_Win_unlock, each window or
# result as mpi4py's host calls leave it
C = 1000
win = MPI.Win.Allocate(4 * C * n, 4, comm=comm)
mem = np.frombuffer(win.tomemory(), dtype=np.int32)
T, WH = h(MPI.INT), h(win)
mem[:] = -1
comm.Barrier()
call('Win_fence', 0, WH)
src = cp.arange(C, dtype=cp.int32) + 10 * rank
call('Put', p(src), C, T, nxt, W(rank * C), C, T, WH)
call('Win_fence', 0, WH)
want = np.full(C * n, -1, np.int32)
want[prv * C:(prv + 1) * C] = np.arange(C, dtype=np.int32) + 10 * prv
same(mem, want, 'Put (one-sided)')
got = cp.zeros(C, cp.int32)
call('Get', p(got), C, T, nxt, W(rank * C), C, T, WH)
call('Win_fence', 0, WH)
same(got, np.arange(C, dtype=np.int32) + 10 * rank, 'Get (one-sided)')
mem[:] = 0
comm.Barrier()
call('Win_fence', 0, WH)
add = cp.full(C, rank + 1, cp.int32)
call('Accumulate', p(add), C, T, 0, W(0), C, T, h(MPI.SUM), WH)
call('Win_fence', 0, WH)
if rank == 0:
    same(mem[:C], np.full(C, n * (n + 1) // 2, np.int32), 'Accumulate (one-sided)')
win.Fence(MPI.MODE_NOSUCCEED)
win.Lock(rank)
mem[rank * C:(rank + 1) * C] = 1000 + rank
win.Unlock(rank)
comm.Barrier()
got = cp.zeros(C, cp.int32)
win.Lock(nxt, MPI.LOCK_SHARED)
call('Get', p(got), C, T, nxt, W(nxt * C), C, T, WH)
call('Win_unlock', nxt, WH)
same(got, np.full(C, 1000 + nxt, np.int32), 'Get completed by MPI_Win_unlock')
comm.Barrier()
got = cp.zeros(C, cp.int32)
rq = raw_request()
win.Lock_all()
call('Rget', p(got), C, T, nxt, W(nxt * C), C, T, WH, rq)
call('Wait', rq, None)
win.Unlock_all()
same(got, np.full(C, 1000 + nxt, np.int32), 'Rget completed by MPI_Wait')
comm.Barrier()
win.Free()

handled = handler.calls() - before
all_failures = comm.gather(failures)
total = comm.allreduce(checks)
if rank == 0:
    bad = [f for fs in all_failures for f in fs]
    for f in bad[:20]:
        print(f, file=sys.stderr)
    print(f'check_pmpi: {n} ranks, {total} checks, {len(bad)} failed; {handled} calls handled on rank 0; '
          f'interposer {mpigpu.interposer_status()}')
    sys.exit(1 if bad else 0)
