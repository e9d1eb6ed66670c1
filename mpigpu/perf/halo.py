"""The `halo` row of mpigpu-perf: the ghost-column exchange of a stencil code on a 2-D array split by
columns, sent with a vector datatype as codes written for a CUDA-aware MPI send it.

Each rank holds an m x WIDTH array in C order; the row's count is m and its bytes one column's (what
the sendrecv row of the same size moves as contiguous elements, so the two rows of one run compare a
strided message with a contiguous one). Each rank sends its last column to rank + 1 and receives rank
- 1's into its first column (the sendrecv row's ring) in one Sendrecv whose both sides are one instance
of `column`: m blocks of one element, WIDTH elements apart. The NCCL baseline is what a program without
derived datatypes does: a copy kernel packing the column, grouped send/recv of the packed column, a
copy kernel unpacking it. The hand baseline copies the whole arrays (mpigpu-perf's generic staging).
"""
from functools import partial

import numpy as np
from mpi4py import MPI

WIDTH = 8  # columns of a rank's array: a column's elements lie 8 apart (32 bytes for float32)
_types = {}  # the committed column datatype of each (m, element type): made once, kept


def _values(rank, m):
    """A rank's array: small values (exact in every type), never 0, different in every column and rank."""
    rows = np.arange(m)[:, None]
    cols = np.arange(WIDTH)[None, :]
    return (rows * 3 + cols * 5 + rank * 7) % 251 + 1


class HBuffers:
    """The arrays of a halo row (the interface of baselines.Buffers). Out of place only."""
    inplace = False

    def __init__(self, xp, coll, count, dtype, n, rank, root):
        self.xp, self.coll, self.count, self.n, self.rank, self.root = xp, coll, count, n, rank, root
        self.dtype = np.dtype(dtype)
        self.mpi_type = MPI.Datatype.fromcode(self.dtype.char)
        self.m = count
        self.send = xp.asarray(_values(rank, count).astype(self.dtype))
        self.recv = xp.zeros((count, WIDTH), dtype=self.dtype)

    def expected(self, op):
        """The array a correct call leaves: rank - 1's last column in the first, zeros elsewhere."""
        out = np.zeros((self.m, WIDTH), self.dtype)
        out[:, 0] = _values((self.rank - 1) % self.n, self.m)[:, WIDTH - 1]
        return out

    def result(self):
        return self.xp.asnumpy(self.recv) if hasattr(self.xp, 'asnumpy') else np.asarray(self.recv)


def _column_type(m, base):
    """m blocks of one element, WIDTH elements apart (committed once)."""
    key = (m, base.handle)
    t = _types.get(key)
    if t is None:
        t = _types[key] = base.Create_vector(m, 1, WIDTH).Commit()
    return t


def mpi_call(comm, h):
    """The row's Sendrecv on `comm` (mpigpu's or plain mpi4py's), bound once: the send side starts at
    the last column's first element, the receive side at the first column's."""
    n, r = comm.Get_size(), comm.Get_rank()
    col = _column_type(h.m, h.mpi_type)
    last = h.send.reshape(-1)[WIDTH - 1:]
    return partial(comm.Sendrecv, [last, 1, col], (r + 1) % n, 0, [h.recv.reshape(-1), 1, col], (r - 1) % n, 0)


def nccl_call(nc, comm, h, stream):
    """The row on NCCL communicator `comm` (cupy.cuda.nccl `nc`), on `stream` (the current one, where
    CuPy's copy kernels run): the column packed, sent and received as bytes, unpacked."""
    xp, n, r = h.xp, h.n, h.rank
    out, into = xp.empty(h.m, h.dtype), xp.empty(h.m, h.dtype)
    column, ghost = h.send[:, WIDTH - 1], h.recv[:, 0]
    nbytes, u8 = h.m * h.dtype.itemsize, nc.NCCL_UINT8

    def call():
        out[...] = column
        nc.groupStart()
        comm.send(out.data.ptr, nbytes, u8, (r + 1) % n, stream.ptr)
        comm.recv(into.data.ptr, nbytes, u8, (r - 1) % n, stream.ptr)
        nc.groupEnd()
        ghost[...] = into
    return call
