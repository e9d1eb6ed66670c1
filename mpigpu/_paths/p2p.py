"""Point-to-point with device buffers: GPU to GPU over peer mappings, or staged through pinned memory.

Sends of at least MPIGPU_P2P_IPC_BYTES of a whole device array, of a specification's block of plain bytes,
or of a datatype's instances packed on the GPU, on a communicator whose device team is up, go GPU to GPU
(p2p_ipc: a header through MPI, the payload read by the receiver out of the sender's buffer; every receive
takes it through its specification: p2p_target). Everything else is staged: with an MPI that is not CUDA-aware a device
pointer must never reach MPI, so a send copies the buffer into pinned host memory after the
producer's stream (MPI allows that: the send buffer may not change until completion anyway) and
sends the copy; a receive lands in pinned memory and the received bytes go to the device.

Each operation is a `requests.Work` (an inner MPI request plus what to do when it completes); the
non-blocking calls wrap it in a generalized request, so `Wait`/`Test`/`Waitall`, statuses (source,
tag, count) and `Probe`-then-`Irecv` behave as with host buffers; the blocking calls and Sendrecv
finish them in place. Pinned buffers come from a process-wide pool and go back on completion.
"""
import time

import numpy as np
from mpi4py import MPI

from .. import _cuda
from .._base import plain as _plain
from .._describe import datatypes as _datatypes
from .._describe.call import read_once, read_whole, spec_layout, unpack_spec
from .._base.config import config
from .._ext._intake import is_device
from .._state.comm_state import _CACHE as _CACHE_KEY, state_of
from .._describe.strided import as_spec
from ..errors import Error
from . import mirrored, p2p_ipc
from .support import packed, packing, scratch
from .._state import requests
from .mirrored import IN, host_view, split_spec, trusted
from .p2p_target import HostTarget, device_block, host_target
from .support.pinned import Stager, give, take


# mpi4py's own (python -m mpigpu puts mpigpu's Message class where mpi4py.MPI.Message was)
_message_recv = MPI.Message.Recv


class P2pState:
    """What point-to-point keeps per communicator: messages Probe took out of MPI, and the reply
    tags of GPU-to-GPU sends (its state: `CommState.owned(P2pState)`)."""

    def __init__(self, st):
        self.kept = []          # (source, tag, bytes) that Probe took out of MPI, oldest first
        self.reply_tags = {}    # dest -> last reply tag used

    def next_reply_tag(self, dest):
        """A tag for the reply to a send to `dest` (per destination, so replies to outstanding sends
        never collide; the control communicator carries nothing else)."""
        tag = (self.reply_tags.get(dest, -1) + 1) % 32768
        self.reply_tags[dest] = tag
        return tag

    def close(self):
        self.kept.clear()


def kept_messages(st):
    """The messages Probe took out of MPI on this communicator (empty when there are none)."""
    p = st._owned.get(P2pState)
    return p.kept if p is not None else ()


def truncated(st, name, nbytes, capacity):
    """The error of a message of nbytes arriving at a receive buffer of `capacity` bytes."""
    return Error(name, f'message of {nbytes} bytes truncated to the receive buffer of {capacity} bytes',
                 arg='buf', rank=st.rank, error_class=MPI.ERR_TRUNCATE)


# ---- the fast path (mpigpu/_ext/_p2p.pxi): blocking calls on whole device arrays in one Cython call ----
_fast_for = None  # the CUDA layer the fast path was bound for


def _fast():
    """The CUDA layer, its point-to-point fast path bound, or None where it has none (the CPU tests'
    fake layer, a build without CUDA)."""
    global _fast_for
    dm = _cuda.device
    if dm is not _fast_for:
        if getattr(dm, 'bind_fast_p2p', None) is None:
            return None
        dm.bind_fast_p2p(_CACHE_KEY, P2pState, config, p2p_ipc, truncated, _plain.Comm, MPI,
                         lambda: np.full(1, -1, np.int32), _datatypes.layout, scratch.take, scratch.give)
        _fast_for = dm
    return dm


