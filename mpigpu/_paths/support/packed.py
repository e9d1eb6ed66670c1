"""Device buffers described by a non-contiguous MPI datatype, packed on the GPU (cuda/pack.cu).

`Packed` is one such buffer argument: the user's buffer, the datatype's layout (mpigpu/_describe/datatypes.py,
decoded once per handle) and the count; `pack` fills a contiguous scratch buffer (device memory from
the pool of mpigpu/_paths/support/scratch.py, no allocation per call once warm) with the described elements
on the producer's stream, `unpack` scatters one back. The paths that move contiguous device bytes (point-to-point, GPU to GPU
or staged) then move the scratch: a one-column halo of a large array moves its column, not the
array's extent. Instances that form one block (a halo row as a resized contiguous type) need no
scratch: they are moved from where they lie. The packed elements keep the type signature: a homogeneous datatype's are its base
type (`mpi_type`), a mixed struct's bytes.
"""
from mpi4py import MPI

from ... import _cuda
from ..._describe import datatypes as _datatypes
from ..._describe.call import read_whole, unpack_spec, within
from ..._base.types import NATIVE
from ...errors import Error, ValueArgumentError
from . import scratch

def datatype_of(value):
    """The MPI datatype of a buffer specification when it is one the other paths cannot move as plain
    bytes (a derived datatype, or one of MPI's pair types such as DOUBLE_INT, which have a gap), else None. Plain: one block from the pointer whose extent is its size (any
    count of it is contiguous too); a block at an offset or one resized (a halo row, a face of a 3-D
    block at its first plane) is taken here (Packed), where those paths would mirror the whole buffer;
    so is any datatype on a raw address of no length, whose bytes only the count and datatype give."""
    if type(value) not in (list, tuple) or len(value) < 2 or not isinstance(value[-1], MPI.Datatype):
        return None
    dt = value[-1]
    if dt.handle == MPI.DATATYPE_NULL.handle:
        return None
    if _unsized(value[0]):
        return dt  # a raw address of no length: only the datatype and count say which bytes to move
    lay = _datatypes.layout(dt)  # (predefined types too: MPI's pairs, DOUBLE_INT & co., have a gap)
    return None if lay.plain else dt


def _unsized(obj):
    """True for mpi4py's memory or buffer of no length (MPI.memory.fromaddress(p, 0): a C pointer)."""
    return isinstance(obj, MPI.buffer) and len(obj) == 0 and obj.address != 0


def check_within(name, label, rank, buf, lay, count, offset):
    """Raises unless the type map of `count` instances from byte `offset` lies in the memory of device
    buffer `buf`: its length, or past it the device allocation it lies in (MPI trusts an explicit count
    and datatype: the object carrying the address may be shorter than the storage it describes)."""
    if not count or not lay.size:
        return
    lo, hi = lay.span(count)
    lo, hi = offset + lo, offset + hi
    if lo < 0 or hi > buf.nbytes:
        within(name, label, rank, buf, lo, hi, f'{count} elements of the datatype', MPI.ERR_BUFFER)


