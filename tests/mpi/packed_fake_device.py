"""Derived datatypes on device buffers, packed and unpacked by the GPU's pack plans (here the fake CUDA
layer's, which run mpigpu._describe.datatypes' host reference at the same addresses): point-to-point (Sendrecv
ring, Isend/Irecv) and Datatype.Pack/Unpack of every constructor of tests/datatype_cases.py, byte for
byte against plain mpi4py on host copies of the same bytes. Run under mpiexec -n 1..3."""
import os
import sys

import numpy as np
from mpi4py import MPI

from fake_device import FakeCAI, install

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import datatype_cases as cases  # noqa: E402

install()
import mpigpu  # noqa: E402
from mpigpu._face import objects  # noqa: E402

world = mpigpu.COMM_WORLD
plain = MPI.COMM_WORLD
rank, n = world.Get_rank(), world.Get_size()
nxt, prv = (rank + 1) % n, (rank - 1) % n
checks = 0


def same(got, want, what):
    global checks
    checks += 1
    assert got.tobytes() == want.tobytes(), f'rank {rank}: {what}: device and host results differ'


def at(arr, base):
    """The device form of a buffer pointer `base` bytes into `arr` (registered device memory)."""
    return MPI.memory.fromaddress(arr.ctypes.data + base, 0)


for name, (_make, counts, overlapping) in sorted(cases.CASES.items()):
    dt = cases.make(name)
    for count in counts:
        src, base = cases.host_buffer(dt, count, seed=rank)
        keep = FakeCAI(src)  # registers src as device memory
        # Sendrecv around the ring: device buffers on one side, host copies on the other
        if not overlapping:
            init, _ = cases.host_buffer(dt, count, seed=100 + rank)
            dst_dev, dst_host, dst_dev2 = init.copy(), init.copy(), init.copy()
            keep2 = FakeCAI(dst_dev)
            world.Sendrecv([at(src, base), count, dt], nxt, 11, [at(dst_dev, base), count, dt], prv, 11)
            host_src = src.copy()
            plain.Sendrecv([MPI.memory.fromaddress(host_src.ctypes.data + base, 0), count, dt], nxt, 11,
                           [MPI.memory.fromaddress(dst_host.ctypes.data + base, 0), count, dt], prv, 11)
            same(dst_dev, dst_host, f'{name} x{count} Sendrecv')
            # non-blocking: Irecv posted first, then Isend, statuses as MPI reports them
            keep3 = FakeCAI(dst_dev2)
            st = MPI.Status()
            r = world.Irecv([at(dst_dev2, base), count, dt], prv, 12)
            s = world.Isend([at(src, base), count, dt], nxt, 12)
            MPI.Request.Waitall([r, s], [st, MPI.Status()])
            same(dst_dev2, dst_host, f'{name} x{count} Isend/Irecv')
            assert st.Get_count(MPI.BYTE) == count * dt.Get_size(), (name, st.Get_count(MPI.BYTE))
        # Pack and Unpack on device buffers against MPI's own
        lo, hi = cases.span(dt, count)
        if lo >= 0 and dt.Get_extent()[1] > 0 and count * dt.Get_extent()[1] >= hi:
            whole = src[base:base + count * dt.Get_extent()[1]].copy()
            keep4 = FakeCAI(whole)
            packed_dev = np.zeros(count * dt.Get_size() + 3, np.uint8)
            keep5 = FakeCAI(packed_dev)
            ours = objects.Datatype(dt)  # what `from mpigpu import MPI` gives: Pack on device buffers
            pos = ours.Pack(FakeCAI(whole), FakeCAI(packed_dev), 3, world)
            packed_host = np.zeros_like(packed_dev)
            pos2 = MPI.Datatype.Pack(dt, whole, packed_host, 3, plain)
            assert pos == pos2, (name, pos, pos2)
            same(packed_dev, packed_host, f'{name} x{count} Pack')
            if not overlapping:
                out_dev, out_host = np.zeros_like(whole), np.zeros_like(whole)
                keep6 = FakeCAI(out_dev)
                ours.Unpack(FakeCAI(packed_dev), 3, FakeCAI(out_dev), world)
                MPI.Datatype.Unpack(dt, packed_host, 3, out_host, plain)
                same(out_dev, out_host, f'{name} x{count} Unpack')
    if not dt.is_predefined:
        dt.Free()

world.Barrier()
total = world.reduce(checks, root=0)
if rank == 0:
    print(f'derived datatypes on device buffers: {total} checks identical to mpi4py on {n} ranks')
