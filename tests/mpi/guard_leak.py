"""Hands fake device memory straight to plain mpi4py (no mpigpu), under the preloaded device-pointer
guard (tests/mpi4py_suite/guard.c), for tests/test_device_guard.py. One rank.

    guard_leak.py first   the guard's default mode: the first call must end the process
    guard_leak.py each    MPIGPU_GUARD_MODE=report: every entry point below is caught, the same calls
                          on host memory and on memory no longer registered are not
"""
import ctypes
import os
import sys
import tempfile

import numpy as np
from mpi4py import MPI

import fake_device

lib = ctypes.CDLL(None)
hits = lib.mpigpu_guard_hits
hits.restype = ctypes.c_ulonglong

comm = MPI.COMM_SELF
dev = np.arange(64, dtype=np.int32)
fake_device.register_device(dev.ctypes.data, dev.nbytes)

if sys.argv[1] == 'first':
    comm.Sendrecv(dev, 0, 0, np.zeros(64, np.int32), 0, 0)
    print('not caught: Sendrecv returned')
    sys.exit(0)


def cases(a):
    """(what, call): each call hands MPI the memory of int32 array `a` (64 items) as a buffer."""
    out = np.zeros(64, np.int32)
    packed = bytearray(1024)
    path = os.path.join(tempfile.mkdtemp(), 'guard.bin')

    def send_recv():
        r = comm.Isend(a, 0, 1)
        comm.Recv(out, 0, 1)
        r.Wait()

    def recv():
        r = comm.Isend(out, 0, 2)
        comm.Recv(a, 0, 2)
        r.Wait()

    def matched_recv():
        r = comm.Isend(out, 0, 3)
        comm.Mprobe(0, 3).Recv(a)
        r.Wait()

    def persistent():
        r = comm.Send_init(a, 0, 4)
        rr = comm.Recv_init(out, 0, 4)
        MPI.Prequest.Startall([rr, r])
        MPI.Request.Waitall([rr, r])
        r.Free()
        rr.Free()

    def partitioned():
        r = comm.Psend_init(a, 2, 0, 5)
        rr = comm.Precv_init(out, 2, 0, 5)
        for q in (rr, r):
            q.Start()
        r.Pready_range(0, 1)
        MPI.Request.Waitall([rr, r])
        r.Free()
        rr.Free()

    def persistent_coll():
        r = comm.Allreduce_init(a, out)
        r.Start()
        r.Wait()
        r.Free()

    def neighbor():
        cart = comm.Create_cart([1], periods=[True])
        cart.Neighbor_allgather(a, np.zeros(128, np.int32))
        cart.Free()

    def rma():
        win = MPI.Win.Create(a, 4, comm=comm)
        win.Free()

    def put():
        win = MPI.Win.Create(out, 4, comm=comm)
        win.Fence()
        win.Put(a, 0)
        win.Fence()
        win.Free()

    def attach():
        MPI.Attach_buffer(a)
        MPI.Detach_buffer()

    def file_write():
        fh = MPI.File.Open(comm, path, MPI.MODE_CREATE | MPI.MODE_RDWR)
        fh.Write_at(0, a)
        fh.Close()

    return [
        ('MPI_Sendrecv', lambda: comm.Sendrecv(a, 0, 0, out, 0, 0)),
        ('MPI_Isend', send_recv),
        ('MPI_Recv', recv),
        ('MPI_Mrecv', matched_recv),
        ('MPI_Send_init', persistent),
        ('MPI_Psend_init', partitioned),
        ('MPI_Bcast', lambda: comm.Bcast(a)),
        ('MPI_Allreduce', lambda: comm.Allreduce(a, out)),
        ('MPI_Allreduce', lambda: comm.Allreduce(MPI.IN_PLACE, a)),
        ('MPI_Iallgather', lambda: comm.Iallgather(a, out).Wait()),
        ('MPI_Alltoallw', lambda: comm.Alltoallw([a, [1], [0], [MPI.INT]], [out, [1], [0], [MPI.INT]])),
        ('MPI_Allreduce_init', persistent_coll),
        ('MPI_Neighbor_allgather', neighbor),
        ('MPI_Pack', lambda: MPI.INT.Pack(a, packed, 0, comm)),
        ('MPI_Unpack', lambda: MPI.INT.Unpack(bytes(256), 0, a, comm)),
        ('MPI_Pack_external', lambda: MPI.INT.Pack_external('external32', a, packed, 0)),
        ('MPI_Reduce_local', lambda: MPI.SUM.Reduce_local(a, out)),
        ('MPI_Win_create', rma),
        ('MPI_Put', put),
        ('MPI_Buffer_attach', attach),
        ('MPI_File_write_at', file_write),
        # the buffer forms of code written for a CUDA-aware MPI: raw addresses, a view at an offset
        ('MPI_Sendrecv', lambda: comm.Sendrecv([MPI.memory.fromaddress(a.ctypes.data, a.nbytes), MPI.BYTE], 0, 0,
                                               [out, MPI.BYTE], 0, 0)),
        ('MPI_Sendrecv', lambda: comm.Sendrecv([MPI.buffer.fromaddress(a.ctypes.data + 8, 16), 4, MPI.INT], 0, 0,
                                               [out, 4, MPI.INT], 0, 0)),
    ]


log = os.environ['MPIGPU_GUARD_LOG']
missed = []
for what, call in cases(dev):
    before, lines = hits(), (open(log).read().count('\n') if os.path.exists(log) else 0)
    call()
    new = open(log).read().splitlines()[lines:] if os.path.exists(log) else []
    if hits() == before or not any(f'{what}(' in ln or f'{what}_c(' in ln for ln in new):
        missed.append(what)
assert not missed, f'device pointers the guard did not catch: {missed}'
caught = hits()

host = np.arange(64, dtype=np.int32)
for what, call in cases(host):
    call()
fake_device.unregister_device(dev.ctypes.data, dev.nbytes)  # from now on `dev` is host memory
for what, call in cases(dev):
    call()
assert hits() == caught, f'host memory reported as device memory ({hits() - caught} times)'
print(f'guard: caught {len(cases(dev))} of {len(cases(dev))} entry points; host memory passed')
