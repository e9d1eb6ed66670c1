"""The hierarchical path: the five collectives of a communicator whose ranks span several nodes, as
compositions of node phases (each node's device team over NVLink, node.py) and
network phases (host MPI between nodes, net.py), pipelined chunk by chunk
(state.py). docs/architecture.md describes the forms; the cost model
(model.py) chooses between them.

Forms. 'rail' (every node the same size L; rank (n, l) is local rank l of node n): the node splits the
message into L shards and every GPU carries its shard over its own rail (the ranks with the same l), so
each GPU's network path carries 1/L of the bytes. 'leader': the node's lowest rank carries everything
over the leaders' communicator: fewer steps (small messages), and any node sizes (uneven nodes, where
shards would not line up across nodes). A rail form leaves the last count % L elements to the leader
form. Reductions are in the same order in every form (the node's ranks in order, then the nodes in
order), so forms, chunkings and the model's choice change no bit of a result.
"""
from mpi4py import MPI

from ... import _cuda
from ..._base.codes import Coll
from ..._base.config import config
from ...errors import Error
from ..._state import requests
from . import device_forms, model, progress, replay
from .shards import Shards
from .net import REDUCING, SMALL_BYTES, device_buffer, pieces
from .state import SLOTS, HierState, largest as _largest, pipeline, slot_size, split as _split

_FORCED = {'hier-rail': 'rail', 'hier-leader': 'leader'}


# ---- entry points (mpigpu/_paths/plan.py) ----------------------------------------------------------------
def runs(st, c):
    """True when the hierarchical path runs Call `c`: the communicator's ranks span several nodes (no
    device team of its own). Its first call sets up the topology, collectively (all ranks make the
    same calls, and the team's outcome they agreed on is the same everywhere)."""
    if st.team is not None or config.algo == 'staged':
        return False
    hs = st.owned(HierState)
    if not hs.multi_node or c.dtype < 0 or (c.coll in REDUCING and c.op_code < 0):
        return False
    if c.coll in (Coll.ALLGATHER, Coll.REDUCE_SCATTER_BLOCK) and not hs.topo.consecutive:
        return False  # blocks in rank order would not be node regions: staged (docs/architecture.md)
    return True


def form_of(hs, c):
    """(form, chunks) of a call: the cost model's choice, or MPIGPU_ALGO's (remembered per call shape:
    the model costs tens of microseconds of Python)."""
    key = (c.coll, c.count, c.itemsize, config.algo, config.hier_chunk_bytes)
    got = hs.forms.get(key)
    if got is None:
        if len(hs.forms) >= _FORMS_KEPT:
            hs.forms.clear()
        got = hs.forms[key] = model.choose(c.coll, c.count * c.itemsize, hs.shape,
                                                _FORCED.get(config.algo, ''), config.hier_chunk_bytes, c.itemsize)
    return got


_FORMS_KEPT = 512


def _check_capture(hs, c, stream):
    if _cuda.capturing(stream):
        raise Error(c.name, 'a CUDA graph cannot capture this call: the communicator spans several nodes, '
                    'and the network phase of its collectives runs on the host (MPI) and would not replay; '
                    'capture calls of a node-local communicator, or call it outside the capture',
                    arg='stream', rank=hs.st.rank, error_class=MPI.ERR_OTHER)


def run(st, c, stream, sync):
    """Runs Call `c` after the work queued on `stream`: done on return (sync), or (stream=) queued for
    the progress thread with `stream` held until it is done. Where the node phases are staged through
    host MPI, a stream= call completes before it returns, as on the staged path (those phases allocate
    as they go, which must not happen while a stream waits for the progress thread)."""
    hs = st.owned(HierState)
    progress.check(hs, c.name, st.rank)
    _check_capture(hs, c, stream)
    shape = prepare(hs, c)

    def issue(dep):
        collective(hs, c, dep, shape)
    if not sync and stream_waits(hs):
        if hs.dnet is not None and progress.quiet():
            if not replay.run(hs, c, shape, stream, False, issue):
                _enqueue(hs, c, stream, shape)
        else:
            progress.on_stream(hs, stream, issue)
        return
    if replay.run(hs, c, shape, stream, True, issue):
        return

    def body():
        _cuda.record(hs.ev_dep, stream)
        collective(hs, c, hs.ev_dep, shape)
    progress.blocking(hs, body)


