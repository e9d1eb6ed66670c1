"""Point-to-point with device buffers: GPU to GPU over peer mappings, or staged through pinned memory.

Sends of whole device arrays of at least MPIGPU_P2P_IPC_BYTES on a communicator whose device team
is up go GPU to GPU (mpigpu/_p2p_ipc.py: a header through MPI, the payload copied by the receiver out
of the sender's buffer). Everything else is staged: with an MPI that is not CUDA-aware a device
pointer must never reach MPI, so a send copies the buffer into pinned host memory after the
producer's stream (MPI allows that: the send buffer may not change until completion anyway) and
sends the copy; a receive lands in pinned memory and the received bytes go to the device.

Each operation is a `_requests.Work` (an inner MPI request plus what to do when it completes); the
non-blocking calls wrap it in a generalized request, so `Wait`/`Test`/`Waitall`, statuses (source,
tag, count) and `Probe`-then-`Irecv` behave as with host buffers; the blocking calls and Sendrecv
finish them in place. Pinned buffers come from a process-wide pool and go back on completion.
"""
import threading

import numpy as np
from mpi4py import MPI

from . import _engine, _mirror, _p2p_ipc, _requests
from ._buffers import read_whole
from ._config import config
from ._ext._intake import is_device
from ._mirror import IN, _split, device_of
from ._staged import _NP
from .errors import Error

_lock = threading.Lock()
_pool = {}           # size class -> free PinnedBuffers


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


def _state(comm):
    return comm.__dict__.get('_mg_state') or _engine._attach(comm)


def _stream_of(buf, dev):
    return _engine.consumer_stream(dev) if buf.stream_synced else max(buf.stream, 0)


def _copy_sync(dev, dst, src, nbytes, stream):
    """Copies nbytes on `stream` of device `dev` and waits for it."""
    dm = _engine._device

    def copy():
        dm.memcpy_async(dst, src, nbytes, stream)
        dm.stream_sync(stream)
    _engine._with_device(dev, copy)


def _stage(st, name, value, writable):
    """(device buffer, pinned copy, host view as mpi4py spec, device) with the device bytes copied in."""
    obj, rest = _split(value)
    buf = read_whole(name, 'buf', st.rank, obj, writable, _engine.consumer_stream)
    dev = device_of(st, name, 'buf', buf)
    pinned = _take(buf.nbytes)
    if buf.nbytes:
        stager = st.stager_for(dev)
        stream = _stream_of(buf, dev)

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


def _finish_now(work):
    """Completes a Work on the calling thread (blocking calls); raises what its completion raised."""
    work.finish(True)
    if work.exc is not None:
        raise work.exc


# ---- sends -----------------------------------------------------------------------------------
_SYNCHRONOUS = ('Ssend', 'Issend')


def _post_send(st, comm, name, base, value, dest, tag):
    """Starts a send of a device buffer; `base` is mpi4py's non-blocking method for the staged copy."""
    obj, rest = _split(value)
    if rest is None and name in ('Send', 'Ssend', 'Isend', 'Issend', 'Sendrecv'):
        buf = read_whole(name, 'buf', st.rank, obj, False, _engine.consumer_stream)
        dev = device_of(st, name, 'buf', buf)
        h = _p2p_ipc.header_for(st, buf, dev, dest)
        if h is not None:
            header, reply = h
            _engine._with_device(dev, _engine._device.stream_sync, _stream_of(buf, dev))  # payload ready
            code = np.full(1, -1, np.int32)
            inner = st.shadow.Irecv([code, MPI.INT], dest, reply)
            send = MPI.Intracomm.Issend if name in _SYNCHRONOUS else MPI.Intracomm.Isend
            hreq = send(comm, [header, MPI.BYTE], dest, tag)

            def replied():
                hreq.Wait()  # matched and delivered: the reply came after it
                _p2p_ipc.check_reply(st, name, dest, int(code[0]))
            return _requests.Work(dev, inner=inner, on_done=replied)
    _dbuf, pinned, spec, dev = _stage(st, name, value, False)
    try:
        inner = base(comm, spec, dest, tag)
    except BaseException:
        _give(pinned)
        raise
    return _requests.Work(dev, inner=inner, on_done=lambda: _give(pinned))


def isend(comm, name, base, buf, dest, tag):
    """Isend/Issend/Irsend/Ibsend (`base` is mpi4py's method) with a device buffer."""
    st = _state(comm)
    return _guarded(st, name, lambda: _requests.start(_post_send(st, comm, name, base, buf, dest, tag)))


