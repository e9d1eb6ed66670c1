"""The exchange rows of mpigpu-perf: alltoall, alltoallv, allgatherv, gatherv, scatterv,
neighbor_alltoall, and redistribute (its own module, redistribute.py: its send blocks are strided).

A row of S bytes on n ranks has a base block of c = S / (itemsize * n) elements. The v-rows make the
blocks uneven, by a fixed rule every rank computes alike, so that the counts and displacements
matter (an even v-row would be a regular collective under another name):

    alltoallv                        the block src sends dst: c + ((src + 2 dst) % 3 - 1) * spread(c)
    allgatherv, gatherv, scatterv    rank r's block:          c + (r % 3 - 1) * spread(c)

with spread(c) = c / 4 rounded up, so that rows of a few elements are uneven too. Blocks lie in rank
order, packed (each displacement is the sum of the counts before it).

redistribute (redistribute.py) moves a distributed 2-D array from a split by rows to a split by
columns: Alltoallv of one strided (vector) block per peer, the row issue 46 names.

neighbor_alltoall is a halo exchange: Neighbor_alltoall on a 2-D Cart of the ranks (MPI.Compute_dims,
not periodic, ranks not reordered), c elements to and from each of the four neighbours in the Cart's
order (dimension 0 down and up, then dimension 1); a block at the grid's edge (PROC_NULL) moves nothing.

A rank's plan is two lists of (peer, offset, count), in elements: the blocks it sends (at offsets
of its send buffer) and those it receives (at offsets of its receive buffer). The MPI calls' counts
and displacements, the check's expected result and NCCL's grouped point-to-point all read that one
plan.
"""
from functools import partial

import numpy as np
from mpi4py import MPI

from . import redistribute

COLLS = ('alltoall', 'alltoallv', 'allgatherv', 'gatherv', 'scatterv', 'neighbor_alltoall', 'redistribute')
ROOTED = ('gatherv', 'scatterv')
# The rows where a rank sends one block, the same to every rank that receives it.
_ONE_BLOCK = ('allgatherv', 'gatherv')


def spread(c):
    return (c + 3) // 4


def pair_count(c, src, dst):
    """alltoallv: the elements of the block `src` sends `dst`."""
    return c + ((src + 2 * dst) % 3 - 1) * spread(c)


def rank_count(c, r):
    """allgatherv, gatherv, scatterv: the elements of rank r's block."""
    return c + (r % 3 - 1) * spread(c)


def _packed(blocks):
    """[(peer, count)] -> [(peer, offset, count)]: one after the other, in the order given."""
    out, offset = [], 0
    for peer, count in blocks:
        out.append((peer, offset, count))
        offset += count
    return out