def _fast_failed(comm, name, exc):
    """A CUDA error of the fast path as the general path raises it."""
    return Error(name, str(exc), rank=state_of(comm).rank, error_class=MPI.ERR_OTHER)


def _copy_sync(dev, dst, src, nbytes, stream):
    """Copies nbytes on `stream` of device `dev` and waits for it."""
    def copy():
        _cuda.copy(dst, src, nbytes, stream)
        _cuda.sync(stream)
    _cuda.with_device(dev, copy)


def _stage(st, name, value, writable):
    """(device buffer, pinned copy, host view as mpi4py spec, device) with the device bytes copied in."""
    obj, rest = split_spec(value)
    buf = read_whole(name, 'buf', st.rank, obj, writable, _cuda.consumer_stream)
    if rest is not None:
        buf = trusted(name, 'buf', st.rank, buf, rest, (packing.SIMPLE, 0))
    dev = _cuda.device_of(name, 'buf', st.rank, buf)
    pinned = take(buf.nbytes)
    if buf.nbytes:
        sg = st.owned(Stager).on(dev)
        stream = _cuda.stream_of(buf, dev)

        def copy_in():
            sg.after(stream)
            sg.to_host(pinned.ptr, buf.ptr, buf.nbytes)
        _cuda.with_device(dev, copy_in)
    host = host_view(np.frombuffer(pinned, dtype=np.uint8), buf.nbytes, buf.typestr)
    return buf, pinned, (host if rest is None else [host, *rest]), dev


def _read(value, name):
    """A buffer argument as every later step takes it: its device buffer read once (read_once), else a
    strided array through its strides (as_spec)."""
    return as_spec(read_once(value, _cuda.consumer_stream), call=name)


def _guarded(st, name, fn):
    _cuda.require(name, st.rank, 'buf')
    with _cuda.errors_as(name, st.rank):
        return fn()


def _finish_now(work):
    """Completes a Work on the calling thread (blocking calls); raises what its completion raised."""
    work.finish(True)
    if work.exc is not None:
        raise work.exc


# ---- sends -----------------------------------------------------------------------------------
_SYNCHRONOUS = ('Ssend', 'Issend')
_FAST_SENDS = ('Send', 'Ssend')


def _then(work, after):
    """Runs `after()` once `work` is done, after what it does itself."""
    first = work.on_done

    def both():
        try:
            if first is not None:
                first()
        finally:
            after()
    work.on_done = both
    return work


def _plain_block(st, name, obj, rest, writable):
    """The bytes a device buffer specification describes as one block (a predefined or plain datatype, a
    typecode; a count, a displacement) as a whole device buffer, or None: a datatype with gaps, or a block
    past the array (the staged path trusts an explicit count there, or raises)."""
    buf = read_whole(name, 'buf', st.rank, obj, writable, _cuda.consumer_stream)
    try:
        block = device_block(name, st.rank, buf, rest)
    except Error:
        return None
    return None if block is None else buf.view(block[0] - buf.ptr, block[1], -1)


def _staged_block(name, rank, block, rest):
    """What a send stages for a specification's block: the block with the specification's datatype (its
    instances fill the block: a plain datatype's size is its extent), so the message keeps its signature."""
    dtype = unpack_spec(name, 'buf', rank, [None, *rest])[3]
    return block if dtype is None else [block, dtype]