def _enqueue(hs, c, stream, shape):
    """A stream= call whose every phase runs on the GPU (a transport of device memory, node phases on
    the engine): enqueued from this thread, after the work queued on `stream`, which then waits for it
    on the GPU; no host thread in between (nothing is queued on the progress thread, so the order of
    the node phases is the program's)."""
    _cuda.record(hs.ev_dep, stream)
    hs.join = stream
    try:
        collective(hs, c, hs.ev_dep, shape)
    finally:
        hs.join = None


def request(st, c, stream):
    """Starts Call `c` (non-blocking or persistent) and returns its request."""
    hs = st.owned(HierState)
    progress.check(hs, c.name, st.rank)
    _check_capture(hs, c, stream)
    if not progress.threads():
        run(st, c, stream, True)
        return requests.completed()
    shape = prepare(hs, c)
    return progress.request(hs, stream, lambda dep: collective(hs, c, dep, shape))


def stream_waits(hs):
    """True when a stream= call returns at once, its stream held until the progress thread has run it."""
    return progress.threads() and hs.node.kind != 'staged'


def prepare(hs, c):
    """(form, chunks) of Call `c`, with the buffers it needs reserved (on the caller's thread)."""
    form, chunks = form_of(hs, c)
    hs.reserve(needs(hs, c, form, chunks))
    return form, chunks


def collective(hs, c, dep, shape):
    """Runs Call `c` in its prepared (form, chunks) to completion on this thread, after event `dep`."""
    form, chunks = shape
    hs.last_form = form
    hs.net.reduce_on_gpu(c)
    hs.begin(dep)
    with _cuda.errors_as(c.name, hs.st.rank):
        if hs.dnet is not None:
            device_forms.run(hs, c, form, chunks)
        else:
            _FORMS[c.coll](hs, c, form, chunks)


