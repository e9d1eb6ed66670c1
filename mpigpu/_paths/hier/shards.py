"""The chunks of a rail form and their node phases, shared by the forms over host MPI (calls.py) and
over a transport of device memory (device_forms.py). Chunk k of the message (elements parts[k]) is L
shards of `size` elements each, shard l this rank's (`mine`); the chunks lie in the user's receive
buffer or, off a Reduce's root, in SLOTS slots of device scratch.
"""
from .state import SLOTS


class Shards:
    """One call's rail chunks on this rank. `inplace`: the node reduce-scatter reads the chunk itself
    and leaves the shard first; `scratch` (with `big`, the largest shard): the slots the chunks lie in
    instead of the receive buffer."""

    def __init__(self, hs, c, parts, inplace, scratch=0, big=0):
        self.node, self.c, self.parts, self.inplace = hs.node, c, parts, inplace
        self.L, self.l, self.its = hs.topo.nlocal, hs.topo.local, c.itemsize
        self.scratch, self.big = scratch, big

    def chunk(self, k):
        """(where chunk k lies, where this rank's shard of it lies, shard elements)."""
        s, size = self.parts[k]
        L, its = self.L, self.its
        base = self.scratch + (k % SLOTS) * self.big * L * its if self.scratch else self.c.recv_ptr + s * L * its
        return base, base + self.l * size * its, size

    def reduced(self, k):
        """Where this rank's shard of chunk k lies after reduce_in (in place: the chunk's start)."""
        base, mine, _size = self.chunk(k)
        return base if self.inplace else mine

    def reduce_in(self, k, ns):
        """The node reduce-scatter of chunk k: shard l of the node's sum to rank l."""
        base, mine, size = self.chunk(k)
        if self.inplace:
            self.node.reduce_scatter(self.c, base, base, size, ns)
        else:
            self.node.reduce_scatter(self.c, self.c.send_ptr + self.parts[k][0] * self.L * self.its, mine, size, ns)

    def bcast_in(self, k, ns, root_local):
        """The root's node: the whole chunk to every GPU of it (they need it anyway)."""
        base, _mine, size = self.chunk(k)
        self.node.bcast(self.c, base, size * self.L, root_local, ns)

    def gather_out(self, k, ns):
        """The node all-gather of the shards of chunk k into the chunk."""
        base, mine, size = self.chunk(k)
        self.node.allgather(self.c, mine, base, size, ns)
