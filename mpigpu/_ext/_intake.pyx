# Buffer intake: decides where a buffer lives (device or host memory, by its pointer, not its wrapper)
# and reads a device buffer's pointer, size, element type, writability and producer stream from the
# CUDA Array Interface (v2/v3), DLPack (legacy and versioned capsules) or the buffer protocol. Every
# export is validated before any pointer arithmetic; a malformed one raises the Python exception
# mpi4py raises for it (TypeError, ValueError, BufferError, KeyError), which mpigpu._describe.call turns into
# an mpigpu.Error of that class. Host buffers are not parsed here: they go to mpi4py untouched.
import sys
import warnings

from cpython.buffer cimport PyBUF_FORMAT, PyBUF_ND, PyBUF_SIMPLE, PyBuffer_Release, PyObject_CheckBuffer, PyObject_GetBuffer
from cpython.pycapsule cimport PyCapsule_IsValid, PyCapsule_GetPointer
from cpython.pyport cimport PY_SSIZE_T_MAX
from cpython.pythread cimport PyThread_get_thread_ident
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

from ._codes import BY_KIND, MIRROR_TYPESTRS, NAMES, SIZES

include "_geometry.pxi"

# The element types' tables (mpigpu/_ext/_codes.pyx), bound to typed globals.
cdef dict _BY_KIND = BY_KIND                 # (kind, bytes) -> code
cdef tuple _NAMES = NAMES
cdef tuple _SIZES = SIZES
cdef tuple _MIRROR_TYPESTRS = MIRROR_TYPESTRS

cdef enum:
    kDLCPU = 1
    kDLCUDA = 2
    kDLCUDAHost = 3
    kDLCUDAManaged = 13

# DLPack's type codes (kDLInt, kDLUInt, kDLFloat, kDLBfloat, kDLComplex, kDLBool) as our kinds.
cdef dict _DL_KIND = {0: 'i', 1: 'u', 2: 'f', 4: 'B', 5: 'c', 6: 'b'}
# Buffer-protocol format characters (struct module) as kinds; their sizes come from struct.
cdef dict _FORMAT_KIND = {'?': 'b', 'b': 'i', 'h': 'i', 'i': 'i', 'l': 'i', 'q': 'i', 'n': 'i', 'B': 'u',
                          'H': 'u', 'I': 'u', 'L': 'u', 'Q': 'u', 'N': 'u', 'e': 'f', 'f': 'f', 'd': 'f',
                          'Zf': 'c', 'Zd': 'c'}
# A buffer's bytes must fit a Py_ssize_t; addresses and stream handles a pointer.
cdef Py_ssize_t _MAX_BYTES = PY_SSIZE_T_MAX
cdef object _UINTPTR_LIMIT = (<object>1) << (8 * sizeof(uintptr_t))
cdef object _INTPTR_LIMIT = (<object>1) << (8 * sizeof(uintptr_t) - 1)


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
    cdef readonly str typestr         # the elements as NumPy (and so mpi4py) reads a host mirror of them

    def __repr__(self):
        name = _NAMES[self.dtype] if self.dtype >= 0 else self.typestr
        return (f'DeviceBuffer(ptr=0x{self.ptr:x}, nbytes={self.nbytes}, dtype={name}, '
                f'device={self.device}, readonly={bool(self.readonly)})')

    def view(self, Py_ssize_t offset, Py_ssize_t nbytes, int dtype):
        """The same memory from `offset` for `nbytes`, read as `dtype` (buffer specifications)."""
        cdef DeviceBuffer b = DeviceBuffer.__new__(DeviceBuffer)
        b.owner = self.owner
        b.ptr = self.ptr + <uintptr_t>offset
        b.nbytes = nbytes
        b.dtype = dtype
        if dtype >= 0:
            b.itemsize, b.typestr = _SIZES[dtype], _MIRROR_TYPESTRS[dtype]
        else:
            b.itemsize, b.typestr = self.itemsize, self.typestr
        b.readonly = self.readonly
        b.device = self.device
        b.stream = self.stream
        b.stream_synced = self.stream_synced
        return b

    @property
    def count(self):
        return self.nbytes // self.itemsize if self.itemsize else 0

    @property
    def __cuda_array_interface__(self):
        """The buffer as a CUDA array (version 3), so that a library reading its arguments itself (mpi4py
        on a CUDA-aware MPI, handed a call's arguments after read_once) reads what was read: its elements
        in one axis, its producer stream where its exporter gave one."""
        n, typestr = (self.count, self.typestr) if self.itemsize else (self.nbytes, '|u1')
        return {'shape': (n,), 'typestr': typestr, 'data': (self.ptr, bool(self.readonly)), 'version': 3,
                'strides': None, 'stream': self.stream if self.stream > 0 else None}


