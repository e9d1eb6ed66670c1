"""The description of one device-buffer collective (`Call`): its arguments parsed and checked.

mpi4py's rules for buffer specifications apply: `buf`, `[buf, datatype]`, `[buf, count]`,
`[buf, (count, displ)]`, `[buf, count, datatype]`, `[buf, (count, displ), datatype]` and
`[buf, count, displ, datatype]`; `displ` counts datatype extents. Every check raises `mpigpu.Error`
before anything is transferred, so a rejected call leaves recvbuf untouched.
"""
import operator

from mpi4py import MPI

from ._codes import ALIGNMENTS, NAMES, SIZES, Coll
from ._ext._intake import DeviceBuffer, IntakeError, call_geometry, device_buffer
from ._types import FROM_MPI, check_op, from_typecode, op_code
from .errors import Error


class Arg:
    """One parsed device buffer argument."""
    __slots__ = ('buf', 'count', 'dtype', 'mpi_type', 'itemsize')

    def __init__(self, buf, count, dtype, mpi_type, itemsize):
        self.buf = buf            # DeviceBuffer of exactly the described bytes
        self.count = count        # elements
        self.dtype = dtype        # engine dtype code, -1 when only MPI knows the type (pair types)
        self.mpi_type = mpi_type  # MPI datatype given in a specification, or None
        self.itemsize = itemsize


class Call:
    """Plain description of one collective call, what the engine and the staged path consume."""
    __slots__ = ('name', 'coll', 'send', 'recv', 'count', 'dtype', 'mpi_type', 'itemsize', 'op',
                 'op_code', 'root', 'inplace', 'device', 'stream', 'streams', 'send_ptr', 'recv_ptr')

    def __repr__(self):
        return (f'Call({self.name}, count={self.count}, dtype={NAMES[self.dtype] if self.dtype >= 0 else self.mpi_type},'
                f' op={self.op_code}, root={self.root}, inplace={self.inplace}, device={self.device})')


def _datatype(call, argname, rank, spec_type):
    """(dtype code, MPI datatype or None, itemsize) of a datatype given in a buffer specification."""
    if isinstance(spec_type, MPI.Datatype):
        if spec_type.handle == MPI.DATATYPE_NULL.handle:
            raise Error(call, 'MPI.DATATYPE_NULL is not a datatype', arg=argname, rank=rank, error_class=MPI.ERR_TYPE)
        lb, extent = spec_type.Get_extent()
        code = FROM_MPI.get(spec_type.handle, -1)
        if code < 0 and spec_type.Get_size() != extent:
            raise Error(call, f'datatype {spec_type.Get_name() or spec_type} is not contiguous; '
                        'device buffers take contiguous datatypes only', arg=argname, rank=rank,
                        error_class=MPI.ERR_TYPE)
        return code, spec_type, extent
    if isinstance(spec_type, str):
        code = from_typecode(spec_type)
        if code is None:
            raise Error(call, f'unknown datatype {spec_type!r}', arg=argname, rank=rank, error_class=MPI.ERR_TYPE)
        return code, None, SIZES[code]
    raise Error(call, f'datatype must be an MPI.Datatype or a typecode, not {type(spec_type).__name__}',
                arg=argname, rank=rank, error_class=MPI.ERR_TYPE)


def _unpack_spec(call, argname, rank, spec):
    """(buffer object, count or None, displ, datatype or None) from a buffer specification."""
    n = len(spec)
    count = None
    displ = 0
    dtype = None
    if n == 2:
        obj, x = spec
        if isinstance(x, (MPI.Datatype, str)):
            dtype = x
        elif isinstance(x, tuple):
            count, displ = x
        else:
            count = x
    elif n == 3:
        obj, x, dtype = spec
        if isinstance(x, tuple):
            count, displ = x
        else:
            count = x
    elif n == 4:
        obj, count, displ, dtype = spec
    else:
        raise Error(call, f'buffer specification must have 2 to 4 items, not {n}', arg=argname, rank=rank,
                    error_class=MPI.ERR_BUFFER)
    checked = []
    for label, value in (('count', count), ('displacement', displ)):
        if value is not None:
            try:
                value = operator.index(value)  # Python and NumPy integers, as mpi4py takes them
            except TypeError:
                value = -1
            if value < 0:
                raise Error(call, f'{label} must be a non-negative integer', arg=argname, rank=rank,
                            error_class=MPI.ERR_COUNT if label == 'count' else MPI.ERR_ARG)
        checked.append(value)
    return obj, checked[0], checked[1], dtype


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
        except IntakeError as exc:
            raise Error(call, str(exc), arg=argname, rank=rank, error_class=MPI.ERR_BUFFER) from None
    if writable and buf.readonly:
        raise Error(call, 'buffer is read-only', arg=argname, rank=rank, error_class=MPI.ERR_BUFFER)
    return buf


