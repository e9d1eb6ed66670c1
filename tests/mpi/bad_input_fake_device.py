"""Bad input, as a fuzzer of the buffer API finds it, on fake device memory: each class of call where
mpigpu once crashed, hung or gave another result than mpi4py now gives mpi4py's result or a clear error
on every rank that took part, never a hang; and an explicit count and datatype are trusted as MPI trusts
them (checked against the device allocation, not the length of the object carrying the address).
Run under mpiexec -n 2..3 (tests/test_mpi.py)."""
import numpy as np
from mpi4py import MPI

from fake_device import FakeCAI, device_memory, install

install()
import mpigpu  # noqa: E402

plain = MPI.COMM_WORLD
world = mpigpu.COMM_WORLD
rank, n = plain.Get_rank(), plain.Get_size()
root = n - 1
checks = 0


def ok(cond, label):
    global checks
    assert cond, f'rank {rank}: {label}'
    checks += 1


class Broken:
    """A CUDA Array Interface whose export is broken in one of the ways a fuzzer tries."""

    def __init__(self, how, a):
        self.how, self.a = how, a
        device_memory(self, a.ctypes.data, a.nbytes)

    @property
    def __cuda_array_interface__(self):
        good = {'shape': self.a.shape, 'typestr': self.a.dtype.str, 'data': (self.a.ctypes.data, False),
                'version': 3, 'strides': None}
        if self.how == 'raises':
            raise RuntimeError('broken property')
        if self.how == 'no data':
            del good['data']
        if self.how == 'data not a tuple':
            good['data'] = self.a.ctypes.data
        if self.how == 'negative shape':
            good['shape'] = (-4,)
        return good


class BadDLPack:
    def __init__(self, a):
        self.a = a
        device_memory(self, a.ctypes.data, a.nbytes)

    def __dlpack_device__(self):
        return (2, 0)

    def __dlpack__(self, **kwargs):
        return 'not a capsule'


def outcome(fn):
    try:
        fn()
        return 'ok', None
    except Exception as exc:
        return type(exc).__name__, exc


# 1. An error only the root of a Reduce sees (its receive buffer's export is broken): the root raises;
# device peers raise naming it (no wait); host peers finish, as mpi4py's do.
for how in ('raises', 'no data', 'data not a tuple', 'dlpack string'):
    for peers_on_device in (True, False):
        x = np.arange(4.0) + rank
        send = FakeCAI(x) if peers_on_device or rank == root else x
        recv = (BadDLPack(np.zeros(4)) if how == 'dlpack string' else Broken(how, np.zeros(4))) if rank == root else None
        kind, exc = outcome(lambda: world.Reduce(send, recv, MPI.SUM, root))
        if rank == root:
            ok(kind != 'ok', f'Reduce root with a broken receive buffer ({how}) raised')
        elif peers_on_device:
            ok(kind == 'Error' and f'rank {root} refused' in str(exc), f'device peer of a refused Reduce ({how}): {exc}')
        else:
            ok(kind == 'ok', f'host peer of a refused Reduce ({how}) finished: {exc}')
        plain.Barrier()

# 2. A negative shape in every rank's Bcast buffer: BufferError everywhere (mpi4py's class), no hang.
kind, exc = outcome(lambda: world.Bcast(Broken('negative shape', np.zeros(4)), root=0))
ok(kind == 'BufferArgumentError' and isinstance(exc, BufferError), f'negative shape: {kind} {exc}')

# 3. A count of 10**12 in Bcast's specification: a clear error on every rank (past the allocation).
buf = FakeCAI(np.zeros(4))
kind, exc = outcome(lambda: world.Bcast([buf, 10 ** 12, MPI.DOUBLE], root=0))
ok(kind == 'ValueArgumentError' and 'past the device allocation' in str(exc), f'count 10**12: {exc}')
raw = MPI.memory.fromaddress(buf.a.ctypes.data, 0)  # C's pointer: only the allocation bounds it
kind, exc = outcome(lambda: world.Bcast([raw, 10 ** 12, MPI.DOUBLE], root=0))
ok(kind == 'ValueArgumentError' and 'past the device allocation' in str(exc), f'raw count 10**12: {exc}')

# 4. Four-item specifications as receive buffers: mpi4py's result where they fit; past the allocation a
# clear error on every rank.
k = 3
x = np.arange(k, dtype=np.float64) + 10 * rank
for method, args in (('Allgather', lambda W, r: (W(x), [r, k, 0, MPI.DOUBLE])),
                     ('Gather', lambda W, r: (W(x), [r, k, 0, MPI.DOUBLE], 0)),
                     ('Alltoall', lambda W, r: (W(np.tile(x, n)), [r, k, 0, MPI.DOUBLE]))):
    expect = np.zeros(k * n)
    getattr(plain, method)(*args(lambda a: a, expect))
    for W in (FakeCAI, lambda a: a):
        got = np.zeros(k * n)
        r = FakeCAI(got) if W is FakeCAI else got
        getattr(world, method)(*args(W, r))
        ok(np.array_equal(got, expect) or (method == 'Gather' and rank != 0), f'{method} 4-item spec')
    small = FakeCAI(np.zeros(k))  # k elements where n * k are described
    comm = world.Dup()  # a Gather's root raises alone: its peers' messages stay unmatched there
    kind, exc = outcome(lambda: getattr(comm, method)(*args(FakeCAI, small)))
    ok(n == 1 or (kind == 'ValueArgumentError' and 'past the device allocation' in str(exc)) or
       (method == 'Gather' and rank != 0), f'{method} 4-item spec past the allocation: {kind} {exc}')
    plain.Barrier()
    comm.Free()

