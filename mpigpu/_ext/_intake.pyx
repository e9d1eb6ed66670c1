# Buffer intake: decides whether a buffer lives on a CUDA device and, if so, reads its pointer, size,
# element type, writability and producer stream from the CUDA Array Interface (v2/v3) or DLPack
# (legacy and versioned capsules), without Python-level loops. Host buffers are not parsed here: they
# go to mpi4py untouched.
from cpython.pycapsule cimport PyCapsule_IsValid, PyCapsule_GetPointer
from libc.stdint cimport uintptr_t, int64_t, uint64_t, uint8_t, uint16_t, int32_t, uint32_t

cdef extern from *:
    """
    typedef struct { int32_t device_type; int32_t device_id; } mg_DLDevice;
    typedef struct { uint8_t code; uint8_t bits; uint16_t lanes; } mg_DLDataType;
    typedef struct {
        void *data; mg_DLDevice device; int32_t ndim; mg_DLDataType dtype;
        int64_t *shape; int64_t *strides; uint64_t byte_offset;
    } mg_DLTensor;
    typedef struct { mg_DLTensor dl_tensor; void *manager_ctx; void *deleter; } mg_DLManagedTensor;
    typedef struct {
        uint32_t major; uint32_t minor; void *manager_ctx; void *deleter; uint64_t flags;
        mg_DLTensor dl_tensor;
    } mg_DLManagedTensorVersioned;
    #define MG_DLPACK_FLAG_READ_ONLY 1ULL
    """
    ctypedef struct mg_DLDevice:
        int32_t device_type
        int32_t device_id
    ctypedef struct mg_DLDataType:
        uint8_t code
        uint8_t bits
        uint16_t lanes
    ctypedef struct mg_DLTensor:
        void *data
        mg_DLDevice device
        int32_t ndim
        mg_DLDataType dtype
        int64_t *shape
        int64_t *strides
        uint64_t byte_offset
    ctypedef struct mg_DLManagedTensor:
        mg_DLTensor dl_tensor
    ctypedef struct mg_DLManagedTensorVersioned:
        uint64_t flags
        mg_DLTensor dl_tensor
    uint64_t MG_DLPACK_FLAG_READ_ONLY

from ._codes import DTYPES as _DTYPE_ROWS

include "_geometry.pxi"

# Element types by code (the table of cuda/mpigpu_cuda.h): bytes, and the alignment the kernels need.
DTYPE_SIZES = tuple(row[1] for row in _DTYPE_ROWS)
DTYPE_ALIGNMENTS = tuple(row[2] for row in _DTYPE_ROWS)
cdef dict _BY_KIND = {(row[3], row[1]): code for code, row in enumerate(_DTYPE_ROWS)}

# CUDA Array Interface typestr -> dtype code: '|' for byte-sized types, little-endian '<' otherwise
# (bfloat16 has no typestr).
TYPESTR_CODES = {('|' if size == 1 else '<') + kind + str(size): code
                 for code, (_name, size, _align, kind) in enumerate(_DTYPE_ROWS) if kind != 'B'}
cdef dict _TYPESTR = TYPESTR_CODES

cdef enum:
    kDLCPU = 1
    kDLCUDA = 2
    kDLCUDAHost = 3
    kDLCUDAManaged = 13

# DLPack's type codes (kDLInt, kDLUInt, kDLFloat, kDLBfloat, kDLComplex, kDLBool) as our kinds.
cdef dict _DL_KIND = {0: 'i', 1: 'u', 2: 'f', 4: 'B', 5: 'c', 6: 'b'}


