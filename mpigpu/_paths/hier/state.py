"""What the hierarchical path keeps per communicator (`CommState.owned(HierState)`): the topology, the
node's phases (its device team, set up on the node communicator as the engine's is), the network's
figures, the model's view of the communicator, and the streams, events, pinned chunks and device
scratch of its pipelines, all made once, collectively, at the communicator's first device collective;
and the pipeline that overlaps node phases, copies and network phases chunk by chunk.
"""
import logging

import numpy as np

from ... import _cuda, _host_mpi
from ..._state import CommState
from ..._topology import Topology, measure_network
from . import model, progress
from .net import Net
from .node import NodePhases
from ..support.pinned import SLOTS, Stager

log = logging.getLogger('mpigpu')
_CLOSE_WAIT_S = 60.0  # at release, how long queued calls may take to finish (a dead peer: not forever)


def slot_size(slot_bytes):
    """The bytes of one pipeline slot holding slot_bytes: whole 16-byte lines, at least 4 KiB (so a
    rail form's tail of fewer than L elements fits the slots of its body)."""
    return max(4096, -(-slot_bytes // 16) * 16)


class Slots:
    """SLOTS pinned chunks of `slot` bytes each (the pipeline's host side of chunk k is k % SLOTS)."""

    def __init__(self, buf, arr, slot):
        self.buf, self.arr, self.slot = buf, arr, slot

    def ptr(self, k):
        return self.buf.ptr + (k % SLOTS) * self.slot

    def view(self, k):
        o = (k % SLOTS) * self.slot
        return self.arr[o:o + self.slot]


class HierState:
    """One communicator's hierarchical path (made collectively on first use; `multi_node` False when
    the communicator's ranks share one node, and then it holds nothing)."""

    def __init__(self, st):
        self.st = st
        self.multi_node = False
        self.async_error = None  # a failed stream= call's error, raised by the next call (progress)
        self.last_form = None    # the form the last call ran ('rail' / 'leader'), for mpigpu-perf
        self.forms = {}          # the model's choice by call shape (calls.form_of)
        topo = Topology(st.comm)
        if topo.nnodes == 1:
            topo.close()
            return
        self.topo, self.multi_node, self.device = topo, True, st.device
        node = CommState(topo.node_comm)
        if topo.nlocal > 1:
            node.bind_device('hierarchical setup', st.device)  # the node's team: collective on the node
        else:
            node.device = st.device
        self.node = NodePhases(node)
        kinds = st.comm.allgather(self.node.kind)
        self.node_kinds = tuple(kinds[topo.firsts[n]] for n in range(topo.nnodes))
        self.latency_us, self.gbps = measure_network(st.comm, topo.leaders, topo.node)
        self.cuda_aware = _host_mpi.cuda_aware()
        self.shape = model.Shape(tuple(topo.sizes), topo.consecutive, self.node_kinds, self.cuda_aware,
                                      self.latency_us, self.gbps)
        self._scratch = None
        _cuda.with_device(self.device, self._make)
        self.net = Net(self.pinned, self.reduce_stream)
        log.debug('rank %d: hierarchical path: %s', st.rank, self.describe())

    def _make(self):
        dm = _cuda.device
        dm.load_kernels()  # before any stream waits for the progress thread (cuda/kernel_load.cu)
        self.stream = dm.stream_create()     # node phases
        self.reduce_stream = dm.stream_create()  # reductions of what arrives from the network
        self.sg = Stager(None).on(self.device)  # its d2h and h2d copy streams, pinned chunks
        self.ev_dep = dm.event_create()
        self.ev_node = [dm.event_create() for _ in range(SLOTS)]
        self.ev_d2h = [dm.event_create() for _ in range(SLOTS)]
        self.ev_h2d = [dm.event_create() for _ in range(SLOTS)]

    def describe(self):
        if not self.multi_node:
            return 'one node'
        net = 'CUDA-aware MPI' if self.cuda_aware else 'host MPI through pinned memory'
        kinds = sorted(set(self.node_kinds))
        return (f'{self.topo.describe()}; node phases: {", ".join(kinds)}; network: {net}, '
                f'{self.latency_us:.1f} us, {self.gbps:.2f} GB/s per GPU')

    def engine_status(self):
        """What comm.engine_status() says of a communicator on this path ('' on one node)."""
        if not self.multi_node:
            return ''
        return f'hierarchical: {self.describe()}; node engine: {self.node.describe()}'

    # ---- resources ----------------------------------------------------------------------------------
    # Pinned buffers and the device scratch are grown by `reserve`, before a call runs, on the caller's
    # thread with nothing of this communicator queued: freeing or allocating memory can wait for the
    # whole GPU, and a stream= call's stream waits for the progress thread, so the thread itself never
    # allocates (the accessors below only hand out what was reserved).
    def reserve(self, needs):
        """Grows the buffers to `needs`: {pinned key: bytes, 'scratch': device bytes}."""
        short = {k: nb for k, nb in needs.items()
                 if nb > (self._scratch.nbytes if k == 'scratch' and self._scratch is not None else
                          0 if k == 'scratch' else self._pinned_size(k))}
        if not short:
            return
        thread = progress.running()
        if thread is not None:
            thread.drain()
        for k, nb in short.items():
            if k == 'scratch':
                size = max(nb, 1 << 16, 0 if self._scratch is None else self._scratch.nbytes * 3 // 2)
                self._scratch = None
                self._scratch = _cuda.device.DeviceMemory(size)
            else:
                self.sg.host(k, nb)

    def _pinned_size(self, key):
        buf = self.sg.pinned.get(key)
        return 0 if buf is None else buf.nbytes

    def slots(self, key, slot_bytes):
        """Slots for pipeline buffer `key` ('in', 'out') of slot_bytes each (reserved: slot_size)."""
        slot = slot_size(slot_bytes)
        buf, arr = self.pinned(key, SLOTS * slot)
        return Slots(buf, arr, slot)

    def pinned(self, key, nbytes):
        """Reserved pinned buffer `key` of at least nbytes, and its uint8 array."""
        buf = self.sg.pinned.get(key)
        if buf is None or buf.nbytes < nbytes:
            raise RuntimeError(f'hierarchical path: pinned buffer {key!r} of {nbytes} bytes not reserved')
        return buf, np.frombuffer(buf, dtype=np.uint8, count=buf.nbytes)

    def scratch(self, nbytes):
        """The reserved device scratch (at least nbytes)."""
        if nbytes and (self._scratch is None or self._scratch.nbytes < nbytes):
            raise RuntimeError(f'hierarchical path: device scratch of {nbytes} bytes not reserved')
        return self._scratch.ptr if self._scratch is not None else 0

    def begin(self, dep):
        """Orders the path's streams after event `dep` (the producer's stream when the call came)."""
        dm = _cuda.device
        for s in (self.stream, self.sg.d2h, self.sg.h2d):
            dm.stream_wait_event(s, dep)
        if self.cuda_aware:  # MPI reads and writes the user's buffers itself: the producer must be done
            dm.event_sync(dep)

    def finish(self):
        dm = _cuda.device
        dm.stream_sync(self.sg.h2d)
        dm.stream_sync(self.stream)

    # ---- release -------------------------------------------------------------------------------------
    def close_collective(self):
        """Release when every rank releases (Free): the node's team waits for its peers first (a barrier),
        so that no node peer still uses this rank's workspace."""
        self.close(collective=True)

    def close(self, collective=False):
        if not self.multi_node:
            return
        self.multi_node = False
        thread = progress.running()
        if thread is not None:  # no call of this communicator may still run
            thread.drain(_CLOSE_WAIT_S)
        dm = _cuda.device

        def free():
            for s in (self.stream, self.reduce_stream):
                dm.stream_destroy(s)
            for ev in [self.ev_dep] + self.ev_node + self.ev_d2h + self.ev_h2d:
                dm.event_destroy(ev)
            self.sg.close()
            self._scratch = None
        try:
            _cuda.with_device(self.device, free)
        finally:
            self.node.close(collective)
            self.topo.close()


def pipeline(hs, nchunks, node_in=None, to_host=None, net=None, to_device=None, node_out=None, wait_in=False,
             h2d_after_node=False):
    """Runs chunks 0..nchunks-1 through node_in -> copy to host -> net -> copy to device -> node_out,
    chunk k's network phase (on this thread) overlapping chunk k+1's node_in and copy to the host and
    chunk k-1's copy back and node_out (on the GPU). Any stage may be None or give nothing:
    node_in(k, stream), node_out(k, stream): enqueue the node phases of chunk k on the node stream;
    to_host(k), to_device(k): [(dst, src, bytes)] copies (host pointers into the slots' chunk k % SLOTS);
    net(k): the host's work on chunk k. wait_in: net(k) waits for node_in(k) without copies (MPI reads
    device memory); h2d_after_node: copies to the device wait for the node phases enqueued before them.
    The host side of chunk k must not be written by net(k) before the copy-out of chunk k - SLOTS is done:
    net(k) runs after it. Returns with every stage done."""
    dm = _cuda.device
    ns, d2h, h2d = hs.stream, hs.sg.d2h, hs.sg.h2d

    def issue(k):
        if node_in is not None:
            node_in(k, ns)
        copies = to_host(k) if to_host is not None else None
        if copies:
            ev = hs.ev_node[k % SLOTS]
            dm.event_record(ev, ns)
            dm.stream_wait_event(d2h, ev)
            for dst, src, nb in copies:
                dm.memcpy_async(dst, src, nb, d2h)
            dm.event_record(hs.ev_d2h[k % SLOTS], d2h)
            return hs.ev_d2h[k % SLOTS]
        if wait_in and node_in is not None:
            dm.event_record(hs.ev_node[k % SLOTS], ns)
            return hs.ev_node[k % SLOTS]
        return None

    ready = issue(0) if nchunks else None
    for k in range(nchunks):
        following = issue(k + 1) if k + 1 < nchunks else None
        if ready is not None:
            dm.event_sync(ready)
        if k >= SLOTS:
            dm.event_sync(hs.ev_h2d[k % SLOTS])  # chunk k - SLOTS's copy-out has left this slot
        if net is not None:
            net(k)
        copies = to_device(k) if to_device is not None else None
        if copies:
            if h2d_after_node:
                dm.event_record(hs.ev_node[k % SLOTS], ns)
                dm.stream_wait_event(h2d, hs.ev_node[k % SLOTS])
            for dst, src, nb in copies:
                dm.memcpy_async(dst, src, nb, h2d)
            dm.event_record(hs.ev_h2d[k % SLOTS], h2d)
            if node_out is not None:
                dm.stream_wait_event(ns, hs.ev_h2d[k % SLOTS])
        if node_out is not None:
            node_out(k, ns)
        ready = following
    hs.finish()
