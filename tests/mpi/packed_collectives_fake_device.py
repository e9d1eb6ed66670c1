"""Collectives with derived datatypes on device buffers: the instances each call reaches are packed on the
GPU into the pinned mirror (mpigpu/_paths/support/packing.py; here the fake CUDA layer's pack plans, which run
mpigpu._describe.datatypes' host reference at the same addresses), host MPI runs the rewritten specification, and
outputs are unpacked on the GPU. Every constructor of tests/datatype_cases.py through Bcast, Gather(v),
Scatter(v), Allgather(v), Alltoall(v, w), neighbourhood collectives and non-blocking and persistent
forms, byte for byte against plain mpi4py on host copies of the same bytes; the reductions, Scan and
Exscan against plain mpi4py on the base-type elements MPI packs (the element type decides).
Run under mpiexec -n 1..3 (tests/test_mpi.py); on a GPU with MPIGPU_CHECK_ON_GPU=1 (CuPy arrays, the
real pack kernels; benchmarks/device_session.sh, part packed)."""
import os
import sys

import numpy as np
from mpi4py import MPI

from fake_device import FakeCAI, install_unless_gpu

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import datatype_cases as cases  # noqa: E402

# MPIGPU_CHECK_ON_GPU=1: the same checks on CuPy arrays of a real GPU, run through the real pack kernels
cp = install_unless_gpu()
GPU = cp is not None
import mpigpu  # noqa: E402
from mpigpu._describe import datatypes as _datatypes  # noqa: E402
from mpigpu._base import types as mpigpu_types  # noqa: E402
from mpigpu._paths.support import packing  # noqa: E402

world = mpigpu.COMM_WORLD
plain = MPI.COMM_WORLD
rank, n = world.Get_rank(), world.Get_size()
checks = 0
packed_runs = [0]

_pack = packing.Packing.pack


def _counting_pack(self, ptr):
    packed_runs[0] += 1
    return _pack(self, ptr)


packing.Packing.pack = _counting_pack


class Pair:
    """The same random bytes twice around a buffer pointer, reaching what `instances` instances of dt
    (and the byte ranges in `extra`) touch: one copy registered as device memory."""

    def __init__(self, dt, instances, seed, small=False, extra=()):
        lo, hi = cases.span(dt, max(instances, 1))
        for a, b in extra:
            lo, hi = min(lo, a), max(hi, b)
        lo, hi, margin = min(lo, 0), max(hi, 0), 32
        rng = np.random.default_rng(seed)
        buf = rng.integers(0, 64 if small else 256, hi - lo + 2 * margin, dtype=np.uint8)
        self.base = margin - lo
        self.host = buf.copy()
        if GPU:
            self.dev = cp.asarray(buf)
            self.ptr = self.dev.data.ptr
        else:
            self.dev = buf.copy()
            self.keep = FakeCAI(self.dev)
            self.ptr = self.dev.ctypes.data

    def d(self):
        return MPI.memory.fromaddress(self.ptr + self.base, 0)

    def h(self):
        return MPI.memory.fromaddress(self.host.ctypes.data + self.base, 0)

    def same(self, what):
        global checks
        checks += 1
        dev = cp.asnumpy(self.dev) if GPU else self.dev
        assert dev.tobytes() == self.host.tobytes(), f'rank {rank}: {what}: device and host results differ'


def run(what, fn, *pairs):
    """fn(side, comm) runs the call on one side ('d' device, 'h' host) with that side's communicator."""
    fn('d', world)
    fn('h', plain)
    for p in pairs:
        p.same(what)


def spec(p, side, *rest):
    return [getattr(p, side)(), *rest]


def _persistent_collectives():
    """Whether host MPI has MPI-4's persistent collectives (Open MPI 4 has none: mpi4py raises)."""
    try:
        plain.Barrier_init().Free()
        return True
    except NotImplementedError:
        return False


PERSISTENT_COLLECTIVES = _persistent_collectives()


