"""Hello, Allreduce: every rank contributes its rank number; everyone gets the sum.

    mpiexec -n 4 python examples/allreduce_hello.py          # GPU arrays where CuPy and GPUs exist
    mpiexec -n 2 python examples/allreduce_hello.py --host   # NumPy arrays (any machine)
"""
import argparse

import numpy as np

import mpigpu
from mpigpu import MPI

p = argparse.ArgumentParser(description='Allreduce of every rank\'s number (1M float32 elements), checked.')
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

x = xp.full(1 << 20, rank, dtype=xp.float32)
y = xp.empty_like(x)
comm.Allreduce(x, y, op=MPI.SUM)            # blocking: y holds the sum when it returns
comm.Allreduce(MPI.IN_PLACE, x, op=MPI.MAX)  # MPI's in-place form

expected = size * (size - 1) / 2
assert float(y[0]) == expected and float(y[-1]) == expected and float(x[0]) == size - 1
if rank == 0:
    where = 'GPU' if xp is not np else 'host'
    engine = comm.engine_status() if xp is not np else 'not used for host buffers'
    print(f'allreduce_hello: {size} ranks, {where} buffers: sum of ranks = {float(y[0]):g}, '
          f'max = {float(x[0]):g} (device engine: {engine})')