def parse(call, argname, rank, obj, writable, stream_for):
    """Parses one device buffer argument (a buffer or a specification) into an `Arg`."""
    spec = None
    if type(obj) in (list, tuple):
        spec = obj
        obj, count, displ, spec_type = _unpack_spec(call, argname, rank, spec)
    buf = read_whole(call, argname, rank, obj, writable, stream_for)
    if spec is None:
        if buf.dtype < 0:
            raise Error(call, 'unsupported element type of the device buffer; give an MPI datatype in a '
                        'buffer specification', arg=argname, rank=rank, error_class=MPI.ERR_TYPE)
        return Arg(buf, buf.count, buf.dtype, None, buf.itemsize)
    if spec_type is None:
        if buf.dtype < 0:
            raise Error(call, 'the buffer specification needs a datatype for this buffer', arg=argname,
                        rank=rank, error_class=MPI.ERR_TYPE)
        code, mpi_type, extent = buf.dtype, None, buf.itemsize
    else:
        code, mpi_type, extent = _datatype(call, argname, rank, spec_type)
    offset = displ * extent
    room = buf.nbytes - offset
    if count is None:
        if room < 0 or room % extent:
            raise Error(call, f'buffer of {buf.nbytes} bytes is not a whole number of {extent}-byte elements '
                        f'after a displacement of {displ}', arg=argname, rank=rank, error_class=MPI.ERR_BUFFER)
        count = room // extent
    elif count * extent > room:
        raise Error(call, f'count {count} x {extent} bytes at displacement {displ} exceeds the buffer of '
                    f'{buf.nbytes} bytes', arg=argname, rank=rank, error_class=MPI.ERR_BUFFER)
    return Arg(buf.view(offset, count * extent, code), count, code, mpi_type, extent)


def _same_type(call, rank, a, b, aname, bname):
    if a.dtype != b.dtype or (a.dtype < 0 and a.mpi_type.handle != b.mpi_type.handle):
        an = NAMES[a.dtype] if a.dtype >= 0 else a.mpi_type.Get_name()
        bn = NAMES[b.dtype] if b.dtype >= 0 else b.mpi_type.Get_name()
        raise Error(call, f'{aname} holds {an} but {bname} holds {bn}', arg=bname, rank=rank,
                    error_class=MPI.ERR_TYPE)


def _count_error(name, coll, rank, size, why, s, r):
    """The general path's message for a geometry error (_ext/_geometry.pxi)."""
    if why == 'counts_differ':
        return Error(name, f'sendbuf has {s.count} elements but recvbuf has {r.count}', arg='recvbuf', rank=rank,
                     error_class=MPI.ERR_COUNT)
    if why == 'recv_not_multiple':
        return Error(name, f'recvbuf has {r.count} elements, not a multiple of the communicator size {size}',
                     arg='recvbuf', rank=rank, error_class=MPI.ERR_COUNT)
    if why == 'send_not_multiple':
        return Error(name, f'sendbuf has {s.count} elements, not a multiple of the communicator size {size}',
                     arg='sendbuf', rank=rank, error_class=MPI.ERR_COUNT)
    if coll == Coll.REDUCE_SCATTER_BLOCK:
        return Error(name, f'recvbuf has {r.count} elements but sendbuf gives each rank {s.count // size}',
                     arg='recvbuf', rank=rank, error_class=MPI.ERR_COUNT)
    return Error(name, f'recvbuf has {r.count} elements but needs {s.count} x {size}', arg='recvbuf', rank=rank,
                 error_class=MPI.ERR_COUNT)


