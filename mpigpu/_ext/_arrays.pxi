# The fast paths' array readers (included by _device.pyx, before _fast.pxi, _exchange.pxi and _p2p.pxi,
# which read their buffers with them): a contiguous device array read in Cython, without the general
# path's intake (mpigpu/_describe/call.py): CuPy's and PyTorch's attributes, mpi4py's [array, datatype] of
# the array's own type, any CUDA Array Interface. What they decline, the general path reads (and raises
# where it must).
cdef dict _CAI_CODE = TYPESTR_CODES
cdef tuple _SIZES = SIZES
# Most elements a buffer may hold: its bytes must fit a Py_ssize_t (16: the largest element).
cdef Py_ssize_t _MAX_ELEMENTS = PY_SSIZE_T_MAX // 16
# Addresses and stream handles: what a pointer holds.
cdef object _UINTPTR_LIMIT = (<object>1) << (8 * sizeof(uintptr_t))
cdef object _INTPTR_LIMIT = (<object>1) << (8 * sizeof(uintptr_t) - 1)


# CuPy arrays are read from their attributes (no interface dictionary, no pointer query): building
# __cuda_array_interface__ and asking the driver where a pointer lives cost ~1.5 us per array.
cdef object _cupy_ndarray = None      # cupy.ndarray, once CuPy has been imported by the program
cdef object _cupy_current_stream = None
cdef dict _NUM_CODE = {}              # numpy dtype.num -> mg_dtype code
cdef object _last_dtype = None        # the last array's dtype object and its code: programs repeat them
cdef int _last_code = -1

# CuPy's own C function for its current stream (cupy_backends.cuda.stream declares it in its .pxd, so
# Cython exports it to other modules), called directly: CuPy has no Python function for the pointer
# alone, and a blocking one-rank call with nothing to copy is ~2 us in all, where each Python call
# counts (docs/benchmarks.md, one rank). Where the export is missing or its signature differs, the
# Python call (get_current_stream().ptr).
ctypedef intptr_t (*_stream_ptr_fn)() except *
cdef _stream_ptr_fn _cupy_stream_c = NULL
cdef bytes _CUPY_STREAM_SIGNATURE = b'intptr_t (void)'


cdef _stream_ptr_fn _cupy_stream_function():
    """CuPy's get_current_stream_ptr, where its module exports it with the signature expected."""
    backend = sys.modules.get('cupy_backends.cuda.stream')
    capi = getattr(backend, '__pyx_capi__', None)
    cap = capi.get('get_current_stream_ptr') if type(capi) is dict else None
    if cap is None:
        return NULL
    name = PyCapsule_GetName(cap)
    if name == NULL or <bytes>name != _CUPY_STREAM_SIGNATURE or not PyCapsule_IsValid(cap, name):
        return NULL
    return <_stream_ptr_fn>PyCapsule_GetPointer(cap, name)


cdef int _cupy_attach() except -1:
    global _cupy_ndarray, _cupy_current_stream
    m = sys.modules.get('cupy')
    if m is None:
        return 0
    import numpy
    for ch in '?bBhHiIlLqQefdFD':
        dt = numpy.dtype(ch)
        key = typestr(dt.kind, dt.itemsize)
        if key in _CAI_CODE:
            _NUM_CODE[dt.num] = _CAI_CODE[key]
    global _cupy_stream_c
    _cupy_stream_c = _cupy_stream_function()
    get = m.cuda.get_current_stream
    _cupy_current_stream = lambda: get().ptr
    _cupy_ndarray = m.ndarray
    return 1


cdef inline bint _cupy(object obj, uintptr_t *ptr, Py_ssize_t *count, int *dtype, int *device) except? False:
    """Reads a C-contiguous cupy.ndarray (exactly that type); False when obj is not one."""
    if _cupy_ndarray is None and not _cupy_attach():
        return False
    global _last_dtype, _last_code
    if type(obj) is not _cupy_ndarray or not obj._c_contiguous:
        return False
    dt = obj.dtype
    if dt is not _last_dtype:
        code = _NUM_CODE.get(dt.num)
        if code is None:
            return False
        _last_dtype, _last_code = dt, code
    mp = obj.data
    ptr[0] = <uintptr_t>mp.ptr
    count[0] = obj.size
    dtype[0] = _last_code
    device[0] = mp.device_id
    return True


cdef inline Py_ssize_t _cupy_stream():
    """CuPy's current stream as its __cuda_array_interface__ reports it (1: the legacy default)."""
    cdef Py_ssize_t p = _cupy_stream_c() if _cupy_stream_c != NULL else _cupy_current_stream()
    return p if p != 0 else 1


