"""Where a halo Sendrecv's time goes (not a user tool): `mpirun -n 2 python3 benchmarks/halo_parts_probe.py`.

A ring Sendrecv of the same bytes in several forms (each rank sends to rank + 1, receives from rank - 1),
then the pieces of the halo's path alone on each rank, for columns of 16 .. 4M float32 elements of an
m x 8 array:
  contig        whole arrays of m floats
  plaintype     [array, 1, Create_contiguous(m)] on both sides (a plain derived type: moved as it lies)
  predef        [array, MPI.FLOAT] on both sides
  halo          [column, 1, Create_vector(m, 1, 8)] on both sides (the mpigpu-perf halo row)
  packonly      the column sent, a whole array received
  unpackonly    a whole array sent, the column received
  pack>pin, pack>dev, unpack<pin, unpack<dev
                the datatype's kernel between the array and page-locked or device memory, then a
                synchronize of the stream
  memcpyD2H     one cudaMemcpyAsync of m floats to page-locked memory, then its synchronize
  m2D_D2H, m2D_H2D
                the column by one cudaMemcpy2DAsync to or from page-locked memory, then a synchronize
Prints rank 0's table, best of 3 loops per cell, us.
"""
import os
import time

import cupy as cp

cp.cuda.Device(int(os.environ.get('OMPI_COMM_WORLD_LOCAL_RANK', os.environ.get('PMI_LOCAL_RANK', 0)))
               % cp.cuda.runtime.getDeviceCount()).use()

from mpi4py import MPI  # noqa: E402

import mpigpu  # noqa: E402
from mpigpu._describe import datatypes  # noqa: E402
from mpigpu._ext import _device  # noqa: E402

WIDTH = 8
comm = mpigpu.COMM_WORLD
rank, n = comm.Get_rank(), comm.Get_size()
team = cp.ones(4096, cp.float32)
comm.Allreduce(MPI.IN_PLACE, team)  # the device team, so that rendezvous sizes go GPU to GPU


def best(fn, loops):
    for _ in range(20):
        fn()
    cp.cuda.Stream.null.synchronize()
    out = float('inf')
    for _ in range(3):
        comm.Barrier()
        t = time.perf_counter()
        for _ in range(loops):
            fn()
        out = min(out, (time.perf_counter() - t) / loops * 1e6)
    return out


def row(m):
    loops = 2000 if m <= 16384 else 200
    a = cp.arange(m * WIDTH, dtype=cp.float32).reshape(m, WIDTH)
    g = cp.zeros((m, WIDTH), cp.float32)
    c1, c2 = cp.arange(m, dtype=cp.float32), cp.zeros(m, cp.float32)
    col = MPI.FLOAT.Create_vector(m, 1, WIDTH).Commit()
    cont = MPI.FLOAT.Create_contiguous(m).Commit()
    last, first = a.reshape(-1)[WIDTH - 1:], g.reshape(-1)
    d, s = (rank + 1) % n, (rank - 1) % n
    stream = cp.cuda.get_current_stream()
    sync, st = stream.synchronize, stream.ptr
    plan = _device.pack_plan(datatypes.layout(col), cp.cuda.Device().id)
    pin = _device.PinnedBuffer(m * 4)
    dev = cp.empty(m, cp.float32)
    r = {
        'contig': best(lambda: comm.Sendrecv(c1, d, 0, c2, s, 0), loops),
        'plaintype': best(lambda: comm.Sendrecv([c1, 1, cont], d, 0, [c2, 1, cont], s, 0), loops),
        'predef': best(lambda: comm.Sendrecv([c1, MPI.FLOAT], d, 0, [c2, MPI.FLOAT], s, 0), loops),
        'halo': best(lambda: comm.Sendrecv([last, 1, col], d, 0, [first, 1, col], s, 0), loops),
        'packonly': best(lambda: comm.Sendrecv([last, 1, col], d, 0, c2, s, 0), loops),
        'unpackonly': best(lambda: comm.Sendrecv(c1, d, 0, [first, 1, col], s, 0), loops),
        'pack>pin': best(lambda: (plan.pack(1, last.data.ptr, pin.ptr, st), sync()), loops),
        'pack>dev': best(lambda: (plan.pack(1, last.data.ptr, dev.data.ptr, st), sync()), loops),
        'unpack<pin': best(lambda: (plan.unpack(1, pin.ptr, first.data.ptr, st), sync()), loops),
        'unpack<dev': best(lambda: (plan.unpack(1, dev.data.ptr, first.data.ptr, st), sync()), loops),
        'memcpyD2H': best(lambda: (cp.cuda.runtime.memcpyAsync(pin.ptr, dev.data.ptr, m * 4, 2, st), sync()),
                          loops),
        'm2D_D2H': best(lambda: (cp.cuda.runtime.memcpy2DAsync(pin.ptr, 4, last.data.ptr, 4 * WIDTH, 4, m, 2, st),
                                 sync()), loops),
        'm2D_H2D': best(lambda: (cp.cuda.runtime.memcpy2DAsync(first.data.ptr, 4 * WIDTH, pin.ptr, 4, 4, m, 1, st),
                                 sync()), loops),
    }
    col.Free()
    cont.Free()
    return r


rows = [(m * 4, row(m)) for m in (16, 256, 1024, 4096, 16384, 262144, 4194304)]
if rank == 0:
    keys = list(rows[0][1])
    print('bytes ' + ' '.join(f'{k:>11}' for k in keys))
    for nbytes, r in rows:
        print(f'{nbytes:>8} ' + ' '.join(f'{r[k]:11.2f}' for k in keys))
    print('(us; best of 3 loops; the ranks in a ring)')
