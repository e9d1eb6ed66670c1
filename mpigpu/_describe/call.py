"""The description of one device-buffer collective (`Call`): its arguments parsed and checked with
mpi4py's meaning, before anything is transferred (a rejected call leaves recvbuf untouched).

Buffer specifications are read as mpi4py reads them: `buf`, `[buf, datatype]`, `[buf, count]`,
`[buf, (count, displ)]`, `[buf, count, datatype]`, `[buf, (count, displ), datatype]` and
`[buf, count, displ, datatype]`; `displ` counts datatype extents, and an explicit count of a buffer
that holds one block per rank (Allgather's recvbuf, Reduce_scatter_block's sendbuf) is per block.
`None` or `MPI.IN_PLACE` as sendbuf, or a specification around `MPI.IN_PLACE`, is in place. Each mistake
raises an mpigpu.Error that is also the Python exception mpi4py raises for it (errors.py).
"""
import operator

from mpi4py import MPI

from .. import _cuda
from . import datatypes as _datatypes
from .._base.codes import ALIGNMENTS, NAMES, SIZES, Coll
from .._ext._intake import DeviceBuffer, call_geometry, device_buffer, read_device
from .._base.types import FROM_MPI, check_op, from_typecode, op_code
from ..errors import (PYTHON_ERRORS, BufferArgumentError, Error, KeyArgumentError, TypeArgumentError,
                      ValueArgumentError, like)


class Arg:
    """One parsed device buffer argument."""
    __slots__ = ('buf', 'count', 'dtype', 'mpi_type', 'itemsize')

    def __init__(self, buf, count, dtype, mpi_type, itemsize):
        self.buf = buf            # DeviceBuffer of exactly the described bytes
        self.count = count        # elements it describes, all blocks together
        self.dtype = dtype        # engine dtype code, -1 when only MPI knows the type (pair types)
        self.mpi_type = mpi_type  # MPI datatype given in a specification, or None
        self.itemsize = itemsize


class Call:
    """Plain description of one collective call, what the engine and the staged path consume.
    `mirror`: why only the mirrored path can run it (a derived datatype, an element type mpigpu does
    not know), else None."""
    __slots__ = ('name', 'coll', 'send', 'recv', 'count', 'dtype', 'mpi_type', 'itemsize', 'op',
                 'op_code', 'root', 'inplace', 'device', 'send_ptr', 'recv_ptr', 'mirror')

    def __repr__(self):
        return (f'Call({self.name}, count={self.count}, dtype={NAMES[self.dtype] if self.dtype >= 0 else self.mpi_type},'
                f' op={self.op_code}, root={self.root}, inplace={self.inplace}, device={self.device})')


def as_int(call, argname, rank, value):
    """An integer argument (a root, a count) converted as mpi4py converts it: integers and objects with
    __index__, and floats truncated, as its C int parameters take them; anything else is a TypeError."""
    if isinstance(value, float):
        return int(value)
    try:
        return operator.index(value)
    except TypeError:
        raise TypeArgumentError(call, f'an integer is required, not {type(value).__name__}', arg=argname,
                                rank=rank, error_class=MPI.ERR_ARG) from None


def is_in_place(value):
    """An in-place sendbuf as MPI sees it through mpi4py: MPI.IN_PLACE or None, or a specification
    around MPI.IN_PLACE (mpi4py passes its address, MPI_IN_PLACE, with the counts of a call that is not
    in place). A specification around None is not: mpi4py reads it as MPI_BOTTOM (an error with a
    count)."""
    if value is None or value is MPI.IN_PLACE:
        return True
    return type(value) in (list, tuple) and len(value) > 0 and value[0] is MPI.IN_PLACE