cdef inline int _dl_dtype(mg_DLDataType t):
    if t.lanes != 1 or t.bits % 8:
        return -1
    return _BY_KIND.get((_DL_KIND.get(t.code), t.bits // 8), -1)


class IntakeError(ValueError):
    """A buffer that cannot be used; the message says why (the caller adds call, argument, rank)."""


cdef class DeviceBuffer:
    """A contiguous buffer in CUDA device memory, as read from its exporter."""
    cdef readonly object owner        # keeps the exporter (or its DLPack capsule) alive
    cdef readonly uintptr_t ptr
    cdef readonly Py_ssize_t nbytes
    cdef readonly int dtype           # mg_dtype code, -1 when the exporter's type is unknown
    cdef readonly int itemsize
    cdef readonly bint readonly
    cdef readonly int device          # device ordinal, -1 when the exporter does not say (CAI)
    cdef readonly Py_ssize_t stream   # producer stream (CAI v3): -1 none given, else the handle
    cdef readonly bint stream_synced  # DLPack: the producer already ordered its work before our stream

    def __repr__(self):
        name = _DTYPE_ROWS[self.dtype][0] if self.dtype >= 0 else '?'
        return (f'DeviceBuffer(ptr=0x{self.ptr:x}, nbytes={self.nbytes}, dtype={name}, '
                f'device={self.device}, readonly={bool(self.readonly)})')

    def view(self, Py_ssize_t offset, Py_ssize_t nbytes, int dtype):
        """The same memory from `offset` for `nbytes`, read as `dtype` (buffer specifications)."""
        cdef DeviceBuffer b = DeviceBuffer.__new__(DeviceBuffer)
        b.owner = self.owner
        b.ptr = self.ptr + <uintptr_t>offset
        b.nbytes = nbytes
        b.dtype = dtype
        b.itemsize = DTYPE_SIZES[dtype] if dtype >= 0 else self.itemsize
        b.readonly = self.readonly
        b.device = self.device
        b.stream = self.stream
        b.stream_synced = self.stream_synced
        return b

    @property
    def count(self):
        return self.nbytes // self.itemsize if self.itemsize else 0


cdef set _HOST_TYPES = set()


cpdef bint is_device(object obj) except -1:
    """True when obj (or the buffer of a buffer specification) lives in CUDA device memory."""
    cdef type t = type(obj)
    if t is list or t is tuple:
        if len(obj) == 0:
            return False
        obj = obj[0]
        t = type(obj)
    if t in _HOST_TYPES or obj is None:
        return False
    dev = getattr(t, '__dlpack_device__', None)
    if dev is not None:
        try:
            kind = obj.__dlpack_device__()[0]
        except Exception:
            kind = kDLCPU
        return kind == kDLCUDA or kind == kDLCUDAManaged
    if hasattr(obj, '__cuda_array_interface__'):
        return True
    if t.__module__ in ('numpy', 'builtins', 'array'):
        _HOST_TYPES.add(t)
    return False


cdef bint _contiguous(tuple shape, object strides, Py_ssize_t itemsize):
    if strides is None:
        return True
    cdef Py_ssize_t nd = len(shape), i, expect, extent
    for i in range(nd):
        if shape[i] == 0:
            return True
    # C order
    expect = itemsize
    cdef bint c_ok = True, f_ok = True
    for i in range(nd - 1, -1, -1):
        extent = shape[i]
        if extent != 1 and strides[i] != expect:
            c_ok = False
            break
        expect *= extent
    if c_ok:
        return True
    expect = itemsize
    for i in range(nd):
        extent = shape[i]
        if extent != 1 and strides[i] != expect:
            f_ok = False
            break
        expect *= extent
    return f_ok


cdef DeviceBuffer _from_cai(object obj, dict cai):
    cdef DeviceBuffer b = DeviceBuffer.__new__(DeviceBuffer)
    if cai.get('mask') is not None:
        raise IntakeError('masked CUDA arrays are not supported')
    typestr = cai['typestr']
    shape = tuple(cai['shape'])
    cdef Py_ssize_t n = 1
    for s in shape:
        n *= s
    code = _TYPESTR.get(typestr, -1)
    if code >= 0:
        itemsize = DTYPE_SIZES[code]
    else:
        try:
            itemsize = int(typestr[2:])
        except ValueError:
            raise IntakeError(f'unsupported CUDA Array Interface typestr {typestr!r}')
    if not _contiguous(shape, cai.get('strides'), itemsize):
        raise IntakeError('buffer is not contiguous (shape %r, strides %r)' % (shape, cai.get('strides')))
    data = cai['data']
    b.owner = obj
    b.ptr = <uintptr_t>(data[0] or 0)
    b.readonly = bool(data[1])
    b.nbytes = n * itemsize
    b.dtype = code
    b.itemsize = itemsize
    b.device = -1
    stream = cai.get('stream') if cai.get('version', 0) >= 3 else None
    b.stream = -1 if stream is None else <Py_ssize_t>stream
    b.stream_synced = False
    return b


cdef DeviceBuffer _from_dlpack(object obj, object stream):
    cdef DeviceBuffer b = DeviceBuffer.__new__(DeviceBuffer)
    cdef mg_DLTensor *t
    cdef bint ro = False
    try:
        cap = obj.__dlpack__(stream=stream, max_version=(1, 1))
    except TypeError:
        cap = obj.__dlpack__(stream=stream)
    if PyCapsule_IsValid(cap, b'dltensor_versioned'):
        vt = <mg_DLManagedTensorVersioned *>PyCapsule_GetPointer(cap, b'dltensor_versioned')
        t = &vt.dl_tensor
        ro = (vt.flags & MG_DLPACK_FLAG_READ_ONLY) != 0
    elif PyCapsule_IsValid(cap, b'dltensor'):
        t = &(<mg_DLManagedTensor *>PyCapsule_GetPointer(cap, b'dltensor')).dl_tensor
    else:
        raise IntakeError('__dlpack__ returned no DLPack capsule')
    if t.device.device_type != kDLCUDA and t.device.device_type != kDLCUDAManaged:
        raise IntakeError(f'DLPack device type {t.device.device_type} is not a CUDA device')
    code = _dl_dtype(t.dtype)
    cdef Py_ssize_t itemsize = (t.dtype.bits * t.dtype.lanes + 7) // 8
    cdef Py_ssize_t n = 1, i
    shape = []
    for i in range(t.ndim):
        n *= t.shape[i]
        shape.append(t.shape[i])
    if t.strides != NULL:
        strides = tuple(t.strides[i] * itemsize for i in range(t.ndim))
        if not _contiguous(tuple(shape), strides, itemsize):
            raise IntakeError('buffer is not contiguous (shape %r, strides %r)' % (tuple(shape), strides))
    # The capsule owns a reference to the tensor: keeping it alive keeps the memory alive, and its
    # destructor calls the DLPack deleter because we never rename it.
    b.owner = cap
    b.ptr = <uintptr_t>t.data + <uintptr_t>t.byte_offset
    b.nbytes = n * itemsize
    b.dtype = code
    b.itemsize = itemsize
    b.readonly = ro
    b.device = t.device.device_id
    b.stream = -1
    b.stream_synced = stream is not None
    return b


cdef bint _prefer_dlpack(object obj):
    # PyTorch's CUDA Array Interface is v2 (no stream) and refuses bfloat16: DLPack's stream handshake
    # orders the call after PyTorch's current stream instead.
    return type(obj).__module__.startswith('torch')


cpdef DeviceBuffer device_buffer(object obj, object stream=None):
    """Reads a CUDA buffer. `stream` is the consumer stream offered to a DLPack producer."""
    if isinstance(obj, DeviceBuffer):
        return obj
    cdef dict cai
    if not _prefer_dlpack(obj):
        try:
            cai = obj.__cuda_array_interface__
        except AttributeError:
            cai = None
        except (TypeError, RuntimeError, ValueError):
            cai = None
        if cai is not None:
            return _from_cai(obj, cai)
    if hasattr(obj, '__dlpack__'):
        try:
            return _from_dlpack(obj, stream)
        except IntakeError:
            raise
        except Exception as exc:
            raise IntakeError(f'__dlpack__ failed: {exc}') from exc
    raise IntakeError(f'{type(obj).__name__} exposes neither __cuda_array_interface__ nor __dlpack__')


def call_geometry(int coll, int n, int rank, bint has_send, Py_ssize_t scount, bint has_recv,
                  Py_ssize_t rcount, bint inplace):
    """(error, count, own) of an engine collective by _geometry.pxi's rules, for the general path: error is
    None or a key of GEOMETRY_ERRORS' values ('counts_differ', ...)."""
    cdef Py_ssize_t count = 0, own = 0
    cdef int err = geometry(coll, n, rank, has_send, scount, has_recv, rcount, inplace, &count, &own)
    return GEOMETRY_ERRORS.get(err), count, own