# ---- where a buffer lives ------------------------------------------------------------------------
cdef object _pointer_query = None  # fn(ptr) -> True for device or managed memory; set by mpigpu._cuda
# is_device's finding of device memory behind a CUDA Array Interface, (weak reference to the exporter,
# its dict, the thread): read_device takes it for the same exporter in the same thread instead of asking
# it and the driver again, so a method's placement check and its call's reading read the buffer once
# between them. Every is_device drops the one before, so a finding no reading took (a call that raised
# first) never reaches a later call, which checks placement before it reads. One tuple, swapped whole;
# no array is held alive; an exporter without weak references is read twice.
cdef object _seen = None
cdef object _weakref = __import__('weakref').ref
cdef set _HOST_TYPES = {bytes, bytearray, type(None)}  # and mpi4py's constants, below
cdef object _cupy_ndarray = None
cdef object _MISSING = object()
cdef object _mpi4py = __import__('mpi4py.MPI', fromlist=['IN_PLACE'])
cdef type _IN_PLACE_TYPE = type(_mpi4py.IN_PLACE)
_HOST_TYPES.update({_IN_PLACE_TYPE, type(_mpi4py.BOTTOM), type(_mpi4py.BUFFER_AUTOMATIC)})


def set_pointer_query(fn):
    """Installs the CUDA layer's question "is this pointer device (or managed) memory?" (None: no
    pointer is, as on a machine without the CUDA layer)."""
    global _pointer_query
    _pointer_query = fn


cdef bint _cupy_array(type t):
    """True for cupy.ndarray (exactly), whose memory CuPy allocates on a device."""
    global _cupy_ndarray
    if _cupy_ndarray is None:
        m = sys.modules.get('cupy')
        if m is None:
            return False
        _cupy_ndarray = m.ndarray
    return t is _cupy_ndarray


cdef object _torch_tensor = None  # torch.Tensor, once PyTorch is imported


cdef bint _torch_tensor_type(type t):
    """True for torch.Tensor (exactly): its is_cuda says where it lives, without a DLPack call."""
    global _torch_tensor
    if _torch_tensor is None:
        if t.__module__ != 'torch':
            return False
        m = sys.modules.get('torch')
        if m is None or not hasattr(m, 'Tensor'):
            return False
        _torch_tensor = m.Tensor
    return t is _torch_tensor


# Producers whose DLPack device type is trusted; any other exporter's pointer is asked (a host array
# may claim a CUDA device, as mpi4py's own test suite's do).
cdef frozenset _GPU_FRAMEWORKS = frozenset(('torch', 'cupy', 'jax', 'jaxlib', 'numba', 'cudf', 'tensorflow'))


cdef int _dlpack_pointer(object obj, uintptr_t *ptr) except -1:
    """0 with the data pointer of obj's DLPack export, taken without synchronization (stream -1, as
    mpi4py takes it); 1 when the export fails or is malformed."""
    cdef mg_DLTensor *t
    try:
        try:
            cap = obj.__dlpack__(stream=-1)
        except TypeError:
            cap = obj.__dlpack__()
    except Exception:
        return 1
    if PyCapsule_IsValid(cap, b'dltensor_versioned'):
        t = &(<mg_DLManagedTensorVersioned *>PyCapsule_GetPointer(cap, b'dltensor_versioned')).dl_tensor
    elif PyCapsule_IsValid(cap, b'dltensor'):
        t = &(<mg_DLManagedTensor *>PyCapsule_GetPointer(cap, b'dltensor')).dl_tensor
    else:
        return 1
    ptr[0] = <uintptr_t>t.data + <uintptr_t>t.byte_offset
    return 0


cdef int _cai_pointer(object cai, uintptr_t *ptr) except -1:
    """0 with the data pointer in *ptr when a CAI dict's 'data' is well formed (a null pointer for None),
    1 when it is not."""
    if type(cai) is not dict:
        return 1
    data = cai.get('data')
    if type(data) is not tuple or len(data) != 2:
        return 1
    p = data[0]
    if p is None:
        ptr[0] = 0
        return 0
    if type(p) is not int or p < 0 or p >= _UINTPTR_LIMIT:
        return 1
    ptr[0] = <uintptr_t>p
    return 0


