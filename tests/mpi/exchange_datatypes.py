"""Derived datatypes on the exchange transport (block shapes, cuda/block_shape.cuh): the calls array
libraries make to redistribute a distributed array (Alltoallv of resized vectors, Alltoallw of nested
vectors per peer as a CUDA-aware array library builds them), strided receives, subarrays, negative
strides, byte-sized units, in place, rooted calls; blocking, I*, *_init and stream= forms. Every result is compared
with plain mpi4py's on host copies (int32: exactly). Where every rank brought device buffers the call
must have taken the transport, except for a datatype it does not take (a block table), which the mirrors
pack; where some rank brought host memory, the host MPI call.

Runs on CPUs with the fake CUDA layer (EXCHANGE_ENGINE=1) and on GPUs with MPIGPU_CHECK_ON_GPU=1, under
mpiexec -n 1..6.
"""
import numpy as np
from mpi4py import MPI

from exchange_common import PLACEMENTS, compared, engine, nonblocking, one_node, persistent, placed, streamed
import mpigpu  # noqa: E402
from mpigpu._base.config import config  # noqa: E402

plain = MPI.COMM_WORLD
comm = mpigpu.COMM_WORLD
rank, n = plain.Get_rank(), plain.Get_size()
INT = MPI.INT
B = 3  # the side of a block
_types = []  # every committed datatype, freed at the end


def commit(t):
    t.Commit()
    _types.append(t)
    return t


def column_type(b, width):
    """b rows of b ints, `width` ints apart, resized to b ints: displacement p is column block p."""
    return commit(INT.Create_vector(b, b, width).Create_resized(0, b * 4))


def rows(b, width, seed):
    return (np.arange(b * width, dtype=np.int32) * 7 + 1000 * seed).reshape(b, width) % 100003


def redistribute(dev, root):
    """The perf row's call: rows to columns, the send blocks strided, the receive blocks plain."""
    s, r = rows(B, n * B, rank), np.full(n * B * B, -1, np.int32)
    col = column_type(B, n * B)
    sv = ([1] * n, list(range(n)))
    rv = ([B * B] * n, [p * B * B for p in range(n)])
    return [[placed(s, dev), sv, col], [placed(r, dev), rv, INT]], [[s.copy(), sv, col], [r.copy(), rv, INT]], 1


def both_strided(dev, root):
    """Strided on both sides: each block lands in the left half of a receive array twice as wide."""
    s, r = rows(B, n * B, rank + 5), np.full(n * B * 2 * B, -1, np.int32)
    col = column_type(B, n * B)
    half = commit(INT.Create_vector(B, B, 2 * B).Create_resized(0, B * 2 * B * 4))
    sv, rv = ([1] * n, list(range(n))), ([1] * n, list(range(n)))
    return ([[placed(s, dev), sv, col], [placed(r, dev), rv, half]],
            [[s.copy(), sv, col], [r.copy(), rv, half]], 1)


def alltoall_columns(dev, root):
    """Alltoall with one resized column block per peer (blocks one extent apart)."""
    s, r = rows(B, n * B, rank + 9), np.full(n * B * B, -1, np.int32)
    col = column_type(B, n * B)
    return [[placed(s, dev), 1, col], [placed(r, dev), B * B, INT]], [[s.copy(), 1, col], [r.copy(), B * B, INT]], 1


def subarray(dev, root):
    """3-D subarrays (two strided dimensions, a start inside the extent, 4-byte units): the second
    component of each (row, column block) of a b x nb x 2 array."""
    s, r = np.arange(B * n * B * 2, dtype=np.int32) + 100 * rank, np.full(n * B * B, -1, np.int32)
    t = commit(INT.Create_subarray([B, n * B, 2], [B, B, 1], [0, 0, 1]).Create_resized(0, B * 2 * 4))
    sv, rv = ([1] * n, list(range(n))), ([B * B] * n, [p * B * B for p in range(n)])
    return [[placed(s, dev), sv, t], [placed(r, dev), rv, INT]], [[s.copy(), sv, t], [r.copy(), rv, INT]], 1


def odd_bytes(dev, root):
    """Byte vectors at odd strides (1-byte units), as int32 arrays of bytes: 3 blocks of 3 bytes, 5 apart."""
    t = commit(MPI.BYTE.Create_hvector(3, 3, 5).Create_resized(0, 15))
    s = (np.arange(16 * n, dtype=np.int32) * 3 + rank) % 251
    r = np.full(3 * n, -1, np.int32)  # 9 bytes from each peer, 12 bytes apart
    sv, rv = ([1] * n, list(range(n))), ([9] * n, [12 * p for p in range(n)])
    return ([[placed(s, dev), sv, t], [placed(r, dev), rv, MPI.BYTE]],
            [[s.copy(), sv, t], [r.copy(), rv, MPI.BYTE]], 1)


def negative_stride(dev, root):
    """Column blocks read bottom row first (a vector of negative stride), displaced to stay in the array."""
    s, r = rows(B, n * B, rank + 3), np.full(n * B * B, -1, np.int32)
    t = commit(INT.Create_vector(B, B, -n * B).Create_resized(0, B * 4))
    sv = ([1] * n, [(B - 1) * n + p for p in range(n)])  # in extents of b ints: the last row's block p
    rv = ([B * B] * n, [p * B * B for p in range(n)])
    return [[placed(s, dev), sv, t], [placed(r, dev), rv, INT]], [[s.copy(), sv, t], [r.copy(), rv, INT]], 1