def _post_send(st, comm, name, base, value, dest, tag):
    """Starts a send of a device buffer; `base` is mpi4py's non-blocking method for the staged copy.
    A buffer with a derived datatype is packed on its GPU first and its packed elements are sent."""
    if packed.datatype_of(value) is not None:
        pk = packed.Packed(st, name, 'buf', value, False)
        try:
            pk.pack()
            return _then(_post_send(st, comm, name, base, pk.view(), dest, tag), pk.release)
        except BaseException:
            pk.release()
            raise
    obj, rest = split_spec(value)
    block = read_whole(name, 'buf', st.rank, obj, False, _cuda.consumer_stream) if rest is None else \
        _plain_block(st, name, obj, rest, False)  # a whole array, or a specification's block of plain bytes
    if block is not None and name in ('Send', 'Ssend', 'Isend', 'Issend', 'Sendrecv') and p2p_ipc.usable(st):
        dev = _cuda.device_of(name, 'buf', st.rank, block)
        reply = st.owned(P2pState).next_reply_tag(dest)
        header = p2p_ipc.header_at(st, block.ptr, block.nbytes, dev, dest, reply)
        if header is not None:
            _cuda.with_device(dev, _cuda.sync, _cuda.stream_of(block, dev))  # payload ready
            code = np.full(1, -1, np.int32)
            inner = st.control.Irecv([code, MPI.INT], dest, reply)
            send = _plain.Comm.Issend if name in _SYNCHRONOUS else _plain.Comm.Isend
            hreq = send(comm, [header, MPI.BYTE], dest, tag)

            def replied():
                hreq.Wait()  # matched and delivered: the reply came after it
                p2p_ipc.check_reply(st, name, dest, int(code[0]))
            return requests.Work(dev, inner=inner, on_done=replied)
    if block is not None and rest is not None:
        value = _staged_block(name, st.rank, block, rest)  # the block alone, not the whole buffer
    _dbuf, pinned, spec, dev = _stage(st, name, value, False)
    try:
        inner = base(comm, spec, dest, tag)
    except BaseException:
        give(pinned)
        raise
    return requests.Work(dev, inner=inner, on_done=lambda: give(pinned))


def isend(comm, name, base, buf, dest, tag):
    """Isend/Issend/Irsend/Ibsend (`base` is mpi4py's method) with a device buffer."""
    buf = _read(buf, name)
    st = state_of(comm)
    return _guarded(st, name, lambda: requests.start(_post_send(st, comm, name, base, buf, dest, tag)))


def send(comm, name, buf, dest, tag):
    """Send/Ssend/Rsend/Bsend with a device buffer."""
    if name in _FAST_SENDS:  # (the fast path reads an array, or [array, (count,) datatype]; declines the rest)
        dm = _fast()
        if dm is not None:
            try:
                if dm.p2p_send(comm, buf, dest, tag, name == 'Ssend'):
                    return None
            except dm.DeviceError as exc:
                raise _fast_failed(comm, name, exc) from None
    buf = _read(buf, name)
    st = state_of(comm)
    if (name in ('Send', 'Ssend') and p2p_ipc.usable(st)) or packed.datatype_of(buf) is not None:
        base = getattr(_plain.Comm, 'I' + name.lower())
        return _guarded(st, name, lambda: _finish_now(_post_send(st, comm, name, base, buf, dest, tag)))
    blocking = getattr(_plain.Comm, name)
    return mirrored.run(st, name, lambda b: blocking(comm, b, dest, tag), [(buf, IN)])


# ---- receives --------------------------------------------------------------------------------
def _kept_index(st, source, tag):
    """Where the oldest message kept by Probe that (source, tag) matches lies in the kept list, or -1."""
    for i, (s, t, _data) in enumerate(kept_messages(st)):
        if source in (MPI.ANY_SOURCE, s) and tag in (MPI.ANY_TAG, t):
            return i
    return -1


def _kept_match(st, source, tag, remove=True):
    """The oldest message kept by Probe that (source, tag) matches (taken out with `remove`), or None."""
    i = _kept_index(st, source, tag)
    if i < 0:
        return None
    kept = kept_messages(st)
    return kept.pop(i) if remove else kept[i]


def _receive_kept(st, source, tag, build):
    """The Work of a receive that a message Probe kept satisfies (`build(kept)` makes it), or None where none
    matches. The message leaves the kept list only once `build` returned: a receive whose arguments are
    refused leaves it for the next, as MPI leaves a message that an erroneous receive never matched."""
    i = _kept_index(st, source, tag)
    if i < 0:
        return None
    kept = kept_messages(st)
    work = build(kept[i])
    del kept[i]
    return work


def _deliver(st, name, work, data, n, dst, capacity, stream, place, read=None):
    """What arrived (n bytes in `data`: a header or the payload itself) goes to `dst`; `place(n)`
    puts a payload there (None: MPI received it in place already); `read`: p2p_ipc.receive's."""
    fields = p2p_ipc.parse(data, n)
    if fields is not None:
        work.received = p2p_ipc.receive(st, name, fields, work.source_of(), dst, capacity, stream, read)
        return
    if n > capacity:
        raise truncated(st, name, n, capacity)
    if place is not None and n:
        place(n)
    work.received = n


