# The five engine collectives' fast path: the common call read, agreed and run in one Cython call
# (included by _device.pyx).

# ---- fast path -----------------------------------------------------------------------------------
# The common call (CUDA Array Interface arrays, no buffer specification, types and counts that
# match) is handled here without Python-level parsing. Anything else returns 0 and takes the general
# path (mpigpu/_paths/plan.py over mpigpu/_describe/call.py), which also produces the precise error messages.
cdef dict _CAI_CODE = TYPESTR_CODES
cdef tuple _SIZES = SIZES
# A pointer less aligned than its type takes the general path, which refuses it (mpigpu._describe.call.build).
cdef tuple _ALIGN = ALIGNMENTS
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


cdef inline bint _cai(object obj, uintptr_t *ptr, Py_ssize_t *count, int *dtype, bint *ro,
                      Py_ssize_t *stream):
    """Reads a well-formed contiguous CAI array; False when the fast path does not apply to it (anything
    unusual, malformed exports included: the general path validates them and raises)."""
    cdef type t = type(obj)
    cdef Py_ssize_t n = 1, itemsize, expect, extent, k, nd
    if t is list or t is tuple or t.__module__.startswith('torch'):
        return False
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


cdef int _read_call(int nranks, int rank, int device, int coll, object sendbuf, object recvbuf, int op_code,
                    int root, bint inplace, uintptr_t *sp_out, uintptr_t *rp_out, Py_ssize_t *count_out,
                    int *dtype_out, Py_ssize_t *rs_out) except -1:
    """Reads the common call (of a communicator of nranks, this rank `rank`, on `device`, current): its
    send and receive pointers (MPI's in-place layouts: a one-buffer call's send pointer is this rank's
    block; 0 for a Reduce's recvbuf off the root), count, type and producer stream. 1 when read; 0 when
    the general path must take it (and raise, where the call is wrong)."""
    cdef uintptr_t sp = 0, rp = 0
    cdef Py_ssize_t sc = 0, rc = 0, ss = 0, rs = 0, count = 0, own = 0
    cdef int sd = -1, rd = -1, rdev = -1, sdev = -1, current = -1
    cdef bint sro = False, rro = False
    cdef bint off_root = coll == MG_REDUCE and rank != root  # a Reduce's recvbuf is not significant here
    cdef bint one_buffer = inplace or coll == MG_BCAST
    if root < 0 or root >= nranks:
        return 0
    if mg_get_device(&current) != 0 or current != device:
        return 0  # the general path makes the communicator's device current
    if off_root:
        if inplace:
            return 0  # MPI.IN_PLACE off the root: the general path raises
        if not _array(sendbuf, &sp, &sc, &sd, &sdev, &sro, &ss):
            return 0
        rd, rs = sd, ss  # rp stays 0: no output off the root
    else:
        if not _array(recvbuf, &rp, &rc, &rd, &rdev, &rro, &rs) or rro:
            return 0
        if one_buffer:
            sd, sdev = rd, rdev
        elif not _array(sendbuf, &sp, &sc, &sd, &sdev, &sro, &ss) or sd != rd or ss != rs:
            return 0  # (two producer streams: the general path orders the call after both)
    if coll != MG_ALLGATHER and coll != MG_BCAST and not mg_supports(rd, op_code):
        return 0
    if geometry(coll, nranks, rank, not one_buffer, sc, not off_root, rc, one_buffer, &count,
                &own) != GEOMETRY_OK:
        return 0  # the general path raises, naming the counts
    if one_buffer:
        sp = rp + <uintptr_t>(own * _SIZES[rd])
    if (sp | rp) % <uintptr_t>_ALIGN[rd]:
        return 0  # refused on the general path, whatever the count
    if count and not off_root and not (rdev == device if rdev >= 0 else _on_device(rp, device)):
        return 0
    if count and not one_buffer and not (sdev == device if sdev >= 0 else _on_device(sp, device)):
        return 0
    sp_out[0], rp_out[0], count_out[0], dtype_out[0], rs_out[0] = sp, rp, count, rd, rs
    return 1


cpdef int fast_collective(Team team, int device, int coll, object sendbuf, object recvbuf, int op_code,
                          int root, bint inplace, int algo, int nchannels, Py_ssize_t stream=-1) except -1:
    """Runs Allreduce, Bcast (buffer as recvbuf), Reduce_scatter_block, Reduce (recvbuf None off the root)
    or Allgather with MPI semantics when the call is the common case and `device` is current; returns 1
    when done, 0 when the general path must handle it. stream < 0: on the producer's stream, returning
    with the result (MPI blocking); stream >= 0: enqueued on that stream, returning at once."""
    cdef uintptr_t sp = 0, rp = 0
    cdef Py_ssize_t count = 0, rs = 0
    cdef int rd = -1
    if team.t == NULL:
        return 0
    if not _read_call(team.nranks, team.rank, device, coll, sendbuf, recvbuf, op_code, root, inplace, &sp, &rp,
                      &count, &rd, &rs):
        return 0
    return _run_read(team, coll, algo, rd, op_code, sp, rp, count, root, inplace, nchannels, stream, rs)


