"""Non-blocking point-to-point (Isend and friends, Irecv) on device buffers, through pinned host copies.

With an MPI that is not CUDA-aware a device pointer must never reach MPI. A send copies the buffer
into pinned host memory after the producer's stream (MPI allows that: the send buffer may not change
until completion anyway) and starts the host MPI send on the copy; a receive starts the host MPI
receive into a pinned copy and, when it has arrived, copies it to the device. The user gets a
generalized request (mpigpu._requests) that completes once the whole operation has, so MPI's
`Wait`/`Test`/`Waitall`, statuses (source, tag, count) and `Probe`-then-`Irecv` behave as with host
buffers. Pinned buffers come from a process-wide pool and go back to it on completion.
"""
import threading

import numpy as np
from mpi4py import MPI

from . import _engine, _requests
from ._buffers import read_whole
from ._mirror import _split
from ._staged import _NP
from .errors import Error

_lock = threading.Lock()
_pool = {}           # size class -> free PinnedBuffers
_copy_streams = {}   # device -> stream for copies back to the device (any thread)


def _take(nbytes):
    size = max(1 << 16, 1 << (max(nbytes, 1) - 1).bit_length())
    with _lock:
        free = _pool.get(size)
        if free:
            return free.pop()
    return _engine._device.PinnedBuffer(size)


def _give(buf):
    with _lock:
        _pool.setdefault(buf.nbytes, []).append(buf)


def _copy_stream(device):
    with _lock:
        s = _copy_streams.get(device)
        if s is None:
            s = _copy_streams[device] = _engine._with_device(device, _engine._device.stream_create)
        return s


def _stage(st, name, value, writable):
    """(device buffer, pinned copy, host view as mpi4py spec, device) with the device bytes copied in."""
    obj, rest = _split(value)
    buf = read_whole(name, 'buf', st.rank, obj, writable, _engine.consumer_stream)
    _device = _engine._device
    dev = buf.device
    if buf.nbytes:
        memtype, d = _device.pointer_info(buf.ptr)
        if memtype not in (_device.MEM_DEVICE, _device.MEM_MANAGED):
            raise Error(name, 'buffer claims to be on a CUDA device but its pointer is not device memory',
                        arg='buf', rank=st.rank, error_class=MPI.ERR_BUFFER)
        dev = d
    if dev is None or dev < 0:
        dev = _device.get_device()
    pinned = _take(buf.nbytes)
    if buf.nbytes:
        stager = st.stager_for(dev)
        stream = _engine.consumer_stream(dev) if buf.stream_synced else max(buf.stream, 0)

        def copy_in():
            stager.after(stream)
            stager.to_host(pinned.ptr, buf.ptr, buf.nbytes)
        _engine._with_device(dev, copy_in)
    arr = np.frombuffer(pinned, dtype=np.uint8, count=buf.nbytes)
    host = arr.view(_NP.get(buf.dtype, np.uint8) if buf.dtype != 0 else np.bool_)
    return buf, pinned, (host if rest is None else [host, *rest]), dev


def _guarded(st, name, fn):
    if _engine._device is None:
        raise Error(name, _engine.gpu_available()[1], arg='buf', rank=st.rank, error_class=MPI.ERR_BUFFER)
    try:
        return fn()
    except _engine._device.DeviceError as exc:
        raise Error(name, str(exc), rank=st.rank, error_class=MPI.ERR_OTHER) from None


def isend(comm, name, base, buf, dest, tag):
    """Isend/Issend/Irsend/Ibsend (`base` is mpi4py's method) with a device buffer."""
    st = comm.__dict__.get('_mg_state') or _engine._attach(comm)

    def go():
        dbuf, pinned, spec, dev = _stage(st, name, buf, False)
        try:
            inner = base(comm, spec, dest, tag)
        except BaseException:
            _give(pinned)
            raise
        return _requests.start(_requests.Work(dev, inner=inner, on_done=lambda: _give(pinned)))
    return _guarded(st, name, go)


def irecv(comm, buf, source, tag):
    """Irecv with a device buffer: the bytes arrive in pinned memory, then go to the device."""
    st = comm.__dict__.get('_mg_state') or _engine._attach(comm)

    def go():
        # The whole buffer is copied in first, so bytes past the received count stay as they were.
        dbuf, pinned, spec, dev = _stage(st, 'Irecv', buf, True)
        try:
            inner = MPI.Intracomm.Irecv(comm, spec, source, tag)
        except BaseException:
            _give(pinned)
            raise

        def copy_back():
            try:
                if dbuf.nbytes:
                    dm = _engine._device
                    s = _copy_stream(dev)
                    _engine._with_device(dev, dm.memcpy_async, dbuf.ptr, pinned.ptr, dbuf.nbytes, s)
                    _engine._with_device(dev, dm.stream_sync, s)
            finally:
                _give(pinned)
        return _requests.start(_requests.Work(dev, inner=inner, on_done=copy_back))
    return _guarded(st, 'Irecv', go)