def _post_recv_device(st, comm, name, obj, source, tag, read=None):
    """A receive into a whole device array: bytes (or a header) land in pinned memory first. `read`: what
    reads a GPU sender's payload at its mapped address instead of the copy into the array
    (p2p_ipc.receive)."""
    buf = read_whole(name, 'buf', st.rank, obj, True, _cuda.consumer_stream)
    dev = _cuda.device_of(name, 'buf', st.rank, buf)
    stream = _cuda.stream_of(buf, dev)
    cap = max(buf.nbytes, p2p_ipc.HEADER_BYTES if p2p_ipc.usable(st) else 0)
    pinned = take(cap)
    kept = _kept_match(st, source, tag) if kept_messages(st) else None
    if kept is not None:
        inner = None
        np.frombuffer(pinned, np.uint8, count=len(kept[2]))[:] = np.frombuffer(kept[2], np.uint8)
    else:
        try:
            inner = _plain.Comm.Irecv(comm, [np.frombuffer(pinned, np.uint8, count=cap), MPI.BYTE], source, tag)
        except BaseException:
            give(pinned)
            raise
    work = requests.Work(dev, inner=inner, receive=True)
    if kept is not None:
        work.source, work.tag = kept[0], kept[1]

    def arrived():
        try:
            n = len(kept[2]) if kept is not None else work.inner_status.Get_count(MPI.BYTE)
            _deliver(st, name, work, pinned, n, buf.ptr, buf.nbytes, stream,
                     lambda k: _copy_sync(dev, buf.ptr, pinned.ptr, k, stream), read)
        finally:
            give(pinned)
    work.on_done = arrived
    return work


def _post_recv_staged(st, comm, name, value, source, tag):
    """A receive into a device buffer specification that is neither a block of plain bytes within the array
    (received as a whole array: _plain_block) nor a datatype with gaps (packed.Packed): one whose explicit
    count reaches past the array object, which MPI trusts (`trusted`: within its allocation). The whole
    buffer is staged, as mpi4py reads it; a GPU sender's header arriving there brings the payload into the
    specification's block of the staged extent (refused, both sides raising, where it lies past that)."""
    if kept_messages(st):
        work = _receive_kept(st, source, tag, lambda kept: _kept_device(st, name, value, kept))
        if work is not None:
            return work
    dbuf, pinned, spec, dev = _stage(st, name, value, True)
    try:
        inner = _plain.Comm.Irecv(comm, spec, source, tag)
    except BaseException:
        give(pinned)
        raise
    rest = split_spec(value)[1]

    def copy_back():
        try:
            n = work.inner_status.Get_count(MPI.BYTE)
            fields = block = None
            if n == p2p_ipc.HEADER_BYTES and p2p_ipc.usable(st):
                try:
                    block = device_block(name, st.rank, dbuf, rest)
                except Error:
                    block = None
                # MPI put what arrived at the specification's block (its displacement), not the buffer's start
                fields = p2p_ipc.parse(memoryview(pinned)[block[0] - dbuf.ptr if block is not None else 0:], n)
            if fields is not None:
                if block is None:
                    p2p_ipc.refuse(st, name, fields, work.inner_status.Get_source(),
                                   'its specification reaches past the buffer')
                work.received = p2p_ipc.receive(st, name, fields, work.inner_status.Get_source(), block[0], block[1],
                                                _cuda.stream_of(dbuf, dev))
                return  # (the pinned copy holds the header, not the payload: nothing to copy back)
            if dbuf.nbytes:
                _copy_sync(dev, dbuf.ptr, pinned.ptr, dbuf.nbytes, _cuda.stream_of(dbuf, dev))
        finally:
            give(pinned)
    work = requests.Work(dev, inner=inner, on_done=copy_back, receive=True)
    return work