def _datatype(call, argname, rank, spec_type):
    """(dtype code, MPI datatype or None, extent, contiguous) of a specification's datatype."""
    if isinstance(spec_type, MPI.Datatype):
        if spec_type.handle == MPI.DATATYPE_NULL.handle:
            raise ValueArgumentError(call, 'message: cannot infer count, datatype is null', arg=argname,
                                     rank=rank, error_class=MPI.ERR_TYPE)
        lb, extent = spec_type.Get_extent()
        code = FROM_MPI.get(spec_type.handle, -1)
        contiguous = code >= 0 or (lb == 0 and spec_type.Get_size() == extent and spec_type.Get_true_extent() == (0, extent))
        return code, spec_type, extent, contiguous
    if isinstance(spec_type, str):
        code = from_typecode(spec_type)
        if code is None:
            raise KeyArgumentError(call, f'cannot map {spec_type!r} to MPI datatype', arg=argname, rank=rank,
                                   error_class=MPI.ERR_TYPE)
        return code, None, SIZES[code], True
    raise TypeArgumentError(call, f'datatype must be an MPI.Datatype or a typecode, not {type(spec_type).__name__}',
                            arg=argname, rank=rank, error_class=MPI.ERR_TYPE)


datatype_of = _datatype  # for the paths that read specifications of their own (mpigpu/_paths/exchange.py)


def unpack_spec(call, argname, rank, spec):
    """(buffer object, count or None, displ, datatype or None) from a buffer specification."""
    n = len(spec)
    count = displ = dtype = None
    if n == 2:
        obj, x = spec
        if isinstance(x, (MPI.Datatype, str)):
            dtype = x
        elif type(x) in (list, tuple):
            count, displ = x
        else:
            count = x
    elif n == 3:
        obj, x, dtype = spec
        if type(x) in (list, tuple):
            count, displ = x
        else:
            count = x
    elif n == 4:
        obj, count, displ, dtype = spec
    else:
        raise ValueArgumentError(call, f'message: expecting 2 to 4 items, not {n}', arg=argname, rank=rank,
                                 error_class=MPI.ERR_BUFFER)
    checked = []
    for label, value in (('count', count), ('displacement', displ)):
        if value is not None:
            try:
                value = operator.index(value)  # Python and NumPy integers, as mpi4py takes them
            except TypeError:
                raise TypeArgumentError(call, f'message: {label} must be an integer, not {type(value).__name__}',
                                        arg=argname, rank=rank, error_class=MPI.ERR_ARG) from None
            if value < 0:
                raise ValueArgumentError(call, f'message: negative {label} {value}', arg=argname, rank=rank,
                                         error_class=MPI.ERR_COUNT if label == 'count' else MPI.ERR_ARG)
        checked.append(value)
    return obj, checked[0], checked[1] or 0, dtype


def spec_layout(call, argname, rank, rest, nbytes, itemsize):
    """How a buffer specification's rest (what follows the buffer) reads a buffer of nbytes whose elements
    have `itemsize` bytes: (start, count, size, layout): the first instance's byte offset (displ
    extents), the instances (inferred as mpi4py infers them: whole extents after the displacement), one
    instance's packed bytes, and the datatype's layout (mpigpu/_describe/datatypes.py), None where the
    instances are plain bytes (a plain datatype: predefined ones but MPI's pairs, which have a gap; a
    typecode; or none: the buffer's own elements). Raises mpi4py's errors for a specification it refuses."""
    _obj, count, displ, dtype = unpack_spec(call, argname, rank, [None, *rest])
    lay = None
    if dtype is None:
        size = extent = itemsize
    else:
        _code, mpi_type, extent, _contiguous = _datatype(call, argname, rank, dtype)
        size = extent
        if mpi_type is not None:
            lay = _datatypes.layout(mpi_type)
            size = lay.size
            if lay.plain:
                lay = None
    start = displ * extent
    if displ and (extent <= 0 or start > nbytes):  # as mpi4py refuses it
        raise ValueArgumentError(call, f'message: displacement {displ} out of bounds, datatype extent {extent}',
                                 arg=argname, rank=rank, error_class=MPI.ERR_ARG)
    if count is None:
        if extent <= 0 or (nbytes - start) % extent:
            raise ValueArgumentError(call, f'message: cannot infer count, buffer length {nbytes - start} is not '
                                     f'a multiple of datatype extent {extent}', arg=argname, rank=rank,
                                     error_class=MPI.ERR_COUNT)
        count = (nbytes - start) // extent
    return start, count, size, lay


def read_once(value, stream_for):
    """A buffer argument with its device buffer read once: a DeviceBuffer in place of the exporter, alone or
    as a specification's first item, which every later step of the call (placement, the intake, host
    mirrors) takes as read instead of asking the exporter again, as mpi4py's intake reads a buffer once
    per call. `value` itself where it holds host memory, or where the read fails (read_device)."""
    if type(value) in (list, tuple):
        buf = read_device(value[0], stream_for) if value else None
        return value if buf is None else type(value)((buf, *value[1:]))
    buf = read_device(value, stream_for)
    return value if buf is None else buf