cpdef bint is_device(object obj) except -1:
    """True when obj (or the buffer of a buffer specification) lives in CUDA device or managed memory:
    a CuPy array; a DLPack export that says so; a CUDA Array Interface or buffer-protocol export whose
    pointer the CUDA layer says is device memory. NumPy arrays, bytes and bytearray are host memory
    without a query. A malformed CUDA Array Interface counts as device memory, so that mpigpu's intake,
    not MPI, reads it (and raises). A CUDA Array Interface found device memory is kept for the call's
    read_device of the same exporter (recalled), until the next is_device."""
    global _seen
    cdef type t = type(obj)
    cdef uintptr_t ptr = 0
    cdef Py_buffer view
    _seen = None
    if t is list or t is tuple:
        if len(obj) == 0:
            return False
        obj = obj[0]
        t = type(obj)
    if t in _HOST_TYPES:
        return False
    if t is DeviceBuffer:  # read already (read_device)
        return True
    if _cupy_array(t):
        return True
    if _torch_tensor_type(t):
        return obj.is_cuda
    if getattr(t, '__dlpack_device__', None) is not None and t.__module__ != 'numpy':
        try:
            kind = obj.__dlpack_device__()[0]
        except Exception:
            return True
        if kind != kDLCUDA and kind != kDLCUDAManaged:
            return False
        if t.__module__.split('.', 1)[0] in _GPU_FRAMEWORKS:
            return True  # their device type is where their memory is
        if _dlpack_pointer(obj, &ptr):
            return True  # a malformed export: mpigpu's intake reads it (and raises)
        return ptr != 0 and _pointer_query is not None and _pointer_query(ptr)
    try:
        cai = obj.__cuda_array_interface__
    except AttributeError:
        cai = _MISSING
    except Exception:
        return True
    if cai is not _MISSING:
        if _cai_pointer(cai, &ptr):
            return True
        if ptr == 0 or _pointer_query is None or not _pointer_query(ptr):
            return False
        _remember(obj, cai)
        return True
    if PyObject_CheckBuffer(obj):
        if t.__module__ in ('numpy', 'array'):
            _HOST_TYPES.add(t)
            return False
        if _pointer_query is None:
            return False
        PyObject_GetBuffer(obj, &view, PyBUF_SIMPLE)
        ptr = <uintptr_t>view.buf
        PyBuffer_Release(&view)
        # no length test: MPI.memory.fromaddress(p, 0) is a C pointer, which a datatype gives extent
        return ptr != 0 and _pointer_query(ptr)
    return False


cdef void _remember(object obj, object cai):
    global _seen
    try:
        _seen = (_weakref(obj), cai, PyThread_get_thread_ident())
    except TypeError:
        _seen = None


cpdef object recalled(object obj):
    """The CUDA Array Interface is_device last found device memory behind, where obj is its exporter
    (taken: a later read asks the exporter again); else None. read_device takes it, and the fast paths'
    reader (_device's _arrays.pxi, through the hook mpigpu._cuda sets: set_recall)."""
    global _seen
    seen = _seen
    if seen is None or (<tuple>seen)[0]() is not obj or (<tuple>seen)[2] != PyThread_get_thread_ident():
        return None
    _seen = None
    return (<tuple>seen)[1]


cpdef bint any_device(object sendbuf, object recvbuf) except -1:
    """True when a collective's sendbuf (unless in place: None or MPI.IN_PLACE, alone or in a
    specification) or recvbuf is device memory: the host path's one check per call."""
    cdef type t = type(recvbuf)
    if t not in _HOST_TYPES and is_device(recvbuf):
        return True
    t = type(sendbuf)
    if t in _HOST_TYPES:
        return False
    if (t is list or t is tuple) and len(sendbuf) > 0 and (sendbuf[0] is None or type(sendbuf[0]) is _IN_PLACE_TYPE):
        return False
    return type(sendbuf) is not _IN_PLACE_TYPE and is_device(sendbuf)


# ---- reading a device buffer ---------------------------------------------------------------------
cdef bint _contiguous(tuple shape, tuple strides, Py_ssize_t itemsize):
    cdef Py_ssize_t nd = len(shape), i, expect, extent
    for i in range(nd):
        if shape[i] == 0:
            return True
    expect = itemsize
    cdef bint ok = True
    for i in range(nd - 1, -1, -1):      # C order
        extent = shape[i]
        if extent != 1 and strides[i] != expect:
            ok = False
            break
        expect *= extent
    if ok:
        return True
    expect = itemsize
    for i in range(nd):                  # Fortran order
        extent = shape[i]
        if extent != 1 and strides[i] != expect:
            return False
        expect *= extent
    return True