cdef int _run_read(Team team, int coll, int algo, int dtype, int op_code, uintptr_t sp, uintptr_t rp,
                   Py_ssize_t count, int root, bint inplace, int nchannels, Py_ssize_t stream,
                   Py_ssize_t rs) except -1:
    """Runs a call read by _read_call (or the interposer's entry, _pmpi_entry.pxi): agreed with the peers
    where they must agree, then on the team. 1 when done, 0 when the general path must take it."""
    if team.board is not None:  # ranks that must agree on the call's path (mpigpu/_state/agree.py)
        if type(team.board) is not Board:
            return 0  # they agree on the general path (across nodes, a broken communicator)
        return _run_agreed(team, <Board>team.board, coll, algo, dtype, op_code, sp, rp, count, root, nchannels,
                           stream, rs)
    if count == 0:
        return 1
    if stream >= 0:
        team.run(coll, algo, dtype, op_code, sp, rp, count, root, nchannels, <uintptr_t>stream, False)
    elif (inplace or coll == MG_BCAST) and team.nranks == 1:
        team.run_nothing(<uintptr_t>rs)
    else:
        team.run(coll, algo, dtype, op_code, sp, rp, count, root, nchannels, <uintptr_t>rs, True)
    return 1


cdef int _hier_call(object st, object replayed, int coll, object sendbuf, object recvbuf, int code, int root,
                    bint inplace, Py_ssize_t stream) except -1:
    """The common call of a communicator spanning nodes whose calls are replayed (mpigpu/_paths/hier/
    replay.py): read here, then `replayed` agrees on it and launches its recorded graph. 1 when it ran;
    0 when the general path must take it (a call not recorded yet, anything unusual, or agreed on the
    host MPI call, which the general path then makes without a second exchange)."""
    cdef uintptr_t sp = 0, rp = 0
    cdef Py_ssize_t count = 0, rs = 0
    cdef int rd = -1
    if st.device is None or not _read_call(st.size, st.rank, st.device, coll, sendbuf, recvbuf, code, root,
                                           inplace, &sp, &rp, &count, &rd, &rs):
        return 0
    return 1 if replayed(coll, root, rd, code, sp, rp, count, inplace, stream if stream >= 0 else rs,
                         stream >= 0) else 0


# The interposer's hand-off (_pmpi_entry.pxi): a call its entry posted on a board and the board agreed on
# another path goes to the handler, whose call must take the stashed verdict, not post the call again.
# Per thread (a call and its handler's call run in one thread); counted, so no other call pays for a look.
cdef int _pmpi_handoffs = 0
cdef object _pmpi_local = _thread_local()


cdef int _pmpi_begin_handoff(Board board) except -1:
    global _pmpi_handoffs
    if getattr(_pmpi_local, 'board', None) is None:
        _pmpi_handoffs += 1
    _pmpi_local.board = board
    return 0


cdef int _pmpi_end_handoff() except -1:
    global _pmpi_handoffs
    if _pmpi_handoffs and getattr(_pmpi_local, 'board', None) is not None:
        _pmpi_local.board = None
        _pmpi_handoffs -= 1
    return 0


cdef int _run_agreed(Team team, Board board, int coll, int algo, int dtype, int op, uintptr_t sp, uintptr_t rp,
                     Py_ssize_t count, int root, int nchannels, Py_ssize_t stream, Py_ssize_t rs) except -1:
    """The fast path's call on a team whose ranks agree on each call: this rank posts DEVICE, and the
    engine runs it when every rank did; a blocking call waits for its peers' posts inside the CUDA
    layer, at the last moment (Team.run_agreed). 0: another verdict, kept for the general path."""
    cdef int who = -1, verdict
    if _pmpi_handoffs and getattr(_pmpi_local, 'board', None) is board:
        _pmpi_end_handoff()
        if board.has_stash():  # the interposer's entry agreed this very call and handed it on: not posted again
            return 0
    if board.post_device(coll) != 0:
        board.stash(MG_VERDICT_TIMEOUT, MG_BOARD_BEHIND)  # nothing posted
        return 0
    if count and stream < 0:
        return team.run_agreed(board, coll, algo, dtype, op, sp, rp, count, root, nchannels, <uintptr_t>rs)
    verdict = board.wait_device(coll, &who)
    if verdict != MG_VERDICT_DEVICE:
        board.stash(verdict, who)
        return 0
    if count:
        team.run(coll, algo, dtype, op, sp, rp, count, root, nchannels, <uintptr_t>stream, False)
    return 1