def read_whole(call, argname, rank, obj, writable, stream_for):
    """The whole device buffer behind `obj` (no specification), checked for writability.
    `stream_for(device)` gives the stream a DLPack producer is asked to order its work before."""
    if isinstance(obj, DeviceBuffer):
        buf = obj
    else:
        dev = None
        if hasattr(obj, '__dlpack_device__'):
            try:
                dev = obj.__dlpack_device__()[1]
            except Exception:
                dev = None
        try:
            buf = device_buffer(obj, stream_for(dev))
        except PYTHON_ERRORS as exc:
            raise like(type(exc))(call, str(exc).strip('"'), arg=argname, rank=rank,
                                  error_class=MPI.ERR_BUFFER) from None
    if writable and buf.readonly:
        raise BufferArgumentError(call, 'buffer is not writable', arg=argname, rank=rank,
                                  error_class=MPI.ERR_BUFFER)
    return buf


def parse(call, argname, rank, obj, writable, stream_for, blocks=1, whole=False):
    """Parses one device buffer argument (a buffer or a specification) into an `Arg`, or None when only
    the mirrored path can read it (a non-contiguous datatype; an element type mpigpu does not know).
    `blocks`: how many blocks the buffer holds (one per rank for Allgather's recvbuf ...), which an
    explicit count counts one of. `whole`: a count inferred from the buffer is one block's (mpi4py's
    reading of an in-place Reduce_scatter_block's recvbuf when sendbuf is a specification around
    MPI.IN_PLACE: the blocks then reach past the buffer, which only its allocation may allow)."""
    spec, count, displ, spec_type = None, None, 0, None
    if type(obj) in (list, tuple):
        spec = obj
        obj, count, displ, spec_type = unpack_spec(call, argname, rank, spec)
    buf = read_whole(call, argname, rank, obj, writable, stream_for)
    if spec is None and whole and buf.dtype >= 0:
        spec, count = obj, buf.count
    if spec is None:
        if buf.dtype < 0:
            return None
        if buf.count % blocks:
            raise ValueArgumentError(call, f'message: cannot infer count, number of entries {buf.count} is not a '
                                     f'multiple of required number of blocks {blocks}', arg=argname, rank=rank,
                                     error_class=MPI.ERR_COUNT)
        return Arg(buf, buf.count, buf.dtype, None, buf.itemsize)
    if spec_type is None:
        if buf.dtype < 0:
            return None
        code, mpi_type, extent, contiguous = buf.dtype, None, buf.itemsize, True
    else:
        code, mpi_type, extent, contiguous = _datatype(call, argname, rank, spec_type)
    if not contiguous:
        return None
    offset = displ * extent
    if count is None:
        room = buf.nbytes - offset
        if room < 0:
            raise ValueArgumentError(call, f'message: displacement {displ} out of bounds, number of datatype '
                                     f'entries {buf.nbytes // extent}', arg=argname, rank=rank,
                                     error_class=MPI.ERR_ARG)
        if room % extent or (room // extent) % (1 if whole else blocks):
            raise ValueArgumentError(call, f'message: cannot infer count, buffer length {room} is not a '
                                     f'multiple of {blocks} blocks of datatype extent {extent}', arg=argname,
                                     rank=rank, error_class=MPI.ERR_COUNT)
        total = room // extent
        if whole:
            count = total
    if count is not None:
        total = count * blocks
        lo, hi = offset, offset + total * extent
        if total and (lo < 0 or hi > buf.nbytes):
            within(call, argname, rank, buf, lo, hi, f'count {count}{f" x {blocks} blocks" if blocks > 1 else ""} '
                   f'of {extent} bytes at displacement {displ}', MPI.ERR_COUNT)
    return _arg(buf, offset, total, code, mpi_type, extent)


def within(call, argname, rank, buf, lo, hi, what, error_class):
    """Raises unless bytes [lo, hi) from device buffer `buf`'s pointer lie in its allocation. An
    explicit count and datatype are trusted as MPI trusts them: they may reach past the length of the
    object that carries the address (MPI.memory.fromaddress(p, 0), a view shorter than its storage),
    never past the memory really there, as the driver reports it."""
    alloc = _cuda.allocation(buf.ptr)
    if alloc is not None:
        base, size = alloc
        if buf.ptr + lo >= base and buf.ptr + hi <= base + size:
            return
        room = f'the device allocation of {size} bytes it lies in (which starts at its byte {base - buf.ptr})'
    elif not buf.nbytes:
        return  # no allocation known (host memory behind a raw address): C's pointer, the caller's business
    else:
        room = f'the buffer of {buf.nbytes} bytes'
    raise ValueArgumentError(call, f'message: {what}: bytes {lo}..{hi} of the buffer lie past {room}',
                             arg=argname, rank=rank, error_class=error_class)


def _arg(buf, offset, total, code, mpi_type, extent):
    """The Arg of `total` instances from `offset`; a contiguous derived datatype of one named type is
    read as that type's elements (the element type decides: the engine reduces them, and host MPIs
    reduce named types only)."""
    if mpi_type is not None and code < 0 and not mpi_type.is_predefined:
        lay = _datatypes.layout(mpi_type)
        if lay.code >= 0 and lay.size == extent:
            elements = lay.size // SIZES[lay.code]
            return Arg(buf.view(offset, total * extent, lay.code), total * elements, lay.code, None, SIZES[lay.code])
    return Arg(buf.view(offset, total * extent, code), total, code, mpi_type, extent)


def _same_type(call, rank, a, b, aname, bname):
    if a.dtype != b.dtype or (a.dtype < 0 and a.mpi_type.handle != b.mpi_type.handle):
        raise ValueArgumentError(call, 'mismatch in send and receive MPI datatypes '
                                 f'({_type_name(a)} and {_type_name(b)})', arg=bname, rank=rank,
                                 error_class=MPI.ERR_TYPE)


def _type_name(a):
    return NAMES[a.dtype] if a.dtype >= 0 else (a.mpi_type.Get_name() or 'a derived datatype')


def _count_error(name, coll, rank, size, why, s, r):
    """The general path's message for a geometry error (_ext/_geometry.pxi)."""
    if why == 'counts_differ':
        text, arg = f'mismatch in send count {s.count} and receive count {r.count}', 'recvbuf'
    elif why == 'recv_not_multiple':
        text, arg = f'recvbuf has {r.count} elements, not a multiple of the communicator size {size}', 'recvbuf'
    elif why == 'send_not_multiple':
        text, arg = f'sendbuf has {s.count} elements, not a multiple of the communicator size {size}', 'sendbuf'
    elif coll == Coll.REDUCE_SCATTER_BLOCK:
        text, arg = f'mismatch in send count {s.count // size} per rank and receive count {r.count}', 'recvbuf'
    else:
        text, arg = f'mismatch in send count {s.count} and receive count {r.count} / {size} per rank', 'recvbuf'
    return ValueArgumentError(name, text, arg=arg, rank=rank, error_class=MPI.ERR_COUNT)


def check_root(name, size, rank, root):
    """The root as an int, checked to be a rank (MPI's ERR_ROOT otherwise)."""
    root = as_int(name, 'root', rank, root)
    if not 0 <= root < size:
        raise Error(name, f'root {root} is not a rank of a communicator of size {size}', arg='root',
                    rank=rank, error_class=MPI.ERR_ROOT)
    return root


def build(name, coll, size, rank, sendbuf, recvbuf, op, root, stream_for):
    """Parses and checks one collective call with device buffers into a `Call`.

    coll: a Coll; for Bcast pass the buffer as recvbuf and sendbuf=None.
    """
    c = Call()
    root = check_root(name, size, rank, root)
    c.name, c.coll, c.root, c.op, c.mirror = name, coll, root, op, None
    inplace = coll != Coll.BCAST and is_in_place(sendbuf)
    is_root = rank == root
    # mpi4py reads a specification around MPI.IN_PLACE as a message at MPI_IN_PLACE's address: in place
    # for MPI, with the receive counts of a call that is not, so Reduce_scatter_block's recvbuf is then
    # one block of its whole count (and the blocks of the others reach past it)
    whole = coll == Coll.REDUCE_SCATTER_BLOCK and inplace and type(sendbuf) in (list, tuple)
    if coll == Coll.BCAST:
        r = parse(name, 'buf', rank, recvbuf, not is_root, stream_for)
        s = None
        present = (r,)
    elif coll == Coll.REDUCE and not is_root:  # recvbuf is not significant off the root
        if inplace:
            raise ValueArgumentError(name, 'MPI.IN_PLACE is valid only at the root', arg='sendbuf', rank=rank,
                                     error_class=MPI.ERR_BUFFER)
        s = parse(name, 'sendbuf', rank, sendbuf, False, stream_for)
        r = None
        present = (s,)
    else:
        r = parse(name, 'recvbuf', rank, recvbuf, True, stream_for,
                  size if coll == Coll.ALLGATHER or (inplace and coll == Coll.REDUCE_SCATTER_BLOCK) else 1, whole)
        s = None if inplace else parse(name, 'sendbuf', rank, sendbuf, False, stream_for,
                                       size if coll == Coll.REDUCE_SCATTER_BLOCK else 1)
        present = (r,) if inplace else (s, r)
        if s is not None and r is not None:
            _same_type(name, rank, s, r, 'sendbuf', 'recvbuf')
    c.inplace = inplace
    if coll in (Coll.ALLREDUCE, Coll.REDUCE_SCATTER_BLOCK, Coll.REDUCE):
        if not isinstance(op, MPI.Op):
            raise TypeArgumentError(name, f"Argument 'op' has incorrect type (expected mpi4py.MPI.Op, got "
                                    f'{type(op).__name__})', arg='op', rank=rank, error_class=MPI.ERR_OP)
        c.op_code = op_code(op)
    else:
        c.op_code = 0
    if any(a is None for a in present):
        # Only mpi4py reads these buffers' layout: the mirrored path runs the call.
        c.mirror = 'a buffer with a non-contiguous datatype or an element type mpigpu does not know'
        c.send, c.recv = s, r
        return c
    ref = r if r is not None else s
    c.dtype, c.mpi_type, c.itemsize = ref.dtype, ref.mpi_type, ref.itemsize
    if coll in (Coll.ALLREDUCE, Coll.REDUCE_SCATTER_BLOCK, Coll.REDUCE):
        check_op(name, c.dtype, op, rank)

    # Counts and the in-place layout, per MPI's definition of each collective (_ext/_geometry.pxi).
    one_buffer = inplace or coll == Coll.BCAST
    why, c.count, own = call_geometry(coll, size, rank, s is not None, s.count if s is not None else 0,
                                      r is not None, r.count if r is not None else 0, one_buffer)
    if why is not None:
        raise _count_error(name, coll, rank, size, why, s, r)

    # Devices: every buffer on the same device.
    c.send, c.recv = s, r
    devs = {a.buf.device for a in (s, r) if a is not None and a.buf.device >= 0}
    c.device = devs.pop() if len(devs) == 1 else (-1 if not devs else None)
    if c.device is None:
        raise ValueArgumentError(name, 'sendbuf and recvbuf are on different devices', arg='recvbuf', rank=rank,
                                 error_class=MPI.ERR_BUFFER)

    # Alignment: the kernels access elements where C would, at the alignment of the element type
    # (a complex type's is its component's). Checked on every path, so a program's validity does not
    # depend on which path runs; GPU libraries never produce such arrays, only raw pointer offsets do.
    for argname, a in (('sendbuf', s), ('recvbuf' if coll != Coll.BCAST else 'buf', r)):
        if a is not None and a.dtype >= 0 and a.buf.ptr % ALIGNMENTS[a.dtype]:
            raise BufferArgumentError(name, f'device address {a.buf.ptr:#x} is not aligned to the '
                                      f'{ALIGNMENTS[a.dtype]} bytes of {NAMES[a.dtype]}', arg=argname, rank=rank,
                                      error_class=MPI.ERR_BUFFER)

    # Pointers the engine reads and writes (MPI's in-place layouts).
    if r is None:
        c.send_ptr, c.recv_ptr = s.buf.ptr, 0
    elif one_buffer:
        c.recv_ptr = r.buf.ptr
        c.send_ptr = r.buf.ptr + own * c.itemsize
    else:
        c.send_ptr, c.recv_ptr = s.buf.ptr, r.buf.ptr
    return c