cdef Py_ssize_t _elements(tuple shape, Py_ssize_t itemsize, str what) except -1:
    """The product of a shape, checked: integers, none negative, the bytes within a Py_ssize_t."""
    cdef Py_ssize_t n = 1, k
    for s in shape:
        if type(s) is not int and not isinstance(s, int):
            raise TypeError(f'{what}: shape {shape!r} holds {type(s).__name__}, not integers')
        if s < 0:
            raise BufferError(f'{what}: buffer with negative size (shape {shape!r})')
    for s in shape:
        k = s if s <= <object>PY_SSIZE_T_MAX else PY_SSIZE_T_MAX
        if k and n > _MAX_BYTES // itemsize // k:
            raise BufferError(f'{what}: shape {shape!r} of {itemsize}-byte elements is too large')
        n *= k
    return n


cdef DeviceBuffer _from_cai(object obj, object cai):
    cdef str what = '__cuda_array_interface__'
    cdef DeviceBuffer b = DeviceBuffer.__new__(DeviceBuffer)
    cdef Py_ssize_t itemsize, n
    if type(cai) is not dict:
        raise TypeError(f'{what} must be a dict, not {type(cai).__name__}')
    data, typestr, shape = cai['data'], cai['typestr'], cai['shape']   # KeyError, as mpi4py
    strides, version = cai.get('strides'), cai.get('version', 0)
    if type(data) is not tuple:
        raise TypeError(f"{what}: 'data' must be a tuple (pointer, read-only), not {type(data).__name__}")
    if len(data) != 2:
        raise ValueError(f"{what}: 'data' must be (pointer, read-only), not {len(data)} items")
    if type(typestr) is not str:
        raise TypeError(f"{what}: 'typestr' must be a str, not {type(typestr).__name__}")
    if type(shape) is not tuple:
        raise TypeError(f"{what}: 'shape' must be a tuple, not {type(shape).__name__}")
    if strides is not None and type(strides) is not tuple:
        raise TypeError(f"{what}: 'strides' must be a tuple or None, not {type(strides).__name__}")
    if strides is not None and len(strides) < len(shape):
        raise IndexError(f"{what}: 'strides' has {len(strides)} entries for {len(shape)} dimensions")
    if not isinstance(version, int):
        raise TypeError(f"{what}: 'version' must be an int, not {type(version).__name__}")
    if cai.get('mask') is not None:
        raise BufferError(f'{what}: cannot handle masked arrays')
    descr = cai.get('descr')
    if descr is not None and type(descr) is not list:
        raise TypeError(f"{what}: 'descr' must be a list, not {type(descr).__name__}")
    if len(typestr) < 3 or not typestr[2:].isdigit():
        raise ValueError(f'{what}: invalid typestr {typestr!r}')
    if typestr[0] not in '<>|':
        raise BufferError(f'{what}: typestr {typestr!r} with unrecognized byte order')
    if descr is not None and (len(descr) != 1 or descr[0] != ('', typestr)):
        warnings.warn(f"{what}: ignoring 'descr' key", RuntimeWarning, stacklevel=2)
    itemsize = int(typestr[2:])
    if itemsize <= 0:
        raise ValueError(f'{what}: invalid typestr {typestr!r}')
    if typestr[0] == '>' and itemsize > 1:
        raise BufferError(f'{what}: typestr {typestr!r} with non-native byte order')
    n = _elements(shape, itemsize, what)
    if strides is not None:
        for st in strides[:len(shape)]:
            if not isinstance(st, int):
                raise TypeError(f"{what}: 'strides' {strides!r} holds {type(st).__name__}, not integers")
        if not _contiguous(shape, strides[:len(shape)], itemsize):
            raise BufferError(f'{what}: buffer is not contiguous (shape {shape!r}, strides {strides!r})')
    ptr = data[0]
    if ptr is None and n == 0:
        ptr = 0
    if not isinstance(ptr, int):
        raise TypeError(f'{what}: the data pointer must be an integer, not {type(ptr).__name__}')
    if ptr < 0 or ptr >= _UINTPTR_LIMIT:
        raise ValueError(f'{what}: data pointer {ptr} is not an address')
    if ptr == 0 and n:
        raise BufferError(f'{what}: null data pointer for {n} elements')
    stream = cai.get('stream') if version >= 3 else None
    if stream is not None:
        if type(stream) is not int and not isinstance(stream, int):
            raise TypeError(f"{what}: 'stream' must be an int or None, not {type(stream).__name__}")
        if stream <= 0 or stream >= _INTPTR_LIMIT:
            raise ValueError(f"{what}: 'stream' {stream} is not a CUDA stream (0 is not allowed)")
    kind = typestr[1]
    code = _BY_KIND.get((kind, itemsize), -1) if kind in 'biufc' else -1
    b.owner = obj
    b.ptr = <uintptr_t>ptr
    b.readonly = bool(data[1])
    b.nbytes = n * itemsize
    b.dtype = code
    b.itemsize = itemsize
    b.typestr = _MIRROR_TYPESTRS[code] if code >= 0 else ('|' if itemsize == 1 else '<') + typestr[1:]
    b.device = -1
    b.stream = -1 if stream is None else <Py_ssize_t>stream
    b.stream_synced = False
    return b