def _header_target(st, name, value):
    """The HostTarget of a receive into host buffer `value` (a whole buffer or a specification) that must
    look for a GPU sender's header: room for at least MPIGPU_P2P_IPC_BYTES on a communicator where senders
    may use peer mappings; else None."""
    if not p2p_ipc.usable(st):
        return None
    return host_target(name, st.rank, value, config.p2p_ipc_bytes)


def host_checked(st, value):
    """True when a receive into host buffer `value` must look for a GPU sender's header (_header_target)."""
    return _header_target(st, 'Recv', value) is not None


def _post_recv_host(st, comm, value, target, source, tag):
    """A receive into a host buffer or specification (`target`: where its bytes lie) on a communicator with a
    device team: MPI receives into it; a GPU sender's header found there brings the payload through the
    specification."""
    work = requests.Work(st.device, inner=_plain.Comm.Irecv(comm, value, source, tag), receive=True)

    def arrived():
        n = work.inner_status.Get_count(MPI.BYTE)
        fields = p2p_ipc.parse(target.head(n), n) if n == p2p_ipc.HEADER_BYTES else None
        if fields is not None:
            work.received = target.take_payload(st, fields, work.source_of())
    work.on_done = arrived
    return work


def _post_recv(st, comm, name, value, source, tag):
    if value is None or not is_device(value):
        if kept_messages(st):
            work = _receive_kept(st, source, tag, lambda kept: _kept_host(st, name, value, kept))
            if work is not None:
                return work
        target = _header_target(st, name, value)
        if target is not None:
            return _post_recv_host(st, comm, value, target, source, tag)
        return requests.Work(None, inner=_plain.Comm.Irecv(comm, value, source, tag), receive=True)
    if packed.datatype_of(value) is not None:
        pk = packed.Packed(st, name, 'buf', value, True)
        direct = []  # a GPU sender's payload unpacked straight from its bytes (then nothing is left to unpack)

        def read(src, nbytes):
            pk.unpack_from(src, nbytes)
            direct.append(nbytes)
        try:
            direct_ok = not pk.in_place and pk.device == st.device  # (the peer mapping is st.device's)
            work = _post_recv_device(st, comm, name, pk.view(), source, tag, read if direct_ok else None)
        except BaseException:
            pk.release()
            raise

        def unpack():
            try:
                if not direct and work.received is not None:  # (None: the receive failed)
                    pk.unpack(work.received)
            finally:
                pk.release()
        return _then(work, unpack)
    obj, rest = split_spec(value)
    if rest is None:
        return _post_recv_device(st, comm, name, obj, source, tag)
    block = _plain_block(st, name, obj, rest, True)
    if block is not None:  # received as a whole array of the block's bytes (no copy of the rest of the buffer)
        return _post_recv_device(st, comm, name, block, source, tag)
    return _post_recv_staged(st, comm, name, value, source, tag)


def _kept_host(st, name, value, kept):
    """A host receive satisfied by a message Probe took out of MPI (through the receive's specification)."""
    src, tag, data = kept
    target = HostTarget(name, st.rank, value)
    work = requests.Work(st.device, receive=True)
    work.source, work.tag = src, tag

    def arrived():
        fields = p2p_ipc.parse(data, len(data))
        if fields is not None:
            work.received = target.take_payload(st, fields, src)
            return
        if len(data) > target.room:
            raise truncated(st, name, len(data), target.room)
        target.place(data, len(data))
        work.received = len(data)
    work.on_done = arrived
    return work


def irecv(comm, buf, source, tag):
    buf = _read(buf, 'Irecv')
    st = state_of(comm)
    return _guarded(st, 'Irecv', lambda: requests.start(_post_recv(st, comm, 'Irecv', buf, source, tag)))


def recv(comm, buf, source, tag, status):
    """Recv with a device buffer, or a host buffer that may receive a GPU sender's header."""
    dm = _fast()
    if dm is not None:
        try:
            if dm.p2p_recv(comm, buf, source, tag, status):
                return None
        except dm.DeviceError as exc:
            raise _fast_failed(comm, 'Recv', exc) from None
    buf = _read(buf, 'Recv')
    st = state_of(comm)

    def go():
        work = _post_recv(st, comm, 'Recv', buf, source, tag)
        _finish_now(work)
        if status is not None:
            work.query(status)
    return _guarded(st, 'Recv', go)


