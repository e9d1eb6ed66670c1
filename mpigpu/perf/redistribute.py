"""The `redistribute` row of mpigpu-perf: a distributed 2-D array moved from a split by rows to a split by
columns, as array libraries redistribute between axes (an FFT's transpose, a solver's layout change).

The global array is N x N with N = n b (b: the row's count, the side of one rank's block), in C order.
Before, rank r holds rows [r b, (r + 1) b), all N columns: a b x N array. After, it holds every row of
columns [r b, (r + 1) b): an N x b array. Block (r, p), which rank r sends rank p, is b rows of b
elements N apart in the sender's array, and b x b contiguous elements at row p b of the receiver's.

The call, as such libraries make it: Alltoallv whose send blocks are one instance each of a vector
datatype (b blocks of b elements, stride N) resized to the extent of b elements, displaced by p such
extents; the receive blocks plain elements. The NCCL baseline is what a program without derived
datatypes does: one copy kernel packing the column blocks, then grouped send/recv of contiguous blocks.
"""
from functools import partial

import numpy as np
from mpi4py import MPI

_types = {}  # the committed send datatype of each (b, n, element type): made once, kept


def side(nbytes, itemsize, n):
    """The block side b of a row whose rank holds about `nbytes` (n b^2 elements), at least 1."""
    b = int((nbytes // itemsize // n) ** 0.5)
    while (b + 1) * (b + 1) * n * itemsize <= nbytes:
        b += 1
    while b > 1 and b * b * n * itemsize > nbytes:
        b -= 1
    return max(b, 1)


def row_bytes(b, n, itemsize):
    """The bytes a rank holds (before and after)."""
    return n * b * b * itemsize


def _values(rows, cols, b):
    """Elements of the global array at (rows, cols) (index arrays) of blocks of side b: small (exact in
    every type), never 0, and shifted by the block's row and column (a block put in another's place
    shows, even where the pattern within blocks repeats)."""
    return (rows * 7 + cols * 3 + (rows // b) * 11 + (cols // b) * 5) % 251 + 1


class RBuffers:
    """The arrays of a redistribute row (the interface of baselines.Buffers). Out of place only."""
    inplace = False

    def __init__(self, xp, coll, count, dtype, n, rank, root):
        self.xp, self.coll, self.count, self.n, self.rank, self.root = xp, coll, count, n, rank, root
        self.dtype = np.dtype(dtype)
        self.mpi_type = MPI.Datatype.fromcode(self.dtype.char)
        b = self.b = count
        rows = np.arange(rank * b, (rank + 1) * b)[:, None]
        cols = np.arange(n * b)[None, :]
        self.send = xp.asarray(_values(rows, cols, max(b, 1)).astype(self.dtype))
        self.recv = xp.zeros((n * b, b), dtype=self.dtype)

    def expected(self, op):
        """The column block a correct call leaves, as NumPy (`op`: unused, nothing reduces)."""
        b, n = self.b, self.n
        rows = np.arange(n * b)[:, None]
        cols = np.arange(self.rank * b, (self.rank + 1) * b)[None, :]
        return _values(rows, cols, max(b, 1)).astype(self.dtype)

    def result(self):
        return self.xp.asnumpy(self.recv) if hasattr(self.xp, 'asnumpy') else np.asarray(self.recv)


def _column_type(b, n, base):
    """b blocks of b elements, N = n b apart, resized to the extent of b elements (committed once)."""
    key = (b, n, base.handle)
    t = _types.get(key)
    if t is None:
        _lb, extent = base.Get_extent()
        vector = base.Create_vector(b, b, n * b)
        t = _types[key] = vector.Create_resized(0, b * extent).Commit()
        vector.Free()
    return t


def mpi_call(comm, r, **kw):
    """The row's Alltoallv on `comm` (mpigpu's or plain mpi4py's), bound once (`kw`: mpigpu's stream=)."""
    b, n, t = r.b, r.n, r.mpi_type
    col = _column_type(b, n, t)
    send = [r.send, ([1] * n, list(range(n))), col]
    recv = [r.recv, ([b * b] * n, [p * b * b for p in range(n)]), t]
    return partial(comm.Alltoallv, send, recv, **kw)


def nccl_call(nc, comm, r, stream):
    """The row on NCCL communicator `comm` (cupy.cuda.nccl `nc`), enqueued on `stream` (the current one,
    where the packing kernel runs): the column blocks packed by one copy kernel into a staging array made
    once, the rank's own block copied to its place, the others grouped send/recv of bytes."""
    xp, b, n, me = r.xp, r.b, r.n, r.rank
    packed = xp.empty((n, b, b), dtype=r.dtype)
    view = r.send.reshape(b, n, b).transpose(1, 0, 2)  # [p] is the column block for rank p
    e, u8, rt = r.dtype.itemsize, nc.NCCL_UINT8, xp.cuda.runtime
    block = b * b * e
    sp, rp = packed.data.ptr, r.recv.data.ptr

    def call():
        if not block:
            return
        packed[...] = view
        rt.memcpyAsync(rp + me * block, sp + me * block, block, rt.memcpyDeviceToDevice, stream.ptr)
        nc.groupStart()
        for p in range(n):
            if p != me:
                comm.send(sp + p * block, block, u8, p, stream.ptr)
                comm.recv(rp + p * block, block, u8, p, stream.ptr)
        nc.groupEnd()
    return call
