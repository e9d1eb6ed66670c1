"""Broadcast of a model's parameter set from rank 0, MPI-style: every tensor with Bcast, in place.

    mpirun -n 4 python examples/broadcast_parameters.py --gb 4      # CuPy arrays on GPUs
    mpiexec -n 2 python examples/broadcast_parameters.py --host      # NumPy arrays, small

On GPUs large broadcasts run the engine's pipelined scatter-forward algorithm (every rank receives
each byte once, in two hops); the script reports the achieved rate and checks every parameter.
"""
import argparse
import time

import numpy as np

import mpigpu

p = argparse.ArgumentParser()
p.add_argument('--gb', type=float, default=0.25, help='total parameter size in GB (GPU run)')
p.add_argument('--host', action='store_true', help='NumPy arrays, 8 MB in total')
a = p.parse_args()

comm = mpigpu.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
xp = np
if not a.host and mpigpu.gpu_available()[0]:
    try:
        import cupy as xp
        xp.cuda.Device(rank % xp.cuda.runtime.getDeviceCount()).use()
    except ImportError:
        xp = np
total = int((a.gb if xp is not np else 0.008) * 1e9)

# a parameter set shaped like a transformer's: many matrices, some vectors, float32 and bfloat16-sized
shapes, nbytes = [], 0
while nbytes < total:
    for shape, dt in (((1024, 4096), np.float32), ((4096,), np.float32), ((1024, 1024), np.float16)):
        shapes.append((shape, dt))
        nbytes += int(np.prod(shape)) * np.dtype(dt).itemsize
params = []
for i, (shape, dt) in enumerate(shapes):
    if rank == 0:
        params.append((xp.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape) % 251 + i).astype(dt))
    else:
        params.append(xp.zeros(shape, dtype=dt))

# The first GPU call on a communicator sets up its device team (peer mappings, workspaces opened over
# CUDA IPC); that one-time cost is timed on its own so the rate below is the broadcasts' own.
comm.Barrier()
t0 = time.perf_counter()
comm.Bcast(xp.zeros(1, np.float32), root=0)
setup = time.perf_counter() - t0
comm.Barrier()
t0 = time.perf_counter()
for prm in params:
    comm.Bcast(prm, root=0)
comm.Barrier()
dt = time.perf_counter() - t0

bad = 0
for i, (prm, (shape, d)) in enumerate(zip(params, shapes)):
    want = (np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape) % 251 + i).astype(d)
    got = xp.asnumpy(prm) if xp is not np else prm
    bad += int(not np.array_equal(got, want))
bad = comm.allreduce(bad)
assert bad == 0, f'{bad} parameters differ from rank 0'
if rank == 0:
    where = 'GPU' if xp is not np else 'host'
    print(f'broadcast {len(params)} parameters, {nbytes / 1e9:.3f} GB, {size} ranks, {where} arrays: '
          f'{dt * 1e3:.1f} ms, {nbytes / dt / 1e9:.1f} GB/s per rank (first call, setup: '
          f'{setup * 1e3:.1f} ms); all equal to rank 0')
