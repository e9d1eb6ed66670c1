"""A fake device engine for CPU tests: a device team whose ranks meet in shared memory, as the real
engine's kernels meet in peer-mapped GPU memory, and never through MPI.

So a rank that runs a collective on it waits for every peer to run the same call on it, and a peer
that makes the host MPI call instead never arrives (the call gives up after MPIGPU_TIMEOUT_S): the
property that makes mixed placement across ranks a question of agreement (mpigpu/_state/agree.py). Each
rank's workspace is a file in /dev/shm (its "IPC handle" is the file's name); a call moves its data
in rounds through the workspaces (each rank writes its part, every rank reads what it needs, two
counters per rank separate the rounds) and reduces in rank order, as the engine's one-shot kernel
does. install_engine() makes it the fake CUDA layer's Team."""
import ctypes
import itertools
import mmap
import os
import secrets
import time
import types

import numpy as np

import fake_device
from fake_device import DeviceError, fake, install
from mpigpu._base.codes import ENGINE_COLLS, Coll

_HEADER = 64            # posted and done counters (two 8-byte words)
_REGION = 1 << 20       # bytes of data one rank offers per round
_ids = itertools.count()
_ALLREDUCE, _BCAST, _RSB, _REDUCE, _ALLGATHER = range(5)  # mpigpu._base.codes.Coll, checked at install


def _memory(ptr, nbytes):
    return np.ctypeslib.as_array((ctypes.c_uint8 * max(nbytes, 1)).from_address(ptr))[:nbytes]


