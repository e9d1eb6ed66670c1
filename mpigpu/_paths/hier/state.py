"""What the hierarchical path keeps per communicator (`CommState.owned(HierState)`): the topology, the
node's phases (its device team, set up on the node communicator as the engine's is), the network's
figures, the model's view of the communicator, and the streams, events, pinned chunks and device
scratch of its pipelines, all made once, collectively, at the communicator's first device collective;
and the pipeline that overlaps node phases, copies and network phases chunk by chunk.
"""
import logging
import socket

import numpy as np
from mpi4py import MPI

from ... import _cuda
from ..._base import host_mpi as _host_mpi
from ..._base.config import config
from ..._state.comm_state import CommState
from ..._state.topology import Topology, measure_agreement, measure_network
from ..._transports import nccl
from ...errors import Error
from . import model, progress, replay
from .net import Net, pieces
from .net_device import DeviceNet
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
        self.cuda_aware = _host_mpi.cuda_aware()
        self._scratch = self._net_scratch = None
        self.transport = self.dnet = None  # the rail's transport communicator, the phases over it
        self.replays = None  # the recorded calls (replay.py), where every phase runs on the GPU
        self.join = None  # a stream= call enqueued whole: its stream, which waits for the path's streams
        self.net_note = ''  # why the network phases are not on NCCL, where MPIGPU_NET let them be
        _cuda.with_device(self.device, self._make)
        self.net = Net(self.pinned, self.reduce_stream)
        self._connect(st)
        # the network as the phases take it: over the transport where it moves device memory
        probes = (None, None) if self.dnet is None else (self._on_transport(self.dnet.round_trips),
                                                         self._on_transport(self.dnet.exchanges))
        self.latency_us, self.gbps, self.gbps_both = measure_network(st.comm, topo.leaders, topo.node, *probes)
        self.agree_us = measure_agreement(st.comm, topo.leaders)
        self.shape = model.Shape(tuple(topo.sizes), topo.consecutive, self.node_kinds, self.cuda_aware,
                                 self.latency_us, self.gbps, self.dnet is not None, self.gbps_both, self.agree_us)
        log.debug('rank %d: hierarchical path: %s', st.rank, self.describe())

    def _on_transport(self, probe):
        """A network probe (round trips, exchanges) over the rail's transport, on the path's GPU and stream."""
        return lambda *args: _cuda.with_device(self.device, probe, self.transport, *args, self.net_stream)

    def _make(self):
        _cuda.load_kernels()  # before any stream waits for the progress thread (cuda/kernel_load.cu)
        self.stream = _cuda.stream()     # node phases
        self.net_stream = _cuda.stream()  # network phases on a transport of device memory
        self.reduce_stream = _cuda.stream()  # reductions of what arrives from the network
        self.sg = Stager(None).on(self.device)  # its d2h and h2d copy streams, pinned chunks
        self.ev_dep = _cuda.event()
        self.ev_node = [_cuda.event() for _ in range(SLOTS)]
        self.ev_d2h = [_cuda.event() for _ in range(SLOTS)]
        self.ev_h2d = [_cuda.event() for _ in range(SLOTS)]
        self.ev_net = [_cuda.event() for _ in range(SLOTS)]
        self.ev_end = [_cuda.event() for _ in range(2)]

    def _connect(self, st):
        """The network's transport, the same on every rank (MPIGPU_NET; collective, whatever each rank's
        knob says): NCCL over the rails where every rank can take it, else host MPI (net.py; `net_note`
        says why). A rank of a leaders' communicator is on rail 0, so the rails' communicators serve
        the leader forms too."""
        lib, why = self._nccl()
        if not self._agreed(st, why):
            return
        # simulated nodes are hosts of their own for NCCL too (its network transport between them)
        host = (f'{socket.gethostname()}-mpigpu-node{self.topo.firsts[self.topo.node]}'
                if config.simulate_nodes > 1 else None)
        why = ''
        try:
            self.transport = _cuda.with_device(self.device, lib.connect, self.topo.rail, host, config.timeout_s)
        except nccl.NcclError as exc:  # every rank of this rail raises it: the rails agree below
            why = f'NCCL setup: {exc}'
        if not self._agreed(st, why):
            if self.transport is not None:
                self.transport.close(abort=True)
                self.transport = None
            return
        self.dnet = DeviceNet(lib, self.net_scratch)
        if replay.usable(self):
            self.replays = replay.Replays(self)
            st.hier_replayed = replay.fast_entry(st, self)

    def _nccl(self):
        """(NCCL's library, '') where this rank can take it, else (None, why not); collective on the rail."""
        # NCCL takes one rank per GPU in a communicator (ranks sharing one, MPIGPU_SHARED_GPU: host MPI)
        gpus = self.topo.rail.allgather((socket.gethostname(), _cuda.pci_bus_id(self.device)))
        if config.net == 'mpi':
            return None, 'MPIGPU_NET=mpi'
        lib, why = nccl.library()
        if lib is not None and len(set(gpus)) < len(gpus) and not getattr(lib, 'shares_gpus', False):
            return None, 'ranks of a rail share a GPU'
        return lib, why

    def _agreed(self, st, why):
        """True when no rank has a reason (`why`) against NCCL; else notes the first one, and where any
        rank set MPIGPU_NET=nccl every rank raises it (collective)."""
        got = st.comm.allgather((why, config.net == 'nccl'))
        ranks = [r for r, (w, _demands) in enumerate(got) if w]
        if not ranks:
            return True
        self.net_note = f'rank {ranks[0]}: {got[ranks[0]][0]}'
        if any(demands for _w, demands in got):
            raise Error('hierarchical setup', f'MPIGPU_NET=nccl, but NCCL is not usable on ranks {ranks}: '
                        f'{self.net_note}', rank=st.rank, error_class=MPI.ERR_OTHER)
        log.debug('rank %d: hierarchical path: no NCCL (%s): host MPI', st.rank, self.net_note)
        return False

    def describe(self):
        if not self.multi_node:
            return 'one node'
        net = (f'{self.dnet.library.describe()}, device memory to device memory' if self.dnet is not None else
               'CUDA-aware MPI' if self.cuda_aware else 'host MPI through pinned memory')
        if self.dnet is None and self.net_note and config.net != 'mpi':
            net += f' (no NCCL: {self.net_note})'
        kinds = sorted(set(self.node_kinds))
        return (f'{self.topo.describe()}; node phases: {", ".join(kinds)}; network: {net}, '
                f'{self.latency_us:.1f} us, {self.gbps:.2f} GB/s per GPU one way, {self.gbps_both:.2f} each way '
                f'of an exchange; agreement across nodes {self.agree_us:.1f} us a call')

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
    # device memory by key (the node phases' scratch, the network phases'), kept in these attributes;
    # every other key is a pinned buffer
    _DEVICE_KEYS = {'scratch': '_scratch', 'net-device': '_net_scratch'}

    def reserve(self, needs):
        """Grows the buffers to `needs`: {pinned key: bytes, 'scratch' / 'net-device': device bytes}."""
        short = {k: nb for k, nb in needs.items() if nb > self._size(k)}
        if not short:
            return
        thread = progress.running()
        if thread is not None:
            thread.drain()
        for k, nb in short.items():
            attr = self._DEVICE_KEYS.get(k)
            if attr is None:
                self.sg.host(k, nb)
                continue
            size = max(nb, 1 << 16, self._size(k) * 3 // 2)
            if self.replays is not None:
                self.replays.clear()  # their graphs hold the old block's address
            setattr(self, attr, None)  # the old block goes before the new one is made
            setattr(self, attr, _cuda.device_memory(size))

    def _size(self, key):
        attr = self._DEVICE_KEYS.get(key)
        if attr is None:
            return self._pinned_size(key)
        mem = getattr(self, attr)
        return 0 if mem is None else mem.nbytes

    def net_scratch(self, nbytes):
        """The reserved device scratch of the network phases (at least nbytes)."""
        if nbytes and (self._net_scratch is None or self._net_scratch.nbytes < nbytes):
            raise RuntimeError(f'hierarchical path: network scratch of {nbytes} bytes not reserved')
        return self._net_scratch.ptr if self._net_scratch is not None else 0

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
        # (the copy streams only where copies run: a recorded call's streams must all join its end)
        for s in (self.stream,) if self.dnet is not None else (self.stream, self.sg.d2h, self.sg.h2d):
            _cuda.wait(s, dep)
        if self.dnet is not None:
            # the network stream after everything the node stream holds (an enqueued call's network
            # phases included, joined there by finish): calls never overlap on the path's scratch
            _cuda.after(self.net_stream, self.stream, self.ev_end[0])
        elif self.cuda_aware:  # MPI reads and writes the user's buffers itself: the producer must be done
            _cuda.sync_event(dep)

    def finish(self):
        """Waits for the call's work on the path's streams; for a call enqueued whole (`join`), makes its
        stream wait for it instead."""
        if self.join is not None:  # the node stream takes in the network stream's work, the caller's both
            _cuda.after(self.stream, self.net_stream, self.ev_end[1])
            _cuda.after(self.join, self.stream, self.ev_end[0])
            return
        _cuda.sync(self.sg.h2d)
        if self.dnet is not None:
            _cuda.sync(self.net_stream)
        _cuda.sync(self.stream)

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

        def free():
            replay.drop(self)  # before the transport: graphs hold its operations
            if self.transport is not None:
                self.transport.close()
                self.transport = self.dnet = None
            for s in (self.stream, self.net_stream, self.reduce_stream):
                _cuda.free_stream(s)
            for ev in [self.ev_dep] + self.ev_node + self.ev_d2h + self.ev_h2d + self.ev_net + self.ev_end:
                _cuda.free_event(ev)
            self.sg.close()
            self._scratch = self._net_scratch = None
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
    ns, d2h, h2d = hs.stream, hs.sg.d2h, hs.sg.h2d

    def issue(k):
        if node_in is not None:
            node_in(k, ns)
        copies = to_host(k) if to_host is not None else None
        if copies:
            ev = hs.ev_node[k % SLOTS]
            _cuda.after(d2h, ns, ev)
            for dst, src, nb in copies:
                _cuda.copy(dst, src, nb, d2h)
            _cuda.record(hs.ev_d2h[k % SLOTS], d2h)
            return hs.ev_d2h[k % SLOTS]
        if wait_in and node_in is not None:
            _cuda.record(hs.ev_node[k % SLOTS], ns)
            return hs.ev_node[k % SLOTS]
        return None

    ready = issue(0) if nchunks else None
    for k in range(nchunks):
        following = issue(k + 1) if k + 1 < nchunks else None
        if ready is not None:
            _cuda.sync_event(ready)
        if k >= SLOTS:
            _cuda.sync_event(hs.ev_h2d[k % SLOTS])  # chunk k - SLOTS's copy-out has left this slot
        if net is not None:
            net(k)
        copies = to_device(k) if to_device is not None else None
        if copies:
            if h2d_after_node:
                _cuda.after(h2d, ns, hs.ev_node[k % SLOTS])
            for dst, src, nb in copies:
                _cuda.copy(dst, src, nb, h2d)
            _cuda.record(hs.ev_h2d[k % SLOTS], h2d)
            if node_out is not None:
                _cuda.wait(ns, hs.ev_h2d[k % SLOTS])
        if node_out is not None:
            node_out(k, ns)
        ready = following
    hs.finish()


def split(total, nchunks):
    """[(start, size)] of total elements in at most nchunks balanced chunks, none empty."""
    return pieces(total, max(1, min(nchunks, total))) if total else []


def largest(parts):
    return max(size for _s, size in parts)


def device_pipeline(hs, nchunks, node_in=None, net=None, node_out=None):
    """The pipeline where the network's transport moves device memory: chunk k's node_in(k, stream) on
    the node stream, its net(k, stream) on the network stream after it, its node_out(k, stream) on the
    node stream after that; chunk k + 1's node phase is issued before chunk k's node_out, so it runs
    while chunk k crosses the network. Nothing waits on the host until every stage is done (the
    node's ranks issue their phases in the same order, as the device team needs)."""
    ns, nets = hs.stream, hs.net_stream

    def start(k):
        if net is not None and k >= SLOTS:
            # chunk k's node phase writes the slot chunk k - SLOTS's network phase reads (a Reduce's
            # scratch off the root's node, which has no node_out to order them)
            _cuda.wait(ns, hs.ev_net[k % SLOTS])
        if node_in is not None:
            node_in(k, ns)
        if net is not None:
            ev = hs.ev_node[k % SLOTS]
            _cuda.after(nets, ns, ev)
            net(k, nets)
            _cuda.record(hs.ev_net[k % SLOTS], nets)
    if nchunks:
        start(0)
    for k in range(nchunks):
        if k + 1 < nchunks:
            start(k + 1)
        if node_out is not None:
            if net is not None:
                _cuda.wait(ns, hs.ev_net[k % SLOTS])
            node_out(k, ns)
    hs.finish()
