"""The `pingpong` row of mpigpu-perf: the latency of one message, as osu_latency measures it.

A call is one round trip of blocking point-to-point between ranks 0 and 1: rank 0 sends its array and
receives rank 1's, rank 1 receives rank 0's and sends its own; the other ranks make no call (on one
rank, a Sendrecv to itself). The time column is the round trip's: one message's latency is half of it
(the ratios against the baselines are the same either way). NCCL's baseline is the same four calls,
each ncclSend or ncclRecv on the stream.
"""
from functools import partial

import numpy as np


def _values(rank, count):
    """A rank's array: small values (exact in every type), never 0, different on every rank."""
    return (np.arange(count) * 3 + rank * 7) % 251 + 1


def _peer(rank, n):
    """Whom `rank` exchanges with: 0 and 1 with each other, rank 0 with itself on one rank, else None."""
    if n == 1:
        return 0
    return {0: 1, 1: 0}.get(rank)


class PBuffers:
    """The arrays of a pingpong row (the interface of baselines.Buffers). Out of place only."""
    inplace = False

    def __init__(self, xp, coll, count, dtype, n, rank, root):
        self.xp, self.coll, self.count, self.n, self.rank, self.root = xp, coll, count, n, rank, root
        self.dtype = np.dtype(dtype)
        self.peer = _peer(rank, n)
        self.send = xp.asarray(_values(rank, count).astype(self.dtype))
        self.recv = xp.zeros(count, dtype=self.dtype)

    def expected(self, op):
        """The peer's array, or the zeros a rank outside the pair keeps."""
        if self.peer is None:
            return np.zeros(self.count, self.dtype)
        return _values(self.peer, self.count).astype(self.dtype)

    def result(self):
        return self.xp.asnumpy(self.recv) if hasattr(self.xp, 'asnumpy') else np.asarray(self.recv)


def _nothing():
    pass


def mpi_call(comm, p):
    """The row's round trip on `comm` (mpigpu's or plain mpi4py's), bound once."""
    if p.peer is None:
        return _nothing
    if p.n == 1:
        return partial(comm.Sendrecv, p.send, 0, 1, p.recv, 0, 1)
    first, then = (comm.Send, comm.Recv) if p.rank == 0 else (comm.Recv, comm.Send)
    a = (p.send, p.peer, 1) if p.rank == 0 else (p.recv, p.peer, 1)
    b = (p.recv, p.peer, 1) if p.rank == 0 else (p.send, p.peer, 1)

    def call():
        first(*a)
        then(*b)
    return call


def nccl_call(nc, comm, p, stream):
    """The round trip on NCCL communicator `comm` (cupy.cuda.nccl `nc`), on `stream`, as bytes."""
    if p.peer is None:
        return _nothing
    nbytes, u8, s = p.count * p.dtype.itemsize, nc.NCCL_UINT8, stream.ptr
    send = partial(comm.send, p.send.data.ptr, nbytes, u8, p.peer, s)
    recv = partial(comm.recv, p.recv.data.ptr, nbytes, u8, p.peer, s)
    if p.n == 1:
        def call():
            nc.groupStart()
            send()
            recv()
            nc.groupEnd()
        return call
    first, then = (send, recv) if p.rank == 0 else (recv, send)

    def call():
        first()
        then()
    return call