def send(comm, name, buf, dest, tag):
    """Send/Ssend/Rsend/Bsend with a device buffer."""
    st = _state(comm)
    obj, rest = _split(buf)
    if rest is None and name in ('Send', 'Ssend') and _p2p_ipc.usable(st):
        base = getattr(MPI.Intracomm, 'I' + name.lower())
        return _guarded(st, name, lambda: _finish_now(_post_send(st, comm, name, base, buf, dest, tag)))
    blocking = getattr(MPI.Intracomm, name)
    return _mirror.run(comm, name, lambda b: blocking(comm, b, dest, tag), [(buf, IN)])


# ---- receives --------------------------------------------------------------------------------
def _kept_match(st, source, tag, remove=True):
    """The oldest message kept by Probe that (source, tag) matches (taken out with `remove`), or None."""
    for i, (s, t, data) in enumerate(st.kept):
        if source in (MPI.ANY_SOURCE, s) and tag in (MPI.ANY_TAG, t):
            return st.kept.pop(i) if remove else st.kept[i]
    return None


def _deliver(st, name, work, data, n, dst, capacity, stream, place):
    """What arrived (n bytes in `data`: a header or the payload itself) goes to `dst`; `place(n)`
    puts a payload there (None: MPI received it in place already)."""
    fields = _p2p_ipc.parse(data, n)
    if fields is not None:
        work.received = _p2p_ipc.receive(st, name, fields, work.source_of(), dst, capacity, stream)
        return
    if n > capacity:
        raise Error(name, f'message of {n} bytes truncated to the receive buffer of {capacity} bytes',
                    arg='buf', rank=st.rank, error_class=MPI.ERR_TRUNCATE)
    if place is not None and n:
        place(n)
    work.received = n


def _address(data):
    return np.frombuffer(data, np.uint8).ctypes.data


def _post_recv_device(st, comm, name, obj, source, tag):
    """A receive into a whole device array: bytes (or a header) land in pinned memory first."""
    buf = read_whole(name, 'buf', st.rank, obj, True, _engine.consumer_stream)
    dev = device_of(st, name, 'buf', buf)
    stream = _stream_of(buf, dev)
    cap = max(buf.nbytes, _p2p_ipc.HEADER_BYTES if _p2p_ipc.usable(st) else 0)
    pinned = _take(cap)
    kept = _kept_match(st, source, tag) if st.kept else None
    if kept is not None:
        inner = None
        np.frombuffer(pinned, np.uint8, count=len(kept[2]))[:] = np.frombuffer(kept[2], np.uint8)
    else:
        try:
            inner = MPI.Intracomm.Irecv(comm, [np.frombuffer(pinned, np.uint8, count=cap), MPI.BYTE], source, tag)
        except BaseException:
            _give(pinned)
            raise
    work = _requests.Work(dev, inner=inner, receive=True)
    if kept is not None:
        work.source, work.tag = kept[0], kept[1]

    def arrived():
        try:
            n = len(kept[2]) if kept is not None else work.inner_status.Get_count(MPI.BYTE)
            _deliver(st, name, work, pinned, n, buf.ptr, buf.nbytes, stream,
                     lambda k: _copy_sync(dev, buf.ptr, pinned.ptr, k, stream))
        finally:
            _give(pinned)
    work.on_done = arrived
    return work


def _post_recv_staged(st, comm, name, value, source, tag):
    """A receive into a device buffer specification: the whole buffer is staged, as mpi4py reads it."""
    dbuf, pinned, spec, dev = _stage(st, name, value, True)
    try:
        inner = MPI.Intracomm.Irecv(comm, spec, source, tag)
    except BaseException:
        _give(pinned)
        raise

    def copy_back():
        try:
            n = work.inner_status.Get_count(MPI.BYTE)
            fields = _p2p_ipc.parse(pinned, n) if _p2p_ipc.usable(st) else None
            if fields is not None:
                _p2p_ipc.refuse(st, name, fields, work.inner_status.Get_source())
            if dbuf.nbytes:
                _copy_sync(dev, dbuf.ptr, pinned.ptr, dbuf.nbytes, _stream_of(dbuf, dev))
        finally:
            _give(pinned)
    work = _requests.Work(dev, inner=inner, on_done=copy_back, receive=True)
    return work


def host_checked(st, value):
    """True when a receive into host buffer `value` must look for a GPU sender's header: a whole
    buffer of at least MPIGPU_P2P_IPC_BYTES on a communicator where senders may use peer mappings."""
    if not _p2p_ipc.usable(st) or type(value) in (list, tuple):
        return False
    try:
        return memoryview(value).nbytes >= config.p2p_ipc_bytes
    except TypeError:
        return False


