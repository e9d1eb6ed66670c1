"""In-place Alltoall and Alltoallv on the exchange transport: each block of the buffer goes to its rank
and the block from that rank lands where it was, so the rounds would overwrite blocks not sent yet. The
buffer's sent span is first copied to device scratch on the call's stream, and the exchange sends from
the copy: one device-to-device copy instead of the host MPI call on mirrors, which the call took before
(two copies over PCIe and host MPI's all-to-all).

`InPlace` takes the forms of the transport's work as `exchange_read.Ranges` does (run, enqueue, request,
bind; keep for a persistent request's rounds), its scratch from the pool as exchange_reduce's
Reduction takes its rows'."""
import weakref

from .. import _cuda
from .support import scratch


class InPlace:
    """Ranges whose send blocks are the receive blocks of the same buffer (`ranges.send_off` ==
    `ranges.recv_off`, no shapes): sent from a copy of the buffer's first `span` bytes."""
    __slots__ = ('ranges', 'span', 'bufs', 'device', 'kept', 'taken', 'streams', '__weakref__')

    def __init__(self, ranges, span):
        self.ranges, self.span = ranges, span
        self.bufs, self.device = ranges.bufs, ranges.device
        self.kept = self.taken = None
        self.streams = []

    @property
    def send_bytes(self):
        return self.ranges.send_bytes

    @property
    def recv_bytes(self):
        return self.ranges.recv_bytes

    def _from(self, mem, stream):
        """The copy of the buffer into `mem` queued on `stream`, and the ranges sending from it."""
        _cuda.copy(mem.ptr, self.ranges.recv, self.span, stream)
        self.ranges.send = mem.ptr
        return self.ranges

    def run(self, team, stream):
        mem = self.kept if self.kept is not None else scratch.take(self.span, team.device)
        try:
            self._from(mem, stream).run(team, stream)
        finally:
            if mem is not self.kept:
                scratch.give(mem, team.device)  # the blocking exchange has read it

    def enqueue(self, team, stream):
        """The stream= form: waited for before the call returns, so its scratch goes back to the pool
        only once the stream has run the exchange (as exchange_reduce's Reduction)."""
        self.run(team, stream)

    def request(self, team, stream, addr, watch):
        mem = self.kept
        if mem is not None and stream not in self.streams:
            self.streams.append(stream)
        if mem is None:
            mem = scratch.take(self.span, team.device)
            self.taken = (mem, team.device)
        try:
            return self._from(mem, stream).request(team, stream, addr, watch)
        except BaseException:
            if self.taken is not None:  # no request holds it: back once whatever was enqueued is done
                scratch.give_after(mem, team.device, stream)
                self.taken = None
            raise

    def bind(self, req, stream):
        """Keeps the buffer alive as long as request `req`, and returns the scratch it took once the
        request is gone (after its stream's work)."""
        self.ranges.bind(req, stream)
        if self.taken is not None:
            mem, device = self.taken
            self.taken = None
            weakref.finalize(req, scratch.give_after, mem, device, stream)

    def keep(self, device):
        """Takes the scratch of a persistent request's rounds, given back once the request is gone."""
        self.kept = scratch.take(self.span, device)
        weakref.finalize(self, scratch.give_after, self.kept, device, self.streams)