# PyTorch tensors are read from their attributes as well: their CUDA Array Interface names no stream,
# so the general path exports them through DLPack with its stream handshake (our stream waits for
# PyTorch's current stream) and reads them in Python. Here the producer stream is that same current
# stream, read through PyTorch's C binding of it (the raw handle; current_stream() builds a Python
# object). Declined, for the general path to read or refuse as before: a tensor that requires grad
# (PyTorch refuses to export it), one with a lazy conjugate or negation bit, a non-strided layout, a
# subclass other than nn.Parameter, a type mpigpu does not run.
cdef object _torch_tensor = None      # torch.Tensor, once PyTorch has been imported by the program
cdef object _torch_parameter = None   # torch.nn.Parameter
cdef object _torch_strided = None     # torch.strided
cdef object _torch_raw_stream = None  # fn(device) -> the current stream's handle (0: the legacy default)
cdef dict _TORCH_CODE = {}            # torch.dtype -> mg_dtype code


cdef int _torch_attach() except -1:
    """Binds what _torch reads, once PyTorch is imported; a PyTorch without it (before 1.10: no is_neg) is
    bound to a type no tensor has, so its tensors keep the general path. 0: not imported yet."""
    global _torch_tensor, _torch_parameter, _torch_strided, _torch_raw_stream
    m = sys.modules.get('torch')
    if m is None or not hasattr(m, 'Tensor'):
        return 0  # not imported, or still being imported
    try:
        for name in ('bool', 'int8', 'uint8', 'int16', 'uint16', 'int32', 'uint32', 'int64', 'uint64', 'float16',
                     'bfloat16', 'float32', 'float64', 'complex64', 'complex128'):
            dt = getattr(m, name, None)
            if dt is None:
                continue
            kind = ('b' if dt is m.bool else 'B' if dt is m.bfloat16 else 'c' if dt.is_complex
                    else 'f' if dt.is_floating_point else 'i' if dt.is_signed else 'u')
            code = BY_KIND.get((kind, m.empty((), dtype=dt).element_size()))  # (dtype.itemsize: 2.1 on)
            if code is not None:
                _TORCH_CODE[dt] = code
        raw = getattr(m._C, '_cuda_getCurrentRawStream', None)
        if raw is None:
            current = m.cuda.current_stream
            raw = lambda int device: current(device).cuda_stream
        for attr in ('is_conj', 'is_neg', 'get_device', 'data_ptr', 'is_contiguous'):
            getattr(m.Tensor, attr)
        _torch_raw_stream, _torch_strided, _torch_parameter = raw, m.strided, m.nn.Parameter
        _torch_tensor = m.Tensor
    except Exception:
        _torch_tensor = _torch_parameter = type('NoTensor', (), {})  # a type that is never a tensor's
    return 1


cdef inline bint _torch(object obj, uintptr_t *ptr, Py_ssize_t *count, int *dtype, int *device,
                        Py_ssize_t *stream) except? False:
    """Reads a contiguous CUDA torch.Tensor (or nn.Parameter); False when obj is not one the fast path takes."""
    cdef type t = type(obj)
    if _torch_tensor is None and (t.__module__[:5] != 'torch' or not _torch_attach()):
        return False
    if t is not _torch_tensor and t is not _torch_parameter:
        return False
    if (not obj.is_cuda or obj.requires_grad or obj.layout is not _torch_strided or obj.is_conj() or obj.is_neg()
            or not obj.is_contiguous()):
        return False
    code = _TORCH_CODE.get(obj.dtype)
    if code is None:
        return False
    cdef int dev = obj.get_device()
    cdef Py_ssize_t s = _torch_raw_stream(dev)
    ptr[0] = <uintptr_t>obj.data_ptr()
    count[0] = obj.numel()
    dtype[0] = code
    device[0] = dev
    stream[0] = s if s != 0 else 1  # the legacy default stream, as CUDA Array Interface v3 names it
    return True


# mpi4py's two-item buffer specification [buf, datatype] (mpi4py's own examples write every call so) is the
# call on buf itself where the datatype is the predefined type of buf's elements: read here too. Any other
# specification (a count, displacements, another type) is the general path's.
cdef object _spec_datatype = None     # mpi4py.MPI.Datatype, at the first specification
cdef dict _SPEC_CODES = None          # a predefined MPI datatype's handle -> mg_dtype code (types.FROM_MPI)
cdef object _spec_last_dt = None      # the last datatype read and its code: programs repeat them
cdef int _spec_last_code = -1