class Packed:
    """One device buffer argument with a derived datatype, and its packed scratch."""
    __slots__ = ('buf', 'layout', 'count', 'base', 'device', 'nbytes', 'scratch', 'mpi_type', 'elements',
                 'stream', 'in_place')

    def __init__(self, st, name, label, value, writable):
        obj, count, displ, dt = unpack_spec(name, label, st.rank, value)
        buf = self.buf = read_whole(name, label, st.rank, obj, writable, _cuda.consumer_stream)
        lay = self.layout = _datatypes.layout(dt)
        if lay.extent <= 0 and count is None:
            raise ValueArgumentError(name, f'message: cannot infer count, datatype extent {lay.extent}', arg=label,
                                     rank=st.rank, error_class=MPI.ERR_COUNT)
        offset = displ * lay.extent
        if count is None:
            if (buf.nbytes - offset) % lay.extent:  # as mpi4py infers a count: whole extents only
                raise ValueArgumentError(name, f'message: cannot infer count, buffer length {buf.nbytes - offset} is '
                                         f'not a multiple of datatype extent {lay.extent}', arg=label, rank=st.rank,
                                         error_class=MPI.ERR_COUNT)
            count = (buf.nbytes - offset) // lay.extent
        self.count, self.base = count, buf.ptr + offset
        check_within(name, label, st.rank, buf, lay, count, offset)
        self.device = _cuda.device_of(name, label, st.rank, buf)
        self.stream = _cuda.stream_of(buf, self.device)
        self.nbytes = count * lay.size
        native = NATIVE[lay.code] if lay.code >= 0 else None
        self.mpi_type = native if native is not None else MPI.BYTE
        self.elements = self.nbytes // self.mpi_type.Get_size()
        self.scratch = None
        # One block: moved from the user's buffer, with its stream (a packed copy cost a kernel and a
        # wait: the 64 KiB row of the halo benchmark took 1.64x the hand-packed send that way).
        self.in_place = lay.contiguous(count)

    def take(self):
        """The scratch buffer (pooled device memory of this buffer's GPU)."""
        if self.scratch is None:
            self.scratch = scratch.take(self.nbytes, self.device)
        return self.scratch

    def view(self):
        """The packed elements as a whole device buffer of exactly their bytes, typed by their
        signature (the scratch itself is a pool size); in place, the block in the user's buffer."""
        code = self.layout.code if self.mpi_type is not MPI.BYTE else -1
        if self.in_place:
            return self.buf.view(self.base - self.buf.ptr + self.layout.start, self.nbytes, code)
        whole = read_whole('pack', 'buf', 0, self.take(), True, lambda device: None)
        return whole.view(0, self.nbytes, code)

    def pack(self):
        """Packs the described elements into the scratch on the producer's stream, and waits for it
        (the caller then hands the scratch to MPI or to a peer). In place: nothing (the paths order
        the view's reads after its stream, as any device buffer's)."""
        if self.in_place:
            return
        mem = self.take()
        if self.nbytes:
            def run():
                plan = _cuda.pack_plan(self.layout, self.device)
                plan.pack(self.count, self.base, mem.ptr, self.stream)
                _cuda.sync(self.stream)
            _cuda.with_device(self.device, run)

    def unpack(self, nbytes=None):
        """Scatters the first `nbytes` (whole instances; all by default) of the scratch into the user's
        buffer on its stream, and waits for it. In place: nothing (the bytes arrived where they belong)."""
        if self.in_place:
            return
        nbytes = self.nbytes if nbytes is None else nbytes
        count = nbytes // self.layout.size if self.layout.size else 0
        if count:
            def run():
                plan = _cuda.pack_plan(self.layout, self.device)
                plan.unpack(count, self.scratch.ptr, self.base, self.stream)
                _cuda.sync(self.stream)
            _cuda.with_device(self.device, run)

    def unpack_from(self, src, nbytes):
        """Scatters the whole instances of `nbytes` packed bytes at device address `src` (another GPU's,
        mapped: p2p_ipc.receive's `read`) into the user's buffer on its stream, and waits for it."""
        count = nbytes // self.layout.size if self.layout.size else 0
        if count:
            def run():
                _cuda.pack_plan(self.layout, self.device).unpack(count, src, self.base, self.stream)
                _cuda.sync(self.stream)
            _cuda.with_device(self.device, run)

    def release(self):
        if self.scratch is not None:
            scratch.give(self.scratch, self.device)
            self.scratch = None


def _both(st, name, inbuf, outbuf):
    """(input, output) device buffers of a Pack or Unpack, on one GPU, or None when not both are device memory."""
    from ..._ext._intake import is_device
    if not (is_device(inbuf) and is_device(outbuf)):
        return None
    src = read_whole(name, 'inbuf', st.rank, inbuf, False, _cuda.consumer_stream)
    dst = read_whole(name, 'outbuf', st.rank, outbuf, True, _cuda.consumer_stream)
    dev = _cuda.device_of(name, 'inbuf', st.rank, src)
    if _cuda.device_of(name, 'outbuf', st.rank, dst) != dev:
        return None
    return src, dst, dev


def _overflow(name, rank, what, need, have):
    return Error(name, f'{what} needs {need} bytes, the buffer has {have}',
                 arg='outbuf' if name.endswith('Pack') else 'inbuf', rank=rank, error_class=MPI.ERR_TRUNCATE)


def pack(st, datatype, inbuf, outbuf, position):
    """Datatype.Pack with both buffers on one GPU: the pack kernel writes the packed bytes at
    `position` (as MPI_Pack's native representation, the type map's bytes in order); returns the new
    position, or None when the buffers are not both device memory of one GPU."""
    return _pack_call(st, 'Datatype.Pack', datatype, inbuf, outbuf, position, unpacking=False)


def unpack(st, datatype, inbuf, position, outbuf):
    """Datatype.Unpack with both buffers on one GPU (see pack); returns the new position or None."""
    return _pack_call(st, 'Datatype.Unpack', datatype, inbuf, outbuf, position, unpacking=True)


def _pack_call(st, name, datatype, inbuf, outbuf, position, unpacking):
    """Pack or Unpack: the typed buffer is inbuf (packing) or outbuf (unpacking), the packed bytes
    the other one's from `position`."""
    with _cuda.errors_as(name, st.rank):
        bufs = _both(st, name, inbuf, outbuf)
        if bufs is None:
            return None
        src, dst, dev = bufs
        typed, packed = (dst, src) if unpacking else (src, dst)
        lay = _datatypes.layout(datatype)
        count = typed.nbytes // lay.extent if lay.extent > 0 else 0
        size = count * lay.size
        if position < 0 or position + size > packed.nbytes:
            what = (f'unpacking {count} elements from position {position}' if unpacking
                    else f'packing {count} elements at position {position}')
            raise _overflow(name, st.rank, what, position + size, packed.nbytes)
        _run(lay, dev, count, typed.ptr, packed.ptr + position, _cuda.stream_of(typed, dev), unpacking)
        return position + size


def _run(lay, dev, count, buf, packed_ptr, stream, unpacking):
    if not count or not lay.size:
        return

    def run():
        plan = _cuda.pack_plan(lay, dev)
        if unpacking:
            plan.unpack(count, packed_ptr, buf, stream)
        else:
            plan.pack(count, buf, packed_ptr, stream)
        _cuda.sync(stream)
    _cuda.with_device(dev, run)