def needs(hs, c, form, nchunks):
    """The pinned buffers and device scratch (bytes by key, HierState.reserve) that Call `c` in `form`
    uses: each form below takes only these."""
    if hs.dnet is not None:
        return device_forms.needs(hs, c, form, nchunks)
    topo, its, rank = hs.topo, c.itemsize, hs.st.rank
    L, N, P, leader = topo.nlocal, topo.nnodes, hs.st.size, topo.local == 0
    out = {}

    def at_least(key, nb):
        if nb > out.get(key, 0):
            out[key] = nb

    def chunks_of(elems, reduces, n):  # pipeline slots, and the network reduction's scratch (net)
        at_least('in', SLOTS * slot_size(elems * its))
        at_least('out', SLOTS * slot_size(elems * its))
        if reduces:
            at_least('net-rows', max(SMALL_BYTES, (elems + n) * its))
            at_least('net-piece', (elems // n + 1) * its)
    if c.coll in (Coll.ALLREDUCE, Coll.BCAST, Coll.REDUCE):
        reduces, rooted = c.coll != Coll.BCAST, c.coll == Coll.REDUCE
        body = c.count // L * L if form == 'rail' and (c.coll != Coll.BCAST or L > 1) else 0
        if body:
            largest = _largest(_split(body // L, nchunks))
            chunks_of(largest, reduces, N)
            if rooted and rank != c.root:
                at_least('scratch', SLOTS * largest * L * its)
        if body < c.count:
            largest = _largest(_split(c.count - body, nchunks if not body else 1))
            chunks_of(largest, reduces, N)
            if rooted and leader and rank != c.root:
                at_least('scratch', SLOTS * largest * its)
    elif c.coll == Coll.ALLGATHER:
        at_least('ag', (N if form == 'rail' else P) * c.count * its)
    else:
        bb = c.count * its
        at_least('rs-out', bb)
        if form == 'rail':
            for key in ('scratch', 'rs', 'net-rs-rows'):
                at_least(key, N * bb)
        elif leader:
            at_least('rs-full', P * bb)
            if not c.inplace:
                at_least('scratch', P * bb)
            at_least('net-rows', N * topo.nlocal * bb)
            at_least('net-piece', topo.nlocal * bb)
    return out


# ---- Allreduce -------------------------------------------------------------------------------------
def _allreduce(hs, c, form, nchunks):
    topo, its = hs.topo, c.itemsize
    L = topo.nlocal
    body = c.count // L * L if form == 'rail' else 0
    if body:
        parts = _split(body // L, nchunks)
        hin, hout = hs.slots('in', _largest(parts) * its), hs.slots('out', _largest(parts) * its)

        sh = Shards(hs, c, parts, c.inplace)

        def to_host(k):
            return [(hin.ptr(k), sh.reduced(k), parts[k][1] * its)]

        def net(k):
            hs.net.allreduce(topo.rail, c, hin.view(k), hout.view(k), parts[k][1])

        def to_device(k):
            _base, mine, size = sh.chunk(k)
            return [(mine, hout.ptr(k), size * its)]
        pipeline(hs, len(parts), sh.reduce_in, to_host, net, to_device, sh.gather_out)
    if body < c.count:
        _allreduce_leader(hs, c, body, c.count - body, nchunks if not body else 1)


def _allreduce_leader(hs, c, first, count, nchunks):
    """Elements [first, first + count): node reduce to the leader, leaders' all-reduce, node bcast."""
    topo, its = hs.topo, c.itemsize
    leader = topo.local == 0
    src = (c.recv_ptr if c.inplace else c.send_ptr) + first * its
    dst = c.recv_ptr + first * its
    parts = _split(count, nchunks)
    hin, hout = hs.slots('in', _largest(parts) * its), hs.slots('out', _largest(parts) * its)

    def node_in(k, ns):
        s, size = parts[k]
        hs.node.reduce(c, src + s * its, dst + s * its, size, 0, ns)

    def to_host(k):
        s, size = parts[k]
        return [(hin.ptr(k), dst + s * its, size * its)] if leader else None

    def net(k):
        if leader:
            hs.net.allreduce(topo.leaders, c, hin.view(k), hout.view(k), parts[k][1])

    def to_device(k):
        s, size = parts[k]
        return [(dst + s * its, hout.ptr(k), size * its)] if leader else None

    def node_out(k, ns):
        s, size = parts[k]
        hs.node.bcast(c, dst + s * its, size, 0, ns)
    pipeline(hs, len(parts), node_in, to_host, net, to_device, node_out)


# ---- Bcast -------------------------------------------------------------------------------------------
def _bcast(hs, c, form, nchunks):
    topo, its = hs.topo, c.itemsize
    L = topo.nlocal
    home = topo.node == topo.node_of[c.root]
    root_node, root_local = topo.node_of[c.root], topo.local_of[c.root]
    aware = hs.cuda_aware
    body = c.count // L * L if form == 'rail' and L > 1 else 0
    if body:
        parts = _split(body // L, nchunks)
        hin, hout = hs.slots('in', _largest(parts) * its), hs.slots('out', _largest(parts) * its)

        sh = Shards(hs, c, parts, False)

        def to_host(k):
            _base, mine, size = sh.chunk(k)
            return [(hin.ptr(k), mine, size * its)]

        def net(k):  # rail l carries shard l of the chunk from the root's node to every other node
            _base, mine, size = sh.chunk(k)
            buf = device_buffer(mine, size * its) if aware else (hin if home else hout).view(k)
            hs.net.bcast(topo.rail, buf, size * its, root_node)

        def to_device(k):
            _base, mine, size = sh.chunk(k)
            return [(mine, hout.ptr(k), size * its)]
        if home:
            pipeline(hs, len(parts), lambda k, ns: sh.bcast_in(k, ns, root_local), None if aware else to_host, net,
                     wait_in=aware)
        else:
            pipeline(hs, len(parts), None, None, net, None if aware else to_device, sh.gather_out)
    if body < c.count:
        _bcast_leader(hs, c, body, c.count - body, nchunks if not body else 1)


def _bcast_leader(hs, c, first, count, nchunks):
    """Elements [first, first + count): the root's node bcast, leaders' bcast, node bcast elsewhere."""
    topo, its = hs.topo, c.itemsize
    leader, aware = topo.local == 0, hs.cuda_aware
    home = topo.node == topo.node_of[c.root]
    root_node, root_local = topo.node_of[c.root], topo.local_of[c.root]
    buf = c.recv_ptr + first * its
    parts = _split(count, nchunks)
    hin, hout = hs.slots('in', _largest(parts) * its), hs.slots('out', _largest(parts) * its)

    def node_in(k, ns):
        s, size = parts[k]
        hs.node.bcast(c, buf + s * its, size, root_local, ns)

    def to_host(k):
        s, size = parts[k]
        return [(hin.ptr(k), buf + s * its, size * its)]

    def net(k):
        s, size = parts[k]
        data = device_buffer(buf + s * its, size * its) if aware else (hin if home else hout).view(k)
        hs.net.bcast(topo.leaders, data, size * its, root_node)

    def to_device(k):
        s, size = parts[k]
        return [(buf + s * its, hout.ptr(k), size * its)]

    def node_out(k, ns):
        s, size = parts[k]
        hs.node.bcast(c, buf + s * its, size, 0, ns)
    if home:
        pipeline(hs, len(parts), node_in, to_host if leader and not aware else None, net if leader else None,
                 wait_in=leader and aware)
    else:
        pipeline(hs, len(parts), None, None, net if leader else None,
                 to_device if leader and not aware else None, node_out)


# ---- Reduce ----------------------------------------------------------------------------------------
def _reduce(hs, c, form, nchunks):
    topo, its, rank = hs.topo, c.itemsize, hs.st.rank
    L = topo.nlocal
    is_root, home = rank == c.root, topo.node == topo.node_of[c.root]
    root_node = topo.node_of[c.root]
    body = c.count // L * L if form == 'rail' else 0
    if body:
        parts = _split(body // L, nchunks)
        largest = _largest(parts)
        hin, hout = hs.slots('in', largest * its), hs.slots('out', largest * its)
        scratch = 0 if is_root else hs.scratch(SLOTS * largest * L * its)
        sh = Shards(hs, c, parts, is_root and c.inplace, scratch, largest)

        def to_host(k):
            return [(hin.ptr(k), sh.reduced(k), parts[k][1] * its)]

        def net(k):  # rail l reduces shard l to the root's node
            hs.net.reduce(topo.rail, c, hin.view(k), hout.view(k), parts[k][1], root_node)

        def to_device(k):
            _base, mine, size = sh.chunk(k)
            return [(mine, hout.ptr(k), size * its)]
        if home:
            pipeline(hs, len(parts), sh.reduce_in, to_host, net, to_device, sh.gather_out)
        else:
            pipeline(hs, len(parts), sh.reduce_in, to_host, net)
    if body < c.count:
        _reduce_leader(hs, c, body, c.count - body, nchunks if not body else 1)


def _reduce_leader(hs, c, first, count, nchunks):
    """Elements [first, first + count): node reduce to the leader, leaders' reduce to the root's node's
    leader, which hands the result to the root (host MPI on the node) if it is another rank."""
    topo, its, rank = hs.topo, c.itemsize, hs.st.rank
    leader, is_root = topo.local == 0, rank == c.root
    home, root_node, root_local = topo.node == topo.node_of[c.root], topo.node_of[c.root], topo.local_of[c.root]
    src = (c.recv_ptr if is_root and c.inplace else c.send_ptr) + first * its
    dst = c.recv_ptr + first * its if is_root else 0
    parts = _split(count, nchunks)
    largest = _largest(parts)
    hin, hout = hs.slots('in', largest * its), hs.slots('out', largest * its)
    scratch = hs.scratch(SLOTS * largest * its) if leader and not is_root else 0

    def target(k):
        s, _size = parts[k]
        return dst + s * its if is_root else scratch + (k % SLOTS) * largest * its

    def node_in(k, ns):
        s, size = parts[k]
        hs.node.reduce(c, src + s * its, target(k) if leader else 0, size, 0, ns)

    def to_host(k):
        return [(hin.ptr(k), target(k), parts[k][1] * its)] if leader else None

    def net(k):
        nb = parts[k][1] * its
        if leader:
            hs.net.reduce(topo.leaders, c, hin.view(k), hout.view(k), parts[k][1], root_node)
        if home and root_local != 0:
            if leader:
                topo.node_comm.Send([hout.view(k), nb, MPI.BYTE], root_local, _HOP_TAG)
            elif is_root:
                topo.node_comm.Recv([hout.view(k), nb, MPI.BYTE], 0, _HOP_TAG)

    def to_device(k):
        s, size = parts[k]
        return [(dst + s * its, hout.ptr(k), size * its)] if is_root else None
    pipeline(hs, len(parts), node_in, to_host, net, to_device)


_HOP_TAG = 23


# ---- Allgather (node regions are consecutive ranks) -------------------------------------------------
def _allgather(hs, c, form, nchunks):
    topo, its = hs.topo, c.itemsize
    n, bb = topo.node, c.count * its
    R, ns = c.recv_ptr, hs.stream

    def region(m):
        return R + topo.firsts[m] * bb
    hs.node.allgather(c, c.send_ptr, region(n), c.count, ns)  # this node's region, while the network works
    if form == 'rail':
        _allgather_rail(hs, c, bb)
    else:
        _allgather_leader(hs, c, bb, nchunks)
    _cuda.sync(hs.sg.h2d)
    _cuda.sync(ns)


def _allgather_rail(hs, c, bb):
    """Every rank's block over its rail, then a node all-gather of each other node's region."""
    topo, ns = hs.topo, hs.stream
    n, l, N, R = topo.node, topo.local, topo.nnodes, c.recv_ptr
    displs = [(topo.firsts[m] + l) * bb for m in range(N)]
    if hs.cuda_aware:
        _cuda.record(hs.ev_node[0], ns)
        _cuda.sync_event(hs.ev_node[0])  # this rank's block is in recvbuf now
        hs.net.allgatherv(topo.rail, device_buffer(R, displs[-1] + bb), [bb] * N, displs)
    else:
        buf, arr = hs.pinned('ag', N * bb)
        _cuda.copy(buf.ptr + n * bb, c.send_ptr, bb, hs.sg.d2h)
        _cuda.sync(hs.sg.d2h)
        hs.net.allgatherv(topo.rail, arr, [bb] * N, [m * bb for m in range(N)])
    for i in range(1, N):
        m = (n + i) % N
        if not hs.cuda_aware:
            _cuda.copy(R + displs[m], buf.ptr + m * bb, bb, hs.sg.h2d)
            ev = hs.ev_h2d[i % SLOTS]
            _cuda.after(ns, hs.sg.h2d, ev)
        hs.node.allgather(c, R + displs[m], R + topo.firsts[m] * bb, c.count, ns)


def _allgather_leader(hs, c, bb, nchunks):
    """The leaders all-gather the node regions; each node broadcasts the others' from its leader."""
    topo, ns = hs.topo, hs.stream
    n, N, R = topo.node, topo.nnodes, c.recv_ptr
    leader, aware = topo.local == 0, hs.cuda_aware
    counts = [topo.sizes[m] * bb for m in range(N)]
    displs = [topo.firsts[m] * bb for m in range(N)]
    total = displs[-1] + counts[-1]
    own = (displs[n], displs[n] + counts[n])
    if leader:
        _cuda.record(hs.ev_node[0], ns)
        if aware:
            _cuda.sync_event(hs.ev_node[0])
            hs.net.allgatherv(topo.leaders, device_buffer(R, total), counts, displs)
        else:
            buf, arr = hs.pinned('ag', total)
            _cuda.wait(hs.sg.d2h, hs.ev_node[0])
            _cuda.copy(buf.ptr + own[0], R + own[0], counts[n], hs.sg.d2h)
            _cuda.sync(hs.sg.d2h)
            hs.net.allgatherv(topo.leaders, arr, counts, displs)
    # the rest of recvbuf (before and after this node's region) from the leader, in chunks
    spans = [(0, own[0]), (own[1], total)]
    elems = [(a // c.itemsize, (b - a) // c.itemsize) for a, b in spans if b > a]
    rest = sum(size for _a, size in elems)
    for i, (start, size) in enumerate(_chunks_of(elems, max(1, -(-rest // max(1, nchunks))))):
        nb = size * c.itemsize
        if leader and not aware:
            _cuda.copy(R + start * c.itemsize, buf.ptr + start * c.itemsize, nb, hs.sg.h2d)
            ev = hs.ev_h2d[i % SLOTS]
            _cuda.after(ns, hs.sg.h2d, ev)
        hs.node.bcast(c, R + start * c.itemsize, size, 0, ns)


def _chunks_of(spans, most):
    """[(start, size)]: each (start, size) span cut into pieces of at most `most` elements."""
    out = []
    for start, size in spans:
        for s, k in pieces(size, -(-size // most)):
            out.append((start + s, k))
    return out


# ---- Reduce_scatter_block (node regions are consecutive ranks) ---------------------------------------
def _reduce_scatter_block(hs, c, form, nchunks):
    if form == 'rail':
        _reduce_scatter_rail(hs, c)
    else:
        _reduce_scatter_leader(hs, c, nchunks)


def _reduce_scatter_rail(hs, c):
    """A node reduce-scatter of every node's region (into scratch), each partial block sent over the
    rail to its node, the partials of this rank's block reduced in node order on the host."""
    topo, ns, its = hs.topo, hs.stream, c.itemsize
    n, N, rail = topo.node, topo.nnodes, topo.rail
    bb = c.count * its
    src = c.recv_ptr if c.inplace else c.send_ptr
    scratch = hs.scratch(N * bb)
    pbuf, parr = hs.pinned('rs', N * bb)
    rows = hs.net.scratch('rs-rows', N * bb)  # node m's partial of this rank's block in row m
    recvs = [rail.Irecv([rows[m * bb:(m + 1) * bb], bb, MPI.BYTE], m, _RS_TAG) for m in range(N) if m != n]
    sends = []
    order = [(n + 1 + i) % N for i in range(N)]  # nodes start with different regions; this node's last

    def issue(i):
        m = order[i]
        hs.node.reduce_scatter(c, src + topo.firsts[m] * bb, scratch + m * bb, c.count, ns)
        ev = hs.ev_node[i % SLOTS]
        _cuda.after(hs.sg.d2h, ns, ev)
        _cuda.copy(pbuf.ptr + m * bb, scratch + m * bb, bb, hs.sg.d2h)
        _cuda.record(hs.ev_d2h[i % SLOTS], hs.sg.d2h)
    issue(0)
    for i, m in enumerate(order):
        if i + 1 < N:
            issue(i + 1)
        _cuda.sync_event(hs.ev_d2h[i % SLOTS])
        if m != n:
            sends.append(rail.Isend([parr[m * bb:(m + 1) * bb], bb, MPI.BYTE], m, _RS_TAG))
    MPI.Request.Waitall(recvs + sends)
    rows[n * bb:(n + 1) * bb] = parr[n * bb:(n + 1) * bb]
    out, oarr = hs.pinned('rs-out', bb)
    hs.net.reduce_rows(c, rows, N, oarr[:bb])
    _cuda.copy(c.recv_ptr, out.ptr, bb, hs.sg.h2d)
    hs.finish()


_RS_TAG = 29


def _reduce_scatter_leader(hs, c, nchunks):
    """Node reduce of the whole vector to the leader, the leaders reduce-scatter it by node regions,
    each leader scatters its region's blocks over the node (host MPI)."""
    topo, its = hs.topo, c.itemsize
    leader, N = topo.local == 0, topo.nnodes
    bb = c.count * its
    total = sum(topo.sizes) * c.count
    src = c.recv_ptr if c.inplace else c.send_ptr
    target = (c.recv_ptr if c.inplace else hs.scratch(total * its)) if leader else 0
    full, farr = hs.pinned('rs-full', total * its) if leader else (None, None)
    out, oarr = hs.pinned('rs-out', bb)
    parts = _split(total, nchunks)
    last = len(parts) - 1

    def node_in(k, ns):
        s, size = parts[k]
        hs.node.reduce(c, src + s * its, target + s * its if leader else 0, size, 0, ns)

    def to_host(k):
        s, size = parts[k]
        return [(full.ptr + s * its, target + s * its, size * its)] if leader else None

    def net(k):
        if k != last:
            return
        if leader:
            mine = hs.net.reduce_regions(topo.leaders, c, farr, [topo.sizes[m] * c.count for m in range(N)])
            topo.node_comm.Scatter([mine, bb, MPI.BYTE], [oarr, bb, MPI.BYTE], 0)
        else:
            topo.node_comm.Scatter(None, [oarr, bb, MPI.BYTE], 0)

    def to_device(k):
        return [(c.recv_ptr, out.ptr, bb)] if k == last else None
    pipeline(hs, len(parts), node_in, to_host, net, to_device, h2d_after_node=True)


_FORMS = {Coll.ALLREDUCE: _allreduce, Coll.BCAST: _bcast, Coll.REDUCE: _reduce,
          Coll.ALLGATHER: _allgather, Coll.REDUCE_SCATTER_BLOCK: _reduce_scatter_block}
