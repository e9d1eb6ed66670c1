"""Host MPI collectives of the staged path that give up (mpigpu/_base/deadline.py): a peer that never
arrives, or an abort, ends the call in an error and breaks the communicator instead of a wait without
end. `Bounded(st, call)` has the blocking collectives the staged path uses, each run as its
non-blocking form and waited for with the deadline."""
from ..._base import deadline as _deadline
from ...errors import CommunicatorBroken


class Bounded:
    """The blocking collectives of communicator state `st`'s communicator, bounded (see the module)."""

    def __init__(self, st, call):
        self.st, self.call = st, call

    def _wait(self, req, *buffers):
        try:
            _deadline.wait(req, lambda: self.st.broken, buffers)
        except _deadline.GaveUp as exc:
            self.st.abandon(exc.pending, exc.why)
            raise CommunicatorBroken(self.call, exc.why, rank=self.st.rank) from None

    def Allreduce(self, sendbuf, recvbuf, op):
        self._wait(self.st.comm.Iallreduce(sendbuf, recvbuf, op), sendbuf, recvbuf)

    def Reduce(self, sendbuf, recvbuf, op, root):
        self._wait(self.st.comm.Ireduce(sendbuf, recvbuf, op, root), sendbuf, recvbuf)

    def Bcast(self, buf, root):
        self._wait(self.st.comm.Ibcast(buf, root), buf)

    def Allgather(self, sendbuf, recvbuf):
        self._wait(self.st.comm.Iallgather(sendbuf, recvbuf), sendbuf, recvbuf)

    def Reduce_scatter_block(self, sendbuf, recvbuf, op):
        self._wait(self.st.comm.Ireduce_scatter_block(sendbuf, recvbuf, op), sendbuf, recvbuf)

    def Alltoall(self, sendbuf, recvbuf):
        self._wait(self.st.comm.Ialltoall(sendbuf, recvbuf), sendbuf, recvbuf)

    def Gather(self, sendbuf, recvbuf, root):
        self._wait(self.st.comm.Igather(sendbuf, recvbuf, root), sendbuf, recvbuf)

    def Get_size(self):
        return self.st.size