# 5. [MPI.IN_PLACE, count, datatype] in Reduce_scatter_block: mpi4py passes MPI_IN_PLACE's address with
# the counts of a call that is not in place, so recvbuf is one block of its whole count: with an explicit
# receive count, mpi4py's in-place result; with none, n blocks of the whole buffer (past it: an error,
# where mpi4py reads past a host buffer). And [buf, None, datatype] in Reduce.
full = np.arange(2 * n, dtype=np.float64) * (rank + 1)
expect = full.copy()
plain.Reduce_scatter_block([MPI.IN_PLACE, 2, MPI.DOUBLE], [expect, 2, MPI.DOUBLE])
got = full.copy()
world.Reduce_scatter_block([MPI.IN_PLACE, 2, MPI.DOUBLE], [FakeCAI(got), 2, MPI.DOUBLE])
ok(np.array_equal(got[:2], expect[:2]), f'Reduce_scatter_block in place with a count: {got[:2]} {expect[:2]}')
kind, exc = outcome(lambda: world.Reduce_scatter_block([MPI.IN_PLACE, 2, MPI.DOUBLE], FakeCAI(full.copy())))
ok(n == 1 or (kind == 'ValueArgumentError' and 'past the device allocation' in str(exc)),
   f'Reduce_scatter_block [MPI.IN_PLACE, ...] with a bare receive buffer: {kind} {exc}')
kind, exc = outcome(lambda: world.Allreduce([None, 4, MPI.DOUBLE], FakeCAI(np.zeros(4))))
ok(kind == 'ValueError' and 'buffer is None but count is 4' in str(exc), f'[None, count, datatype]: {kind} {exc}')
expect = np.zeros(4)
plain.Reduce([np.arange(4.0), None, MPI.DOUBLE], [expect, MPI.DOUBLE], MPI.SUM, 0)
got = np.zeros(4)
world.Reduce([FakeCAI(np.arange(4.0)), None, MPI.DOUBLE], [FakeCAI(got), MPI.DOUBLE], MPI.SUM, 0)
ok(rank != 0 or np.array_equal(got, expect), 'Reduce [buf, None, datatype]')

# 6. Vector datatypes as Scatter's and Alltoall's send buffers, within the buffer.
vec = MPI.DOUBLE.Create_vector(2, 1, 2).Commit()
src = np.arange(3 * 2 * n, dtype=np.float64) + rank  # n instances of 3 doubles' extent
expect, got = np.zeros(2), np.zeros(2)
plain.Scatter([src, 1, vec], expect, 0)
world.Scatter([FakeCAI(src.copy()), 1, vec], FakeCAI(got), 0)
ok(np.array_equal(got, expect), f'Scatter vector: {got} {expect}')
expect, got = np.zeros(2 * n), np.zeros(2 * n)
plain.Alltoall([src, 1, vec], expect)
world.Alltoall([FakeCAI(src.copy()), 1, vec], FakeCAI(got))
ok(np.array_equal(got, expect), f'Alltoall vector: {got} {expect}')

# 7. Trusted as MPI trusts them: a short address-carrying object over a larger allocation (a permuted
# tensor's storage wrapped with its elements' bytes) and a datatype that spans the storage.
storage = np.arange(40, dtype=np.float32) + 100 * rank
stride = MPI.FLOAT.Create_vector(5, 1, 8).Commit()  # 5 elements 8 apart: bytes 0..132 of the storage
owner = FakeCAI(storage)
short = MPI.memory.fromaddress(storage.ctypes.data, 5 * 4)
got = np.zeros(5 * n, np.float32)
world.Allgatherv([short, 1, stride], [FakeCAI(got), MPI.FLOAT])
expect = np.zeros(5 * n, np.float32)
plain.Allgatherv([storage, 1, stride], [expect, MPI.FLOAT])
ok(np.array_equal(got, expect), f'short wrapper over its storage: {got} {expect}')
past = MPI.FLOAT.Create_vector(5, 1, 12).Commit()  # reaches past the storage's 160 bytes
kind, exc = outcome(lambda: world.Allgatherv([short, 1, past], [FakeCAI(np.zeros(5 * n, np.float32)), MPI.FLOAT]))
ok(kind == 'ValueArgumentError' and 'past the device allocation' in str(exc), f'past the storage: {exc}')
for t in (vec, stride, past):
    t.Free()
plain.Barrier()
if rank == 0:
    print(f'bad input on {n} ranks: {checks} checks, MPI\'s result or a clear error, no hang')
