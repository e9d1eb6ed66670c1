"""The exchange path's reading of a call: this rank's arguments of an all-to-all family call (Alltoall,
Alltoallv, Alltoallw, Allgatherv, Gather(v), Scatter(v), the neighbourhood collectives) read into the byte
ranges the exchange transport moves (`Ranges`), or None where only the mirrored path can read them (a
datatype the kernel cannot follow, a specification it does not take, an intercommunicator, host memory
among the significant buffers, in-place Alltoall(v) of blocks with gaps; in-place Alltoall(v) of plain
blocks is sent from a copy of the buffer: exchange_in_place.InPlace). A block of a derived datatype with gaps is read as its
packed bytes and its layout, which the kernel follows (a block shape: cuda/block_shape.cuh). exchange.py
runs what `describe` reads; exchange_reduce.py reads its reductions with the same pieces (BufferArg).
"""
import operator

from mpi4py import MPI

from .. import _cuda
from .._base.codes import Coll
from .._describe import datatypes as _datatypes
from .._describe.call import datatype_of, read_whole, unpack_spec
from .exchange_in_place import InPlace
from .support import packing

# The blocking methods this path takes, with their code (on the placement board, and the call's for the
# transport: mg_exchange_call::coll).
CODES = {'Alltoall': Coll.ALLTOALL, 'Alltoallv': Coll.ALLTOALLV, 'Alltoallw': Coll.ALLTOALLW,
         'Allgatherv': Coll.ALLGATHERV, 'Gather': Coll.GATHER, 'Gatherv': Coll.GATHERV, 'Scatter': Coll.SCATTER,
         'Scatterv': Coll.SCATTERV, 'Neighbor_allgather': Coll.NEIGHBOR_ALLGATHER,
         'Neighbor_allgatherv': Coll.NEIGHBOR_ALLGATHERV, 'Neighbor_alltoall': Coll.NEIGHBOR_ALLTOALL,
         'Neighbor_alltoallv': Coll.NEIGHBOR_ALLTOALLV, 'Neighbor_alltoallw': Coll.NEIGHBOR_ALLTOALLW}
_ROOTED = frozenset(('Gather', 'Gatherv', 'Scatter', 'Scatterv'))
SHAPE_MAX_DIMS = 4  # nested dimensions of a block shape the kernel takes (MG_SHAPE_MAX_DIMS, cuda/mpigpu_cuda.h)


class Unread(Exception):
    """The arguments are not ones this path reads: the host MPI call takes the call."""


class Ranges:
    """One rank's exchange: send_bytes[p] bytes from send + send_off[p] go to rank p; recv_bytes[p]
    bytes from rank p land at recv + recv_off[p]; `bufs` the device buffers (their streams order the
    call). A block of a datatype with gaps has a shape (send_shape[p], recv_shape[p]: its layout, else
    None): its bytes are the packed bytes of its instances, the first of which lies at the offset. `coll`:
    the code of the call it serves (the transport picks its FIFOs' end by it)."""
    __slots__ = ('coll', 'send', 'recv', 'send_bytes', 'send_off', 'recv_bytes', 'recv_off', 'send_shape',
                 'recv_shape', 'shapes', 'bufs', 'device')

    def __init__(self, n, coll):
        self.coll = int(coll)
        self.send = self.recv = 0
        self.send_bytes, self.send_off = [0] * n, [0] * n
        self.recv_bytes, self.recv_off = [0] * n, [0] * n
        self.send_shape, self.recv_shape = [None] * n, [None] * n
        self.shapes = None  # (send_shape, recv_shape) where a block has a shape (the team's `shapes`)
        self.bufs = []
        self.device = None  # the GPU of its buffers (None: none holds a byte)

    # What the transport's forms do with a call (this class's, and exchange_reduce.Reduction's):
    def run(self, team, stream, then=None):
        """The exchange, blocking (`then`: the reduction that follows it, the team's `then`)."""
        team.exchange(self.coll, self.send, self.recv, self.send_bytes, self.send_off, self.recv_bytes, self.recv_off,
                      stream, True, self.shapes, then)

    def enqueue(self, team, stream):
        """The exchange enqueued on `stream`, not waited for (the stream= form; exchange_reduce's
        Reduction waits, for its scratch)."""
        team.exchange(self.coll, self.send, self.recv, self.send_bytes, self.send_off, self.recv_bytes, self.recv_off,
                      stream, False, self.shapes)

    def request(self, team, stream, addr, watch, then=None):
        """The exchange enqueued with the generalized request at `addr` that completes after it: its ticket."""
        return team.exchange_request(self.coll, self.send, self.recv, self.send_bytes, self.send_off, self.recv_bytes,
                                     self.recv_off, stream, addr, watch, self.shapes, then)

    def bind(self, req, stream):
        """Keeps what the kernel reads and writes alive as long as request `req`."""
        req._mpigpu_buffers = self.bufs


