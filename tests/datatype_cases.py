"""MPI datatypes of every constructor, nested ones, negative strides, resized extents, and the
reference packing of each by MPI itself, shared by the CPU tests of mpigpu._describe.datatypes, of the pack
kernels' host emulation, and the GPU check tests/gpu/check_pack.py."""
import numpy as np
from mpi4py import MPI

D, F, I, S, B = MPI.DOUBLE, MPI.FLOAT, MPI.INT, MPI.SHORT, MPI.BYTE


def _struct(blocks, displs, types):
    return MPI.Datatype.Create_struct(blocks, displs, types)


def _strided_view(base, shape, strides):
    """A strided tensor's datatype as libraries written for CUDA-aware MPI build it: per dimension,
    innermost first, a vector of one element at the stride, resized to one element."""
    item = base.Get_extent()[1]
    t = base
    for n, s in zip(reversed(shape), reversed(strides)):
        t = t.Create_vector(n, 1, s // item).Create_resized(0, item)
    return t


def _darray(size, rank, gsizes, distribs, dargs, psizes, order=MPI.ORDER_C, base=D):
    return base.Create_darray(size, rank, gsizes, distribs, dargs, psizes, order)


BLK, CYC, NONE, DFLT = MPI.DISTRIBUTE_BLOCK, MPI.DISTRIBUTE_CYCLIC, MPI.DISTRIBUTE_NONE, MPI.DISTRIBUTE_DFLT_DARG

# name -> (constructor, counts, overlapping: True where instances or blocks overlap, so MPI defines
# packing but not unpacking)
CASES = {
    'named-double': (lambda: D, (1, 3), False),
    'named-byte': (lambda: B, (5,), False),
    'pair-double-int': (lambda: MPI.DOUBLE_INT, (1, 3), False),
    'pair-short-int': (lambda: MPI.SHORT_INT, (1, 4), False),
    'contiguous': (lambda: I.Create_contiguous(5), (1, 2), False),
    'contiguous-empty': (lambda: I.Create_contiguous(0), (1, 3), False),
    'dup': (lambda: D.Create_vector(3, 2, 4).Dup(), (1, 2), False),
    'vector': (lambda: D.Create_vector(4, 2, 5), (1, 3), False),
    'vector-negative-stride': (lambda: D.Create_vector(4, 1, -3), (1, 2), False),
    'vector-stride-0': (lambda: F.Create_vector(3, 2, 0), (1,), True),
    'vector-long-rows': (lambda: B.Create_vector(3, 9000, 9500), (1, 2), False),
    'vector-many-rows': (lambda: I.Create_vector(5000, 1, 3), (1, 2), False),
    'hvector-unaligned': (lambda: F.Create_hvector(3, 2, 20), (1, 2), False),
    'hvector-negative': (lambda: S.Create_hvector(3, 1, -12), (1, 3), False),
    'hvector-odd-bytes': (lambda: B.Create_hvector(7, 3, 5), (1, 2), False),
    'indexed': (lambda: D.Create_indexed([2, 1, 3], [0, 5, 9]), (1, 3), False),
    'indexed-negative': (lambda: D.Create_indexed([1, 2, 1], [4, -2, 1]), (1, 2), False),
    'indexed-zero-blocks': (lambda: I.Create_indexed([0, 2, 0, 1], [3, 0, 9, 5]), (1, 2), False),
    'indexed-all-empty': (lambda: I.Create_indexed([0, 0], [3, 0]), (1, 2), False),
    'hindexed-odd': (lambda: I.Create_hindexed([1, 2], [0, 33]), (1, 2), False),
    'indexed-block': (lambda: F.Create_indexed_block(2, [7, 0, 3]), (1, 2), False),
    'indexed-block-even': (lambda: F.Create_indexed_block(2, [0, 6, 12, 18]), (1, 2), False),
    'hindexed-block': (lambda: D.Create_hindexed_block(3, [40, 0, -24]), (1, 2), False),
    'struct-one-type': (lambda: _struct([1, 2, 1], [0, 16, 40], [D, D, D]), (1, 3), False),
    'struct-mixed': (lambda: _struct([1, 1, 2], [0, 8, 13], [D, I, B]), (1, 2), False),
    'struct-of-vectors': (lambda: _struct([1, 1], [0, 4], [F.Create_vector(3, 1, 2)] * 2), (1, 2), False),
    'struct-big-blocks': (lambda: _struct([20000, 9000], [0, 24008], [B, B]), (1, 2), False),
    'struct-pairs': (lambda: _struct([2, 1], [0, 40], [MPI.SHORT_INT, MPI.DOUBLE_INT]), (1, 2), False),
    'subarray-2d-c': (lambda: D.Create_subarray([6, 7], [3, 4], [1, 2]), (1, 2), False),
    'subarray-2d-f': (lambda: D.Create_subarray([6, 7], [3, 4], [1, 2], order=MPI.ORDER_F), (1, 2), False),
    'subarray-3d-xface': (lambda: F.Create_subarray([8, 9, 10], [8, 9, 1], [0, 0, 3]), (1, 2), False),
    'subarray-3d-yface': (lambda: F.Create_subarray([8, 9, 10], [8, 1, 10], [0, 8, 0]), (1, 2), False),
    'subarray-3d-zface': (lambda: F.Create_subarray([8, 9, 10], [1, 9, 10], [7, 0, 0]), (1, 2), False),
    'subarray-4d-f': (lambda: S.Create_subarray([3, 4, 5, 6], [2, 2, 3, 4], [1, 0, 2, 1], order=MPI.ORDER_F),
                      (1, 2), False),
    'subarray-column': (lambda: D.Create_subarray([64, 64], [64, 1], [0, 5]), (1,), False),
    'darray-block-cyclic': (lambda: _darray(6, 4, [7, 10], [BLK, CYC], [DFLT, 2], [2, 3]), (1, 2), False),
    'darray-cyclic-f': (lambda: _darray(6, 1, [9, 8], [CYC, BLK], [2, DFLT], [3, 2], MPI.ORDER_F), (1, 2), False),
    'darray-none-block': (lambda: _darray(2, 1, [5, 6, 4], [NONE, BLK, CYC], [DFLT, DFLT, DFLT], [1, 2, 1],
                                          base=F), (1,), False),
    'darray-even-cyclic': (lambda: _darray(4, 3, [8, 8], [CYC, CYC], [2, 1], [2, 2]), (1, 2), False),
    'darray-empty-rank': (lambda: _darray(4, 3, [3, 4], [BLK, BLK], [2, DFLT], [2, 2]), (1,), False),
    'resized-negative-lb': (lambda: D.Create_vector(3, 1, 4).Create_resized(-16, 48), (1, 3), False),
    'resized-overlapping': (lambda: D.Create_vector(2, 1, 3).Create_resized(0, 8), (1, 4), True),
    'resized-extent-0': (lambda: I.Create_contiguous(2).Create_resized(0, 0), (1, 3), True),
    'resized-column-transpose': (lambda: D.Create_vector(16, 1, 16).Create_resized(0, 8), (1, 16), False),
    # One block per call (moved in place, no scratch): a halo row, a row at an offset; resized-row's
    # count 3 overlaps and is not contiguous (packed).
    'resized-row': (lambda: D.Create_contiguous(7).Create_resized(0, 8), (1, 3), True),
    'subarray-row': (lambda: D.Create_subarray([4, 8], [1, 8], [2, 0]), (1, 2), False),
    'nested-vector-of-vector': (lambda: D.Create_vector(2, 1, 3).Create_vector(3, 2, 4), (1, 2), False),
    'nested-subarray-of-resized': (lambda: F.Create_vector(2, 1, 3).Create_resized(0, 8)
                                   .Create_subarray([5, 4], [2, 3], [2, 1]), (1, 2), False),
    'nested-indexed-of-subarray': (lambda: I.Create_subarray([4, 4], [2, 2], [1, 1])
                                   .Create_indexed([1, 2], [0, 3]), (1, 2), False),
    'nested-hvector-of-indexed-negative': (lambda: D.Create_indexed([1, 1], [0, 3])
                                           .Create_hvector(3, 1, -40), (1, 2), False),
    'nested-contiguous-of-struct-gap': (lambda: _struct([1, 1], [0, 12], [I, I]).Create_contiguous(3), (1, 2), False),
    'nested-deep': (lambda: D.Create_vector(2, 1, 2).Create_hvector(2, 1, 40).Create_hvector(2, 1, 100)
                    .Create_hvector(2, 1, 300).Create_hvector(2, 1, 700).Create_hvector(2, 1, 1500)
                    .Create_hvector(2, 1, 3100).Create_hvector(2, 1, 6300).Create_hvector(2, 1, 12700),
                    (1, 2), False),
    'tensor-transposed': (lambda: _strided_view(F, (5, 6), (4, 20)), (1,), False),
    'tensor-3d-strided': (lambda: _strided_view(D, (3, 4, 5), (120, -360, 24)), (1,), False),
}

F90 = {}
try:
    F90['f90-real'] = (lambda: MPI.Datatype.Create_f90_real(15, MPI.UNDEFINED).Create_vector(2, 1, 3), (1, 2), False)
    MPI.Datatype.Create_f90_real(15, MPI.UNDEFINED)
except MPI.Exception:  # an MPI built without Fortran
    F90.clear()
CASES.update(F90)


def make(name):
    """The committed datatype of a case."""
    return CASES[name][0]().Commit()


def span(dt, count):
    """(lowest, highest + 1) byte offset from the buffer pointer that count instances touch."""
    lb, ext = dt.Get_true_extent()
    step = dt.Get_extent()[1] * (count - 1)
    return lb + min(0, step), lb + ext + max(0, step)


def host_buffer(dt, count, seed=0, margin=32):
    """Random bytes around the buffer pointer: (uint8 array, offset of the pointer in it)."""
    lo, hi = span(dt, count)
    lo, hi = min(lo, 0), max(hi, 0)
    rng = np.random.default_rng(seed)
    buf = rng.integers(0, 256, hi - lo + 2 * margin, dtype=np.uint8)
    return buf, margin - lo


def mpi_pack(dt, count, buf, base):
    """The packed bytes of count instances, as MPI itself makes them (a send to self)."""
    out = np.zeros(count * dt.Get_size(), np.uint8)
    src = MPI.memory.fromaddress(buf.ctypes.data + base, 0)
    MPI.COMM_SELF.Sendrecv([src, count, dt], 0, 7, [out, len(out), MPI.BYTE], 0, 7)
    return out.tobytes()


def mpi_unpack(dt, count, packed, buf, base):
    """Unpacks packed bytes into buf (pointer at byte base) as MPI itself does (a receive)."""
    data = np.frombuffer(packed, np.uint8)
    dst = MPI.memory.fromaddress(buf.ctypes.data + base, 0)
    MPI.COMM_SELF.Sendrecv([data, len(data), MPI.BYTE], 0, 8, [dst, count, dt], 0, 8)