cdef object _dlpack_export(object obj, object stream):
    try:
        return obj.__dlpack__(stream=stream, max_version=(1, 1))
    except TypeError:  # a producer of DLPack before 1.0 (no max_version)
        return obj.__dlpack__(stream=stream)


cdef DeviceBuffer _from_dlpack(object obj, object stream):
    cdef DeviceBuffer b = DeviceBuffer.__new__(DeviceBuffer)
    cdef mg_DLTensor *t
    cdef bint ro = False
    cdef Py_ssize_t n = 1, i, itemsize
    cdef bint synced = stream is not None
    try:
        cap = _dlpack_export(obj, stream)
    except Exception:
        if not synced or stream == -1:
            raise
        # A producer that takes only -1 (no synchronization, what mpi4py asks for; mpi4py's own test
        # arrays assert it): exported unsynchronized, so ordered after the legacy default stream.
        cap = _dlpack_export(obj, -1)
        synced = False
    if PyCapsule_IsValid(cap, b'dltensor_versioned'):
        vt = <mg_DLManagedTensorVersioned *>PyCapsule_GetPointer(cap, b'dltensor_versioned')
        t = &vt.dl_tensor
        ro = (vt.flags & MG_DLPACK_FLAG_READ_ONLY) != 0
    elif PyCapsule_IsValid(cap, b'dltensor'):
        t = &(<mg_DLManagedTensor *>PyCapsule_GetPointer(cap, b'dltensor')).dl_tensor
    else:
        raise BufferError('dlpack: __dlpack__ returned no DLPack capsule')
    if t.device.device_type != kDLCUDA and t.device.device_type != kDLCUDAManaged:
        raise BufferError(f'dlpack: device type {t.device.device_type} is not a CUDA device')
    if t.ndim < 0:
        raise BufferError('dlpack: number of dimensions is negative')
    if t.ndim > 0 and t.shape == NULL:
        raise BufferError('dlpack: shape is NULL')
    if t.dtype.lanes != 1 or t.dtype.bits == 0 or t.dtype.bits % 8:
        raise BufferError(f'dlpack: elements of {t.dtype.bits} bits in {t.dtype.lanes} lanes')
    itemsize = t.dtype.bits // 8
    shape = tuple(t.shape[i] for i in range(t.ndim))
    n = _elements(shape, itemsize, 'dlpack')
    if t.strides != NULL:
        strides = tuple(t.strides[i] * itemsize for i in range(t.ndim))
        if not _contiguous(shape, strides, itemsize):
            raise BufferError('dlpack: buffer is not contiguous (shape %r, strides %r)' % (shape, strides))
    if t.data == NULL and n:
        raise BufferError(f'dlpack: null data pointer for {n} elements')
    kind = _DL_KIND.get(t.dtype.code)
    code = _BY_KIND.get((kind, itemsize), -1)
    # The capsule owns a reference to the tensor: keeping it alive keeps the memory alive, and its
    # destructor calls the DLPack deleter because we never rename it.
    b.owner = cap
    b.ptr = <uintptr_t>t.data + <uintptr_t>t.byte_offset
    b.nbytes = n * itemsize
    b.dtype = code
    b.itemsize = itemsize
    b.typestr = _MIRROR_TYPESTRS[code] if code >= 0 else '|V%d' % itemsize
    b.readonly = ro
    b.device = t.device.device_id
    b.stream = -1
    b.stream_synced = synced
    return b


