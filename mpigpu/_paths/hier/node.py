"""Node phases of the hierarchical path: one node's part of a collective, run by the node's device team
(its kernels over NVLink, enqueued on a stream without waiting), staged through host MPI on the node
communicator where the node has no team (GPUs without peer access, the CPU tests' fake CUDA layer), or
plain copies on a node of one rank.

Every rank of a node issues the same phases in the same order (the team's kernels meet on the GPU by
that order). Pointers are device pointers into the user's buffers or the path's scratch; counts are
elements of the call's type, laid out as the engine's collectives define them (an in-place
Reduce_scatter_block reads `send == recv` and leaves its block first; an in-place Allgather's send
pointer is this rank's block inside recv).
"""
from ... import _cuda
from ..._describe.call import Call
from ..._base.codes import SIZES, Algo, Coll
from .. import staged


class NodePhases:
    """The node's phases for one communicator: `kind` says which of the three forms runs them."""

    def __init__(self, node_state):
        self.st = node_state
        self.team = node_state.team
        self.size, self.rank = node_state.size, node_state.rank
        if self.size == 1:
            self.kind = 'single'
        elif self.team is not None:
            self.kind = 'engine'
        else:
            self.kind = 'staged'

    def describe(self):
        if self.kind == 'engine':
            return 'device engine'
        if self.kind == 'single':
            return 'one rank'
        return f'staged ({self.st.reason})'

    # ---- the four phases ----------------------------------------------------------------------------
    def reduce_scatter(self, c, send, recv, count, stream):
        """Block `rank` of the node's sum of send[0 : size * count] into recv[0 : count]."""
        if self.kind == 'single':
            self._copy(recv, send, count * c.itemsize, stream)
        else:
            self._run(c, Coll.REDUCE_SCATTER_BLOCK, send, recv, count, 0, stream)

    def allgather(self, c, send, recv, count, stream):
        """recv[k * count ...] = rank k's send[0 : count] (send may be this rank's block of recv)."""
        if self.kind == 'single':
            self._copy(recv, send, count * c.itemsize, stream)
        else:
            self._run(c, Coll.ALLGATHER, send, recv, count, 0, stream)

    def reduce(self, c, send, recv, count, root, stream):
        """The node's reduction of send[0 : count] into the root's recv (send == recv: in place there)."""
        if self.kind == 'single':
            self._copy(recv, send, count * c.itemsize, stream)
        else:
            self._run(c, Coll.REDUCE, send, recv if self.rank == root else 0, count, root, stream)

    def bcast(self, c, buf, count, root, stream):
        """The root's buf[0 : count] to every rank of the node."""
        if self.kind != 'single':
            self._run(c, Coll.BCAST, buf, buf, count, root, stream)

    # ---- how they run --------------------------------------------------------------------------------
    @staticmethod
    def _copy(dst, src, nbytes, stream):
        if dst != src and nbytes:
            _cuda.copy(dst, src, nbytes, stream)

    def _run(self, c, coll, send, recv, count, root, stream):
        if not count:
            return
        reduces = coll in (Coll.REDUCE_SCATTER_BLOCK, Coll.REDUCE)
        op = c.op_code if reduces else 0
        if self.kind == 'engine' and (not reduces or _cuda.supports(c.dtype, op)):
            self.team.run(coll, self._algo(coll, c.dtype, count), c.dtype, op, send, recv, count, root, 0,
                          stream, False)
        else:
            staged.run(self.st, self._call(c, coll, send, recv, count, root), stream)

    def _algo(self, coll, dtype, count):
        """The engine's choice, except its chain for Reduce: every other form reduces in rank order, as
        the node reduce-scatter of the rail forms does, so all forms of the hierarchical path give the
        same bits (the choice between them may follow the measured network)."""
        if coll == Coll.REDUCE and self.team.select(coll, dtype, count)[0] == Algo.RING:
            return Algo.TWOSHOT
        return Algo.AUTO

    @staticmethod
    def _call(c, coll, send, recv, count, root):
        """A Call for the staged path: the node's part of parent call `c`."""
        n = Call()
        n.name, n.coll, n.dtype, n.mpi_type, n.itemsize = c.name, coll, c.dtype, None, SIZES[c.dtype]
        n.op, n.op_code = c.op, c.op_code
        n.root, n.count, n.send_ptr, n.recv_ptr = root, count, send, recv
        n.inplace, n.device, n.mirror, n.send, n.recv = send == recv, c.device, None, None, None
        return n

    def close(self, collective):
        """Releases the node's team (`collective`: every rank of the node is releasing too, so its
        release first waits for them)."""
        self.st.release(collective)
