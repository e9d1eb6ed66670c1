"""A stencil code written for plain mpi4py: 2-D Jacobi iteration, rows split over the ranks, halo rows
swapped with Sendrecv, the residual summed with Allreduce. It imports only mpi4py; run it unchanged
with mpigpu underneath, and its CuPy arrays go GPU-to-GPU (or through pinned memory) instead of
crashing a non-CUDA-aware MPI:

    mpirun -n 4 python -m mpigpu examples/jacobi_halo.py             # CuPy arrays where GPUs exist
    mpiexec -n 3 python -m mpigpu examples/jacobi_halo.py --host     # NumPy arrays

Rank 0 checks the result against the same iteration done serially.
"""
import argparse

import numpy as np
from mpi4py import MPI

p = argparse.ArgumentParser(description='2-D Jacobi iteration in plain mpi4py (halo Sendrecv, residual '
                            'Allreduce), checked against a serial run on rank 0.')
p.add_argument('--n', type=int, default=96, help='grid is n x n (interior), rows split over the ranks (default 96)')
p.add_argument('--steps', type=int, default=200, help='Jacobi iterations (default 200)')
p.add_argument('--host', action='store_true', help='NumPy arrays even where GPUs exist')
a = p.parse_args()

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
xp = np
if not a.host:
    try:
        import cupy
        if cupy.cuda.runtime.getDeviceCount() > 0:
            xp = cupy
            xp.cuda.Device(rank % xp.cuda.runtime.getDeviceCount()).use()
    except Exception:
        xp = np

n = a.n
rows = [n // size + (1 if r < n % size else 0) for r in range(size)]
start = sum(rows[:rank])
# local block with one halo row above and below; the boundary is 1 on the left edge, 0 elsewhere
u = xp.zeros((rows[rank] + 2, n + 2), dtype=xp.float64)
u[:, 0] = 1.0
up, down = (rank - 1 if rank > 0 else MPI.PROC_NULL), (rank + 1 if rank < size - 1 else MPI.PROC_NULL)
res = xp.zeros(1, dtype=xp.float64)
total = xp.zeros(1, dtype=xp.float64)
for step in range(a.steps):
    comm.Sendrecv(u[1], up, 0, u[-1], down, 0)      # my first row up, my lower halo from below
    comm.Sendrecv(u[-2], down, 1, u[0], up, 1)      # my last row down, my upper halo from above
    new = u.copy()
    new[1:-1, 1:-1] = 0.25 * (u[:-2, 1:-1] + u[2:, 1:-1] + u[1:-1, :-2] + u[1:-1, 2:])
    res[0] = ((new[1:-1, 1:-1] - u[1:-1, 1:-1]) ** 2).sum()
    comm.Allreduce(res, total, op=MPI.SUM)
    u = new

interior = xp.ascontiguousarray(u[1:-1, 1:-1])
gathered = np.empty((n, n)) if rank == 0 else None
counts = [r * n for r in rows]
displs = [sum(counts[:r]) for r in range(size)]
comm.Gatherv(interior, [gathered, counts, displs, MPI.DOUBLE] if rank == 0 else None, root=0)
if rank == 0:
    s = np.zeros((n + 2, n + 2))
    s[:, 0] = 1.0
    for step in range(a.steps):
        t = s.copy()
        t[1:-1, 1:-1] = 0.25 * (s[:-2, 1:-1] + s[2:, 1:-1] + s[1:-1, :-2] + s[1:-1, 2:])
        last = ((t[1:-1, 1:-1] - s[1:-1, 1:-1]) ** 2).sum()
        s = t
    err = np.abs(gathered - s[1:-1, 1:-1]).max()
    assert err < 1e-12, f'distributed result differs from serial by {err}'
    assert abs(float(total[0]) - last) <= 1e-9 * max(last, 1e-30), (float(total[0]), last)
    where = 'GPU' if xp is not np else 'host'
    print(f'jacobi_halo: {n}x{n}, {a.steps} steps, {size} ranks, {where} arrays: matches serial '
          f'(residual {float(total[0]):.3e})')
