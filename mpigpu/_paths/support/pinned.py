"""Pinned host memory and copy streams for the paths that stage device buffers through the host: one
communicator's `Stager` (its copy streams and grow-only buffers), and a process-wide pool of pinned
buffers for point-to-point messages in flight."""
import threading

import numpy as np

from ... import _cuda

SLOTS = 3  # pinned chunk slots per direction of a pipeline: copy-in, MPI and copy-out each hold one


class Stager:
    """Copy streams, events and grow-only pinned buffers of one communicator, on one device at a time
    (its state: `CommState.owned(Stager).on(device)`)."""

    def __init__(self, st):
        self.device = None
        self.pinned = {}

    def on(self, device):
        """This stager with its streams and events on `device` (made again when the device changes)."""
        if device != self.device:
            self.close()
            _cuda.with_device(device, self._make)
            self.device = device
        return self

    def _make(self):
        self.d2h = _cuda.stream()
        self.h2d = _cuda.stream()
        self.ev_dep = _cuda.event()
        self.ev_in = [_cuda.event() for _ in range(SLOTS)]
        self.ev_out = [_cuda.event() for _ in range(SLOTS)]

    def close(self):
        if self.device is None:
            return
        for s in (self.d2h, self.h2d):
            _cuda.free_stream(s)
        for ev in [self.ev_dep] + self.ev_in + self.ev_out:
            _cuda.free_event(ev)
        self.pinned.clear()
        self.device = None

    def host(self, key, nbytes):
        """Pinned buffer `key` of at least nbytes, as a uint8 array; reallocated only to grow."""
        buf = self.pinned.get(key)
        if buf is None or buf.nbytes < nbytes:
            # grow geometrically, so a run of slightly larger calls does not pin memory every time
            size = max(nbytes, 1 << 16, 0 if buf is None else buf.nbytes * 3 // 2)
            self.pinned.pop(key, None)
            buf = self.pinned[key] = _cuda.pinned_memory(size)
        return buf, np.frombuffer(buf, dtype=np.uint8, count=buf.nbytes)

    def after(self, stream):
        """Orders both copy streams after the producer's stream."""
        _cuda.after(self.d2h, stream, self.ev_dep)
        _cuda.wait(self.h2d, self.ev_dep)

    def to_host(self, dst_ptr, src_ptr, nbytes):
        _cuda.copy(dst_ptr, src_ptr, nbytes, self.d2h)
        _cuda.sync(self.d2h)

    def to_device(self, dst_ptr, src_ptr, nbytes):
        _cuda.copy(dst_ptr, src_ptr, nbytes, self.h2d)
        _cuda.sync(self.h2d)


# ---- process-wide pool for point-to-point messages in flight ----------------------------------
_lock = threading.Lock()
_pool = {}           # size class -> free PinnedBuffers


def take(nbytes):
    """A pinned buffer of at least nbytes (a power of two, at least 64 KiB) from the pool."""
    size = max(1 << 16, 1 << (max(nbytes, 1) - 1).bit_length())
    with _lock:
        free = _pool.get(size)
        if free:
            return free.pop()
    return _cuda.pinned_memory(size)


def give(buf):
    """Returns a buffer from take() to the pool."""
    with _lock:
        _pool.setdefault(buf.nbytes, []).append(buf)