def build(name, coll, size, rank, sendbuf, recvbuf, op, root, stream_for):
    """Parses and checks one collective call with device buffers into a `Call`.

    coll: a Coll; for Bcast pass the buffer as recvbuf and sendbuf=None.
    """
    c = Call()
    c.name, c.coll, c.root, c.op = name, coll, root, op
    if not 0 <= root < size:
        raise Error(name, f'root {root} is not a rank of a communicator of size {size}', arg='root',
                    rank=rank, error_class=MPI.ERR_ROOT)
    inplace = sendbuf is MPI.IN_PLACE or (isinstance(sendbuf, (list, tuple)) and len(sendbuf) > 0 and
                                          sendbuf[0] is MPI.IN_PLACE)
    is_root = rank == root
    if coll == Coll.BCAST:
        r = parse(name, 'buf', rank, recvbuf, not is_root, stream_for)
        s = None
    elif coll == Coll.REDUCE and not is_root:  # recvbuf is not significant off the root
        if inplace:
            raise Error(name, 'MPI.IN_PLACE is valid only at the root', arg='sendbuf', rank=rank,
                        error_class=MPI.ERR_BUFFER)
        s = parse(name, 'sendbuf', rank, sendbuf, False, stream_for)
        r = None
    else:
        r = parse(name, 'recvbuf', rank, recvbuf, True, stream_for)
        s = None if inplace else parse(name, 'sendbuf', rank, sendbuf, False, stream_for)
        if s is not None:
            _same_type(name, rank, s, r, 'sendbuf', 'recvbuf')
    ref = r if r is not None else s
    c.dtype, c.mpi_type, c.itemsize = ref.dtype, ref.mpi_type, ref.itemsize
    c.inplace = inplace

    # Counts and the in-place layout, per MPI's definition of each collective (_ext/_geometry.pxi).
    one_buffer = inplace or coll == Coll.BCAST
    why, c.count, own = call_geometry(coll, size, rank, s is not None, s.count if s is not None else 0,
                                      r is not None, r.count if r is not None else 0, one_buffer)
    if why is not None:
        raise _count_error(name, coll, rank, size, why, s, r)

    if coll in (Coll.ALLREDUCE, Coll.REDUCE_SCATTER_BLOCK, Coll.REDUCE):
        if not isinstance(op, MPI.Op):
            raise Error(name, f'op must be an MPI.Op, not {type(op).__name__}', arg='op', rank=rank,
                        error_class=MPI.ERR_OP)
        c.op_code = op_code(op)
        check_op(name, c.dtype, op, rank)
    else:
        c.op_code = 0

    # Devices: every buffer on the same device.
    c.send, c.recv = s, r
    devs = {a.buf.device for a in (s, r) if a is not None and a.buf.device >= 0}
    c.device = devs.pop() if len(devs) == 1 else (-1 if not devs else None)
    if c.device is None:
        raise Error(name, 'sendbuf and recvbuf are on different devices', arg='recvbuf', rank=rank,
                    error_class=MPI.ERR_BUFFER)

    # Alignment: the kernels access elements where C would, at the alignment of the element type
    # (a complex type's is its component's). Checked on every path, so a program's validity does not
    # depend on which path runs; GPU libraries never produce such arrays, only raw pointer offsets do.
    for argname, a in (('sendbuf', s), ('recvbuf' if coll != Coll.BCAST else 'buf', r)):
        if a is not None and a.dtype >= 0 and a.buf.ptr % ALIGNMENTS[a.dtype]:
            raise Error(name, f'device address {a.buf.ptr:#x} is not aligned to the {ALIGNMENTS[a.dtype]} bytes '
                        f'of {NAMES[a.dtype]}', arg=argname, rank=rank, error_class=MPI.ERR_BUFFER)

    # Pointers the engine reads and writes (MPI's in-place layouts).
    if r is None:
        c.send_ptr, c.recv_ptr = s.buf.ptr, 0
    elif one_buffer:
        c.recv_ptr = r.buf.ptr
        c.send_ptr = r.buf.ptr + own * c.itemsize
    else:
        c.send_ptr, c.recv_ptr = s.buf.ptr, r.buf.ptr
    return c
