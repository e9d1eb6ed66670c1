"""Network phases of the hierarchical path: host MPI between nodes, on the rail and leaders'
communicators, for buffers in host memory (pinned chunks staged from the GPU) or, for the copying
phases, device memory when MPI is CUDA-aware.

Reductions across nodes are mpigpu's own, the same for every element type: the rail's reduce-scatter
is an Alltoallv of raw bytes, each rank reduces the pieces it received in node order (node 0's
first) on the host, accumulating 16-bit floats in float32 as the staged path's host_reduce does, and an
Allgatherv of raw bytes completes an all-reduce. Every element is reduced once, by one rank, in one
fixed order, so the result is bitwise the same on every rank and from run to run, for every type and
op of the contract (float16 and bfloat16 too, which host MPI cannot reduce). Small messages take the
one-step form (Allgather, then every rank reduces everything in the same order): the same bits.
"""
import numpy as np
from mpi4py import MPI

from .._codes import Coll
from .._types import numpy_dtype
from .staged import host_reduce

# A reduction whose pieces from all nodes together are at most this many bytes is gathered whole
# (one collective, log2(nodes) latency terms) instead of reduce-scattered (two).
SMALL_BYTES = 64 * 1024
_TAG = 17  # rail point-to-point of the Reduce_scatter_block and rooted hop of the leader forms


def pieces(count, n):
    """Element bounds of count split into n balanced pieces: [(start, size)] * n."""
    return [(count * j // n, count * (j + 1) // n - count * j // n) for j in range(n)]


def device_buffer(ptr, nbytes):
    """Device memory as a buffer MPI takes (only for a CUDA-aware MPI)."""
    return MPI.memory.fromaddress(ptr, nbytes)


class Net:
    """The host side of one communicator's network phases: reductions in node order, host scratch."""

    def __init__(self):
        self._scratch = {}

    def scratch(self, key, nbytes):
        """A host scratch array of at least nbytes (grown, never shrunk)."""
        a = self._scratch.get(key)
        if a is None or a.nbytes < nbytes:
            a = self._scratch[key] = np.empty(max(nbytes, 64), np.uint8)
        return a

    # ---- reductions -------------------------------------------------------------------------------
    def _reduce_rows(self, c, rows, out):
        """out (uint8) = rows (list of uint8 arrays, node order) reduced with c's op, in that order."""
        npt = numpy_dtype(c.dtype)
        typed = [r.view(npt) for r in rows]
        out.view(npt)[:] = host_reduce(typed, c.dtype, c.op_code)

    def allreduce(self, comm, c, src, dst, count):
        """dst = the reduction of every rank's src (uint8 views of count elements; may be the same)."""
        n, its = comm.Get_size(), c.itemsize
        nb = count * its
        if n == 1:
            if dst is not src:
                dst[:nb] = src[:nb]
            return
        if nb * n <= SMALL_BYTES:
            rows = self.scratch('rows', nb * n)
            comm.Allgather([src, nb, MPI.BYTE], [rows, nb, MPI.BYTE])
            self._reduce_rows(c, [rows[k * nb:(k + 1) * nb] for k in range(n)], dst[:nb])
            return
        parts = pieces(count, n)
        me = comm.Get_rank()
        mine = self._reduce_scatter(comm, c, src, parts)
        counts = [s * its for _b, s in parts]
        displs = [b * its for b, _s in parts]
        dst[displs[me]:displs[me] + counts[me]] = mine
        comm.Allgatherv(MPI.IN_PLACE, [dst, (counts, displs), MPI.BYTE])

    def _reduce_scatter(self, comm, c, src, parts):
        """This rank's piece of the reduction of every rank's src split as `parts`; a host array."""
        n, its, me = comm.Get_size(), c.itemsize, comm.Get_rank()
        counts = [s * its for _b, s in parts]
        displs = [b * its for b, _s in parts]
        piece = counts[me]
        rows = self.scratch('rows', piece * n)
        comm.Alltoallv([src, (counts, displs), MPI.BYTE],
                       [rows, ([piece] * n, [k * piece for k in range(n)]), MPI.BYTE])
        out = self.scratch('piece', piece)[:piece]
        self._reduce_rows(c, [rows[k * piece:(k + 1) * piece] for k in range(n)], out)
        return out

    def reduce(self, comm, c, src, dst, count, root):
        """dst at rank `root` = the reduction of every rank's src (count elements)."""
        n, its, me = comm.Get_size(), c.itemsize, comm.Get_rank()
        nb = count * its
        if n == 1:
            if dst is not src:
                dst[:nb] = src[:nb]
            return
        if nb * n <= SMALL_BYTES:
            rows = self.scratch('rows', nb * n)
            comm.Gather([src, nb, MPI.BYTE], [rows, nb, MPI.BYTE] if me == root else None, root)
            if me == root:
                self._reduce_rows(c, [rows[k * nb:(k + 1) * nb] for k in range(n)], dst[:nb])
            return
        parts = pieces(count, n)
        mine = self._reduce_scatter(comm, c, src, parts)
        counts = [s * its for _b, s in parts]
        displs = [b * its for b, _s in parts]
        comm.Gatherv([mine, counts[me], MPI.BYTE], [dst, (counts, displs), MPI.BYTE] if me == root else None,
                     root)

    def reduce_regions(self, comm, c, src, counts):
        """This rank's region of the reduction of every rank's src, split into regions of counts[k]
        elements (region k for rank k): a host array (Reduce_scatter over uneven blocks)."""
        starts = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(int)
        return self._reduce_scatter(comm, c, src, list(zip((int(s) for s in starts), counts)))

    def reduce_rows(self, c, rows, out):
        """out = rows reduced in the order given (rows: uint8 arrays of the same size)."""
        self._reduce_rows(c, rows, out)

    # ---- copies -------------------------------------------------------------------------------------
    @staticmethod
    def bcast(comm, buf, nbytes, root):
        """buf (host array or device buffer) of rank `root` to every rank."""
        if comm.Get_size() > 1 and nbytes:
            comm.Bcast([buf, nbytes, MPI.BYTE], root)

    @staticmethod
    def allgatherv(comm, buf, counts, displs):
        """In place: rank k's bytes at displs[k] (counts[k] bytes) to every rank's buf."""
        if comm.Get_size() > 1:
            comm.Allgatherv(MPI.IN_PLACE, [buf, (counts, displs), MPI.BYTE])


# Which collectives reduce (their network phases go through host memory even with a CUDA-aware MPI:
# the reduction runs on the host).
REDUCING = (Coll.ALLREDUCE, Coll.REDUCE_SCATTER_BLOCK, Coll.REDUCE)
