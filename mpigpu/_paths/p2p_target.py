"""Where a receive's packed bytes lie, for what reaches a receive outside MPI's own delivery: the payload
of a GPU sender's header (p2p_ipc: copied out of the sender's buffer) and a message Probe took out of MPI
(its bytes kept). MPI delivers a message through the receive's buffer specification; these must too.

- `HostTarget`: a host buffer or specification (any datatype: a plain one's bytes lie in one block, a
  derived one's where its type map puts them, mpigpu/_describe/datatypes.py);
- `device_block`: a device specification of plain bytes (a predefined or plain datatype, a typecode):
  the block (pointer, room) a payload is copied into GPU to GPU. A derived datatype on the device is
  packed.Packed's (a GPU sender's payload unpacked on the GPU straight from the sender's bytes).
"""
import numpy as np
from mpi4py import MPI

from .. import _cuda
from .._describe.call import spec_layout, unpack_spec
from ..errors import Error
from . import p2p_ipc
from .mirrored import split_spec
from .support.pinned import give, take


def _outside(name, rank, lo, hi, nbytes):
    return Error(name, f'message: the specification reaches bytes {lo}..{hi} of a buffer of {nbytes} bytes',
                 arg='buf', rank=rank, error_class=MPI.ERR_BUFFER)


class HostTarget:
    """A host receive buffer argument: its room (packed bytes) and where each packed byte lies."""
    __slots__ = ('name', 'rank', 'u8', 'start', 'count', 'size', 'layout', 'datatype', 'room')

    def __init__(self, name, rank, value):
        obj, rest = split_spec(value)
        view = memoryview(obj)
        self.name, self.rank = name, rank
        self.u8 = np.frombuffer(view.cast('B'), np.uint8)
        self.datatype = None
        if rest is None:
            self.start, self.count, self.size, self.layout = 0, self.u8.size, 1, None
        else:
            self.start, self.count, self.size, self.layout = spec_layout(name, 'buf', rank, rest, self.u8.size,
                                                                         view.itemsize)
            if self.layout is not None:
                self.datatype = unpack_spec(name, 'buf', rank, value)[3]
        self.room = self.count * self.size
        lo, hi = self.start, self.start + self.room
        if self.layout is not None and self.count:
            lo, hi = (self.start + x for x in self.layout.span(self.count))
        if self.room and (lo < 0 or hi > self.u8.size):
            raise _outside(name, rank, lo, hi, self.u8.size)

    def _runs(self, skip, k):
        """(offset in the buffer, offset in the packed bytes, bytes) of packed bytes skip..k, in order
        (a derived datatype's: its instances' blocks, each instance one extent after the last)."""
        i = skip // self.size
        while i * self.size < k:
            pos = i * self.size  # packed offset of instance i's first byte
            for off, n in self.layout.runs():
                a, b = max(skip - pos, 0), min(n, k - pos)
                if b > a:
                    yield self.start + i * self.layout.extent + off + a, pos + a, b - a
                pos += n
                if pos >= k:
                    return
            i += 1

    def head(self, k):
        """The first k packed bytes (k <= room)."""
        if self.layout is None:
            return self.u8[self.start:self.start + k].tobytes()
        return b''.join(self.u8[o:o + n].tobytes() for o, _p, n in self._runs(0, k))

    def place(self, data, k):
        """Puts the first k bytes of `data` (host memory) where the first k packed bytes lie: a derived
        datatype's whole instances unpacked by MPI, the rest block by block."""
        src = np.frombuffer(data, np.uint8, count=k)
        if self.layout is None:
            self.u8[self.start:self.start + k] = src
            return
        done, extent, whole = 0, self.layout.extent, k // self.size
        # (MPI's Unpack needs the handle: a datatype the program freed meanwhile, as MPI lets it, goes block
        # by block; the instances' extents may reach past the buffer, their type map never does: checked)
        if extent > 0 and whole > 0 and self.datatype != MPI.DATATYPE_NULL:
            out = MPI.memory.fromaddress(self.u8.ctypes.data + self.start, whole * extent)
            self.datatype.Unpack(src[:whole * self.size], 0, out, MPI.COMM_SELF)
            done = whole * self.size
        for o, p, n in self._runs(done, k):
            self.u8[o:o + n] = src[p:p + n]

    def take_payload(self, st, fields, source):
        """Copies a GPU sender's payload (a header's `fields`) here and answers the sender; returns its bytes.
        Plain bytes go straight into the buffer; a derived datatype's through page-locked memory."""
        if self.layout is None:
            return p2p_ipc.receive(st, self.name, fields, source, self.u8.ctypes.data + self.start, self.room,
                                   _cuda.consumer_stream(st.device))
        try:
            pinned = take(max(1, min(fields[3], self.room)))
        except BaseException:
            p2p_ipc.fail(st, fields, source)
            raise
        try:
            got = p2p_ipc.receive(st, self.name, fields, source, pinned.ptr, self.room,
                                  _cuda.consumer_stream(st.device))
            self.place(pinned, got)
        finally:
            give(pinned)
        return got


def host_target(name, rank, value, at_least):
    """The HostTarget of a host receive buffer argument with room for at least `at_least` bytes, or None (less
    room, or not an argument this module reads: mpi4py then takes the receive and raises what it raises)."""
    try:
        if memoryview(split_spec(value)[0]).nbytes < at_least:
            return None  # (no specification holds more than its buffer)
        target = HostTarget(name, rank, value)
    except Exception:
        return None
    return target if target.room >= at_least else None


def device_block(name, rank, dbuf, rest):
    """(pointer, room) of a device specification of plain bytes over whole device buffer `dbuf` (rest: the
    specification after the buffer; None: the whole buffer), or None for a datatype with gaps."""
    if rest is None:
        return dbuf.ptr, dbuf.nbytes
    start, count, size, lay = spec_layout(name, 'buf', rank, rest, dbuf.nbytes, dbuf.itemsize)
    if lay is not None:
        return None
    if start < 0 or start + count * size > dbuf.nbytes:
        raise _outside(name, rank, start, start + count * size, dbuf.nbytes)
    return dbuf.ptr + start, count * size
