"""Network phases of the hierarchical path on a transport that moves device memory (NCCL: mpigpu/_transports):
the same phases as net.py, on device pointers, every step enqueued on a CUDA stream, no host copy and no
host wait.

The transport moves bytes only; reductions are mpigpu's own, as on host MPI: the rail's reduce-scatter
sends each rank's piece to its owner, the owner reduces the rows it holds in node order (node 0's
first) with the kernel of cuda/reduce_rows.cu on device memory, and an all-gather completes an
all-reduce. Every element is reduced once, by one rank, in one order, so results are bitwise the same
on every rank and equal to the host-MPI transport's for every type and op (16-bit floats accumulate in
float32). Small messages take the one-step form: every rank gathers every row and reduces them all.

Scratch (`rows`): device memory reserved by the caller's thread before the call (HierState.reserve with
`bytes_for`), reused by every phase of a call: the phases run in order on one stream.
"""
import time

from ... import _cuda
from .net import SMALL_BYTES, byte_pieces


def bytes_for(count, n, itemsize):
    """The scratch a reduction of count elements over n ranks takes (rows, and a piece off the root)."""
    return max(SMALL_BYTES, (n + 1) * (count // n + 1) * itemsize)


class DeviceNet:
    """The network phases over transport `library` (mpigpu/_transports/nccl.py's interface); `rows()`
    hands out the reserved device scratch."""

    def __init__(self, library, rows):
        self.library, self.rows = library, rows

    def _exchange(self, t, sends, recvs, stream):
        """[(ptr, bytes, peer)] sent and received on transport communicator t, as one group."""
        with self.library.group(t):
            for ptr, nb, peer in sends:
                t.send(ptr, nb, peer, stream)
            for ptr, nb, peer in recvs:
                t.recv(ptr, nb, peer, stream)

    @staticmethod
    def _copy(dst, src, nb, stream):
        if nb and dst != src:
            _cuda.copy(dst, src, nb, stream)

    @staticmethod
    def _reduce(c, out, rows, row_bytes, nrows, stream):
        if row_bytes:
            _cuda.reduce_rows(c.dtype, c.op_code, out, rows, row_bytes, nrows, row_bytes // c.itemsize,
                                     stream)

    def _reduce_scatter(self, t, c, src, counts, displs, out, stream):
        """out = this rank's piece (counts[me] bytes at displs[me]) of the reduction of every rank's src."""
        n, me = t.size, t.rank
        piece = counts[me]
        rows = self.rows((n + 1) * piece)
        others = [p for p in range(n) if p != me]
        self._exchange(t, [(src + displs[p], counts[p], p) for p in others],
                       [(rows + p * piece, piece, p) for p in others], stream)
        self._copy(rows + me * piece, src + displs[me], piece, stream)
        self._reduce(c, out, rows, piece, n, stream)

    def _gather_rows(self, t, c, src, dst, nb, root, stream):
        """The one-step form of small messages: every rank's src (nb bytes) to every rank (an all-gather:
        NCCL's collectives have low-latency protocols its sends and receives lack, and these rows are
        small), and `root` (None: every rank) reduces all the rows into dst in rank order."""
        rows = self.rows(t.size * nb)
        t.allgather(src, rows, nb, stream)
        if root is None or t.rank == root:
            self._reduce(c, dst, rows, nb, t.size, stream)

    def allreduce(self, t, c, src, dst, count, stream):
        """dst = the reduction of every rank's src (count elements; src may be dst)."""
        self._reduction(t, c, src, dst, count, None, stream)

    def reduce(self, t, c, src, dst, count, root, stream):
        """dst at rank `root` = the reduction of every rank's src (count elements); dst unused elsewhere."""
        self._reduction(t, c, src, dst, count, root, stream)

    def _reduction(self, t, c, src, dst, count, root, stream):
        """A reduction to `root`, or to every rank (root None): the pieces reduce-scattered, then
        all-gathered (or gathered to the root)."""
        n, me, its = t.size, t.rank, c.itemsize
        nb = count * its
        if n == 1 or not nb:
            self._copy(dst, src, nb, stream)
            return
        if nb * n <= SMALL_BYTES:
            self._gather_rows(t, c, src, dst, nb, root, stream)
            return
        others = [p for p in range(n) if p != me]
        counts, displs = byte_pieces(count, n, its)
        piece = counts[me]
        mine = dst + displs[me] if root is None or me == root else self.rows((n + 1) * piece) + n * piece
        self._reduce_scatter(t, c, src, counts, displs, mine, stream)
        sends = [(mine, piece, p) for p in others] if root is None else [(mine, piece, root)] if me != root else []
        recvs = [(dst + displs[p], counts[p], p) for p in others] if root is None or me == root else []
        self._exchange(t, sends, recvs, stream)

    def reduce_regions(self, t, c, src, counts, stream):
        """This rank's region of the reduction of every rank's src split into regions of counts[k]
        elements (region k for rank k), left in scratch: its device pointer (Reduce_scatter's blocks)."""
        its, me, n = c.itemsize, t.rank, t.size
        starts = [sum(counts[:k]) for k in range(len(counts))]
        nbs, displs = [k * its for k in counts], [s * its for s in starts]
        piece = nbs[me]
        out = self.rows((n + 1) * piece) + n * piece
        self._reduce_scatter(t, c, src, nbs, displs, out, stream)
        return out

    @staticmethod
    def round_trips(t, peer, nbytes, rounds, first, stream):
        """The shortest of `rounds` round trips of nbytes of device memory with `peer` over t (seconds;
        `first` sends first): the network's figures for the cost model, measured at setup."""
        buf = _cuda.device_memory(max(nbytes, 1))
        best = float('inf')
        for _ in range(rounds + 1):  # the first round only warms the connection
            t0 = time.perf_counter()
            for op in ((t.send, t.recv) if first else (t.recv, t.send)):
                op(buf.ptr, nbytes, peer, stream)
            _cuda.sync(stream)
            best = min(best, time.perf_counter() - t0)
        return best

    def exchanges(self, t, peer, nbytes, rounds, stream):
        """The shortest of `rounds` exchanges of nbytes of device memory each way with `peer` over t, both
        sending at once (seconds): the network's two-way figure for the cost model, measured at setup."""
        out, into = _cuda.device_memory(max(nbytes, 1)), _cuda.device_memory(max(nbytes, 1))
        best = float('inf')
        for _ in range(rounds + 1):  # the first round only warms the connection
            t0 = time.perf_counter()
            self._exchange(t, [(out.ptr, nbytes, peer)], [(into.ptr, nbytes, peer)], stream)
            _cuda.sync(stream)
            best = min(best, time.perf_counter() - t0)
        return best

    # ---- copies -------------------------------------------------------------------------------------
    @staticmethod
    def bcast(t, ptr, nbytes, root, stream):
        """ptr's nbytes of rank `root` to every rank."""
        if t.size > 1 and nbytes:
            t.bcast(ptr, nbytes, root, stream)

    def allgatherv(self, t, ptr, counts, displs, stream):
        """In place: rank k's bytes at ptr + displs[k] (counts[k] bytes) to every rank."""
        me = t.rank
        if all(nb == counts[0] and d == k * counts[0] for k, (nb, d) in enumerate(zip(counts, displs))):
            t.allgather(ptr + displs[me], ptr, counts[0], stream)  # blocks in rank order: one collective
            return
        others = [p for p in range(t.size) if p != me]
        self._exchange(t, [(ptr + displs[me], counts[me], p) for p in others],
                       [(ptr + displs[p], counts[p], p) for p in others], stream)