def sendrecv(comm, sendbuf, dest, sendtag, recvbuf, source, recvtag, status):
    """Sendrecv: the receive is posted first, both run at once, both finish before returning."""
    dm = _fast()
    if dm is not None:
        try:
            if dm.p2p_sendrecv(comm, sendbuf, dest, sendtag, recvbuf, source, recvtag, status):
                return None
        except dm.DeviceError as exc:
            raise _fast_failed(comm, 'Sendrecv', exc) from None
    sendbuf, recvbuf = _read(sendbuf, 'Sendrecv'), _read(recvbuf, 'Sendrecv')
    st = state_of(comm)

    def go():
        rwork = _post_recv(st, comm, 'Sendrecv', recvbuf, source, recvtag)
        try:
            if sendbuf is not None and is_device(sendbuf):
                swork = _post_send(st, comm, 'Sendrecv', _plain.Comm.Isend, sendbuf, dest, sendtag)
            else:
                swork = requests.Work(None, inner=_plain.Comm.Isend(comm, sendbuf, dest, sendtag))
        except BaseException:
            if rwork.inner is not None:  # take the posted receive back before raising
                rwork.inner.Cancel()
            # its on_done still runs: buffers go back to their pools, and a message that matched before the
            # cancel (or one Probe kept) is delivered: a header's sender waits for its reply
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


class _CopyOf:
    """A device copy of a buffer's bytes, exported as the buffer exports them (the same elements, at the
    copy's `ptr`): the send side of Sendrecv_replace."""
    __slots__ = ('__cuda_array_interface__',)

    def __init__(self, buf, ptr):
        cai = dict(buf.__cuda_array_interface__)
        cai['data'], cai['stream'] = (ptr, False), None  # copied and synchronized: no stream to wait for
        self.__cuda_array_interface__ = cai


def _spec_span(name, rank, buf, rest):
    """[lo, hi): the bytes from buf's pointer that its specification reaches, the buffer's own included
    (an explicit count may reach past the array within its allocation, a datatype before its pointer)."""
    if rest is None:
        return 0, buf.nbytes
    start, count, size, lay = spec_layout(name, 'buf', rank, rest, buf.nbytes, buf.itemsize or 1)
    if not count:
        return 0, buf.nbytes
    if lay is None:
        lo, hi = start, start + count * size
    else:
        lo, hi = start + lay.true_lb, start + (count - 1) * lay.extent + lay.true_lb + lay.true_extent
    return min(lo, 0), max(hi, buf.nbytes)


def sendrecv_replace(comm, buf, dest, sendtag, source, recvtag, status):
    """Sendrecv_replace with a device buffer, or a host buffer that may receive a GPU sender's header: a
    Sendrecv from a copy of the buffer's memory into the buffer itself, so the receive takes a GPU
    sender's header as every receive does (on host mirrors the header's bytes landed as data, and its
    sender waited for a reply that never came). The copy holds every byte the buffer's array holds, so
    a datatype with gaps sends from the same places; the received elements land in the buffer."""
    buf = _read(buf, 'Sendrecv_replace')
    obj, rest = split_spec(buf)
    if obj is MPI.BOTTOM or obj is None:  # absolute addresses: no copy of "the buffer" to send from
        return _plain.Comm.Sendrecv_replace(comm, buf, dest, sendtag, source, recvtag, status)
    st = state_of(comm)

    def spec(x):
        return x if rest is None else [x, *rest]

    def go():
        if not is_device(obj):
            copy = np.array(memoryview(obj), copy=True)  # the same format: mpi4py reads the same elements
            return sendrecv(comm, spec(copy), dest, sendtag, buf, source, recvtag, status)
        whole = read_whole('Sendrecv_replace', 'buf', st.rank, obj, True, _cuda.consumer_stream)
        lo, hi = _spec_span('Sendrecv_replace', st.rank, whole, rest)
        dev = _cuda.device_of('Sendrecv_replace', 'buf', st.rank, whole)
        mem = scratch.take(hi - lo, dev)
        try:
            if hi > lo:
                _copy_sync(dev, mem.ptr, whole.ptr + lo, hi - lo, _cuda.stream_of(whole, dev))
            # the copy's pointer where the buffer's lies from the span's start: the specification reads
            # the same bytes there (past the array: within the scratch block, its allocation)
            copy = _CopyOf(whole, mem.ptr - lo)
            return sendrecv(comm, spec(copy), dest, sendtag, buf, source, recvtag, status)
        finally:
            scratch.give(mem, dev)  # sendrecv returned: its send is complete, nothing reads the copy
    return _guarded(st, 'Sendrecv_replace', go)


