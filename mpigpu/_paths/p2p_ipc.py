"""Point-to-point between GPUs of one node: the receiver copies straight out of the sender's buffer.

Protocol (a rendezvous over host MPI; the payload moves GPU to GPU over NVLink):
1. The sender waits for its buffer's producer stream, then sends a 128-byte header on the user's
   communicator with the user's tag: a magic, the payload size, the buffer's allocation (CUDA IPC
   handle, process-wide id, offset) and a tag for the reply. MPI matches the header like any message,
   so receive order, ANY_SOURCE, ANY_TAG and statuses stay MPI's.
2. The receiver recognizes the header (exactly 128 bytes starting with the magic), maps the
   allocation (once per allocation: cached by sender and id), copies the payload on its stream with
   cudaMemcpyAsync, waits for it, and replies on the private duplicate the communicator's device team
   made (its control communicator), after which the sender's buffer may change. Where the allocation cannot be mapped
   (after unmapping the sender's earlier ones), both sides raise.

The sender takes this path when the communicator's device team is up (one node, distinct GPUs, peer
access: agreed by all ranks at its first GPU collective), the message is at least
MPIGPU_P2P_IPC_BYTES, the bytes lie in one block of device memory (a whole array, a specification's
block of plain bytes, a datatype's instances packed into scratch), and its allocation can be exported
(cudaMalloc memory: CuPy's and PyTorch's default allocators; not stream-ordered pools). A receive of
at least 128 bytes on such a communicator therefore checks for a header: device receives always,
host receives when the buffer or specification has room for MPIGPU_P2P_IPC_BYTES (p2p_target).
"""
import atexit
import struct
import threading
from collections import OrderedDict

import numpy as np
from mpi4py import MPI

from .. import _cuda
from .._base.config import config
from ..errors import Error
from .._state import requests

MAGIC = bytes.fromhex('6d7067707532703a9d4c17e2a05b33c1')  # 'mpgpu2p:' + 8 random bytes
_HDR = struct.Struct('=16sIiQQQQii64s')  # magic, version, reply tag, payload, offset, base, id, world rank, -, handle
HEADER_BYTES = _HDR.size  # 128
_OK, _TRUNCATED, _FAILED = 0, 1, 2  # replies
_CUDA_ALREADY_MAPPED = 208
_MAX_MAPPINGS = 64
_world_rank = None
stats = {'sent': 0, 'received': 0}  # messages that took this path (tests check it was taken)
_exported = {}            # allocation id -> IPC handle (this process's buffers)
_mapped = OrderedDict()   # (device, sender world rank, allocation id) -> (base here, sender's base), LRU first
_mapped_base = {}         # (device, sender world rank, sender's base) -> key in _mapped


_lock = threading.Lock()  # the mapping cache, from the calling thread and the request agent


def usable(st):
    """True when senders on this communicator may use the protocol (and receivers must expect it).
    It needs the request agent (MPI_THREAD_MULTIPLE): a non-blocking receive must be able to answer
    a header while its owner waits for something else."""
    return st.team is not None and st.control is not None and requests.agent.enabled()


def header_at(st, ptr, nbytes, dev, dest, reply):
    """The header (bytearray) for sending the nbytes at device pointer `ptr` (on `dev`) by IPC with
    reply tag `reply`, or None when this message takes the staged path."""
    global _world_rank
    if (not usable(st) or dev != st.device or nbytes < config.p2p_ipc_bytes
            or dest == MPI.PROC_NULL or dest == st.rank):
        return None
    dm = _cuda.device
    base, _size, ident, exportable = dm.ipc_describe(ptr)
    if not exportable:
        return None
    handle = _exported.get(ident)
    if handle is None:
        if len(_exported) > 4096:
            _exported.clear()
        handle = _exported[ident] = dm.ipc_export(base)
    if _world_rank is None:
        _world_rank = MPI.COMM_WORLD.Get_rank()
    stats['sent'] += 1
    return bytearray(_HDR.pack(MAGIC, 1, reply, nbytes, ptr - base, base, ident, _world_rank, 0, handle))


def parse(data, n):
    """The header's fields when the first n bytes of `data` are a header, else None."""
    if n != HEADER_BYTES:
        return None
    mv = memoryview(data).cast('B')
    if bytes(mv[:16]) != MAGIC:
        return None
    return _HDR.unpack(bytes(mv[:HEADER_BYTES]))