def _post_recv_host(st, comm, name, value, source, tag):
    """A receive into a whole host buffer on a communicator with a device team."""
    mv = memoryview(value).cast('B')
    work = _requests.Work(st.device, inner=MPI.Intracomm.Irecv(comm, value, source, tag), receive=True)

    def arrived():
        n = work.inner_status.Get_count(MPI.BYTE)
        if n == _p2p_ipc.HEADER_BYTES:
            _deliver(st, name, work, mv, n, _address(mv), mv.nbytes, _engine.consumer_stream(st.device), None)
    work.on_done = arrived
    return work


def _post_recv(st, comm, name, value, source, tag):
    if value is None or not is_device(value):
        if st.kept:
            kept = _kept_match(st, source, tag)
            if kept is not None:
                return _kept_host(st, name, value, kept)
        if host_checked(st, value):
            return _post_recv_host(st, comm, name, value, source, tag)
        return _requests.Work(None, inner=MPI.Intracomm.Irecv(comm, value, source, tag), receive=True)
    obj, rest = _split(value)
    if rest is None:
        return _post_recv_device(st, comm, name, obj, source, tag)
    return _post_recv_staged(st, comm, name, value, source, tag)


def _kept_host(st, name, value, kept):
    """A host receive satisfied by a message Probe took out of MPI."""
    src, tag, data = kept
    obj = value[0] if type(value) in (list, tuple) else value
    mv = memoryview(obj).cast('B')
    work = _requests.Work(st.device, receive=True)
    work.source, work.tag = src, tag

    def arrived():
        _deliver(st, name, work, data, len(data), _address(mv), mv.nbytes, _engine.consumer_stream(st.device),
                 lambda k: mv.__setitem__(slice(0, k), data[:k]))
    work.on_done = arrived
    return work


def irecv(comm, buf, source, tag):
    st = _state(comm)
    return _guarded(st, 'Irecv', lambda: _requests.start(_post_recv(st, comm, 'Irecv', buf, source, tag)))


def recv(comm, buf, source, tag, status):
    """Recv with a device buffer, or a host buffer that may receive a GPU sender's header."""
    st = _state(comm)

    def go():
        work = _post_recv(st, comm, 'Recv', buf, source, tag)
        _finish_now(work)
        if status is not None:
            work.query(status)
    return _guarded(st, 'Recv', go)


def sendrecv(comm, sendbuf, dest, sendtag, recvbuf, source, recvtag, status):
    """Sendrecv: the receive is posted first, both run at once, both finish before returning."""
    st = _state(comm)

    def go():
        rwork = _post_recv(st, comm, 'Sendrecv', recvbuf, source, recvtag)
        try:
            if sendbuf is not None and is_device(sendbuf):
                swork = _post_send(st, comm, 'Sendrecv', MPI.Intracomm.Isend, sendbuf, dest, sendtag)
            else:
                swork = _requests.Work(None, inner=MPI.Intracomm.Isend(comm, sendbuf, dest, sendtag))
        except BaseException:
            if rwork.inner is not None:  # take the posted receive back before raising
                rwork.inner.Cancel()
            rwork.on_done = None
            rwork.finish(True)
            raise
        try:
            _finish_now(rwork)
        finally:
            swork.finish(True)  # the send completes even when the receive failed (truncation)
        if swork.exc is not None:
            raise swork.exc
        if status is not None:
            rwork.query(status)
    return _guarded(st, 'Sendrecv', go)


def probe(comm, source, tag, status, blocking):
    """Probe/Iprobe on a communicator whose senders may send headers: a 128-byte message is taken out
    of MPI and kept (receives take kept messages first), so the status reports the payload's size."""
    st = _state(comm)
    kept = _kept_match(st, source, tag, remove=False) if st.kept else None
    if kept is not None:
        return _report(status, *kept)
    s = MPI.Status()
    if blocking:
        MPI.Intracomm.Probe(comm, source, tag, s)
    elif not MPI.Intracomm.Iprobe(comm, source, tag, s):
        return False
    n = s.Get_count(MPI.BYTE)
    if n != _p2p_ipc.HEADER_BYTES:
        if status is not None:
            _copy_status(status, s.Get_source(), s.Get_tag(), n)
        return True
    s2 = MPI.Status()
    msg = MPI.Intracomm.Mprobe(comm, s.Get_source(), s.Get_tag(), s2)
    data = bytearray(n)
    msg.Recv([data, MPI.BYTE], s2)
    entry = (s2.Get_source(), s2.Get_tag(), bytes(data))
    st.kept.append(entry)
    return _report(status, *entry)


def _report(status, source, tag, data):
    fields = _p2p_ipc.parse(data, len(data))
    if status is not None:
        _copy_status(status, source, tag, fields[3] if fields is not None else len(data))
    return True


def _copy_status(status, source, tag, nbytes):
    status.Set_source(source)
    status.Set_tag(tag)
    status.Set_elements(MPI.BYTE, nbytes)
    status.Set_error(MPI.SUCCESS)