def collectives(name, dt, c):
    tag = f'{name} x{c}'
    counts = [c * (i % 2 + 1) for i in range(n)]
    displs = [sum(counts[:i]) + i for i in range(n)]   # gaps between blocks
    span = displs[-1] + counts[-1]
    for root in range(n):
        b = Pair(dt, c, seed=root * 7 + rank)
        run(f'{tag} Bcast root {root}', lambda s, comm: comm.Bcast(spec(b, s, c, dt), root), b)
        src, dst = Pair(dt, c, seed=rank), Pair(dt, c * n, seed=50 + rank)
        run(f'{tag} Gather root {root}', lambda s, comm: comm.Gather(
            spec(src, s, c, dt), spec(dst, s, c, dt) if rank == root else None, root), src, dst)
        src, dst = Pair(dt, counts[rank], seed=rank), Pair(dt, span, seed=60 + rank)
        run(f'{tag} Gatherv root {root}', lambda s, comm: comm.Gatherv(
            spec(src, s, counts[rank], dt), spec(dst, s, counts, displs, dt) if rank == root else None, root),
            src, dst)
        src, dst = Pair(dt, c * n, seed=70 + root), Pair(dt, c, seed=rank)
        run(f'{tag} Scatter root {root}', lambda s, comm: comm.Scatter(
            spec(src, s, c, dt) if rank == root else None, spec(dst, s, c, dt), root), src, dst)
        src, dst = Pair(dt, span, seed=80 + root), Pair(dt, counts[rank], seed=rank)
        run(f'{tag} Scatterv root {root}', lambda s, comm: comm.Scatterv(
            spec(src, s, (counts, displs), dt) if rank == root else None, spec(dst, s, counts[rank], dt), root),
            src, dst)
    src, dst = Pair(dt, c, seed=rank), Pair(dt, c * n, seed=90 + rank)
    run(f'{tag} Allgather', lambda s, comm: comm.Allgather(spec(src, s, c, dt), spec(dst, s, c, dt)), src, dst)
    src, dst = Pair(dt, counts[rank], seed=rank), Pair(dt, span, seed=100 + rank)
    run(f'{tag} Allgatherv', lambda s, comm: comm.Allgatherv(spec(src, s, counts[rank], dt),
                                                             spec(dst, s, (counts, displs), dt)), src, dst)
    src, dst = Pair(dt, c * n, seed=rank), Pair(dt, c * n, seed=110 + rank)
    run(f'{tag} Alltoall', lambda s, comm: comm.Alltoall(spec(src, s, c, dt), spec(dst, s, c, dt)), src, dst)
    # Alltoallv: rank i sends c * ((i + j) % 2 + 1) instances to rank j (so it receives as many from j)
    acounts = [c * ((rank + j) % 2 + 1) for j in range(n)]
    adispls = [sum(acounts[:j]) + j for j in range(n)]
    aspan = adispls[-1] + acounts[-1]
    src, dst = Pair(dt, aspan, seed=rank), Pair(dt, aspan, seed=120 + rank)
    counts, displs = acounts, adispls
    run(f'{tag} Alltoallv', lambda s, comm: comm.Alltoallv(spec(src, s, (counts, displs), dt),
                                                           spec(dst, s, (counts, displs), dt)), src, dst)
    # Alltoallw: this datatype to even ranks, doubles to odd ones, at byte displacements
    lo, hi = cases.span(dt, c)
    step = max(hi, 0) - min(lo, 0) + 24
    types = [dt if (rank + j) % 2 == 0 else MPI.DOUBLE for j in range(n)]
    wcounts = [c if (rank + j) % 2 == 0 else 3 for j in range(n)]
    wdispls = [j * step - min(lo, 0) for j in range(n)]
    extra = [(d + lo, d + hi) if (rank + j) % 2 == 0 else (d, d + 24) for j, d in enumerate(wdispls)]
    src, dst = Pair(dt, 1, seed=rank, extra=extra), Pair(dt, 1, seed=130 + rank, extra=extra)
    run(f'{tag} Alltoallw', lambda s, comm: comm.Alltoallw(spec(src, s, (wcounts, wdispls), types),
                                                           spec(dst, s, (wcounts, wdispls), types)), src, dst)
    # non-blocking and persistent forms
    src, dst = Pair(dt, c, seed=rank), Pair(dt, c * n, seed=140 + rank)
    run(f'{tag} Iallgather', lambda s, comm: comm.Iallgather(spec(src, s, c, dt), spec(dst, s, c, dt)).Wait(),
        src, dst)
    if not PERSISTENT_COLLECTIVES:
        return
    src, dst = Pair(dt, c * n, seed=rank), Pair(dt, c * n, seed=150 + rank)

    def persistent(s, comm):
        req = comm.Alltoall_init(spec(src, s, c, dt), spec(dst, s, c, dt))
        for _ in range(2):
            req.Start()
            req.Wait()
        req.Free()
    run(f'{tag} Alltoall_init', persistent, src, dst)


