"""The hierarchical path's forms where the network's transport moves device memory (NCCL,
net_device.py): the compositions of calls.py, 'rail' and 'leader', with every phase enqueued on the
path's streams (node phases on the node stream, network phases on the network stream, chunk k + 1's
node phase while chunk k crosses the network: state.device_pipeline) and no copy through the host.

The elements, the node phases and the order of every reduction are those of calls.py's forms, so a
result has the same bits whichever transport carried it. Where the host-MPI forms hand a result from
one rank of a node to another with host MPI, these use a node phase (a broadcast from the leader).
"""
from mpi4py import MPI

from ... import _cuda
from ..._base.codes import Coll
from ...errors import Error
from ..._transports.nccl import NcclError
from .net_device import bytes_for
from .shards import Shards
from .state import SLOTS, device_pipeline, largest, split


def needs(hs, c, form, nchunks):
    """The device scratch (bytes by key, HierState.reserve) Call `c` in `form` takes on these forms."""
    topo, its, rank = hs.topo, c.itemsize, hs.st.rank
    L, N = topo.nlocal, topo.nnodes
    home = topo.node == topo.node_of[c.root]
    out = {}

    def at_least(key, nb):
        if nb > out.get(key, 0):
            out[key] = nb
    if c.coll in (Coll.ALLREDUCE, Coll.REDUCE):
        body = c.count // L * L if form == 'rail' else 0
        if body:
            big = largest(split(body // L, nchunks))
            at_least('net-device', bytes_for(big, N, its))
            if c.coll == Coll.REDUCE and rank != c.root:
                at_least('scratch', SLOTS * big * L * its)
        if body < c.count:
            big = largest(split(c.count - body, nchunks if not body else 1))
            at_least('net-device', bytes_for(big, N, its))
            if c.coll == Coll.REDUCE and rank != c.root and (topo.local == 0 or home):
                at_least('scratch', _tail_offset(hs, c, body, nchunks) + SLOTS * big * its)
    elif c.coll == Coll.REDUCE_SCATTER_BLOCK:
        bb = c.count * its
        if form == 'rail':
            at_least('scratch', N * bb)
            at_least('net-device', (N + 1) * bb)
        elif topo.local == 0:
            at_least('net-device', (N + 1) * L * bb)
            if not c.inplace:
                at_least('scratch', sum(topo.sizes) * bb)
        else:
            at_least('scratch', L * bb)
    return out


def run(hs, c, form, nchunks):
    """Call `c` in `form` (its node and network phases enqueued, then waited for)."""
    try:
        _FORMS[c.coll](hs, c, form, nchunks)
    except NcclError as exc:
        raise Error(c.name, f'the network transport failed: {exc}', rank=hs.st.rank,
                    error_class=MPI.ERR_OTHER) from None


# ---- Allreduce -------------------------------------------------------------------------------------
def _allreduce(hs, c, form, nchunks):
    L, t = hs.topo.nlocal, hs.transport
    body = c.count // L * L if form == 'rail' else 0
    if body:
        parts = split(body // L, nchunks)
        sh = Shards(hs, c, parts, c.inplace)

        def net(k, s):
            hs.dnet.allreduce(t, c, sh.reduced(k), sh.chunk(k)[1], parts[k][1], s)
        device_pipeline(hs, len(parts), sh.reduce_in, net, sh.gather_out)
    if body < c.count:
        _allreduce_leader(hs, c, body, c.count - body, nchunks if not body else 1)


def _allreduce_leader(hs, c, first, count, nchunks):
    """Elements [first, first + count): node reduce to the leader, leaders' all-reduce, node bcast."""
    its, t = c.itemsize, hs.transport
    leader = hs.topo.local == 0
    src = (c.recv_ptr if c.inplace else c.send_ptr) + first * its
    dst = c.recv_ptr + first * its
    parts = split(count, nchunks)

    def node_in(k, ns):
        s, size = parts[k]
        hs.node.reduce(c, src + s * its, dst + s * its, size, 0, ns)

    def net(k, stream):
        s, size = parts[k]
        hs.dnet.allreduce(t, c, dst + s * its, dst + s * its, size, stream)

    def node_out(k, ns):
        s, size = parts[k]
        hs.node.bcast(c, dst + s * its, size, 0, ns)
    device_pipeline(hs, len(parts), node_in, net if leader else None, node_out)


# ---- Bcast -------------------------------------------------------------------------------------------
def _bcast(hs, c, form, nchunks):
    topo, its, t = hs.topo, c.itemsize, hs.transport
    L = topo.nlocal
    home = topo.node == topo.node_of[c.root]
    root_node, root_local = topo.node_of[c.root], topo.local_of[c.root]
    body = c.count // L * L if form == 'rail' and L > 1 else 0
    if body:
        parts = split(body // L, nchunks)
        sh = Shards(hs, c, parts, False)

        def net(k, s):  # rail l carries shard l of the chunk from the root's node to every other node
            _base, mine, size = sh.chunk(k)
            hs.dnet.bcast(t, mine, size * its, root_node, s)
        if home:
            device_pipeline(hs, len(parts), lambda k, ns: sh.bcast_in(k, ns, root_local), net)
        else:
            device_pipeline(hs, len(parts), None, net, sh.gather_out)
    if body < c.count:
        _bcast_leader(hs, c, body, c.count - body, nchunks if not body else 1)


def _bcast_leader(hs, c, first, count, nchunks):
    """Elements [first, first + count): the root's node bcast, leaders' bcast, node bcast elsewhere."""
    topo, its, t = hs.topo, c.itemsize, hs.transport
    leader = topo.local == 0
    home = topo.node == topo.node_of[c.root]
    root_node, root_local = topo.node_of[c.root], topo.local_of[c.root]
    buf = c.recv_ptr + first * its
    parts = split(count, nchunks)

    def node_in(k, ns):
        s, size = parts[k]
        hs.node.bcast(c, buf + s * its, size, root_local, ns)

    def net(k, stream):
        s, size = parts[k]
        hs.dnet.bcast(t, buf + s * its, size * its, root_node, stream)

    def node_out(k, ns):
        s, size = parts[k]
        hs.node.bcast(c, buf + s * its, size, 0, ns)
    if home:
        device_pipeline(hs, len(parts), node_in, net if leader else None)
    else:
        device_pipeline(hs, len(parts), None, net if leader else None, node_out)


# ---- Reduce ----------------------------------------------------------------------------------------
def _reduce(hs, c, form, nchunks):
    topo, its, rank, t = hs.topo, c.itemsize, hs.st.rank, hs.transport
    L = topo.nlocal
    is_root, home = rank == c.root, topo.node == topo.node_of[c.root]
    root_node = topo.node_of[c.root]
    body = c.count // L * L if form == 'rail' else 0
    if body:
        parts = split(body // L, nchunks)
        big = largest(parts)
        sh = Shards(hs, c, parts, is_root and c.inplace, 0 if is_root else hs.scratch(SLOTS * big * L * its), big)

        def net(k, s):  # rail l reduces shard l to the root's node (into the root's node's chunks)
            hs.dnet.reduce(t, c, sh.reduced(k), sh.chunk(k)[1], parts[k][1], root_node, s)
        device_pipeline(hs, len(parts), sh.reduce_in, net, sh.gather_out if home else None)
    if body < c.count:
        _reduce_leader(hs, c, body, c.count - body, nchunks if not body else 1, _tail_offset(hs, c, body, nchunks))


def _tail_offset(hs, c, body, nchunks):
    """Where the leader form's scratch starts after a Reduce's rail body: past the body's slots, so the
    two share no memory. A stream= call runs both with no host wait between them, ordered by events
    only; while they shared slot 0, such a Reduce whose root is not its node's leader gave wrong values
    on 4 H100s (docs/architecture.md, "The network's transport")."""
    if not body or hs.st.rank == c.root:
        return 0
    return SLOTS * largest(split(body // hs.topo.nlocal, nchunks)) * hs.topo.nlocal * c.itemsize


def _reduce_leader(hs, c, first, count, nchunks, offset=0):
    """Elements [first, first + count): node reduce to the leader, leaders' reduce to the root's node's
    leader, which broadcasts it over the node to the root if that is another rank."""
    topo, its, rank, t = hs.topo, c.itemsize, hs.st.rank, hs.transport
    leader, is_root = topo.local == 0, rank == c.root
    home, root_node, root_local = topo.node == topo.node_of[c.root], topo.node_of[c.root], topo.local_of[c.root]
    hop = home and root_local != 0
    src = (c.recv_ptr if is_root and c.inplace else c.send_ptr) + first * its
    dst = c.recv_ptr + first * its if is_root else 0
    parts = split(count, nchunks)
    big = largest(parts)
    scratch = hs.scratch(offset + SLOTS * big * its) + offset if not is_root and (leader or hop) else 0

    def target(k):
        s, _size = parts[k]
        return dst + s * its if is_root else scratch + (k % SLOTS) * big * its

    def node_in(k, ns):
        hs.node.reduce(c, src + parts[k][0] * its, target(k) if leader else 0, parts[k][1], 0, ns)

    def net(k, s):
        hs.dnet.reduce(t, c, target(k), target(k), parts[k][1], root_node, s)

    def node_out(k, ns):
        hs.node.bcast(c, target(k), parts[k][1], 0, ns)
    device_pipeline(hs, len(parts), node_in, net if leader else None, node_out if hop else None)


# ---- Allgather (node regions are consecutive ranks) -------------------------------------------------
def _allgather(hs, c, form, nchunks):
    topo, its, t = hs.topo, c.itemsize, hs.transport
    n, l, N = topo.node, topo.local, topo.nnodes
    bb = c.count * its
    R, ns = c.recv_ptr, hs.stream
    hs.node.allgather(c, c.send_ptr, R + topo.firsts[n] * bb, c.count, ns)
    if form == 'rail':  # every rank's block over its rail, then a node all-gather of each other region
        displs = [(topo.firsts[m] + l) * bb for m in range(N)]
        hs.dnet.allgatherv(t, R, [bb] * N, displs, ns)
        for i in range(1, N):
            m = (n + i) % N
            hs.node.allgather(c, R + displs[m], R + topo.firsts[m] * bb, c.count, ns)
    else:  # the leaders all-gather the node regions; each node broadcasts the others' from its leader
        counts = [topo.sizes[m] * bb for m in range(N)]
        displs = [topo.firsts[m] * bb for m in range(N)]
        if l == 0:
            hs.dnet.allgatherv(t, R, counts, displs, ns)
        for a, b in ((0, displs[n]), (displs[n] + counts[n], displs[-1] + counts[-1])):
            if b > a:
                hs.node.bcast(c, R + a, (b - a) // its, 0, ns)
    hs.finish()


# ---- Reduce_scatter_block (node regions are consecutive ranks) ---------------------------------------
def _reduce_scatter_block(hs, c, form, nchunks):
    topo, its, t, ns = hs.topo, c.itemsize, hs.transport, hs.stream
    n, N, L = topo.node, topo.nnodes, topo.nlocal
    bb = c.count * its
    src = c.recv_ptr if c.inplace else c.send_ptr
    if form == 'rail':
        # a node reduce-scatter of every node's region (row m: this rank's partial of node m's block), the
        # rows to their nodes over the rail, this rank's block reduced in node order
        scratch = hs.scratch(N * bb)
        for i in range(N):
            m = (n + 1 + i) % N  # nodes start with different regions; this node's last
            hs.node.reduce_scatter(c, src + topo.firsts[m] * bb, scratch + m * bb, c.count, ns)
        out = hs.dnet.reduce_regions(t, c, scratch, [c.count] * N, ns)
        _cuda.copy(c.recv_ptr, out, bb, ns)
    else:
        # node reduce of the whole vector to the leader, the leaders reduce-scatter it by node regions,
        # each leader broadcasts its region over the node and every rank keeps its block
        total = sum(topo.sizes) * c.count
        leader = topo.local == 0
        target = (c.recv_ptr if c.inplace else hs.scratch(total * its)) if leader else 0
        hs.node.reduce(c, src, target, total, 0, ns)
        region = (hs.dnet.reduce_regions(t, c, target, [topo.sizes[m] * c.count for m in range(N)], ns)
                  if leader else hs.scratch(L * bb))
        hs.node.bcast(c, region, L * c.count, 0, ns)
        _cuda.copy(c.recv_ptr, region + topo.local * bb, bb, ns)
    hs.finish()


_FORMS = {Coll.ALLREDUCE: _allreduce, Coll.BCAST: _bcast, Coll.REDUCE: _reduce,
          Coll.ALLGATHER: _allgather, Coll.REDUCE_SCATTER_BLOCK: _reduce_scatter_block}
