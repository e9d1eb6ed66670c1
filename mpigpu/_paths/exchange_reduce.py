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
Reduce_scatter's counts given (without them mpi4py gathers them through host MPI); blocking, I* and
*_init forms, on the exchange path's forms (exchange.run_work, start_work, persistent_work): the
reduction is enqueued after the exchange kernel (the call's `then`), before its wait returns or its
request completes. Everything else, and a call some rank cannot describe, is the host MPI call on
mirrors, as every rank agrees (the placement board, as for the exchange path). The rows live in
device scratch (mpigpu/_paths/support/scratch.py's pool): a blocking call's for the call, a non-blocking call's
until its request is gone, a persistent request's for its life.
"""
from mpi4py import MPI

from .. import _cuda
from .._base.codes import Coll
from .._base.types import check_op, op_code
from . import exchange
from .support import scratch
from .exchange_read import BufferArg, Ranges, Unread, count_of, one_device

CODES = {'Reduce_scatter': Coll.REDUCE_SCATTER, 'Scan': Coll.SCAN, 'Exscan': Coll.EXSCAN}


class Reduction(scratch.OnScratch):
    """One rank's reduction: the exchange of its rows (`ranges`, whose receive side is the scratch),
    then `rows` rows of `row_bytes` reduced into `out` (`count` elements of element type `dtype` under
    op `op`). It runs on the transport as Ranges do (run, request, bind), with its scratch."""
    __slots__ = ('ranges', 'out', 'rows', 'row_bytes', 'count', 'dtype', 'op')

    def __init__(self, ranges, out, rows, row_bytes, count, dtype, op):
        super().__init__()
        self.ranges, self.out, self.rows, self.row_bytes = ranges, out, rows, row_bytes
        self.count, self.dtype, self.op = count, dtype, op

    def scratch_bytes(self):
        return max(o + b for o, b in zip(self.ranges.recv_off, self.ranges.recv_bytes))

    def _then(self, mem):
        """The ranges into `mem`, and the reduction out of it (the team's `then`)."""
        self.ranges.recv = mem.ptr
        return (self.dtype, self.op, self.out, mem.ptr, self.row_bytes, self.rows, self.count)

    def run_on(self, mem, team, stream):
        self.ranges.run(team, stream, self._then(mem))

    def request_on(self, mem, team, stream, addr, watch):
        return self.ranges.request(team, stream, addr, watch, self._then(mem))


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
    if code < 0 or not _cuda.supports(dtype, code):
        raise Unread
    check_op(name, dtype, op, rank)  # a pair MPI forbids: the host MPI call raises MPI's error
    r = Ranges(n, CODES[name])
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


def run(st, name, args, host_call):
    """Runs blocking call `name` on device buffers (exchange.run_work)."""
    return exchange.run_work(st, name, CODES[name], lambda: _reduction_for(st, name, args), host_call)


def on_stream(st, name, args, stream, host_call):
    """The stream= form of blocking call `name` (exchange.run_work with its stream; it completes before
    returning: Reduction.enqueue)."""
    return exchange.run_work(st, name, CODES[name], lambda: _reduction_for(st, name, args), host_call, stream)


def start(st, name, blocking, args, host_start):
    """The non-blocking form `name` (Ireduce_scatter, Iscan, Iexscan) of `blocking` (exchange.start_work)."""
    return exchange.start_work(st, name, CODES[blocking], lambda: _reduction_for(st, blocking, args), host_start)


def persistent(st, name, blocking, args, host_init):
    """The persistent form `name` (Reduce_scatter_init, Scan_init, Exscan_init) of `blocking`
    (exchange.persistent_work)."""
    return exchange.persistent_work(st, name, CODES[blocking], lambda: _reduction_for(st, blocking, args),
                                    host_init)


def _reduction_for(st, name, args):
    """The Reduction of this rank's call, or None where it votes for the host MPI call (describe declined
    it, buffers on another GPU than the communicator's)."""
    red = describe(name, st.rank, st.size, args)
    if red is not None and st.device is not None and red.device not in (None, st.device):
        return None
    return red