class RecvInit(requests.Startable, requests.Finishing, MPI.Prequest):
    """Recv_init with a device buffer, or a host buffer that may receive a GPU sender's header: each Start
    posts the receive as Irecv does, so every round takes a GPU sender's header (on host mirrors the
    header's bytes landed as data, and its sender waited for a reply that never came)."""

    @classmethod
    def create(cls, comm, buf, source, tag):
        st = state_of(comm)
        _cuda.require('Recv_init', st.rank, 'buf')
        req = cls()
        req._comm, req._st, req._args, req._work = comm, st, (_read(buf, 'Recv_init'), source, tag), None
        return req

    _args = None

    def _freed(self):
        return self._args is None

    def Start(self):
        st = self._st
        self._check_startable(st.rank)
        buf, source, tag = self._args

        def go():
            self._work = _post_recv(st, self._comm, 'Recv_init', buf, source, tag)
            requests.set_handle(self, requests.start(self._work))
        _guarded(st, 'Start', go)

    cancels_rounds = True  # Cancel reaches the round's receive (the interposer's MPI_Cancel asks)

    def Cancel(self):
        """Cancels the active round's receive, as MPI lets a receive be until a message has matched it;
        Wait or Test then completes the round, its status cancelled."""
        w = self._work
        if not self._active() or w is None or w.inner is None:
            return
        with w.lock:  # held by a Test only (Wait below polls), never across a wait for a message
            if not w.done:
                w.inner.Cancel()

    def Wait(self, status=None):
        """Waits by polling the round's receive, so that its lock is free between looks and a Cancel on
        another thread can end a round no message will meet (a blocking wait held the lock throughout)."""
        w = self._work
        if w is not None:
            pause = config.poll_sleep_us * 1e-6
            while not w.finish(False):
                time.sleep(pause)
        return MPI.Prequest.Wait(self, status)

    def Free(self):
        if self._active():
            self.Wait()
        self._args = self._work = None


def probe(comm, source, tag, status, blocking):
    """Probe/Iprobe on a communicator whose senders may send headers: a 128-byte message is taken out
    of MPI and kept (receives take kept messages first), so the status reports the payload's size."""
    st = state_of(comm)
    kept = _kept_match(st, source, tag, remove=False) if kept_messages(st) else None
    if kept is not None:
        return _report(status, *kept)
    s = MPI.Status()
    if blocking:
        _plain.Comm.Probe(comm, source, tag, s)
    elif not _plain.Comm.Iprobe(comm, source, tag, s):
        return False
    n = s.Get_count(MPI.BYTE)
    if n != p2p_ipc.HEADER_BYTES:
        if status is not None:
            _copy_status(status, s.Get_source(), s.Get_tag(), n)
        return True
    s2 = MPI.Status()
    msg = _plain.Comm.Mprobe(comm, s.Get_source(), s.Get_tag(), s2)
    data = bytearray(n)
    msg.Recv([data, MPI.BYTE], s2)
    entry = (s2.Get_source(), s2.Get_tag(), bytes(data))
    st.owned(P2pState).kept.append(entry)
    return _report(status, *entry)