def count_of(value):
    """A count, root or displacement given as a non-negative integer (bools and others: Unread)."""
    if isinstance(value, bool):
        raise Unread
    v = operator.index(value)
    if v < 0:
        raise Unread
    return v


def _shape(name, label, rank, dt):
    """(layout or None, packed bytes of one instance, extent, element code) of datatype dt: the layout
    where the datatype has gaps and the kernel can follow it (a regular layout of at most SHAPE_MAX_DIMS
    dimensions, positive extent), None where it is contiguous; raises Unread for the others. The code
    is the element type's (mpigpu._base.types; -1: none of ours, or derived)."""
    code, mpi_type, extent, contiguous = datatype_of(name, label, rank, dt)
    if extent <= 0:
        raise Unread
    if contiguous:
        return None, extent, extent, code
    lay = _datatypes.layout(mpi_type)
    if not lay.regular or lay.size <= 0 or len(lay.dims) > SHAPE_MAX_DIMS:
        raise Unread  # a block table, an empty type, deeper nesting: the mirrors pack it
    return lay, lay.size, extent, -1


def type_of(dt):
    """Datatype dt as describe reads a block of it, for the fast path (mpigpu/_ext/_exchange.pxi keeps
    it per datatype): (packed bytes of an instance, extent, the bytes [tlb, tub) one instance touches
    from its displacement, its layout where it has gaps, else None); None where describe declines it."""
    try:
        lay, size, extent, _code = _shape('Alltoallv', 'datatype', 0, dt)
    except Exception:  # noqa: BLE001 - Unread, or a datatype mpi4py refuses: the general path says it
        return None
    if lay is None:
        return size, extent, 0, size, None
    return size, extent, lay.true_lb, lay.true_lb + lay.true_extent, lay