def _unmap(key):
    base, sender_base = _mapped.pop(key)
    _mapped_base.pop((key[0], key[1], sender_base), None)
    _cuda.device.ipc_close(base)


def _map(dev, world_rank, ident, sender_base, handle):
    key = (dev, world_rank, ident)
    hit = _mapped.get(key)
    if hit is not None:
        _mapped.move_to_end(key)
        return hit[0]
    # A new allocation at a base the sender used before: the old one is gone, unmap it.
    old = _mapped_base.get((dev, world_rank, sender_base))
    if old is not None:
        _unmap(old)
    while len(_mapped) >= _MAX_MAPPINGS:
        _unmap(next(iter(_mapped)))
    dm = _cuda.device
    try:
        base = dm.ipc_open(handle)
    except dm.DeviceError as exc:
        if exc.code != _CUDA_ALREADY_MAPPED:
            raise
        # The driver packs small allocations into shared pages; a page this process mapped for an
        # earlier allocation of the sender's cannot be mapped twice. Unmap that sender's, try again.
        for k in [k for k in _mapped if k[0] == dev and k[1] == world_rank]:
            _unmap(k)
        base = dm.ipc_open(handle)
    _mapped[key] = (base, sender_base)
    _mapped_base[(dev, world_rank, sender_base)] = key
    return base


def receive(st, name, fields, source, dst, capacity, stream, read=None):
    """Copies a header's payload to `dst` (device or host address with `capacity` bytes) on `stream`
    of the communicator's device, waits, and replies to the sender; returns the payload size. With
    `read`, read(address, nbytes) enqueues on `stream` what reads the payload at the sender's (mapped)
    address instead of the copy: an unpack kernel scattering it into a derived datatype's instances
    (one pass over the bytes where a copy into scratch and an unpack from it took two)."""
    _magic, _version, reply, nbytes, offset, sender_base, ident, world_rank, _pad, handle = fields
    dm = _cuda.device
    code = _OK
    try:
        if nbytes > capacity:
            code = _TRUNCATED
            raise Error(name, f'message of {nbytes} bytes from rank {source} truncated to the receive buffer '
                        f'of {capacity} bytes', arg='buf', rank=st.rank, error_class=MPI.ERR_TRUNCATE)

        def copy():
            with _lock:  # no other thread unmaps this allocation while it is read
                base = _map(st.device, world_rank, ident, sender_base, handle)
                if read is None:
                    _cuda.copy(dst, base + offset, nbytes, stream)
                else:
                    read(base + offset, nbytes)
                _cuda.sync(stream)
        try:
            _cuda.with_device(st.device, copy)
        except dm.DeviceError as exc:
            code = _FAILED
            raise Error(name, f'reading the message of rank {source} over the peer mapping failed: {exc}',
                        rank=st.rank, error_class=MPI.ERR_OTHER) from None
        except BaseException:
            code = _FAILED  # (a `read` that raised: its sender raises too)
            raise
        stats['received'] += 1
    finally:
        st.control.Send([np.array([code], np.int32), MPI.INT], source, reply)
    return nbytes


def fail(st, fields, source):
    """Answers a header whose receive failed before reading the payload (its sender then raises too,
    instead of waiting for a reply forever)."""
    st.control.Send([np.array([_FAILED], np.int32), MPI.INT], source, fields[2])


def refuse(st, name, fields, source, why):
    """A header arrived at a receive that cannot take it (`why`): both sides raise."""
    fail(st, fields, source)
    raise Error(name, f'rank {source} sent {fields[3]} bytes GPU to GPU, which this receive cannot take: {why} '
                '(or set MPIGPU_P2P_IPC_BYTES higher)', arg='buf', rank=st.rank, error_class=MPI.ERR_BUFFER)


def check_reply(st, name, dest, code):
    """The sender's side of the reply."""
    if code in (_OK, _TRUNCATED):  # MPI: truncation is the receiver's error; the send completes
        return
    raise Error(name, f'rank {dest} could not read the message over the peer mapping (it raised too)',
                rank=st.rank, error_class=MPI.ERR_OTHER)


@atexit.register
def close_all():
    """Unmaps every peer allocation (at exit, before the CUDA context goes)."""
    for key, (base, _sender_base) in list(_mapped.items()):
        try:
            _cuda.with_device(key[0], _cuda.device.ipc_close, base)
        except Exception:
            pass
    _mapped.clear()
    _mapped_base.clear()