def _offsets(off, nbytes, shape):
    """The offset from the buffer pointer of each packed byte of a block (None: a plain block)."""
    return None if shape is None or not nbytes else shape.byte_offsets(nbytes // shape.size) + off


def _packed(base, off, nbytes, shape):
    """A copy of a block's packed bytes (its bytes, or a shaped block's gathered in MPI_Pack's order)."""
    at = _offsets(off, nbytes, shape)
    if at is None:
        return _memory(base + off, nbytes).copy()
    lo = int(at.min())
    return _memory(base + lo, int(at.max()) - lo + 1)[at - lo]


def _unpacked(data, base, off, shape):
    """Writes a block's packed bytes `data` where they belong."""
    at = _offsets(off, len(data), shape)
    if at is None:
        _memory(base + off, len(data))[:] = data
        return
    lo = int(at.min())
    _memory(base + lo, int(at.max()) - lo + 1)[at - lo] = data


class FakeTeam:
    """One rank's side of a fake team (the attributes and methods mpigpu uses of _device.Team)."""

    def __init__(self, rank, nranks, device, config):
        self.rank, self.nranks, self.device = rank, nranks, device
        self.board = None
        self.timeout_s = config.timeout_s
        self.fault = 0
        self.fault_origin = -1
        self.aborted = False
        self.path = '/dev/shm/mpigpu-fake-team-%d-%d-%s' % (os.getpid(), next(_ids), secrets.token_hex(4))
        self.workspace_bytes = _HEADER + _REGION
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            os.ftruncate(fd, self.workspace_bytes)
            self.mine = mmap.mmap(fd, self.workspace_bytes)
        finally:
            os.close(fd)
        self.peers = {}
        self.rounds = 0
        self.calls = 0

    def export_handle(self):
        return self.path.encode()

    def open_peer(self, peer, handle):
        if peer == self.rank:
            self.peers[peer] = self.mine
            return
        fd = os.open(handle.decode(), os.O_RDWR)
        try:
            self.peers[peer] = mmap.mmap(fd, self.workspace_bytes)
        finally:
            os.close(fd)

    def close(self):
        for peer, mm in self.peers.items():
            if peer != self.rank:
                mm.close()
        self.peers = {}
        if self.mine is not None:
            self.mine.close()
            self.mine = None
            try:
                os.unlink(self.path)
            except OSError:
                pass

    def abort(self):
        self.aborted = True

    def missing_peers(self):
        return []

    def select(self, coll, dtype, count, algo=0, nchannels=0):
        return 1, 1, 0  # one-shot, one channel (the node phases ask, to avoid the ring)

    # ---- the rounds ----------------------------------------------------------------------------------
    def _counters(self, mm):
        return np.frombuffer(mm, np.int64, count=2)

    def _data(self, mm):
        return np.frombuffer(mm, np.uint8, count=_REGION, offset=_HEADER)

    def _wait(self, which, k):
        deadline = time.monotonic() + self.timeout_s
        for peer, mm in self.peers.items():
            c = self._counters(mm)
            while c[which] < k:
                if self.aborted:
                    raise DeviceError('fake engine: the communicator was aborted')
                if time.monotonic() > deadline:
                    raise DeviceError(f'fake engine: rank {peer} did not arrive within {self.timeout_s:g} s')
                time.sleep(0)

    def _round(self, put, take):
        """One round: put(region) writes this rank's part; take(regions by rank) reads everyone's."""
        self.rounds += 1
        k = self.rounds
        put(self._data(self.mine))
        self._counters(self.mine)[0] = k
        self._wait(0, k)
        take({p: self._data(mm) for p, mm in self.peers.items()})
        self._counters(self.mine)[1] = k
        self._wait(1, k)

    def run(self, coll, algo, dtype, op, send, recv, count, root, nchannels, stream, sync, chunk=0):
        if self.mine is None:
            raise DeviceError('collective on a released team')
        args = (coll, algo, dtype, op, send, recv, count, root, nchannels, stream, sync, chunk)
        # enqueued work (fake_device._enqueued): kept for each launch while a graph is recorded
        fake_device._enqueued(lambda: self._run_now(*args))

    def _run_now(self, coll, algo, dtype, op, send, recv, count, root, nchannels, stream, sync, chunk=0):
        from mpigpu._paths.staged import host_reduce
        from mpigpu._base.types import numpy_dtype
        self.calls += 1
        npt = numpy_dtype(dtype)
        its, n, me = npt.itemsize, self.nranks, self.rank
        per = max(1, _REGION // its // (n if coll == _RSB else 1))  # elements of one round
        for a in range(0, count, per):  # count: the elements, or a block's (Allgather, Reduce_scatter_block)
            m = min(count, a + per) - a
            if coll in (_ALLREDUCE, _REDUCE):
                def put(region, a=a, m=m):
                    region[:m * its] = _memory(send + a * its, m * its)

                def take(regions, a=a, m=m):
                    if coll == _REDUCE and me != root:
                        return
                    rows = [regions[p][:m * its].view(npt) for p in range(n)]
                    _memory(recv + a * its, m * its)[:] = np.ascontiguousarray(
                        host_reduce(rows, dtype, op)).view(np.uint8)
            elif coll == _BCAST:
                def put(region, a=a, m=m):
                    if me == root:
                        region[:m * its] = _memory(send + a * its, m * its)

                def take(regions, a=a, m=m):
                    if me != root:
                        _memory(recv + a * its, m * its)[:] = regions[root][:m * its]
            elif coll == _ALLGATHER:
                def put(region, a=a, m=m):
                    region[:m * its] = _memory(send + a * its, m * its)

                def take(regions, a=a, m=m):
                    for p in range(n):
                        _memory(recv + (p * count + a) * its, m * its)[:] = regions[p][:m * its]
            else:  # reduce-scatter: block j's slice [a, b) at j * m in the region
                def put(region, a=a, m=m):
                    for j in range(n):
                        region[j * m * its:(j + 1) * m * its] = _memory(send + (j * count + a) * its, m * its)

                def take(regions, a=a, m=m):
                    rows = [regions[p][me * m * its:(me + 1) * m * its].view(npt) for p in range(n)]
                    _memory(recv + a * its, m * its)[:] = np.ascontiguousarray(
                        host_reduce(rows, dtype, op)).view(np.uint8)
            self._round(put, take)

    def exchange(self, coll, send, recv, send_bytes, send_off, recv_bytes, recv_off, stream, sync, shapes=None,
                 then=None):
        """The exchange transport's call (cuda/exchange_kernel.cuh) for collective code `coll` (which end
        holds the kernel's FIFO slots; no difference here): block p of send to rank p, in rounds
        of a share of the region per destination; a first round agrees on how many rounds. A block with
        a shape (`shapes`: (send, recv) per-rank layouts or None) moves as its packed bytes, gathered
        before the rounds and scattered after them, as the kernel's copies pack and unpack them; `then`:
        the reduction of rows that follows, as cuda/exchange.cu launches it."""
        if self.mine is None:
            raise DeviceError('exchange on a released team')
        if Coll(coll) in ENGINE_COLLS:  # every exchange names its call (the kernel picks its FIFOs' end by it)
            raise DeviceError(f'exchange for {Coll(coll).name}, an engine collective')
        self.calls += 1
        n, me = self.nranks, self.rank
        share = _REGION // n
        most = [0]
        sshape, rshape = shapes if shapes is not None else ([None] * n, [None] * n)
        out = [_packed(send, send_off[p], send_bytes[p], sshape[p]) for p in range(n)]
        into = [np.empty(recv_bytes[p], np.uint8) for p in range(n)]

        def put_most(region):
            region[:8] = np.frombuffer(np.int64(max(list(send_bytes) + list(recv_bytes))).tobytes(), np.uint8)

        def take_most(regions):
            most[0] = max(int(regions[p][:8].view(np.int64)[0]) for p in range(n))
        self._round(put_most, take_most)
        for a in range(0, most[0], share):
            def put(region, a=a):
                for p in range(n):
                    m = max(0, min(share, send_bytes[p] - a))
                    region[p * share:p * share + m] = out[p][a:a + m]

            def take(regions, a=a):
                for p in range(n):
                    m = max(0, min(share, recv_bytes[p] - a))
                    into[p][a:a + m] = regions[p][me * share:me * share + m]
            self._round(put, take)
        for p in range(n):
            _unpacked(into[p], recv, recv_off[p], rshape[p])
        if then is not None:  # the reduction that follows (Reduce_scatter, Scan, Exscan)
            dtype, op, dst, src, row_bytes, nrows, count = then
            if nrows > 0 and count:
                fake.reduce_rows(dtype, op, dst, src, row_bytes, nrows, count, stream)

    def run_request(self, *args):
        raise DeviceError('fake engine: requests complete before they return (no C completion)')


def install_engine():
    """The fake CUDA layer with this engine: every process a GPU of its own (its PCI bus id from its
    pid), each with peer access to the others. Returns FakeCAI (as fake_device.install)."""
    from mpigpu._base.codes import Coll
    assert [Coll.ALLREDUCE, Coll.BCAST, Coll.REDUCE_SCATTER_BLOCK, Coll.REDUCE, Coll.ALLGATHER] == list(range(5))
    layer = types.SimpleNamespace(**vars(fake))
    bus = '%04x:%02x:%02x.0' % (os.getpid() >> 16, (os.getpid() >> 8) & 0xff, os.getpid() & 0xff)
    layer.pci_bus_id = lambda d: bus
    layer.device_by_pci_bus_id = lambda b: 0
    layer.can_access_peer = lambda a, b: True
    layer.supports = lambda dtype, op: True
    layer.Team = FakeTeam
    return install(layer)