cdef DeviceBuffer _from_buffer(object obj):
    """A buffer-protocol export (MPI.memory.fromaddress and the like) that points at device memory."""
    cdef DeviceBuffer b = DeviceBuffer.__new__(DeviceBuffer)
    cdef Py_buffer view
    cdef Py_ssize_t itemsize
    PyObject_GetBuffer(obj, &view, PyBUF_FORMAT | PyBUF_ND)
    try:
        fmt = (<bytes>view.format).decode() if view.format != NULL else 'B'
        itemsize = view.itemsize if view.itemsize > 0 else 1
        b.ptr = <uintptr_t>view.buf
        b.nbytes = view.len
        b.readonly = view.readonly
    finally:
        PyBuffer_Release(&view)
    kind = _FORMAT_KIND.get(fmt.lstrip('@=<|'))
    code = _BY_KIND.get((kind, itemsize), -1) if kind is not None else -1
    if code < 0:
        itemsize = 1
    b.owner = obj
    b.dtype = code
    b.itemsize = itemsize
    b.typestr = _MIRROR_TYPESTRS[code] if code >= 0 else '|u1'
    b.device = -1
    b.stream = -1
    b.stream_synced = False
    return b


cdef bint _prefer_dlpack(object obj):
    # PyTorch's CUDA Array Interface is v2 (no stream) and refuses bfloat16; JAX's names no stream
    # while its transfers and computations run on streams of its own (an array just made may not be
    # written yet: seen on GPUs). DLPack's stream handshake makes our stream wait for the producer's
    # work instead.
    module = type(obj).__module__
    return module.startswith('torch') or module.startswith('jax')


cpdef DeviceBuffer device_buffer(object obj, object stream=None):
    """Reads a device buffer. `stream` is the consumer stream offered to a DLPack producer."""
    if isinstance(obj, DeviceBuffer):
        return obj
    if not _prefer_dlpack(obj):
        try:
            cai = obj.__cuda_array_interface__
        except AttributeError:
            cai = _MISSING
        if cai is not _MISSING:
            return _from_cai(obj, cai)
    if hasattr(obj, '__dlpack__'):
        return _from_dlpack(obj, stream)
    if PyObject_CheckBuffer(obj):
        return _from_buffer(obj)
    raise TypeError(f'{type(obj).__name__} exposes no buffer (neither __cuda_array_interface__, __dlpack__ '
                    'nor the buffer protocol)')


cpdef object read_device(object obj, object stream_for):
    """obj's DeviceBuffer where obj is device memory, its exporter asked once for what is_device and
    device_buffer would each ask it (a CUDA Array Interface exporter's dict is built per read, a DLPack
    producer orders its work per export); None where it is host memory, and where the read fails (a
    strided array, a broken export): the call's own steps read it then, and raise where they must.
    `stream_for(device)`: the stream a DLPack producer is asked to order its work before."""
    cdef type t = type(obj)
    if t is DeviceBuffer:
        return obj
    if t in _HOST_TYPES or t is _IN_PLACE_TYPE or t is list or t is tuple or t.__module__ in ('numpy', 'array'):
        return None
    cai = recalled(obj)
    if cai is not None:  # found device memory by the placement check: no second read
        try:
            return _from_cai(obj, cai)
        except Exception:
            return None
    cdef bint trusted = _cupy_array(t)
    if not trusted and _torch_tensor_type(t):
        if not obj.is_cuda:
            return None
        trusted = True
    dev = None
    if getattr(t, '__dlpack_device__', None) is not None:
        try:
            kind, dev = obj.__dlpack_device__()
        except Exception:
            return None
        if kind != kDLCUDA and kind != kDLCUDAManaged:
            return None
        trusted = trusted or t.__module__.split('.', 1)[0] in _GPU_FRAMEWORKS
    try:
        buf = device_buffer(obj, stream_for(dev))
    except Exception:
        return None
    if trusted or ((<DeviceBuffer>buf).ptr != 0 and _pointer_query is not None and _pointer_query((<DeviceBuffer>buf).ptr)):
        return buf
    return None


def call_geometry(int coll, int n, int rank, bint has_send, Py_ssize_t scount, bint has_recv,
                  Py_ssize_t rcount, bint inplace):
    """(error, count, own) of an engine collective by _geometry.pxi's rules, for the general path: error is
    None or a key of GEOMETRY_ERRORS' values ('counts_differ', ...)."""
    cdef Py_ssize_t count = 0, own = 0
    cdef int err = geometry(coll, n, rank, has_send, scount, has_recv, rcount, inplace, &count, &own)
    return GEOMETRY_ERRORS.get(err), count, own
