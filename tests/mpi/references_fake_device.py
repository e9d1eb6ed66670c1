"""No reference kept: once a blocking call returns, or a request completes or is freed, mpigpu holds no
reference to the caller's buffer objects (CUDA Array Interface exporters, DLPack capsules and the
tensors they keep alive), not even in a reference cycle waiting for the garbage collector.

Each call runs on fake device memory exported both ways (fake_device.FakeCAI, FakeDLPack, whose every
export keeps its array alive until the consumer lets go), bare and through buffer specifications, and
sys.getrefcount of every array must be back where it was. Engine collectives in every form (with the
fake engine of fake_engine.py where MIXED_ENGINE=1), the mirrored collectives, point-to-point, matched
probes, Pack/Unpack and calls that raise. Run under mpiexec -n 1..3 (tests/test_mpi.py)."""
import gc
import os
import sys

import numpy as np
from mpi4py import MPI

from fake_device import FakeCAI, FakeDLPack, install

if os.environ.get('MIXED_ENGINE') == '1':
    from fake_engine import install_engine
    install_engine()
else:
    install()
import mpigpu  # noqa: E402
from mpigpu import MPI as MG  # noqa: E402  (mpigpu's datatypes: Pack and Unpack take device buffers)

gc.disable()  # a reference left in a cycle must show: nothing collects it behind the test's back
world = mpigpu.COMM_WORLD
rank, n = world.Get_rank(), world.Get_size()
peer_to, peer_from = (rank + 1) % n, (rank - 1) % n
checks = 0


def refs(arrays):
    return [sys.getrefcount(a) for a in arrays]


def kept_none(label, make, call):
    """Runs call(*exporters) for exporters made by make(ctor) with each exporter kind: every array's
    reference count must be back where it was once the call (and whatever it returned) is gone."""
    global checks
    for ctor in (FakeCAI, FakeDLPack):
        exporters = make(ctor)
        arrays = [e.a for e in exporters]
        before = refs(arrays)
        try:
            result = call(*exporters)
            if isinstance(result, MPI.Request):
                result.Wait()
                if isinstance(result, MPI.Prequest):
                    result.Free()
            del result
        except mpigpu.Error:
            pass
        after = refs(arrays)
        assert after == before, f'rank {rank}: {label} ({ctor.__name__}) kept references: {before} -> {after}'
        checks += 1


def vec(k, salt=0):
    return lambda ctor: [ctor(np.arange(k, dtype=np.int32) + salt), ctor(np.zeros(k * n, np.int32))]


def pair(k):
    return lambda ctor: [ctor(np.arange(k, dtype=np.int32)), ctor(np.zeros(k, np.int32))]


def persistent(method, *args):
    req = getattr(world, method)(*args)
    for _ in range(2):
        req.Start()
        req.Wait()
    req.Free()


# ---- the engine's collectives, every form -----------------------------------------------------------
for k in (0, 5):
    kept_none(f'Allreduce {k}', pair(k), lambda s, r: world.Allreduce(s, r))
    kept_none(f'Allreduce spec {k}', pair(k), lambda s, r: world.Allreduce([s, MPI.INT], [r, k, MPI.INT]))
    kept_none(f'Bcast {k}', pair(k), lambda s, r: world.Bcast(s, root=0))
    kept_none(f'Reduce {k}', pair(k), lambda s, r: world.Reduce(s, r, root=n - 1))
    kept_none(f'Reduce_scatter_block {k}', lambda ctor: [ctor(np.arange(k * n, dtype=np.int32)),
                                                         ctor(np.zeros(k, np.int32))],
              lambda s, r: world.Reduce_scatter_block(s, r))
    kept_none(f'Allgather {k}', vec(k), lambda s, r: world.Allgather(s, r))
    kept_none(f'Iallreduce {k}', pair(k), lambda s, r: world.Iallreduce(s, r))
    kept_none(f'Ibcast {k}', pair(k), lambda s, r: world.Ibcast(s, root=0))
    kept_none(f'Iallgather {k}', vec(k), lambda s, r: world.Iallgather(s, r))
    kept_none(f'Allreduce_init {k}', pair(k), lambda s, r: persistent('Allreduce_init', s, r))
    kept_none(f'Allgather_init {k}', vec(k), lambda s, r: persistent('Allgather_init', s, r))
    kept_none(f'Allreduce stream= {k}', pair(k), lambda s, r: world.Allreduce(s, r, stream=7))
    kept_none(f'Allreduce mixed {k}', pair(k), lambda s, r: world.Allreduce(s.a if rank % 2 else s, r))
# ---- the mirrored path -----------------------------------------------------------------------------
kept_none('Allgatherv', vec(4), lambda s, r: world.Allgatherv(s, r))
kept_none('Alltoall', lambda ctor: [ctor(np.arange(3 * n, dtype=np.int32)), ctor(np.zeros(3 * n, np.int32))],
          lambda s, r: world.Alltoall(s, r))
kept_none('Gather', vec(3), lambda s, r: world.Gather(s, r, root=0))
kept_none('Scan', pair(3), lambda s, r: world.Scan(s, r))
kept_none('Ialltoall', lambda ctor: [ctor(np.arange(2 * n, dtype=np.int32)), ctor(np.zeros(2 * n, np.int32))],
          lambda s, r: world.Ialltoall(s, r))
kept_none('Allgatherv vector type', vec(4), lambda s, r: world.Allgatherv(
    [s, 2, MPI.INT.Create_vector(2, 1, 2).Commit()], [r, MPI.INT]))
# ---- point-to-point --------------------------------------------------------------------------------
kept_none('Sendrecv', pair(6), lambda s, r: world.Sendrecv(s, peer_to, 0, r, peer_from, 0))
kept_none('Sendrecv spec', pair(6), lambda s, r: world.Sendrecv([s, 3, MPI.INT], peer_to, 0, [r, (3, 1), MPI.INT],
                                                               peer_from, 0))
kept_none('Sendrecv_replace', pair(6), lambda s, r: world.Sendrecv_replace(s, peer_to, 0, peer_from, 0))


def isend_irecv(s, r):
    reqs = [world.Irecv(r, peer_from, 1), world.Isend(s, peer_to, 1)]
    MPI.Request.Waitall(reqs)


kept_none('Isend/Irecv', pair(6), isend_irecv)


def probe_recv(s, r):
    req = world.Isend(s, peer_to, 2)
    status = MPI.Status()
    world.Probe(peer_from, 2, status)
    world.Recv(r, peer_from, 2)
    req.Wait()


kept_none('Probe/Recv', pair(6), probe_recv)


def mprobe(s, r):
    req = world.Isend(s, peer_to, 3)
    world.Mprobe(peer_from, 3).Recv(r)
    req.Wait()


kept_none('Mprobe/Mrecv', pair(6), mprobe)


def pack_unpack(s, r):
    packed = FakeCAI(np.zeros(64, np.uint8))
    MG.INT.Pack(s, packed, 0, world)
    MG.INT.Unpack(packed, 0, r, world)


kept_none('Pack/Unpack', pair(6), pack_unpack)


# ---- calls that raise -------------------------------------------------------------------------------
kept_none('Allreduce count mismatch (raises)', lambda ctor: [ctor(np.zeros(3, np.int32)), ctor(np.zeros(4, np.int32))],
          lambda s, r: world.Allreduce(s, r))
kept_none('Bcast past the allocation (raises)', pair(3), lambda s, r: world.Bcast([s, 10 ** 12, MPI.INT], root=0))
world.Barrier()
if rank == 0:
    print(f'references on {n} ranks: {checks} checks, none kept')
