"""Broadcast of a model's parameter set from rank 0, MPI-style: every tensor with Bcast, in place.

    mpirun -n 4 python examples/broadcast_parameters.py --gb 4      # CuPy arrays on GPUs, 4 GB
    mpiexec -n 2 python examples/broadcast_parameters.py --host      # NumPy arrays, 8 MB

On GPUs each Bcast runs on mpigpu's device engine, in the form its cost model picks for the tensor's
size (docs/tuning.md); on host arrays it is the MPI library's own Bcast. Rank 0 prints one line: the
set's size, the time and rate of the broadcasts, and that every parameter matches rank 0's.
"""
import argparse
import time

import numpy as np

import mpigpu

p = argparse.ArgumentParser(description='Broadcast a transformer-shaped parameter set from rank 0 and check it.')
p.add_argument('--gb', type=float, default=None,
               help='total parameter size in GB (default 0.25 on GPUs, 0.008 = 8 MB with --host or without GPUs)')
p.add_argument('--host', action='store_true', help='NumPy arrays in host memory even where GPUs exist')
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
total = int((a.gb if a.gb is not None else 0.25 if xp is not np else 0.008) * 1e9)

# A parameter set shaped like a transformer's: per layer an MLP matrix (width x 4 width, float32), its
# bias and an attention matrix (width x width, float16). The width is the largest power of two up to
# 1024 at which four layers fit the total; tensors are added while the total is not exceeded, so the
# set comes to within one tensor of it.
width = 1024
while width > 16 and 4 * (16 * width * width + 16 * width + 2 * width * width) > total:
    width //= 2
layer = (((width, 4 * width), np.float32), ((4 * width,), np.float32), ((width, width), np.float16))
shapes, nbytes = [], 0
while True:
    shape, dt = layer[len(shapes) % len(layer)]
    step = int(np.prod(shape)) * np.dtype(dt).itemsize
    if shapes and nbytes + step > total:
        break
    shapes.append((shape, dt))
    nbytes += step
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
    amount = f'{nbytes / 1e9:.2f} GB' if nbytes >= 1e9 else f'{nbytes / 1e6:.1f} MB'
    print(f'broadcast_parameters: {size} ranks, {where} arrays, {len(params)} parameters, {amount} in '
          f'{dt * 1e3:.1f} ms ({nbytes / dt / 1e9:.2f} GB/s; setup call {setup * 1e3:.1f} ms); all equal to rank 0')
