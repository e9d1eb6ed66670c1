"""Network phases of the hierarchical path: host MPI between nodes, on the rail and leaders'
communicators, for buffers in host memory (pinned chunks staged from the GPU) or, for the copying
phases, device memory when MPI is CUDA-aware.

Reductions across nodes are mpigpu's own, the same for every element type: the rail's reduce-scatter
is an Alltoallv of raw bytes into pinned memory, each rank reduces the pieces it received in node
order (node 0's first), accumulating 16-bit floats in float32, and an Allgatherv of raw bytes
completes an all-reduce. The reduction runs on the GPU for calls of at least GPU_REDUCE_BYTES (a kernel
reads the rows from pinned memory and writes the result there: no copy, cuda/reduce_rows.cu), on the
host below (NumPy, the staged path's host_reduce: no launch). Every element is reduced once, by one
rank, in one fixed order, so the result is bitwise the same on every rank and from run to run, for
every type and op of the contract (float16 and bfloat16 too, which host MPI cannot reduce). Small
messages take the one-step form (Allgather, then every rank reduces everything in the same order):
the same bits.
"""
from mpi4py import MPI

from ... import _cuda
from ..._base.codes import Coll
from ..._base.types import numpy_dtype
from ..staged import host_reduce

# A reduction whose pieces from all nodes together are at most this many bytes is gathered whole
# (one collective, log2(nodes) latency terms) instead of reduce-scattered (two).
SMALL_BYTES = 64 * 1024
# Calls of at least this many bytes reduce what arrives on the GPU; smaller ones on the host. Both give
# the same bits for every pair but complex PROD (whose products the GPU may fuse), so the choice is
# made per call, by its size, the same in every form.
GPU_REDUCE_BYTES = 1 << 20


def pieces(count, n):
    """Element bounds of count split into n balanced pieces: [(start, size)] * n."""
    return [(count * j // n, count * (j + 1) // n - count * j // n) for j in range(n)]


def byte_pieces(count, n, itemsize):
    """The pieces of `pieces(count, n)` in bytes: (sizes, starts), as MPI's counts and displacements."""
    parts = pieces(count, n)
    return [s * itemsize for _b, s in parts], [b * itemsize for b, _s in parts]


def device_buffer(ptr, nbytes):
    """Device memory as a buffer MPI takes (only for a CUDA-aware MPI)."""
    return MPI.memory.fromaddress(ptr, nbytes)


class Net:
    """The host side of one communicator's network phases: reductions in node order on the GPU
    (`stream`) or the host, in pinned scratch (`pinned(key, nbytes)` -> (buffer, uint8 array))."""

    def __init__(self, pinned, stream):
        self.pinned, self.stream = pinned, stream
        self.gpu = False  # this call reduces on the GPU (set per call: reduce_on_gpu)

    def scratch(self, key, nbytes):
        """Reserved pinned scratch `key` of at least nbytes, as a uint8 array (calls.needs reserves them)."""
        return self.pinned('net-' + key, nbytes)[1]

    def reduce_on_gpu(self, c):
        """Chooses where this call reduces (its size alone decides)."""
        self.gpu = c.count * c.itemsize >= GPU_REDUCE_BYTES

    # ---- reductions -------------------------------------------------------------------------------
    def reduce_rows(self, c, rows, nrows, out):
        """out (uint8) = the nrows rows laid one after another in `rows` (pinned, uint8) reduced with c's
        op in row order."""
        nb = out.nbytes
        if not nb:
            return
        if self.gpu:
            _cuda.reduce_rows(c.dtype, c.op_code, out.ctypes.data, rows.ctypes.data, nb, nrows, nb // c.itemsize,
                           self.stream)
            _cuda.sync(self.stream)
            return
        npt = numpy_dtype(c.dtype)
        out.view(npt)[:] = host_reduce([rows[k * nb:(k + 1) * nb].view(npt) for k in range(nrows)], c.dtype,
                                       c.op_code)

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
            self.reduce_rows(c, rows, n, dst[:nb])
            return
        counts, displs = byte_pieces(count, n, its)
        me = comm.Get_rank()
        mine = self._reduce_scatter(comm, c, src, counts, displs)
        dst[displs[me]:displs[me] + counts[me]] = mine
        comm.Allgatherv(MPI.IN_PLACE, [dst, (counts, displs), MPI.BYTE])

    def _reduce_scatter(self, comm, c, src, counts, displs):
        """This rank's piece of the reduction of every rank's src split in bytes as (counts, displs); a
        host array."""
        n, me = comm.Get_size(), comm.Get_rank()
        piece = counts[me]
        rows = self.scratch('rows', piece * n)
        comm.Alltoallv([src, (counts, displs), MPI.BYTE],
                       [rows, ([piece] * n, [k * piece for k in range(n)]), MPI.BYTE])
        out = self.scratch('piece', piece)[:piece]
        self.reduce_rows(c, rows, n, out)
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
                self.reduce_rows(c, rows, n, dst[:nb])
            return
        counts, displs = byte_pieces(count, n, its)
        mine = self._reduce_scatter(comm, c, src, counts, displs)
        comm.Gatherv([mine, counts[me], MPI.BYTE], [dst, (counts, displs), MPI.BYTE] if me == root else None,
                     root)

    def reduce_regions(self, comm, c, src, counts):
        """This rank's region of the reduction of every rank's src, split into regions of counts[k]
        elements (region k for rank k): a host array (Reduce_scatter over uneven blocks)."""
        its = c.itemsize
        starts = [sum(counts[:k]) for k in range(len(counts))]
        return self._reduce_scatter(comm, c, src, [k * its for k in counts], [s * its for s in starts])

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