cdef int _spec_code(object dt) except -2:
    """The element code a predefined datatype names, else -1."""
    global _spec_datatype, _SPEC_CODES, _spec_last_dt, _spec_last_code
    if dt is _spec_last_dt:
        return _spec_last_code
    if _SPEC_CODES is None:
        from mpi4py import MPI
        from mpigpu._base.types import FROM_MPI
        _SPEC_CODES = {h: int(c) for h, c in FROM_MPI.items()}
        _spec_datatype = MPI.Datatype
    if not isinstance(dt, _spec_datatype):
        return -1  # a typecode string and the like: the general path reads it
    code = _SPEC_CODES.get(dt.handle, -1)
    if code >= 0:
        _spec_last_dt, _spec_last_code = dt, code
    return code


cdef inline bint _array(object obj, uintptr_t *ptr, Py_ssize_t *count, int *dtype, int *device, bint *ro,
                        Py_ssize_t *stream) except? False:
    """Reads a contiguous device array as the fast paths take it (alone or as [array, its datatype]):
    CuPy's and PyTorch's from their attributes (their device known, their producer stream the library's
    current one), any other from its CUDA Array Interface (device -1: the driver is asked; stream 0: none
    given). False: the general path reads it."""
    cdef type t = type(obj)
    if t is list or t is tuple:
        if len(obj) != 2:
            return False
        want = _spec_code(obj[1])
        return want >= 0 and _array_only(obj[0], ptr, count, dtype, device, ro, stream) and dtype[0] == want
    return _array_only(obj, ptr, count, dtype, device, ro, stream)


cdef inline bint _array_only(object obj, uintptr_t *ptr, Py_ssize_t *count, int *dtype, int *device, bint *ro,
                             Py_ssize_t *stream) except? False:
    ro[0] = False
    if _cupy(obj, ptr, count, dtype, device):
        stream[0] = _cupy_stream()
        return True
    if _torch(obj, ptr, count, dtype, device, stream):
        return True
    device[0] = -1
    return _cai(obj, ptr, count, dtype, ro, stream)


cdef object _recall = None  # _intake.recalled, set by mpigpu._cuda (_device imports no mpi4py itself)


def set_recall(fn):
    """fn(obj): the CUDA Array Interface the placement check read of exporter obj, or None (_cai takes it)."""
    global _recall
    _recall = fn


cdef inline bint _cai(object obj, uintptr_t *ptr, Py_ssize_t *count, int *dtype, bint *ro,
                      Py_ssize_t *stream):
    """Reads a well-formed contiguous CAI array; False when the fast path does not apply to it (anything
    unusual, malformed exports included: the general path validates them and raises)."""
    cdef type t = type(obj)
    cdef Py_ssize_t n = 1, itemsize, expect, extent, k, nd
    if t is list or t is tuple or t.__module__.startswith('torch'):
        return False
    cai = _recall(obj) if _recall is not None else None  # what the placement check read of this exporter
    if cai is None:
        try:
            cai = obj.__cuda_array_interface__
        except Exception:
            return False
    if type(cai) is not dict or cai.get('mask') is not None:
        return False
    typestr = cai.get('typestr')
    shape = cai.get('shape')
    data = cai.get('data')
    strides = cai.get('strides')
    version = cai.get('version', 0)
    if (type(typestr) is not str or type(shape) is not tuple or type(data) is not tuple or len(data) != 2
            or type(data[0]) is not int or type(version) is not int):
        return False
    if strides is not None and (type(strides) is not tuple or len(strides) != len(shape)):
        return False
    code = _CAI_CODE.get(typestr)
    if code is None:
        return False
    itemsize = _SIZES[code]
    nd = len(shape)
    for k in range(nd):
        extent = shape[k] if type(shape[k]) is int else -1
        if extent < 0 or (extent and n > _MAX_ELEMENTS // extent):
            return False
        n *= extent
    if strides is not None and n > 1:
        expect = itemsize
        for k in range(nd - 1, -1, -1):
            extent = shape[k]
            if extent != 1 and (type(strides[k]) is not int or strides[k] != expect):
                return False
            expect *= extent
    if data[0] < 0 or data[0] >= _UINTPTR_LIMIT or (data[0] == 0 and n):
        return False
    s = cai.get('stream') if version >= 3 else None
    if s is not None and (type(s) is not int or s <= 0 or s >= _INTPTR_LIMIT):
        return False
    ptr[0] = <uintptr_t>data[0]
    ro[0] = bool(data[1])
    count[0] = n
    dtype[0] = code
    stream[0] = 0 if s is None else <Py_ssize_t>s
    return True


cdef inline bint _on_device(uintptr_t ptr, int device):
    cdef int mt = 0, dev = -1
    if mg_pointer_info(ptr, &mt, &dev) != 0:
        return False
    return (mt == _MEM_DEVICE or mt == _MEM_MANAGED) and dev == device