def _span(off, nbytes, shape):
    """[lo, hi): the bytes from the buffer pointer that a block of nbytes packed bytes at offset `off`
    touches (of a shaped block: from its lowest to its highest byte)."""
    if shape is None or not nbytes:
        return off, off + nbytes
    last = (nbytes // shape.size - 1) * shape.extent
    return off + shape.true_lb, off + last + shape.true_lb + shape.true_extent


class BufferArg:
    """A device buffer argument as mpi4py reads it (a simple message, or a v-message with `vector`): its
    DeviceBuffer, its datatype's packed bytes per instance (`size`), extent, element code (`code`, -1:
    not one of ours) and shape (`layout`: its layout where the datatype has gaps, else None), counts and
    displacements as given."""

    def __init__(self, name, label, rank, value, writable, vector):
        if type(value) not in (list, tuple):  # a v-message's displacements not given: packed, not 0
            obj, counts, displs, dt = value, None, None if vector else 0, None
        elif not vector:
            obj, counts, displs, dt = unpack_spec(name, label, rank, value)
        elif 2 <= len(value) <= 4:
            obj, (counts, displs, dt) = value[0], packing.vector_spec(list(value[1:]))
        else:
            raise Unread  # mpi4py's "expecting 2 to 4 items"
        if obj is None or obj is MPI.IN_PLACE:
            raise Unread
        self.buf = read_whole(name, label, rank, obj, writable, _cuda.consumer_stream)
        self.layout = None
        if dt is None:
            if self.buf.dtype < 0:
                raise Unread
            self.size = self.extent = self.buf.itemsize
            self.code = self.buf.dtype
        else:
            self.layout, self.size, self.extent, self.code = _shape(name, label, rank, dt)
            if self.layout is not None and counts is None:
                raise Unread  # a count read from the buffer's size: the host MPI call reads it
        self.counts, self.displs = counts, displs

    def simple(self, blocks):
        """A simple message of `blocks` equal blocks: (bytes of one block, offset of the first)."""
        sizes, offsets = self._simple(blocks)
        return sizes[0], offsets[0]

    def blocks(self, n):
        """The simple message of a buffer holding one block per rank: (bytes, offsets) per block."""
        return self._simple(n)

    def _simple(self, blocks):
        offset = self.displs * self.extent
        if offset > self.buf.nbytes:
            raise Unread
        if self.counts is not None:
            count = self.counts
        else:
            length = self.buf.nbytes - offset
            if length % self.extent or (length // self.extent) % blocks:
                raise Unread
            count = length // self.extent // blocks
        sizes, offsets = [count * self.size] * blocks, [offset + p * count * self.extent for p in range(blocks)]
        self.check(sizes, offsets)
        return sizes, offsets

    def vector(self, n):
        """A v-message's n blocks: (bytes, offsets), as mpi4py fills counts and displacements."""
        if self.counts is None and self.buf.nbytes % self.extent:
            raise Unread
        counts, displs = packing.vector_counts(self.counts, self.displs, self.buf.nbytes // self.extent, n)
        sizes, offsets = [c * self.size for c in counts], [d * self.extent for d in displs]
        self.check(sizes, offsets)
        return sizes, offsets

    def shapes(self, n):
        """The shape of each of n blocks."""
        return [self.layout] * n

    def check(self, sizes, offsets):
        """Every block within the buffer (beyond it, the host MPI call says what is wrong)."""
        for size, off in zip(sizes, offsets):
            lo, hi = _span(off, size, self.layout)
            if size and (lo < 0 or hi > self.buf.nbytes):
                raise Unread


def _wmessage(name, label, rank, value, writable, blocks):
    """A w-message [array, counts, byte displacements, datatypes] in mpi4py's forms (message_vector_w:
    [array, types] is one of each at 0): (DeviceBuffer, bytes, offsets, shapes)."""
    if type(value) not in (list, tuple) or not 2 <= len(value) <= 4:
        raise Unread
    if len(value) == 2:
        (obj, types), counts, displs = value, None, None
    elif len(value) == 3:
        obj, (counts, displs), types = value
    else:
        obj, counts, displs, types = value
    if obj is None or obj is MPI.IN_PLACE:
        raise Unread
    if counts is None and displs is None:
        counts, displs = [1] * blocks, [0] * blocks
    elif not hasattr(counts, '__len__') or not hasattr(displs, '__len__'):
        raise Unread  # mpi4py raises for it (message_vector_w takes sequences)
    counts, displs = packing.vector_counts(counts, displs, 0, blocks)
    if type(types) not in (list, tuple) or len(types) != blocks or not all(
            isinstance(t, MPI.Datatype) for t in types):
        raise Unread  # a sequence of datatypes, as message_vector_w reads them
    buf = read_whole(name, label, rank, obj, writable, _cuda.consumer_stream)
    sizes, shapes = [], []
    for count, dt, off in zip(counts, types, displs):
        shape, size = _shape(name, label, rank, dt)[:2] if count else (None, 0)
        lo, hi = _span(off, count * size, shape)
        if count and (lo < 0 or hi > buf.nbytes):
            raise Unread
        sizes.append(count * size)
        shapes.append(shape)
    return buf, sizes, list(displs), shapes


def _onto_ranks(n, peers, sizes, offsets, shapes):
    """Blocks addressed to neighbours (peers[i] for block i; PROC_NULL: none) as per-rank byte ranges
    and shapes. A rank that is a neighbour twice (a periodic dimension of 1 or 2 ranks) would need two
    ranges of one pair: the host MPI call takes that call."""
    got, at, shaped, seen = [0] * n, [0] * n, [None] * n, set()
    for peer, size, off, shape in zip(peers, sizes, offsets, shapes):
        if peer == MPI.PROC_NULL:
            continue
        if peer in seen or not 0 <= peer < n:
            raise Unread
        seen.add(peer)
        got[peer], at[peer], shaped[peer] = size, off, shape
    return got, at, shaped


class _Neighbors:
    """A topology communicator's neighbours, (sources, destinations) as mpi4py's inoutedges gives them
    (a communicator's topology never changes: read once, kept in its state)."""

    def __init__(self, st):
        kind = st.comm.Get_topology()
        cls = {MPI.CART: MPI.Cartcomm, MPI.GRAPH: MPI.Graphcomm, MPI.DIST_GRAPH: MPI.Distgraphcomm}.get(kind)
        self.edges = None if cls is None else tuple(list(e) for e in cls(st.comm).inoutedges)

    def close(self):
        """Nothing to release (the communicator's close() calls it for every path's state)."""


def _neighborly(name, rank, n, args, edges):
    """The Ranges of a neighbourhood collective: each block goes to or comes from its neighbour."""
    if edges is None:
        raise Unread  # no topology: host MPI raises
    sources, dests = edges
    sendbuf, recvbuf = args[0], args[1]
    if sendbuf is None or sendbuf is MPI.IN_PLACE or recvbuf is None or recvbuf is MPI.IN_PLACE:
        raise Unread  # MPI has no in-place form of these
    r = Ranges(n, CODES[name])
    kind = name[len('Neighbor_'):]
    if kind == 'alltoallw':
        send, sizes, offs, shapes = _wmessage(name, 'sendbuf', rank, sendbuf, False, len(dests))
        recv, rsizes, roffs, rshapes = _wmessage(name, 'recvbuf', rank, recvbuf, True, len(sources))
    else:
        v = kind in ('allgatherv', 'alltoallv')
        sb = BufferArg(name, 'sendbuf', rank, sendbuf, False, kind == 'alltoallv')
        rb = BufferArg(name, 'recvbuf', rank, recvbuf, True, v)
        if kind.startswith('allgather'):
            size, base = sb.simple(1)
            sizes, offs = [size] * len(dests), [base] * len(dests)
        else:
            sizes, offs = sb.vector(len(dests)) if v else sb.blocks(len(dests))
        rsizes, roffs = rb.vector(len(sources)) if v else rb.blocks(len(sources))
        send, recv = sb.buf, rb.buf
        shapes, rshapes = sb.shapes(len(dests)), rb.shapes(len(sources))
    r.send_bytes, r.send_off, r.send_shape = _onto_ranks(n, dests, sizes, offs, shapes)
    r.recv_bytes, r.recv_off, r.recv_shape = _onto_ranks(n, sources, rsizes, roffs, rshapes)
    r.send, r.recv = send.ptr, recv.ptr
    return _finish(name, rank, r, [send, recv])


def describe(name, rank, n, args, edges=None):
    """The Ranges of this rank's call `name` (mpi4py's arguments `args`) on a communicator of n ranks
    (a neighbourhood collective's: `edges`, its topology's (sources, destinations)), or None where only
    the host MPI call can take it."""
    try:
        if name.startswith('Neighbor_'):
            return _neighborly(name, rank, n, args, edges)
        return _describe(name, rank, n, args)
    except Exception:  # noqa: BLE001 - Unread, or what the intake raised: the host MPI call says it
        return None


def _describe(name, rank, n, args):
    sendbuf, recvbuf = args[0], args[1]
    root = count_of(args[2]) if name in _ROOTED else -1
    if root >= n:
        raise Unread
    at_root = root == rank
    r = Ranges(n, CODES[name])
    in_place = sendbuf is None or sendbuf is MPI.IN_PLACE or (
        type(sendbuf) in (list, tuple) and sendbuf and sendbuf[0] is MPI.IN_PLACE)
    recv = send = None
    if name == 'Alltoallw':
        if in_place:
            raise Unread  # its own block would be overwritten while it is sent
        sb, r.send_bytes, r.send_off, r.send_shape = _wmessage(name, 'sendbuf', rank, sendbuf, False, n)
        rb, r.recv_bytes, r.recv_off, r.recv_shape = _wmessage(name, 'recvbuf', rank, recvbuf, True, n)
        r.send, r.recv = sb.ptr, rb.ptr
        return _finish(name, rank, r, [sb, rb])
    if name in ('Alltoall', 'Alltoallv'):
        v = name == 'Alltoallv'
        recv = BufferArg(name, 'recvbuf', rank, recvbuf, True, v)
        r.recv_bytes, r.recv_off = recv.vector(n) if v else recv.blocks(n)
        r.recv_shape = recv.shapes(n)
        if in_place:
            return _in_place(name, rank, r, recv)
        send = BufferArg(name, 'sendbuf', rank, sendbuf, False, v)
        r.send_bytes, r.send_off = send.vector(n) if v else send.blocks(n)
        r.send_shape = send.shapes(n)
    elif name == 'Allgatherv':
        recv = BufferArg(name, 'recvbuf', rank, recvbuf, True, True)
        r.recv_bytes, r.recv_off = recv.vector(n)
        r.recv_shape = recv.shapes(n)
        if in_place:  # its own block is already in place: sent from there
            size, base = r.recv_bytes[rank], r.recv_off[rank]
            r.send = recv.buf.ptr + base
            r.send_shape = [recv.layout] * n
        else:
            send = BufferArg(name, 'sendbuf', rank, sendbuf, False, False)
            size, base = send.simple(1)
            r.send_shape = send.shapes(n)
        r.send_bytes = [size] * n
        r.send_off = [base] * n if not in_place else [0] * n
    elif name in ('Gather', 'Gatherv'):
        if at_root:
            v = name == 'Gatherv'
            recv = BufferArg(name, 'recvbuf', rank, recvbuf, True, v)
            r.recv_bytes, r.recv_off = recv.vector(n) if v else recv.blocks(n)
            r.recv_shape = recv.shapes(n)
        if in_place and at_root:  # the root's own block is in place: nothing to copy
            r.send = recv.buf.ptr + r.recv_off[rank]
            r.send_bytes[root] = r.recv_bytes[rank]
            r.send_shape[root] = recv.layout
        else:
            send = BufferArg(name, 'sendbuf', rank, sendbuf, False, False)
            r.send_bytes[root], r.send_off[root] = send.simple(1)
            r.send_shape[root] = send.layout
    else:  # Scatter, Scatterv
        if at_root:
            v = name == 'Scatterv'
            send = BufferArg(name, 'sendbuf', rank, sendbuf, False, v)
            r.send_bytes, r.send_off = send.vector(n) if v else send.blocks(n)
            r.send_shape = send.shapes(n)
        recv_in_place = at_root and (recvbuf is None or recvbuf is MPI.IN_PLACE)
        if recv_in_place:
            r.send_bytes[rank] = 0  # the root's own block stays where it is
        else:
            recv = BufferArg(name, 'recvbuf', rank, recvbuf, True, False)
            r.recv_bytes[root], r.recv_off[root] = recv.simple(1)
            r.recv_shape[root] = recv.layout
    if send is not None:
        r.send = send.buf.ptr
    if recv is not None:
        r.recv = recv.buf.ptr
    return _finish(name, rank, r, [b.buf for b in (send, recv) if b is not None], in_place and send is None)


def one_device(name, rank, r, bufs):
    """Adds the call's device buffers `bufs` to Ranges r, with their GPU (one: Unread on two)."""
    for buf in bufs:
        r.bufs.append(buf)
        if buf.nbytes:
            dev = _cuda.device_of(name, 'buffer', rank, buf)
            if r.device is not None and dev != r.device:
                raise Unread  # buffers on two GPUs: the mirrors take them
            r.device = dev


def _in_place(name, rank, r, recv):
    """In-place Alltoall(v), its receive blocks read into r: each block is sent from where it is received,
    so the exchange sends from a copy of the buffer (exchange_in_place.InPlace). Blocks of a datatype
    with gaps stay with the mirrors (their span is not one copy)."""
    if any(s is not None for s in r.recv_shape):
        raise Unread
    r.send_bytes, r.send_off = list(r.recv_bytes), list(r.recv_off)
    r.send = r.recv = recv.buf.ptr
    r = _finish(name, rank, r, [recv.buf], staged=True)
    span = max((o + b for o, b in zip(r.recv_off, r.recv_bytes) if b), default=0)
    return InPlace(r, span) if span else r


def _finish(name, rank, r, bufs, in_place=False, staged=False):
    """Ranges r with the call's device buffers `bufs` checked: one GPU, the own block's two sizes equal,
    nothing received over bytes sent (`in_place`: what this rank sends is its own block of the output;
    `staged`: it is sent from a copy, so sent and received bytes may be the same)."""
    one_device(name, rank, r, bufs)
    if not r.send:
        r.send = r.recv
    if r.send_bytes[rank] != r.recv_bytes[rank]:
        raise Unread  # its own block would not fit (host MPI says what is wrong)
    for shapes, sizes in ((r.send_shape, r.send_bytes), (r.recv_shape, r.recv_bytes)):
        for p, (shape, size) in enumerate(zip(shapes, sizes)):
            if shape is not None and not size:
                shapes[p] = None  # nothing moves: no shape to follow
    if any(x is not None for x in r.send_shape) or any(x is not None for x in r.recv_shape):
        r.shapes = (r.send_shape, r.recv_shape)
    # aliased buffers: the rounds would overwrite blocks not sent yet; the mirrors copy first. In place,
    # shaped blocks' spans interleave (columns of one array) where their bytes do not: MPI forbids
    # receive blocks to overlap, so what the own block sends is never another's.
    if not staged and (not in_place or r.shapes is None) and _overlap(r, rank):
        raise Unread
    return r


def _overlap(r, rank):
    """True where bytes this rank sends overlap bytes it receives: MPI calls it erroneous, the mirrors
    (which copy every input before MPI runs) give the sensible result, the transport's rounds would
    overwrite blocks not sent yet. The own block in place (the same bytes) is no overlap. A shaped
    block counts from its lowest byte to its highest."""
    def spans(base, sizes, offsets, shapes, own):
        out = []
        for p, (b, o, shape) in enumerate(zip(sizes, offsets, shapes)):
            if b and (p != rank or own):
                lo, hi = _span(o, b, shape)
                out.append((base + lo, base + hi))
        return out
    same = (r.send + r.send_off[rank] == r.recv + r.recv_off[rank]
            and r.send_shape[rank] is r.recv_shape[rank])
    own = not same  # the own block is copied: its source is read, its destination written
    sent = spans(r.send, r.send_bytes, r.send_off, r.send_shape, own)
    got = spans(r.recv, r.recv_bytes, r.recv_off, r.recv_shape, own)
    return any(a < d and c < b for a, b in sent for c, d in got)


def edges_of(st):
    """The (sources, destinations) of a topology communicator's state, read once (None: no topology)."""
    return st.owned(_Neighbors).edges