# ---- the fast path's entry: the communicator's state found and the call run in one Cython call --------
# (a Python function in between cost ~0.3 us per call: a one-rank 4 MB copy took 12.7 us where the raw
# team call took 11.4, docs/benchmarks.md "One rank"). Bound once by mpigpu._paths.engine.
cdef object _entry_key = None         # the key of a communicator's state in its __dict__ (mpigpu._state.comm_state)
cdef dict _entry_ops = None           # MPI.Op handle -> op code
cdef object _entry_config = None      # mpigpu's config (algo and nchannels read per call: tests change them)
cdef dict _entry_algos = None         # MPIGPU_ALGO value -> algorithm code
cdef object _entry_failed = None      # (state, coll, DeviceError) -> the mpigpu.Error to raise
cdef type _entry_op_type = None
cdef object _entry_in_place = None
# The last op's code: a program passes the same op object call after call. Only predefined ops have
# codes, and their handles never change (MPI cannot free them).
cdef object _entry_last_op = None
cdef int _entry_last_code = -1
cdef unsigned long long _entry_calls = 0  # calls the fast path ran (engine_fast_calls: benchmarks, tests)


def engine_fast_calls():
    """How many calls of the five engine collectives this process ran on the fast path."""
    return _entry_calls


def bind_fast_entry(state_key, op_codes, config, algos, failed, op_type, in_place):
    """Gives fast_entry what it reads: see the declarations above."""
    global _entry_key, _entry_ops, _entry_config, _entry_algos, _entry_failed, _entry_op_type, _entry_in_place
    _entry_key, _entry_ops, _entry_config, _entry_algos = state_key, dict(op_codes), config, dict(algos)
    _entry_failed, _entry_op_type, _entry_in_place = failed, op_type, in_place
    global _entry_last_op
    _entry_last_op = None


cpdef bint fast_entry(object comm, int coll, object sendbuf, object recvbuf, object op, int root=0,
                      Py_ssize_t stream=-1) except -1:
    """fast_collective for communicator `comm` once its device team is up: True when it ran the call,
    False when the general path must take it (no state or team yet, an op the engine lacks, anything
    unusual about the buffers)."""
    global _entry_last_op, _entry_last_code, _entry_calls
    cdef int code = 0
    cdef dict attrs
    cdef Team team
    try:
        attrs = comm.__dict__
    except AttributeError:  # mpi4py's own objects, which mpigpu's unbound methods may be called on
        return False
    st = attrs.get(_entry_key)
    if st is None:
        return False
    t = st.team
    if type(t) is not Team:  # none yet, a communicator spanning nodes (or the CPU tests' fake team)
        if st.hier_replayed is None:
            return False
    if coll != MG_ALLGATHER and coll != MG_BCAST:
        if op is _entry_last_op:
            code = _entry_last_code
        else:
            if not isinstance(op, _entry_op_type):
                return False
            code = _entry_ops.get(op.handle, -1)
            if code < 0:
                return False
            _entry_last_op, _entry_last_code = op, code
    cdef bint in_place = sendbuf is _entry_in_place
    if type(t) is not Team:
        return _hier_call(st, st.hier_replayed, coll, sendbuf, recvbuf, code, root, in_place, stream) == 1
    team = <Team>t
    cdef int algo = MG_ALGO_AUTO, nchannels = 0
    if team.nranks != 1:  # a one-rank team's calls are copies: no algorithm or channels to choose
        cfg = _entry_config
        algo, nchannels = _entry_algos.get(cfg.algo, MG_ALGO_AUTO), cfg.nchannels
    try:
        if fast_collective(team, team.device, coll, sendbuf, recvbuf, code, root, in_place, algo, nchannels,
                           stream) == 1:
            _entry_calls += 1
            return True
        return False
    except DeviceError as exc:
        raise _entry_failed(st, coll, exc) from None


cdef int _fast_entry_c(object comm, int coll, object sendbuf, object recvbuf, object op, int root,
                       Py_ssize_t stream) except -1:
    return fast_entry(comm, coll, sendbuf, recvbuf, op, root, stream)


cdef bytes _capsule_name = None  # a capsule keeps a pointer to its name: held here for good


def fast_entry_capsule(bytes name):
    """fast_entry as a C function in a capsule called `name`: the communicators' methods
    (mpigpu/_ext/_front.pyx) call it with no Python call in between."""
    global _capsule_name
    _capsule_name = name
    return PyCapsule_New(<void *>_fast_entry_c, <const char *>_capsule_name, NULL)