def elementwise(fn_plain, dt, c, pairs, counts):
    """The host reference of a reduction on a derived datatype, whose element type decides (host MPIs
    reduce named types only): each buffer's instances packed by MPI into base-type elements, the call
    run on those by plain mpi4py, the outputs unpacked by MPI."""
    lay = _datatypes.layout(dt)
    npt = np.dtype(mpigpu_types.numpy_dtype(lay.code))
    packs = []
    for p, k in zip(pairs, counts):
        raw = cases.mpi_pack(dt, k, p.host, p.base) if p is not None else None
        packs.append(None if raw is None else np.frombuffer(raw, np.uint8).view(npt).copy())
    fn_plain(*packs)
    for p, k, a in zip(pairs, counts, packs):
        if p is not None:
            cases.mpi_unpack(dt, k, a.tobytes(), p.host, p.base)


def reduction(what, dt, c, dev_call, plain_call, pairs, counts):
    """The bytes outside the datatype's elements must be untouched and the integer elements equal; floating
    elements equal to rounding, since MPI fixes no order of a reduction (a contiguous derived type reaches
    the engine, which adds in rank order, host MPI may pair ranks up)."""
    global checks
    dev_call()
    elementwise(plain_call, dt, c, pairs, counts)
    lay = _datatypes.layout(dt)
    npt = np.dtype(mpigpu_types.numpy_dtype(lay.code))
    for p, k in zip(pairs, counts):
        if p is None:
            continue
        dev = cp.asnumpy(p.dev) if GPU else p.dev
        idx = lay.byte_offsets(k) + p.base
        mask = np.zeros(len(dev), bool)
        mask[idx] = True
        assert dev[~mask].tobytes() == p.host[~mask].tobytes(), f'rank {rank}: {what}: bytes outside the elements changed'
        got, want = dev[idx].view(npt), p.host[idx].view(npt)
        if npt.kind in 'fc':
            ok = np.allclose(got, want, rtol=8 * np.finfo(npt).eps * n, atol=0, equal_nan=True)
        else:
            ok = got.tobytes() == want.tobytes()
        assert ok, f'rank {rank}: {what}: device and host results differ'
        checks += 1


def reductions(name, dt, c, multi):
    tag = f'{name} x{c}'
    op = MPI.SUM
    a, b = Pair(dt, c, seed=rank, small=True), Pair(dt, c, seed=200 + rank, small=True)
    reduction(f'{tag} Allreduce', dt, c, lambda: world.Allreduce([a.d(), c, dt], [b.d(), c, dt], op),
              lambda x, y: plain.Allreduce(x, y, op), [a, b], [c, c])
    a = Pair(dt, c, seed=rank, small=True)
    reduction(f'{tag} Allreduce in place', dt, c, lambda: world.Allreduce(MPI.IN_PLACE, [a.d(), c, dt], op),
              lambda y: plain.Allreduce(MPI.IN_PLACE, y, op), [a], [c])
    for root in range(n):
        a, b = Pair(dt, c, seed=rank, small=True), Pair(dt, c, seed=210 + rank, small=True)
        mine = rank == root
        reduction(f'{tag} Reduce root {root}', dt, c,
                  lambda: world.Reduce([a.d(), c, dt], [b.d(), c, dt] if mine else None, op, root),
                  lambda x, y: plain.Reduce(x, y if mine else None, op, root), [a, b if mine else None], [c, c])
    a, b = Pair(dt, c, seed=rank, small=True), Pair(dt, c, seed=220 + rank, small=True)
    reduction(f'{tag} Scan', dt, c, lambda: world.Scan([a.d(), c, dt], [b.d(), c, dt], op),
              lambda x, y: plain.Scan(x, y, op), [a, b], [c, c])
    a, b = Pair(dt, c, seed=rank, small=True), Pair(dt, c, seed=230 + rank, small=True)
    reduction(f'{tag} Exscan', dt, c, lambda: world.Exscan([a.d(), c, dt], [b.d(), c, dt], op),
              lambda x, y: plain.Exscan(x, y, op), [a, b], [c, c])
    if not multi:
        return
    a, b = Pair(dt, c * n, seed=rank, small=True), Pair(dt, c, seed=240 + rank, small=True)
    reduction(f'{tag} Reduce_scatter_block', dt, c,
              lambda: world.Reduce_scatter_block([a.d(), c, dt], [b.d(), c, dt], op),
              lambda x, y: plain.Reduce_scatter_block(x, y, op), [a, b], [c * n, c])
    a = Pair(dt, c * n, seed=rank, small=True)
    reduction(f'{tag} Reduce_scatter_block in place', dt, c,
              lambda: world.Reduce_scatter_block(MPI.IN_PLACE, [a.d(), c, dt], op),
              lambda y: plain.Reduce_scatter_block(MPI.IN_PLACE, y, op), [a], [c * n])


