"""Argument parsing of the GPU collectives into one plain description of the call (`Call`).

mpi4py's rules for buffer specifications apply: `buf`, `[buf, datatype]`, `[buf, count]`,
`[buf, (count, displ)]`, `[buf, count, datatype]`, `[buf, (count, displ), datatype]` and
`[buf, count, displ, datatype]`; `displ` counts datatype extents. Every check raises `mpigpu.Error`
before anything is transferred, so a rejected call leaves recvbuf untouched.
"""
import operator

from mpi4py import MPI

from ._ext._intake import DeviceBuffer, IntakeError, device_buffer
from ._types import ALIGNMENT, DTYPES, FROM_MPI, SIZES, TYPECHARS, check_op, op_code
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
        return (f'Call({self.name}, count={self.count}, dtype={DTYPES[self.dtype] if self.dtype >= 0 else self.mpi_type},'
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
        key = spec_type.lstrip('<=|')
        code = TYPECHARS.get(key, -1)
        if code < 0:
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
        an = DTYPES[a.dtype] if a.dtype >= 0 else a.mpi_type.Get_name()
        bn = DTYPES[b.dtype] if b.dtype >= 0 else b.mpi_type.Get_name()
        raise Error(call, f'{aname} holds {an} but {bname} holds {bn}', arg=bname, rank=rank,
                    error_class=MPI.ERR_TYPE)


def build(name, coll, size, rank, sendbuf, recvbuf, op, root, stream_for):
    """Parses and checks one collective call with device buffers into a `Call`.

    name/coll: 'Allreduce'/0 ...; for Bcast pass the buffer as recvbuf and sendbuf=None.
    """
    c = Call()
    c.name, c.coll, c.root, c.op = name, coll, root, op
    if not 0 <= root < size:
        raise Error(name, f'root {root} is not a rank of a communicator of size {size}', arg='root',
                    rank=rank, error_class=MPI.ERR_ROOT)
    inplace = sendbuf is MPI.IN_PLACE or (isinstance(sendbuf, (list, tuple)) and len(sendbuf) > 0 and
                                          sendbuf[0] is MPI.IN_PLACE)
    is_root = rank == root
    if coll == 1:  # Bcast
        r = parse(name, 'buf', rank, recvbuf, not is_root, stream_for)
        s = None
    elif coll == 3 and not is_root:  # Reduce: recvbuf is not significant off the root
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

    # Counts, per MPI's definition of each collective.
    if coll in (0, 3):
        if s is not None and r is not None and s.count != r.count:
            raise Error(name, f'sendbuf has {s.count} elements but recvbuf has {r.count}', arg='recvbuf',
                        rank=rank, error_class=MPI.ERR_COUNT)
        c.count = ref.count
    elif coll == 1:
        c.count = r.count
    elif coll == 2:  # Reduce_scatter_block: count = elements per rank
        total = r.count if inplace else s.count
        if total % size:
            raise Error(name, f'{"recvbuf" if inplace else "sendbuf"} has {total} elements, not a multiple of '
                        f'the communicator size {size}', arg='recvbuf' if inplace else 'sendbuf', rank=rank,
                        error_class=MPI.ERR_COUNT)
        c.count = total // size
        if not inplace and r.count != c.count:
            raise Error(name, f'recvbuf has {r.count} elements but sendbuf gives each rank {c.count}',
                        arg='recvbuf', rank=rank, error_class=MPI.ERR_COUNT)
    elif coll == 4:  # Allgather: count = elements each rank contributes
        if inplace:
            if r.count % size:
                raise Error(name, f'recvbuf has {r.count} elements, not a multiple of the communicator '
                            f'size {size}', arg='recvbuf', rank=rank, error_class=MPI.ERR_COUNT)
            c.count = r.count // size
        else:
            c.count = s.count
            if r.count != s.count * size:
                raise Error(name, f'recvbuf has {r.count} elements but needs {s.count} x {size}',
                            arg='recvbuf', rank=rank, error_class=MPI.ERR_COUNT)

    if coll in (0, 2, 3):
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
    for argname, a in (('sendbuf', s), ('recvbuf' if coll != 1 else 'buf', r)):
        if a is not None and a.dtype >= 0 and a.buf.ptr % ALIGNMENT[a.dtype]:
            raise Error(name, f'device address {a.buf.ptr:#x} is not aligned to the {ALIGNMENT[a.dtype]} bytes '
                        f'of {DTYPES[a.dtype]}', arg=argname, rank=rank, error_class=MPI.ERR_BUFFER)

    # Pointers the engine reads and writes (MPI's in-place layouts).
    if coll == 1:
        c.send_ptr = c.recv_ptr = r.buf.ptr
    elif r is None:
        c.send_ptr, c.recv_ptr = s.buf.ptr, 0
    elif inplace:
        c.recv_ptr = r.buf.ptr
        c.send_ptr = r.buf.ptr + (rank * c.count * c.itemsize if coll == 4 else 0)
    else:
        c.send_ptr, c.recv_ptr = s.buf.ptr, r.buf.ptr
    return c
