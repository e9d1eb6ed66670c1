"""Device arrays that are not contiguous (a transposed PyTorch tensor, a CuPy slice with a step) passed
as a bare buffer: read through their strides as the buffer specification `[region, 1, datatype]`, where
`region` is the memory from the lowest to the highest element and the datatype places the elements in
the array's logical (C) order, a row of the first axis per instance (nested hvectors, as libraries
written for CUDA-aware MPI build them), so counts and blocks cut the array where mpi4py cuts a
contiguous one (by rows: a v-collective's inferred counts, too). The
derived-datatype paths then pack them on the GPU (packed.py for point-to-point, packing.py elsewhere):
the bytes sent are those of the contiguous copy of the array, received elements land at their strides.

Only with MPIGPU_STRIDED_ARRAYS=1: by default such an array is refused with BufferError, as mpi4py
refuses it on the host and its own test suite requires (MPI has no notion of strides; mpigpu cannot
check that strides stay inside the array's allocation, which the program vouches for by opting in).
C- or Fortran-contiguous arrays are never touched here (their memory is one block, read in memory order
as mpi4py reads a host array). Datatypes are made once per (element type, shape, strides) and kept.
"""
import sys

from mpi4py import MPI

from .._base.codes import SIZES, TYPESTR_CODES
from .._base.config import config
from .datatypes import SIMPLE, VECTOR
from .._base.types import NATIVE
from ..errors import Error

_MAX_TYPES = 256     # datatypes kept for distinct (typestr, shape, strides); the oldest is freed beyond
_types = {}          # key -> committed datatype, in insertion order (oldest first)


class Region:
    """The memory a strided array spans, as a one-dimensional byte buffer with the array's producer
    stream (CUDA Array Interface v3); it keeps the array alive."""

    def __init__(self, array, ptr, nbytes, readonly, stream):
        self.array = array
        cai = {'shape': (nbytes,), 'typestr': '|u1', 'data': (ptr, readonly), 'version': 3, 'strides': None}
        if stream:
            cai['stream'] = stream
        self.__cuda_array_interface__ = cai


def _torch_layout(t):
    """(ptr, typestr, shape, byte strides, readonly, stream) of a torch tensor, or None when contiguous."""
    if not t.is_cuda or t.is_contiguous() or t.numel() == 0:
        return None
    torch = sys.modules['torch']
    try:
        typestr = {torch.float16: '<f2', torch.bfloat16: '<V2', torch.float32: '<f4', torch.float64: '<f8',
                   torch.int8: '|i1', torch.uint8: '|u1', torch.int16: '<i2', torch.int32: '<i4',
                   torch.int64: '<i8', torch.bool: '|b1', torch.complex64: '<c8',
                   torch.complex128: '<c16'}[t.dtype]
    except KeyError:
        return None
    item = t.element_size()
    stream = torch.cuda.current_stream(t.device).cuda_stream
    return (t.data_ptr(), typestr, tuple(t.shape), tuple(s * item for s in t.stride()), False, stream)


def _cai_layout(obj):
    """The same from a CUDA Array Interface, or None (contiguous, or no interface)."""
    try:
        cai = obj.__cuda_array_interface__
    except Exception:
        return None
    strides = cai.get('strides') if type(cai) is dict else None
    if strides is None:
        return None
    shape, typestr = tuple(cai['shape']), cai['typestr']
    item = int(typestr[2:])
    if _contiguous(shape, tuple(strides), item):
        return None
    ptr, readonly = cai['data']
    stream = cai.get('stream') if cai.get('version', 0) >= 3 else None
    return (ptr, typestr, shape, tuple(strides), bool(readonly), stream)


def _contiguous(shape, strides, item):
    if any(n == 0 for n in shape):
        return True
    for order in (range(len(shape) - 1, -1, -1), range(len(shape))):
        expect, ok = item, True
        for k in order:
            if shape[k] != 1 and strides[k] != expect:
                ok = False
                break
            expect *= shape[k]
        if ok:
            return True
    return False


def as_spec(value, form=(SIMPLE, 0), call='', rank=None):
    """`value` itself, or for a bare device array that is not contiguous a specification of its elements
    in logical order: `[Region, count, row type]`, each instance one index of the first axis (the row
    type places that row's elements, its extent is the first axis' stride), with the rows split into
    blocks as mpi4py splits a contiguous array's (form: (kind, blocks) of packing.form_of); a first axis
    whose stride is not positive (reversed rows) is one instance of the whole array, one block only."""
    if not config.strided_arrays or type(value) in (list, tuple) or value is None:
        return value
    module = type(value).__module__
    if module.startswith('torch'):
        found = _torch_layout(value)
    elif module.startswith('cupy'):
        flags = value.flags
        found = None if flags.c_contiguous or flags.f_contiguous else _cai_layout(value)
    else:
        found = _cai_layout(value)
    if found is None:
        return value
    ptr, typestr, shape, strides, readonly, stream = found
    item = int(typestr[2:])
    if any(s % item for s in strides):
        return value  # elements off their alignment: the intake refuses it, as mpi4py does
    low = sum(min(0, (n - 1) * s) for n, s in zip(shape, strides))
    high = sum(max(0, (n - 1) * s) for n, s in zip(shape, strides)) + int(typestr[2:])
    region = Region(value, ptr + low, high - low, readonly, stream)
    kind, blocks = form
    rows = shape[0]
    if strides[0] <= 0:
        if blocks > 1:
            raise Error(call, f'a strided array whose first axis has stride {strides[0]} cannot be cut into '
                        f'{blocks} blocks', arg='buffer', rank=rank, error_class=MPI.ERR_BUFFER)
        return [region, 1, datatype(typestr, shape, strides, -low, 0)]
    row = datatype(typestr, shape[1:], strides[1:], -low, strides[0])
    if kind == VECTOR and blocks:
        return [region, [rows // blocks + (rows % blocks > i) for i in range(blocks)], row]
    if blocks > 1:
        if rows % blocks:
            raise Error(call, f'a strided array of {rows} rows cannot be cut into {blocks} blocks',
                        arg='buffer', rank=rank, error_class=MPI.ERR_COUNT)
        rows //= blocks
    return [region, rows, row]


def _element(typestr):
    """The MPI datatype of one element: the named type, or its bytes where MPI has none (16-bit floats)."""
    code = TYPESTR_CODES.get(typestr)
    if code is not None and NATIVE[code] is not None:
        return NATIVE[code], False
    size = SIZES[code] if code is not None else int(typestr[2:])
    return MPI.BYTE.Create_contiguous(size), True


def datatype(typestr, shape, strides, first, extent):
    """The committed datatype of elements at `strides` in C order, the first `first` bytes from the
    pointer, resized to `extent` bytes (0: the whole array, one instance)."""
    key = (typestr, shape, strides, first, extent)
    t = _types.get(key)
    if t is not None:
        return t
    base, made = _element(typestr)
    parts = [base] if made else []
    t = base
    for n, s in zip(reversed(shape), reversed(strides)):
        t = t.Create_hvector(n, 1, s)
        parts.append(t)
    t = MPI.Datatype.Create_struct([1], [first], [t])
    if extent:
        parts.append(t)
        t = t.Create_resized(0, extent)
    t.Commit()
    for p in parts:
        p.Free()
    if len(_types) >= _MAX_TYPES:
        _types.pop(next(iter(_types))).Free()
    _types[key] = t
    return t
