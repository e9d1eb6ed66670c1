"""Host buffers through mpigpu give byte-identical results to plain mpi4py: every method x op x
dtype, in place and out of place, non-zero roots; derived communicators stay wrapped.
Run under mpiexec -n 1..4 (tests/test_mpi.py)."""
import numpy as np
from mpi4py import MPI

import mpigpu

world = mpigpu.COMM_WORLD
plain = MPI.COMM_WORLD
rank, n = world.Get_rank(), world.Get_size()

TYPES = {'b': np.int8, 'B': np.uint8, 'h': np.int16, 'H': np.uint16, 'i': np.int32, 'I': np.uint32,
         'q': np.int64, 'Q': np.uint64, 'f': np.float32, 'd': np.float64, 'F': np.complex64,
         'D': np.complex128, '?': np.bool_}
OPS = {'SUM': 'bBhHiIqQfdFD', 'PROD': 'bBhHiIqQfdFD', 'MAX': 'bBhHiIqQfd', 'MIN': 'bBhHiIqQfd',
       'LAND': 'bBhHiIqQ?', 'LOR': 'bBhHiIqQ?', 'LXOR': 'bBhHiIqQ?', 'BAND': 'bBhHiIqQ', 'BOR': 'bBhHiIqQ',
       'BXOR': 'bBhHiIqQ'}


def data(code, count, salt):
    rng = np.random.default_rng(1000 * rank + salt)
    t = TYPES[code]
    if code == '?':
        return rng.integers(0, 2, count).astype(t)
    if code in 'FD':
        return (rng.uniform(-2, 2, count) + 1j * rng.uniform(-2, 2, count)).astype(t)
    if code in 'fd':
        return rng.uniform(-2, 2, count).astype(t)
    return rng.integers(0, 5, count).astype(t)


def same(a, b, what):
    assert a.tobytes() == b.tobytes(), f'rank {rank}: {what}: mpigpu and mpi4py differ'


count = 37
checked = 0
for opname, codes in OPS.items():
    op = getattr(MPI, opname)
    for code in codes:
        t = TYPES[code]
        x = data(code, count * n, 1)
        label = f'{opname} {np.dtype(t).name}'
        # Allreduce, out of place and in place
        a, b = np.empty(count * n, t), np.empty(count * n, t)
        world.Allreduce(x, a, op)
        plain.Allreduce(x, b, op)
        same(a, b, 'Allreduce ' + label)
        a, b = x.copy(), x.copy()
        world.Allreduce(MPI.IN_PLACE, a, op)
        plain.Allreduce(MPI.IN_PLACE, b, op)
        same(a, b, 'Allreduce in place ' + label)
        # Reduce_scatter_block
        a, b = np.empty(count, t), np.empty(count, t)
        world.Reduce_scatter_block(x, a, op)
        plain.Reduce_scatter_block(x, b, op)
        same(a, b, 'Reduce_scatter_block ' + label)
        a, b = x.copy(), x.copy()
        world.Reduce_scatter_block(MPI.IN_PLACE, a, op)
        plain.Reduce_scatter_block(MPI.IN_PLACE, b, op)
        same(a[:count], b[:count], 'Reduce_scatter_block in place ' + label)
        # Reduce to the last rank
        root = n - 1
        a, b = np.zeros(count * n, t), np.zeros(count * n, t)
        world.Reduce(x, a, op, root)
        plain.Reduce(x, b, op, root)
        if rank == root:
            same(a, b, 'Reduce ' + label)
        checked += 5

for code, t in TYPES.items():
    x = data(code, count, 2)
    a, b = np.empty(count * n, t), np.empty(count * n, t)
    world.Allgather(x, a)
    plain.Allgather(x, b)
    same(a, b, f'Allgather {code}')
    a = np.zeros(count * n, t)
    a[rank * count:(rank + 1) * count] = x
    world.Allgather(MPI.IN_PLACE, a)
    same(a, b, f'Allgather in place {code}')
    for root in range(n):
        a = x.copy() if rank == root else np.zeros(count, t)
        b = x.copy() if rank == root else np.zeros(count, t)
        world.Bcast(a, root)
        plain.Bcast(b, root)
        same(a, b, f'Bcast root {root} {code}')
    # buffer specifications on host buffers go to mpi4py unchanged
    a = np.zeros(count + 4, t)
    world.Allreduce([x, 10, MPI._typedict[code]] if code != '?' else [x, 10, MPI.C_BOOL],
                    [a, 10, MPI._typedict[code]] if code != '?' else [a, 10, MPI.C_BOOL],
                    MPI.LOR if code == '?' else MPI.SUM if code in 'FD' else MPI.MAX)
    checked += 3

# derived communicators are wrapped and usable
for sub in (world.Dup(), world.Split(rank % 2, rank), world.Split_type(MPI.COMM_TYPE_SHARED),
            world.Create(world.Get_group())):
    assert isinstance(sub, mpigpu.Intracomm) and isinstance(sub, MPI.Intracomm), type(sub)
    v = np.array([rank], np.int64)
    out = np.empty(1, np.int64)
    sub.Allreduce(v, out)
    assert out[0] == sum(sub.allgather(rank)), 'sub-communicator Allreduce'
    sub.Free()

assert isinstance(mpigpu.COMM_WORLD, MPI.Intracomm) and mpigpu.COMM_WORLD == MPI.COMM_WORLD
world.Barrier()
if rank == 0:
    print(f'host collectives: {checked} checks on {n} ranks identical to mpi4py')

# Free releases what mpigpu attached: the state leaves the exit registry
from mpigpu._state import comm_state as _state  # noqa: E402
d = world.Dup()
before = len(_state._states)
_state.state_of(d)
assert len(_state._states) == before + 1
d.Free()
assert len(_state._states) == before, 'state of a freed communicator still registered'