def grid_neighbors(n, rank):
    """neighbor_alltoall's Cart: its dimensions, and `rank`'s neighbours as Topocomm.inoutedges lists
    them (each dimension's lower then upper one, PROC_NULL at an edge), from the Cart's row-major order."""
    dims = MPI.Compute_dims(n, 2)
    coords = [rank // dims[1], rank % dims[1]]
    out = []
    for d in range(2):
        for step in (-1, 1):
            at = list(coords)
            at[d] += step
            out.append(at[0] * dims[1] + at[1] if 0 <= at[d] < dims[d] else MPI.PROC_NULL)
    return dims, out


def plan(coll, c, n, rank, root):
    """(sends, recvs) of `rank` in a row of base count c: lists of (peer, offset, count)."""
    peers = range(n)
    if coll == 'neighbor_alltoall':
        _dims, nbrs = grid_neighbors(n, rank)
        return _packed([(j, c) for j in nbrs]), _packed([(j, c) for j in nbrs])
    if coll == 'alltoall':
        return _packed([(j, c) for j in peers]), _packed([(j, c) for j in peers])
    if coll == 'alltoallv':
        return (_packed([(j, pair_count(c, rank, j)) for j in peers]),
                _packed([(j, pair_count(c, j, rank)) for j in peers]))
    everyone = _packed([(j, rank_count(c, j)) for j in peers])
    mine = rank_count(c, rank)
    if coll == 'allgatherv':
        return [(j, 0, mine) for j in peers], everyone
    if coll == 'gatherv':
        return [(root, 0, mine)], everyone if rank == root else []
    if coll == 'scatterv':
        return everyone if rank == root else [], [(root, 0, mine)]
    raise ValueError(coll)


def length(blocks):
    """Elements of the buffer that holds `blocks`."""
    return max((offset + count for _, offset, count in blocks), default=0)


def row_bytes(coll, c, n, itemsize):
    """The bytes an exchange row of base count c reports (nccl-tests: the whole buffer)."""
    if coll == 'redistribute':
        return redistribute.row_bytes(c, n, itemsize)
    if coll in ('alltoall', 'alltoallv', 'neighbor_alltoall'):
        # a rank's send buffer; alltoallv's differ by rank: the largest, as the busiest rank bounds the
        # time (computed from the counts every rank knows, no communication)
        return itemsize * max(length(plan(coll, c, n, r, 0)[0]) for r in range(n))
    # the gathered (scattered) buffer, the same whichever rank is root
    return itemsize * length(plan('allgatherv', c, n, 0, 0)[1])


def block_values(count, src, dst):
    """The elements of the block `src` sends `dst`: small (exact in every type), never 0 (a block left
    unwritten shows), and shifted by src and dst (a block put in another's place shows)."""
    return (np.arange(count) + 3 * dst + 5 * src) % 13 + 1


def _filled(blocks, dtype, values_of):
    """A NumPy array holding each (peer, offset, count) block as values_of(peer, count) gives it (0 for
    a PROC_NULL block: nothing is sent from or written into it)."""
    out = np.zeros(length(blocks), dtype)
    for peer, offset, count in blocks:
        if peer != MPI.PROC_NULL:
            out[offset:offset + count] = values_of(peer, count)
    return out


class VBuffers:
    """The send and receive arrays of an exchange row on the chosen memory (the interface of
    baselines.Buffers), with the rank's plan. Out of place only: --inplace applies to the engine rows."""
    inplace = False

    def __init__(self, xp, coll, count, dtype, n, rank, root):
        self.xp, self.coll, self.count, self.n, self.rank, self.root = xp, coll, count, n, rank, root
        self.dtype = np.dtype(dtype)
        self.mpi_type = MPI.Datatype.fromcode(self.dtype.char)  # the type mpi4py gives such an array
        self.sends, self.recvs = plan(coll, count, n, rank, root)
        self.send = xp.asarray(_filled(self.sends, self.dtype, self._sent_values))
        self.recv = xp.zeros(length(self.recvs), dtype=self.dtype)

    def _key(self, dst):
        # a one-block row sends every receiver the same block
        return 0 if self.coll in _ONE_BLOCK else dst

    def _sent_values(self, peer, count):
        return block_values(count, self.rank, self._key(peer))

    def expected(self, op):
        """The receive buffer a correct call leaves, as NumPy (`op`: unused, nothing reduces)."""
        return _filled(self.recvs, self.dtype, lambda peer, count: block_values(count, peer, self._key(self.rank)))

    def result(self):
        return self.xp.asnumpy(self.recv) if hasattr(self.xp, 'asnumpy') else np.asarray(self.recv)


def _counts(blocks):
    """MPI's (counts, displacements) of blocks listed in rank order."""
    return [count for _, _, count in blocks], [offset for _, offset, _ in blocks]


_carts = {}  # neighbor_alltoall's Cart of each communicator the rows run on (made once: collective)


def _cart(comm):
    key = (type(comm), comm.py2f())
    if key not in _carts:
        _carts[key] = comm.Create_cart(MPI.Compute_dims(comm.Get_size(), 2), [False, False], reorder=False)
    return _carts[key]


def mpi_call(comm, b, **kw):
    """The mpi4py call of an exchange row on `comm` (mpigpu's or plain mpi4py's), in the buffer forms a
    program writes: [buffer, (counts, displacements), datatype] for the v-arguments, None for the
    buffer a rooted call does not use off its root; `kw` takes mpigpu's stream=. Bound once, as
    baselines.mpi_call does."""
    c, t = b.coll, b.mpi_type
    if c == 'redistribute':
        return redistribute.mpi_call(comm, b, **kw)
    if c == 'neighbor_alltoall':
        return partial(_cart(comm).Neighbor_alltoall, b.send, b.recv, **kw)
    if c == 'alltoall':
        return partial(comm.Alltoall, b.send, b.recv, **kw)
    if c == 'alltoallv':
        return partial(comm.Alltoallv, [b.send, _counts(b.sends), t], [b.recv, _counts(b.recvs), t], **kw)
    if c == 'allgatherv':
        return partial(comm.Allgatherv, b.send, [b.recv, _counts(b.recvs), t], **kw)
    at_root = b.rank == b.root
    if c == 'gatherv':
        return partial(comm.Gatherv, b.send, [b.recv, _counts(b.recvs), t] if at_root else None, b.root, **kw)
    if c == 'scatterv':
        return partial(comm.Scatterv, [b.send, _counts(b.sends), t] if at_root else None, b.recv, b.root, **kw)
    raise ValueError(c)


def nccl_ops(b):
    """An exchange row as point-to-point: (local, sends, recvs), in elements. local: (send offset,
    receive offset, count) of the block a rank keeps, or None; sends and recvs: (peer, offset, count)
    of every other non-empty block (at most one a peer each way, so NCCL's order matches them)."""
    me = b.rank
    own_send = [(offset, count) for peer, offset, count in b.sends if peer == me and count]
    own_recv = [(offset, count) for peer, offset, count in b.recvs if peer == me and count]
    local = (own_send[0][0], own_recv[0][0], own_recv[0][1]) if own_recv else None
    sends = [x for x in b.sends if x[0] not in (me, MPI.PROC_NULL) and x[2]]
    recvs = [x for x in b.recvs if x[0] not in (me, MPI.PROC_NULL) and x[2]]
    return local, sends, recvs


def nccl_call(nc, comm, b, stream):
    """One exchange row on NCCL communicator `comm` (cupy.cuda.nccl `nc`), enqueued on `stream`: the
    block a rank keeps as a device-to-device copy, every other block a send or receive in one group
    (gatherv's root receives from, scatterv's sends to, everyone in it). NCCL's point-to-point moves
    bytes whatever their type, so blocks go as uint8: every -d type has this baseline."""
    if b.coll == 'redistribute':
        return redistribute.nccl_call(nc, comm, b, stream)
    local, sends, recvs = nccl_ops(b)
    e, sp, rp = b.dtype.itemsize, b.send.data.ptr, b.recv.data.ptr
    sends = [(peer, sp + offset * e, count * e) for peer, offset, count in sends]
    recvs = [(peer, rp + offset * e, count * e) for peer, offset, count in recvs]
    rt, u8 = b.xp.cuda.runtime, nc.NCCL_UINT8
    copy = (rp + local[1] * e, sp + local[0] * e, local[2] * e) if local else None

    def call():
        if copy:
            rt.memcpyAsync(*copy, rt.memcpyDeviceToDevice, stream.ptr)
        nc.groupStart()
        for peer, ptr, nbytes in sends:
            comm.send(ptr, nbytes, u8, peer, stream.ptr)
        for peer, ptr, nbytes in recvs:
            comm.recv(ptr, nbytes, u8, peer, stream.ptr)
        nc.groupEnd()
    return call
