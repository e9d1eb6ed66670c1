"""Replayed calls of the hierarchical path: where every phase runs on the GPU (a transport of device
memory, node phases on the engine or a node of one rank), a call is a fixed sequence of enqueued work
(node kernels, the transport's sends and receives, reductions, copies) on the path's streams. The
second time a call of the same shape on the same buffers comes, that sequence is recorded into a CUDA
graph; from then on the call is one launch on the node stream, instead of tens of host calls per call
(docs/architecture.md, "Replayed calls"; a 16 KB Allreduce on 2 x 2 simulated nodes spent about 60 us
of host time in them).

A graph holds the addresses it was recorded with: the user's buffers (part of its key), the path's
device scratch (every graph is dropped when the scratch is reallocated) and the node team's workspace
(fixed for the communicator's life). Replays and direct calls give the same bits: the recording is
the direct call's own sequence, and the engine's and NCCL's sequence numbers live on the GPU. Every
graph runs on the node stream, after the work the path queued there before, so the path's calls stay
in program order whichever way each one runs.
"""
from ... import _cuda
from ..._state import undecided as _undecided
from ..._base.codes import Coll, Placement, Verdict
from ..._base.config import config
from . import progress
from .net import REDUCING

_KEPT = 64  # graphs per communicator before they are all dropped (a program cycling through many buffers)


def usable(hs):
    """True when calls of this communicator may be recorded and replayed."""
    return (config.hier_graphs and hs.dnet is not None and hs.node.kind != 'staged'
            and _cuda.can_capture())


class Replays:
    """One communicator's recorded calls, by key; a key seen once is remembered without a graph."""

    def __init__(self, hs):
        self.hs = hs
        self.graphs = {}   # key -> (Graph, form), or None after one sighting
        self.origin = None  # the stream each recording starts on (made at the first recording)

    @staticmethod
    def key(coll, dtype, op_code, count, root, inplace, send_ptr, recv_ptr):
        """A call's key: what the form and chunking follow from (with the knobs that force them) and
        the addresses a graph holds."""
        return (coll, dtype, op_code, count, root, inplace, send_ptr, recv_ptr, config.algo, config.hier_chunk_bytes)

    def recorded(self, *call):
        """(graph, form) of the call of key(*call) if one was recorded, else None."""
        return self.graphs.get(self.key(*call))

    def graph(self, c, shape, issue):
        """The graph of Call `c` in (form, chunks) `shape`: recorded now if the call was seen before
        (issue(dep): the call's work issued after event dep, as a direct call issues it); None when it
        runs directly this time."""
        k = self.key(c.coll, c.dtype, c.op_code, c.count, c.root, c.inplace, c.send_ptr, c.recv_ptr)
        got = self.graphs.get(k, False)
        if got is False:
            if len(self.graphs) >= _KEPT:
                self.clear()
            self.graphs[k] = None
            return None
        if got is None:
            got = self.graphs[k] = (self._record(issue), shape[0])
        return got[0]

    def _record(self, issue):
        hs = self.hs
        if self.origin is None:
            self.origin = _cuda.stream()
        _cuda.capture_begin(self.origin)
        try:
            _cuda.record(hs.ev_dep, self.origin)
            hs.join = self.origin
            issue(hs.ev_dep)
        except BaseException:
            hs.join = None
            try:
                _cuda.capture_end(self.origin).close()
            except Exception:
                pass  # the capture's own failure: the call's error is the one to raise
            raise
        hs.join = None
        return _cuda.capture_end(self.origin)

    def launch(self, graph, stream, sync):
        """Runs `graph` on the node stream after the work queued on `stream`: done on return (sync),
        else `stream` waits for it on the GPU."""
        hs = self.hs
        _cuda.after(hs.stream, stream, hs.ev_dep)
        graph.launch(hs.stream)
        if sync:
            _cuda.sync(hs.stream)
        else:
            _cuda.after(stream, hs.stream, hs.ev_end[0])

    def clear(self):
        graphs, self.graphs = self.graphs, {}
        made = [got[0] for got in graphs.values() if got is not None]
        if made:
            _cuda.sync(self.hs.stream)  # a stream= call's graph may still run
        for g in made:
            g.close()

    def close(self):
        self.clear()
        if self.origin is not None:
            _cuda.free_stream(self.origin)
            self.origin = None


def run(hs, c, shape, stream, sync, issue):
    """Runs Call `c` as a replay where it can: True when it did (or recorded it, issue(dep) issuing its
    work, and then did)."""
    if hs.replays is None or not progress.quiet():
        return False
    if hs.node.kind == 'engine' and c.coll in REDUCING and not _cuda.supports(c.dtype, c.op_code):
        return False  # its node phases are staged through host MPI, which a graph cannot hold
    try:
        graph = hs.replays.graph(c, shape, issue)
    except BaseException:
        # a recording that failed may have left the transport mid-call: the call raises, and this
        # communicator's later calls are issued step by step
        drop(hs)
        raise
    if graph is None:
        return False
    hs.last_form = shape[0]
    hs.replays.launch(graph, stream, sync)
    return True


def fast_entry(st, hs):
    """The entry of the fast path (mpigpu/_ext/_fast.pxi) into this communicator's replayed calls: the
    call read there, agreed here and launched as its graph, with no Plan and no phase issued one by one."""
    def replayed(coll, root, dtype, op_code, sp, rp, count, inplace, stream, enqueue):
        """True when the call ran (or was enqueued on `stream`); False when the general path must take
        it (nothing done, or agreed on the host MPI call: Agreement.keep)."""
        replays = hs.replays
        if (replays is None or st.broken is not None or hs.async_error is not None
                or st.agreement.mode not in ('net', 'nodes') or _undecided.pending() or not progress.quiet()
                or progress.late()):
            return False  # (the general path raises what is pending)
        got = replays.recorded(coll, dtype, op_code, count, root, inplace, sp, rp)
        if got is None or _cuda.capturing(stream):
            return False  # (a capture: the general path raises)
        name = Coll(coll).mpi_name
        verdict = st.agreement.decide(name, coll, Placement.DEVICE)
        if verdict != Verdict.DEVICE:  # a peer brought host memory: the general path makes the host MPI
            st.agreement.keep(verdict)  # call every rank makes, with this verdict
            return False
        if count:
            hs.last_form = got[1]
            with st.errors(name):
                replays.launch(got[0], stream, not (enqueue and progress.threads()))
        return True
    return replayed


def drop(hs):
    """This communicator's calls are no longer replayed (its graphs destroyed)."""
    replays, hs.replays = hs.replays, None
    hs.st.hier_replayed = None
    if replays is not None:
        try:
            replays.close()
        except Exception:  # a GPU already failing: the graphs go with the process
            pass