def neighbours(name, dt, c, cart, plain_cart):
    tag = f'{name} x{c}'
    k = 2  # a periodic ring: two neighbours
    comms = {'d': cart, 'h': plain_cart}
    src, dst = Pair(dt, c, seed=rank), Pair(dt, c * k, seed=300 + rank)
    run(f'{tag} Neighbor_allgather', lambda s, comm: comms[s].Neighbor_allgather(
        spec(src, s, c, dt), spec(dst, s, c, dt)), src, dst)
    src, dst = Pair(dt, c * k, seed=rank), Pair(dt, c * k, seed=310 + rank)
    run(f'{tag} Neighbor_alltoall', lambda s, comm: comms[s].Neighbor_alltoall(
        spec(src, s, c, dt), spec(dst, s, c, dt)), src, dst)
    counts, displs = [c, c], [0, c + 1]
    src, dst = Pair(dt, 2 * c + 1, seed=rank), Pair(dt, 2 * c + 1, seed=320 + rank)
    run(f'{tag} Neighbor_alltoallv', lambda s, comm: comms[s].Neighbor_alltoallv(
        spec(src, s, (counts, displs), dt), spec(dst, s, (counts, displs), dt)), src, dst)


def overlaps(lay, instances):
    offs = lay.byte_offsets(instances)
    return len(np.unique(offs)) != len(offs)


cart = world.Create_cart([n], periods=[True])
plain_cart = plain.Create_cart([n], periods=[True])
before = 0
for name, (_make, counts_, overlapping) in sorted(cases.CASES.items()):
    if overlapping:
        continue  # receives into overlapping instances are erroneous in MPI
    dt = cases.make(name)
    lay = _datatypes.layout(dt)
    # the largest count of the case whose instances in every call here stay apart (receives into
    # overlapping instances are erroneous): Gatherv's span with gaps is the most any call reaches
    fits = [k for k in counts_ if not overlaps(lay, 2 * k * n + 2 * n)]
    c = max(fits) if fits else 1
    before = packed_runs[0]
    if fits:
        collectives(name, dt, c)
        neighbours(name, dt, c, cart, plain_cart)
    else:  # instances that overlap (a strided tensor's chain resized to one element): one per call
        b = Pair(dt, 1, seed=rank)
        run(f'{name} Bcast', lambda s, comm: comm.Bcast(spec(b, s, 1, dt), 0), b)
    if not dt.is_predefined and lay.code >= 0 and lay.size and mpigpu_types.NATIVE[lay.code] is not None:
        reductions(name, dt, c, multi=bool(fits))
    derived = not dt.is_predefined and not lay.plain
    if derived and lay.size:
        assert packed_runs[0] > before, f'{name}: no call was packed on the GPU'
    if not dt.is_predefined:
        dt.Free()

# counts inferred from whole arrays: 3 blocks of 4 x 8 doubles per rank, a 4 x 3 corner of each
sub = MPI.DOUBLE.Create_subarray([4, 8], [4, 3], [0, 2]).Commit()
A = np.arange(3 * 32, dtype=np.float64) * (rank + 1)
got_d, got_h = np.full(3 * 32 * n, -1.0), np.full(3 * 32 * n, -1.0)
keep = (cp.asarray(A), cp.asarray(got_d)) if GPU else (FakeCAI(A), FakeCAI(got_d))
before = packed_runs[0]
world.Allgather([keep[0], sub], [keep[1], sub])
plain.Allgather([A, sub], [got_h, sub])
got_d = cp.asnumpy(keep[1]) if GPU else got_d
assert got_d.tobytes() == got_h.tobytes(), f'rank {rank}: blocks inferred from the arrays differ'
assert packed_runs[0] > before
checks += 1
sub.Free()

cart.Free()
plain_cart.Free()
world.Barrier()
total = world.reduce(checks, root=0)
if rank == 0:
    print(f'derived datatypes in collectives on device buffers: {total} checks identical to mpi4py on {n} ranks')
