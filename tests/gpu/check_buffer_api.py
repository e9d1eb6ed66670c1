"""The rest of mpi4py's buffer API with GPU arrays (host mirrors): point-to-point, Gather(v),
Scatter(v), Allgatherv, Alltoall(v), Reduce_scatter, Scan, Exscan, with CuPy and PyTorch, checked
bit for bit against plain mpi4py on the same data in NumPy arrays.
`mpirun -n N python -m mpi4py tests/gpu/check_buffer_api.py`; exits non-zero on any failure."""
import sys

import cupy as cp
import numpy as np
from mpi4py import MPI

import mpigpu

try:
    import torch
except ImportError:
    torch = None

world, plain = mpigpu.COMM_WORLD, MPI.COMM_WORLD
rank, n = world.Get_rank(), world.Get_size()
cp.cuda.Device(rank % cp.cuda.runtime.getDeviceCount()).use()
if torch is not None:
    torch.cuda.set_device(rank % cp.cuda.runtime.getDeviceCount())
checks, fails = 0, []


def dev(lib, a):
    return cp.asarray(a) if lib == 'cupy' else torch.from_numpy(a).cuda()


def host(lib, d):
    return cp.asnumpy(d) if lib == 'cupy' else d.cpu().numpy()


def same(lib, d, ref, what):
    global checks
    checks += 1
    if host(lib, d).tobytes() != ref.tobytes():
        fails.append(f'rank {rank}: {lib} {what}')


for lib in ('cupy', 'torch') if torch is not None else ('cupy',):
    nxt, prv = (rank + 1) % n, (rank - 1) % n
    x = np.arange(100003, dtype=np.float32) * (rank + 1)
    r, ref = dev(lib, np.zeros_like(x)), np.zeros_like(x)
    world.Sendrecv(dev(lib, x), nxt, 0, r, prv, 0)
    plain.Sendrecv(x, nxt, 0, ref, prv, 0)
    same(lib, r, ref, 'Sendrecv ring')
    if n > 1 and rank < 2:
        if rank == 0:
            world.Send(dev(lib, x), 1, 5)
        else:
            r = dev(lib, np.zeros_like(x))
            world.Recv(r, 0, 5)
            same(lib, r, np.arange(100003, dtype=np.float32), 'Send/Recv')
    counts = [1000 + 7 * i for i in range(n)]
    displs = [sum(counts[:i]) for i in range(n)]
    x = np.arange(counts[rank], dtype=np.float64) + rank
    r, ref = dev(lib, np.zeros(sum(counts))), np.zeros(sum(counts))
    world.Allgatherv(dev(lib, x), [r, counts, displs, MPI.DOUBLE])
    plain.Allgatherv(x, [ref, counts, displs, MPI.DOUBLE])
    same(lib, r, ref, 'Allgatherv')
    root = n - 1
    r, ref = dev(lib, np.zeros(sum(counts))), np.zeros(sum(counts))
    world.Gatherv(dev(lib, x), [r, counts, displs, MPI.DOUBLE] if rank == root else None, root)
    plain.Gatherv(x, [ref, counts, displs, MPI.DOUBLE] if rank == root else None, root)
    same(lib, r, ref, 'Gatherv')
    s = np.arange(sum(counts), dtype=np.float64)
    r, ref = dev(lib, np.zeros(counts[rank])), np.zeros(counts[rank])
    world.Scatterv([dev(lib, s), counts, displs, MPI.DOUBLE] if rank == root else None, r, root)
    plain.Scatterv([s, counts, displs, MPI.DOUBLE] if rank == root else None, ref, root)
    same(lib, r, ref, 'Scatterv')
    x = np.arange(4 * n, dtype=np.int64) + 100 * rank
    r, ref = dev(lib, np.zeros_like(x)), np.zeros_like(x)
    world.Alltoall(dev(lib, x), r)
    plain.Alltoall(x, ref)
    same(lib, r, ref, 'Alltoall')
    x = np.arange(sum(counts), dtype=np.int32) * (rank + 1)
    r, ref = dev(lib, np.zeros(counts[rank], np.int32)), np.zeros(counts[rank], np.int32)
    world.Reduce_scatter(dev(lib, x), r, counts, MPI.SUM)
    plain.Reduce_scatter(x, ref, counts, MPI.SUM)
    same(lib, r, ref, 'Reduce_scatter')
    x = np.arange(1001, dtype=np.float64) * (rank + 1)
    for op in (MPI.SUM, MPI.MAX):
        r, ref = dev(lib, np.zeros_like(x)), np.zeros_like(x)
        world.Scan(dev(lib, x), r, op)
        plain.Scan(x, ref, op)
        same(lib, r, ref, 'Scan')
        r, ref = dev(lib, np.zeros_like(x)), np.zeros_like(x)
        world.Exscan(dev(lib, x), r, op)
        plain.Exscan(x, ref, op)
        if rank:
            same(lib, r, ref, 'Exscan')

# A pointer less aligned than its type (a raw offset, which no GPU library produces): refused on every
# rank with ERR_BUFFER, also once the team is up and the fast path sees the call first.
world.Allreduce(cp.ones(4, cp.float32), cp.zeros(4, cp.float32))
mis = cp.ndarray((16,), cp.float32, memptr=cp.zeros(65, cp.float32).data + 2)
for name, call in (('Allreduce', lambda: world.Allreduce(MPI.IN_PLACE, mis)),
                   ('Reduce', lambda: world.Reduce(mis, cp.zeros(16, cp.float32) if rank == 0 else None, root=0)),
                   ('Bcast', lambda: world.Bcast(mis, root=0))):
    checks += 1
    try:
        call()
        fails.append(f'rank {rank}: {name} took a float32 buffer 2 bytes off alignment')
    except mpigpu.Error as exc:
        if exc.Get_error_class() != MPI.ERR_BUFFER or 'not aligned to the 4 bytes of float32' not in str(exc):
            fails.append(f'rank {rank}: {name} misaligned: {exc}')

allf = world.gather(fails, root=0)
total = world.reduce(checks, root=0)
if rank == 0:
    flat = [f for fs in allf for f in fs]
    for f in flat[:20]:
        print('FAIL', f)
    print(f'buffer API: {total - len(flat)} passed, {len(flat)} failed')
    sys.stdout.flush()
    if flat:
        MPI.COMM_WORLD.Abort(1)