def nested_w(dev, root):
    """Alltoallw as a CUDA-aware array library redistributes a 2-D array from split rows to split
    columns: per peer a vector over the rows of a contiguous run of its columns, built from resized
    vectors of stride 1, two types (long and short column counts) with byte displacements."""
    m = 2 + rank % 2  # uneven rows per rank
    width = [2 + (p % 2) for p in range(n)]  # uneven columns per rank
    total = sum(width)
    s = (np.arange(m * total, dtype=np.int32) + 1000 * rank)
    at = [sum(width[:p]) for p in range(n)]
    stypes = []
    for p in range(n):
        run = INT.Create_vector(width[p], 1, 1).Create_resized(0, 4 * total)
        stypes.append(commit(run.Create_vector(m, 1, 1).Create_resized(0, 4 * width[p])))
        run.Free()
    sdispl = [4 * a for a in at]
    rm = [2 + p % 2 for p in range(n)]  # rows each peer sends me
    rcounts = [rm[p] * width[rank] for p in range(n)]
    rdispl = [4 * sum(rcounts[:p]) for p in range(n)]
    r = np.full(sum(rcounts), -1, np.int32)
    sv, rv = ([1] * n, sdispl), (rcounts, rdispl)
    return ([[placed(s, dev), sv, stypes], [placed(r, dev), rv, [INT] * n]],
            [[s.copy(), sv, stypes], [r.copy(), rv, [INT] * n]], 1)


def allgather_columns(dev, root, in_place=False):
    """Allgatherv into the columns of a b x n array (a strided receive type per block, 1 int wide)."""
    s, r = np.arange(B, dtype=np.int32) + 10 * rank, np.full(B * n, -1, np.int32)
    col = commit(INT.Create_vector(B, 1, n).Create_resized(0, 4))
    if in_place:
        r[rank::n] = s
    rv = ([1] * n, list(range(n)))
    return ([MPI.IN_PLACE if in_place else placed(s, dev), [placed(r, dev), rv, col]],
            [MPI.IN_PLACE if in_place else s.copy(), [r.copy(), rv, col]], 1)


def gather_columns(dev, root):
    """Gatherv at the root into the columns of a b x n array."""
    s, r = np.arange(B, dtype=np.int32) + 10 * rank, np.full(B * n, -1, np.int32)
    col = commit(INT.Create_vector(B, 1, n).Create_resized(0, 4))
    rv = ([1] * n, list(range(n)))
    here = rank == root
    return ([placed(s, dev), [placed(r, dev), rv, col] if here else None, root],
            [s.copy(), [r.copy(), rv, col] if here else None, root], 1 if here else None)


def scatter_columns(dev, root):
    """Scatterv from the columns of the root's b x n array."""
    s, r = np.arange(B * n, dtype=np.int32) + 7, np.full(B, -1, np.int32)
    col = commit(INT.Create_vector(B, 1, n).Create_resized(0, 4))
    sv = ([1] * n, list(range(n)))
    here = rank == root
    return ([[placed(s, dev), sv, col] if here else None, placed(r, dev), root],
            [[s.copy(), sv, col] if here else None, r.copy(), root], 1)


def indexed(dev, root):
    """An irregular indexed type (a block table): the mirrors pack it, the result is MPI's."""
    t = commit(INT.Create_indexed([2, 1], [0, 3]).Create_resized(0, 20))
    s, r = np.arange(5 * n, dtype=np.int32) + 50 * rank, np.full(3 * n, -1, np.int32)
    sv, rv = ([1] * n, list(range(n))), ([3] * n, [3 * p for p in range(n)])
    return [[placed(s, dev), sv, t], [placed(r, dev), rv, INT]], [[s.copy(), sv, t], [r.copy(), rv, INT]], 1


CASES = [('Alltoallv', 'redistribute', redistribute, True), ('Alltoallv', 'both strided', both_strided, True),
         ('Alltoall', 'columns', alltoall_columns, True), ('Alltoallv', 'subarray', subarray, True),
         ('Alltoallv', 'odd bytes', odd_bytes, True), ('Alltoallv', 'negative stride', negative_stride, True),
         ('Alltoallw', 'nested vectors', nested_w, True), ('Allgatherv', 'columns', allgather_columns, True),
         ('Allgatherv', 'columns in place', lambda d, rt: allgather_columns(d, rt, True), True),
         ('Gatherv', 'columns', gather_columns, True), ('Scatterv', 'columns', scatter_columns, True),
         ('Alltoallv', 'indexed', indexed, False)]

transport = engine and one_node and config.exchange and config.exchange_min_bytes == 0
checks = 0
for name, what, build, shaped in CASES:
    roots = sorted({0, n - 1}) if name in ('Gatherv', 'Scatterv') else [0]
    for placement, on in PLACEMENTS.items():
        for root in roots:
            dev = on(rank, root)
            a, b, k = build(dev, root)
            where = f'{name} {what}, {placement}, root {root}, rank {rank}'
            taken, made = compared(comm, plain, name, a, b, k, where)
            checks += made
            expect = int(transport and shaped and all(on(p, root) for p in range(n)))
            assert taken == expect, f'{where}: exchange path taken {taken} times, expected {expect}'
            checks += 1
            checks += nonblocking(comm, plain, name, build, dev, root, k, where, expect)
            checks += persistent(comm, plain, name, build, dev, root, where, expect)
            checks += streamed(comm, plain, name, build, dev, root, where, expect)

for t in _types:
    t.Free()
total = plain.allreduce(checks)
if rank == 0:
    print(f'exchange datatypes on {n} ranks: {total} checks identical to mpi4py '
          f'({"the exchange transport" if transport else "the host MPI call"})')
