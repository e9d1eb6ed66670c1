"""Reduce_scatter, Scan and Exscan on device buffers over the exchange transport: each rank's blocks go to
the ranks that reduce them, into rows of a scratch buffer in rank order, and one kernel reduces the rows
into the output (cuda/reduce_rows.cu), so the op is applied in rank order as MPI defines it.

- Reduce_scatter: block p (recvcounts[p] elements, blocks back to back) of every rank goes to rank p;
  rank p reduces the n rows.
- Scan: every rank's vector goes to itself and the ranks after it; rank r reduces rows 0..r.
- Exscan: to the ranks after it only; rank r reduces rows 0..r-1 (rank 0's output is left as it was,
  as the mirrors leave it: MPI defines nothing there).

It takes predefined element types and predefined ops the device reduces (`supports`), contiguous
buffers (bare arrays or [buffer, count, datatype] specifications of a named type), in place too, and
Reduce_scatter's counts given (without them mpi4py gathers them through host MPI). Everything else,
and a call some rank cannot describe, is the host MPI call on mirrors, as every rank agrees (the
placement board, as for the exchange path). The rows live in a scratch buffer of the communicator on its
GPU, grown when a call needs more (allocated there only, never on a call that fits).
"""
from mpi4py import MPI

from .. import _cuda
from .._codes import Coll, Placement, Verdict
from .._types import check_op, op_code
from . import exchange
from .exchange import BufferArg, Ranges, Unread, count_of, one_device

CODES = {'Reduce_scatter': Coll.REDUCE_SCATTER, 'Scan': Coll.SCAN, 'Exscan': Coll.EXSCAN}


class Reduction:
    """One rank's reduction: the exchange of its rows (`ranges`, whose receive side is filled in with the
    scratch), then `rows` rows of `row_bytes` reduced into `out` (`count` elements of element type
    `dtype` under op `op`)."""
    __slots__ = ('ranges', 'out', 'rows', 'row_bytes', 'count', 'dtype', 'op')

    def __init__(self, ranges, out, rows, row_bytes, count, dtype, op):
        self.ranges, self.out, self.rows, self.row_bytes = ranges, out, rows, row_bytes
        self.count, self.dtype, self.op = count, dtype, op

    @property
    def scratch_bytes(self):
        return max(o + b for o, b in zip(self.ranges.recv_off, self.ranges.recv_bytes))


def _counts(value, n):
    """Reduce_scatter's recvcounts: n counts (a sequence or a NumPy array), else Unread."""
    if value is None or isinstance(value, (str, bytes)) or not hasattr(value, '__len__') or len(value) != n:
        raise Unread  # none (mpi4py gathers them through host MPI) or a form mpi4py raises for
    return [count_of(c) for c in value]


def _elements(name, rank, value, writable):
    """A contiguous buffer argument of a named element type: (BufferArg, element count, byte offset)."""
    b = BufferArg(name, 'buffer', rank, value, writable, False)
    if b.layout is not None or b.code < 0 or b.size != b.extent:
        raise Unread
    nbytes, offset = b.simple(1)
    return b, nbytes // b.size, offset


def describe(name, rank, n, args):
    """The Reduction of this rank's call `name` (mpi4py's arguments), or None where only the host MPI
    call takes it."""
    try:
        return _describe(name, rank, n, args)
    except Exception:  # noqa: BLE001 - Unread, or what the intake raised: the host MPI call says it
        return None


def _describe(name, rank, n, args):
    sendbuf, recvbuf = args[0], args[1]
    op = args[3] if name == 'Reduce_scatter' else args[2]
    in_place = sendbuf is None or sendbuf is MPI.IN_PLACE
    recv, rcount, roff = _elements(name, rank, recvbuf, True)
    if in_place:
        send, scount, soff = recv, rcount, roff
    else:
        send, scount, soff = _elements(name, rank, sendbuf, False)
        if send.code != recv.code:
            raise Unread  # mismatched types: host MPI says what is wrong
    dtype, item, code = recv.code, recv.size, op_code(op) if isinstance(op, MPI.Op) else -1
    if code < 0 or not _cuda.device.supports(dtype, code):
        raise Unread
    check_op(name, dtype, op, rank)  # a pair MPI forbids: the host MPI call raises MPI's error
    r = Ranges(n)
    if name == 'Reduce_scatter':
        counts = _counts(args[2], n)
        total = sum(counts)
        if scount != total or (not in_place and rcount != counts[rank]):
            raise Unread  # mpi4py's count mismatch errors
        count, rows = counts[rank], n
        at = 0
        for p in range(n):
            r.send_bytes[p], r.send_off[p] = counts[p] * item, at * item
            at += counts[p]
        takes_from = range(n)
    else:
        if scount != rcount:
            raise Unread
        count = rcount
        first = rank if name == 'Scan' else rank + 1
        for p in range(first, n):
            r.send_bytes[p] = count * item
        rows = rank + 1 if name == 'Scan' else rank
        takes_from = range(rows)
    row = count * item
    for q in takes_from:
        r.recv_bytes[q], r.recv_off[q] = row, q * row
    r.send = send.buf.ptr + soff
    one_device(name, rank, r, [recv.buf] if in_place else [send.buf, recv.buf])
    # r.recv: the scratch, filled in per call (the output is written after the exchange: no aliasing)
    return Reduction(r, recv.buf.ptr + roff, rows, row, count, dtype, code)


class _Scratch:
    """A communicator's rows: device memory on its GPU, grown to the largest call's need."""

    def __init__(self, st):
        self.mem = None

    def at_least(self, nbytes, device):
        if self.mem is None or self.mem.nbytes < nbytes:
            self.mem = None  # freed before the larger one is made
            self.mem = _cuda.with_device(device, _cuda.device.DeviceMemory, max(nbytes, 1 << 16))
        return self.mem

    def close(self):
        self.mem = None


def run(st, name, args, host_call):
    """Runs blocking call `name` on device buffers: on the exchange transport and the GPU's reduction
    when every rank described its call and the communicator's team is up, else host_call() (the host
    MPI call on mirrors), as every rank of the call does."""
    exchange._usable(st, name, CODES[name], False)
    red = describe(name, st.rank, st.size, args)
    if red is not None and st.device is not None and red.ranges.device not in (None, st.device):
        red = None  # buffers on another GPU than the communicator's: the mirrors take them
    placement = Placement.DEVICE if red is not None else Placement.HOST_MPI
    if st.agreement.decide(name, CODES[name], placement) != Verdict.DEVICE:
        return host_call()
    with _cuda.errors_as(name, st.rank):
        st.bind_device(name, red.ranges.device if red.ranges.device is not None else exchange._default_device(st))
    if st.team is None:  # no device team on this communicator (agreed at its setup): every rank stages
        return host_call()
    with st.errors(name):
        _cuda.with_device(st.device, _reduce, st, red)
    exchange.count_call()
    return None


def _reduce(st, red):
    r = red.ranges
    scratch = st.owned(_Scratch).at_least(red.scratch_bytes, st.device)
    r.recv = scratch.ptr
    stream = exchange._launch_stream(st, r)
    st.team.exchange(r.send, r.recv, r.send_bytes, r.send_off, r.recv_bytes, r.recv_off, stream, True, None)
    if red.rows and red.count:
        dm = _cuda.device
        dm.reduce_rows(red.dtype, red.op, red.out, scratch.ptr, red.row_bytes, red.rows, red.count, stream)
        dm.stream_sync(stream)