# ---- matched probes (Mprobe, Improbe) and their receives -------------------------------------------
def matched_probe(comm, source, tag, status, blocking):
    """Mprobe/Improbe: (the MPI message or None, kept): on a communicator whose senders may send
    headers, a message of the header's size is received at once and kept as (source, tag, bytes), so
    the status reports the payload's size and the receive can copy it from the sender; else kept is
    None and the message stays MPI's."""
    st = state_of(comm)
    if st.control is None:
        msg = _plain.Comm.Mprobe(comm, source, tag, status) if blocking else _plain.Comm.Improbe(comm, source, tag, status)
        return msg, None
    kept = _kept_match(st, source, tag) if kept_messages(st) else None
    if kept is not None:
        _report(status, *kept)
        return None, kept
    s = MPI.Status()
    msg = _plain.Comm.Mprobe(comm, source, tag, s) if blocking else _plain.Comm.Improbe(comm, source, tag, s)
    if msg is None:
        return None, None
    n = s.Get_count(MPI.BYTE)
    if n != p2p_ipc.HEADER_BYTES:
        if status is not None:
            _copy_status(status, s.Get_source(), s.Get_tag(), n)
        return msg, None
    data = bytearray(n)
    msg.Recv([data, MPI.BYTE])
    kept = (s.Get_source(), s.Get_tag(), bytes(data))
    _report(status, *kept)
    return None, kept


def matched_recv(st, name, msg, kept, buf, status):
    """Message.Recv: a kept message (a header or bytes taken at the probe) or MPI's `msg`, into `buf`
    (device or host)."""
    def go():
        if kept is not None:
            try:
                work = (_kept_device if is_device(buf) else _kept_host)(st, name, buf, kept)
            except BaseException:  # the message is consumed (Mprobe took it); a header's sender must hear
                fields = p2p_ipc.parse(kept[2], len(kept[2]))
                if fields is not None:
                    p2p_ipc.fail(st, fields, kept[0])
                raise
            _finish_now(work)
            if status is not None:
                work.query(status)
            return None
        if is_device(buf):
            return mirrored.run(st, name, lambda b: _message_recv(msg, b, status), [(buf, mirrored.OUT)])
        return _message_recv(msg, buf, status)
    return _guarded(st, name, go)


def _kept_device(st, name, value, kept):
    """A device receive satisfied by a message Probe took out of MPI, through its specification: plain
    bytes into their block, a derived datatype's through its packed scratch (unpacked on the GPU)."""
    if packed.datatype_of(value) is not None:
        pk = packed.Packed(st, name, 'buf', value, True)
        try:
            work = _kept_device(st, name, pk.view(), kept)
        except BaseException:
            pk.release()
            raise

        def unpack():
            try:
                if work.received is not None:
                    pk.unpack(work.received)
            finally:
                pk.release()
        return _then(work, unpack)
    obj, rest = split_spec(value)
    dbuf = read_whole(name, 'buf', st.rank, obj, True, _cuda.consumer_stream)
    dev = _cuda.device_of(name, 'buf', st.rank, dbuf)
    ptr, room = device_block(name, st.rank, dbuf, rest)  # (a datatype with gaps is Packed's, above)
    stream = _cuda.stream_of(dbuf, dev)
    src, tag, data = kept
    work = requests.Work(dev, receive=True)
    work.source, work.tag = src, tag

    def arrived():
        fields = p2p_ipc.parse(data, len(data))
        if fields is not None:  # (receive answers the sender whatever happens)
            work.received = p2p_ipc.receive(st, name, fields, src, ptr, room, stream)
            return
        if len(data) > room:
            raise truncated(st, name, len(data), room)
        pinned = take(len(data))
        try:
            np.frombuffer(pinned, np.uint8, count=len(data))[:] = np.frombuffer(data, np.uint8)
            _copy_sync(dev, ptr, pinned.ptr, len(data), stream)
        finally:
            give(pinned)
        work.received = len(data)
    work.on_done = arrived
    return work


def _report(status, source, tag, data):
    fields = p2p_ipc.parse(data, len(data))
    if status is not None:
        _copy_status(status, source, tag, fields[3] if fields is not None else len(data))
    return True


def _copy_status(status, source, tag, nbytes):
    status.Set_source(source)
    status.Set_tag(tag)
    status.Set_elements(MPI.BYTE, nbytes)
    status.Set_error(MPI.SUCCESS)
