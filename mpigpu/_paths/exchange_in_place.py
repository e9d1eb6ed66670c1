"""In-place Alltoall and Alltoallv on the exchange transport: each block of the buffer goes to its rank
and the block from that rank lands where it was, so the rounds would overwrite blocks not sent yet. The
buffer's sent span is first copied to device scratch on the call's stream, and the exchange sends from
the copy: one device-to-device copy instead of the host MPI call on mirrors, which the call took before
(two copies over PCIe and host MPI's all-to-all).

`InPlace` takes the forms of the transport's work as `exchange_read.Ranges` does, its scratch held as
support/scratch.OnScratch holds it (as exchange_reduce's Reduction holds its rows')."""
from .. import _cuda
from .support import scratch


class InPlace(scratch.OnScratch):
    """Ranges whose send blocks are the receive blocks of the same buffer (`ranges.send_off` ==
    `ranges.recv_off`, no shapes): sent from a copy of the buffer's first `span` bytes."""
    __slots__ = ('ranges', 'span')

    def __init__(self, ranges, span):
        super().__init__()
        self.ranges, self.span = ranges, span

    @property
    def send_bytes(self):
        return self.ranges.send_bytes

    @property
    def recv_bytes(self):
        return self.ranges.recv_bytes

    def scratch_bytes(self):
        return self.span

    def _from(self, mem, stream):
        """The copy of the buffer into `mem` queued on `stream`, and the ranges sending from it."""
        _cuda.copy(mem.ptr, self.ranges.recv, self.span, stream)
        self.ranges.send = mem.ptr
        return self.ranges

    def run_on(self, mem, team, stream):
        self._from(mem, stream).run(team, stream)

    def request_on(self, mem, team, stream, addr, watch):
        return self._from(mem, stream).request(team, stream, addr, watch)
