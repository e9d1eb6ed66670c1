# Blocking point-to-point of whole device arrays in one Cython call (included by _device.pyx): Send,
# Ssend, Recv and Sendrecv of C-contiguous CuPy or CUDA Array Interface arrays on the current device.
# The protocols are mpigpu/_paths/p2p.py's (the general path keeps every other case and the precise
# errors): a message below MPIGPU_P2P_IPC_BYTES (or any message where peer mappings cannot be used)
# goes eagerly, its bytes copied into page-locked memory after the producer's stream and sent by host
# MPI with the user's tag, so MPI matches it like any message and a receiver of any placement takes
# its bytes as they are; a larger one sends p2p_ipc's 128-byte header and the receiver copies the
# payload out of the sender's buffer GPU to GPU. Each rank keeps one pair of page-locked buffers per
# thread (no pool, lock or Python object per message): the general path's Python took 75-110 us per
# small Sendrecv where host MPI and the two copies take ~20 (docs/benchmarks.md, point-to-point).
# A buffer given as [array, datatype] or [array, count, datatype] with a derived datatype whose
# instances lie in the array (a halo's column) is moved as bytes where its instances form one block,
# else packed by the datatype's kernel straight into the page-locked buffer and unpacked straight out
# of it (eager), or packed into device scratch that the receiver copies GPU to GPU and unpacks
# (rendezvous): one GPU operation a side, as for a whole array, where the general path's pack, copy,
# copy and unpack took a halo Sendrecv to 172 us against 22.5 (4x H200).

from cpython.pythread cimport PyThread_get_thread_ident

cdef enum:
    # The largest message this path sends eagerly when it cannot use a rendezvous: its page-locked
    # buffers grow to it and stay (two per thread); larger ones stage on the general path's pool.
    _EAGER_MAX = 4 << 20
    # Threads that may hold buffers here; a program that makes more takes the general path on the rest.
    _MAX_THREADS = 64

# Instances of a datatype this path takes (its bounds arithmetic is in Py_ssize_t; more: the general
# path). Not in the enum above: an enum's values are C ints.
cdef Py_ssize_t _MAX_INSTANCES = (<Py_ssize_t>1) << 40

cdef object _p2p_key = None           # a communicator's state in its __dict__ (mpigpu._state.comm_state)
cdef object _p2p_kept_type = None     # p2p.P2pState: messages Probe took out of MPI, and reply tags
cdef object _p2p_config = None        # mpigpu's config (MPIGPU_P2P_IPC_BYTES read per call: tests change it)
cdef object _p2p_ipc = None           # mpigpu._paths.p2p_ipc: usable, header_at, parse, receive, check_reply
cdef object _p2p_truncated = None     # (st, name, nbytes, capacity) -> the truncation Error
cdef object _mpi_send = None, _mpi_ssend = None, _mpi_isend = None, _mpi_issend = None
cdef object _mpi_recv = None, _mpi_irecv = None, _mpi_sendrecv = None
cdef object _mpi_byte = None, _mpi_int = None, _mpi_status = None, _mpi_proc_null = None
cdef object _int32_cell = None        # () -> a one-element int32 array (a rendezvous's reply)
cdef object _layout_of = None         # mpigpu._describe.datatypes.layout: a datatype's cached layout
cdef object _scratch_take = None, _scratch_give = None  # mpigpu._paths.support.scratch's pool
cdef object _mpi_datatype = None
cdef object _WHOLE = object()         # _p2p_spec's answer for bytes in one block (no datatype to pack)
cdef object _null_type = None         # MPI.DATATYPE_NULL's handle (the general path raises for it)
cdef int _header_bytes = 0
cdef dict _p2p_buffers = {}           # thread id -> _P2pBuffers
cdef unsigned long long p2p_fast_calls = 0  # calls this path completed (tests check it ran)


cdef class _P2pBuffers:
    """One thread's page-locked buffers: the outgoing and the incoming message."""
    cdef PinnedBuffer out, inc


def bind_fast_p2p(state_key, kept_type, config, ipc, truncated, plain_comm, mpi, int32_cell, layout_of,
                  scratch_take, scratch_give):
    """Gives the point-to-point fast path what it reads (see the declarations above)."""
    global _p2p_key, _p2p_kept_type, _p2p_config, _p2p_ipc, _p2p_truncated, _int32_cell, _header_bytes
    global _mpi_send, _mpi_ssend, _mpi_isend, _mpi_issend, _mpi_recv, _mpi_irecv, _mpi_sendrecv
    global _mpi_byte, _mpi_int, _mpi_status, _mpi_proc_null, _layout_of, _scratch_take, _scratch_give, _mpi_datatype
    global _null_type
    _layout_of, _scratch_take, _scratch_give, _mpi_datatype = layout_of, scratch_take, scratch_give, mpi.Datatype
    _p2p_key, _p2p_kept_type, _p2p_config, _p2p_ipc = state_key, kept_type, config, ipc
    _p2p_truncated, _int32_cell, _header_bytes = truncated, int32_cell, ipc.HEADER_BYTES
    _mpi_send, _mpi_ssend, _mpi_isend, _mpi_issend = plain_comm.Send, plain_comm.Ssend, plain_comm.Isend, plain_comm.Issend
    _mpi_recv, _mpi_irecv, _mpi_sendrecv = plain_comm.Recv, plain_comm.Irecv, plain_comm.Sendrecv
    _mpi_byte, _mpi_int, _mpi_status, _mpi_proc_null = mpi.BYTE, mpi.INT, mpi.Status, mpi.PROC_NULL
    _null_type = mpi.DATATYPE_NULL.handle


def fast_p2p_calls():
    """How many calls the point-to-point fast path completed in this process."""
    return p2p_fast_calls


cdef PinnedBuffer _grown(PinnedBuffer have, Py_ssize_t nbytes):
    """`have`, or a larger buffer when it cannot hold nbytes (sizes double: a run of growing messages
    allocates a few times)."""
    cdef Py_ssize_t size = 1 << 16
    if have is not None and have.nbytes >= nbytes:
        return have
    while size < nbytes:
        size <<= 1
    return PinnedBuffer(size)


cdef _P2pBuffers _buffers(Py_ssize_t out_bytes, Py_ssize_t in_bytes):
    """The calling thread's buffers, grown to the sizes asked; None when no more threads may have some."""
    cdef long tid = PyThread_get_thread_ident()
    cdef _P2pBuffers b = _p2p_buffers.get(tid)
    if b is None:
        if len(_p2p_buffers) >= _MAX_THREADS:
            return None
        b = _P2pBuffers()
        _p2p_buffers[tid] = b
    if out_bytes >= 0:
        b.out = _grown(b.out, out_bytes)
    if in_bytes >= 0:
        b.inc = _grown(b.inc, in_bytes)
    return b


cdef struct _P2pArray:
    uintptr_t ptr       # the bytes moved (a whole array), or the first instance of a datatype's
    Py_ssize_t nbytes   # bytes moved: the array's, or the packed instances'
    Py_ssize_t stream
    int code
    size_t count        # instances of the datatype (packed buffers: _p2p_spec)


cdef bint _p2p_array(object obj, bint writable, int device, _P2pArray *a) except? False:
    """Reads a C-contiguous device array on `device` (the current device); False when the fast path does
    not take it (the general path reads it and raises where it must)."""
    cdef Py_ssize_t count = 0
    cdef int dev = -1
    cdef bint ro = False
    if not _array(obj, &a.ptr, &count, &a.code, &dev, &ro, &a.stream) or (writable and ro) or (dev >= 0 and dev != device):
        return False
    a.nbytes = count * <Py_ssize_t>_SIZES[a.code]
    if a.nbytes and dev < 0 and not _on_device(a.ptr, device):
        return False
    return True


cdef object _p2p_spec(object obj, bint writable, int device, _P2pArray *a):
    """Reads a buffer argument the fast path takes: a whole device array (returns _WHOLE), or [array,
    datatype] / [array, count, datatype] with a datatype whose instances lie in the array: one block moved
    as bytes, eager or GPU to GPU (returns _WHOLE: every receive takes it), else the datatype's PackPlan for
    this device (a.ptr its first instance, a.count, a.nbytes the packed bytes). None: the general path
    takes it (and raises where it must): instances past the array, a length that is not a whole number of
    extents where the count is inferred (mpi4py raises), sizes whose arithmetic would not fit."""
    cdef Py_ssize_t count, extent, size
    if _p2p_array(obj, writable, device, a):
        return _WHOLE
    cdef type t = type(obj)
    if (t is not list and t is not tuple) or _layout_of is None:
        return None
    n = len(obj)
    if n != 2 and (n != 3 or type(obj[1]) is not int or not 0 <= obj[1] <= _MAX_INSTANCES):
        return None
    dt, inner = obj[n - 1], obj[0]
    if not isinstance(dt, _mpi_datatype) or dt.handle == _null_type or type(inner) is list or type(inner) is tuple:
        return None
    lay = _layout_of(dt)
    extent, size = lay.extent, lay.size
    if extent <= 0 or size <= 0 or not _p2p_array(inner, writable, device, a):
        return None
    if n == 3:
        count = obj[1]
    elif a.nbytes % extent:
        return None
    else:
        count = a.nbytes // extent
    if count == 0:
        a.count, a.nbytes = 0, 0
        return _WHOLE
    lo, hi = lay.span(count)  # (Python ints: a huge extent or span must not wrap around)
    if lo < 0 or hi > a.nbytes or count * lay.size > _MAX_INSTANCES:
        return None  # past the array: the general path checks the allocation, or raises
    a.count = <size_t>count
    a.nbytes = count * size
    if lay.contiguous(count):  # one block: moved from where it lies
        a.ptr = <uintptr_t>(<Py_ssize_t>a.ptr + <Py_ssize_t>lay.start)
        return _WHOLE
    return pack_plan(lay, device)


cdef int _wait(Py_ssize_t stream) except -1:
    cdef int e
    with nogil:
        e = mg_stream_sync(<uintptr_t>stream)
    check(e, 'cudaStreamSynchronize')
    return 0


cdef int _to_host(uintptr_t dst, const _P2pArray *a, object plan) except -1:
    """The array's bytes (a datatype's instances, packed by its kernel) into page-locked `dst`, after its
    producer's work."""
    if a.nbytes:
        if plan is _WHOLE:
            check(mg_memcpy_async(dst, a.ptr, <size_t>a.nbytes, <uintptr_t>a.stream), 'cudaMemcpyAsync')
        else:
            (<PackPlan>plan).pack(a.count, a.ptr, dst, <uintptr_t>a.stream)
        _wait(a.stream)
    return 0


cdef int _to_device(const _P2pArray *a, uintptr_t src, Py_ssize_t nbytes, object plan) except -1:
    """nbytes from `src` (page-locked, or device scratch) into the array (a datatype's whole instances:
    unpacked by its kernel), done when this returns."""
    cdef PackPlan pp
    if nbytes:
        if plan is _WHOLE:
            check(mg_memcpy_async(a.ptr, src, <size_t>nbytes, <uintptr_t>a.stream), 'cudaMemcpyAsync')
        else:
            pp = <PackPlan>plan
            if nbytes // pp.size == 0:
                return 0
            pp.unpack(<size_t>(nbytes // pp.size), src, a.ptr, <uintptr_t>a.stream)
        _wait(a.stream)
    return 0


cdef object _state(object comm):
    try:
        return comm.__dict__.get(_p2p_key)
    except AttributeError:  # mpi4py's own objects
        return None


cdef bint _has_kept(object st):
    kept = st._owned.get(_p2p_kept_type)
    return kept is not None and len(kept.kept) != 0


cdef bint _rendezvous_possible(object st, Py_ssize_t nbytes, int device, int dest) except -1:
    """p2p_ipc.header_at's conditions that need no look at the buffer (its allocation's export is the
    rest): a scratch packed where they fail would never be sent from."""
    return (nbytes >= <Py_ssize_t>_p2p_config.p2p_ipc_bytes and dest != _mpi_proc_null and dest != st.rank
            and device == st.device and _p2p_ipc.usable(st))


cdef object _packed_for_rendezvous(object st, _P2pArray *a, object plan, int device, int dest):
    """Where a datatype's instances go GPU to GPU (at least MPIGPU_P2P_IPC_BYTES packed, peer mappings
    usable): packed into device scratch, which is returned (the caller gives it back once the send is
    done) and which *a then describes as a whole array on the same stream; else None."""
    if plan is _WHOLE or not _rendezvous_possible(st, a.nbytes, device, dest):
        return None
    mem = _scratch_take(a.nbytes, device)
    try:
        (<PackPlan>plan).pack(a.count, a.ptr, mem.ptr, <uintptr_t>a.stream)
    except BaseException:
        _scratch_give(mem, device)
        raise
    a.ptr = mem.ptr
    return mem


cdef list _stranded = []  # scratch a failed rendezvous left where a peer may still read it: never reused


cdef int _scratch_back(object mem, int device, Py_ssize_t stream, int where) except -1:
    """Gives a rendezvous's scratch back to the pool: at once where nothing reads it any more (where 1),
    after its stream where the pack kernel may still write it (0); kept where a peer may still read it
    (2: the send failed after its header went out)."""
    if mem is None:
        return 0
    if where == 0 and mg_stream_sync(<uintptr_t>stream) != 0:
        where = 2  # the stream failed: nothing says the kernel is done with it
    if where == 2:
        _stranded.append(mem)
    else:
        _scratch_give(mem, device)
    return 0


cdef object _rendezvous_header(object st, const _P2pArray *a, object plan, int device, int dest, int *reply):
    """p2p_ipc's header for sending the array GPU to GPU to `dest` (`reply` set to the tag of the
    receiver's reply), or None: this message goes eagerly. Its producer's work is done when a header
    comes back (the receiver reads the buffer at once)."""
    if not _rendezvous_possible(st, a.nbytes, device, dest):
        return None
    reply[0] = st.owned(_p2p_kept_type).next_reply_tag(dest)
    header = _p2p_ipc.header_at(st, a.ptr, a.nbytes, device, dest, reply[0])
    if header is not None:
        _wait(a.stream)
    return header


cdef class _UnpackFrom:
    """p2p_ipc.receive's `read`: the whole instances of the payload at a (mapped) address unpacked into
    the receive's instances on its stream (receive waits for it)."""
    cdef PackPlan plan
    cdef uintptr_t dst
    cdef Py_ssize_t stream

    def __cinit__(self, PackPlan plan, uintptr_t dst, Py_ssize_t stream):
        self.plan, self.dst, self.stream = plan, dst, stream

    def __call__(self, uintptr_t src, Py_ssize_t nbytes):
        if nbytes // self.plan.size:
            self.plan.unpack(<size_t>(nbytes // self.plan.size), src, self.dst, <uintptr_t>self.stream)


cdef int _delivered(object st, str name, const _P2pArray *a, PinnedBuffer inc, object status,
                    object plan) except -1:
    """What a receive into the array took into `inc` goes to the array (a datatype's instances: unpacked
    by its kernel): a header's payload from the sender's buffer (a datatype's unpacked by its kernel
    reading the sender's bytes; the status then reports the payload), else the bytes themselves."""
    cdef Py_ssize_t n = status.Get_count(_mpi_byte)
    if n == _header_bytes and _p2p_ipc.usable(st):
        fields = _p2p_ipc.parse(inc, n)
        if fields is not None:
            if plan is _WHOLE:
                got = _p2p_ipc.receive(st, name, fields, status.Get_source(), a.ptr, a.nbytes, a.stream)
            else:  # unpacked straight from the sender's packed bytes over the peer mapping
                got = _p2p_ipc.receive(st, name, fields, status.Get_source(), 0, a.nbytes, a.stream,
                                       _UnpackFrom(<PackPlan>plan, a.ptr, a.stream))
            status.Set_elements(_mpi_byte, got)
            return 0
    if n > a.nbytes:
        raise _p2p_truncated(st, name, n, a.nbytes)
    _to_device(a, inc.ptr, n, plan)
    return 0


cdef int _replied(object st, str name, int dest, object hreq, object rreq, object code, int *where) except -1:
    """The end of a rendezvous send: the header delivered and the receiver's reply in (*where then 1:
    the receiver reads the buffer no more, whatever it replied)."""
    hreq.Wait()
    rreq.Wait()
    where[0] = 1
    _p2p_ipc.check_reply(st, name, dest, int(code[0]))
    return 0


cdef bint _ready(object st, int *device):
    """True when the fast path may take a call on the communicator whose state is `st`."""
    cdef int current = -1
    if st is None or mg_get_device(&current) != 0:
        return False
    device[0] = current
    return True


cpdef bint p2p_send(object comm, object buf, int dest, int tag, bint synchronous) except -1:
    """Send (Ssend with `synchronous`) of a device array or a datatype's instances in one; False when the
    general path must take it."""
    global p2p_fast_calls
    cdef _P2pArray a
    cdef int device = -1, reply = 0
    st = _state(comm)
    if not _ready(st, &device):
        return False
    plan = _p2p_spec(buf, False, device, &a)
    if plan is None:
        return False
    mem = _packed_for_rendezvous(st, &a, plan, device, dest)
    cdef int where = 0  # the scratch's state (_scratch_back)
    try:
        if mem is not None:
            plan = _WHOLE  # the scratch holds the packed bytes
        header = _rendezvous_header(st, &a, plan, device, dest, &reply)
        if header is not None:
            code = _int32_cell()
            rreq = st.control.Irecv([code, _mpi_int], dest, reply)
            where = 2
            hreq = (_mpi_issend if synchronous else _mpi_isend)(comm, [header, _mpi_byte], dest, tag)
            _replied(st, 'Ssend' if synchronous else 'Send', dest, hreq, rreq, code, &where)
        else:
            if a.nbytes > _EAGER_MAX:
                return False
            b = _buffers(a.nbytes, -1)
            if b is None:
                return False
            if dest != _mpi_proc_null:
                _to_host(b.out.ptr, &a, plan)
            where = 1
            (_mpi_ssend if synchronous else _mpi_send)(comm, [b.out, a.nbytes, _mpi_byte], dest, tag)
    finally:
        _scratch_back(mem, device, a.stream, where)
    p2p_fast_calls += 1
    return True


cpdef bint p2p_recv(object comm, object buf, int source, int tag, object status) except -1:
    """Recv into a device array or a datatype's instances in one; False when the general path must take
    it (messages kept by Probe)."""
    global p2p_fast_calls
    cdef _P2pArray a
    cdef int device = -1
    st = _state(comm)
    if not _ready(st, &device) or _has_kept(st):
        return False
    plan = _p2p_spec(buf, True, device, &a)
    if plan is None or (plan is not _WHOLE and st.device is not None and device != st.device):
        return False  # (a datatype's payload is unpacked from the sender's bytes, mapped on the team's GPU)
    cdef Py_ssize_t cap = max(a.nbytes, _header_bytes)
    if cap > _EAGER_MAX:
        return False
    b = _buffers(-1, cap)
    if b is None:
        return False
    s = status if status is not None else _mpi_status()
    _mpi_recv(comm, [b.inc, cap, _mpi_byte], source, tag, s)
    _delivered(st, 'Recv', &a, b.inc, s, plan)
    p2p_fast_calls += 1
    return True


cpdef bint p2p_sendrecv(object comm, object sendbuf, int dest, int sendtag, object recvbuf, int source,
                        int recvtag, object status) except -1:
    """Sendrecv of device arrays or datatypes' instances in them; False when the general path must take it."""
    global p2p_fast_calls
    cdef _P2pArray s, r
    cdef int device = -1, reply = 0
    st = _state(comm)
    if not _ready(st, &device) or _has_kept(st):
        return False
    rplan = _p2p_spec(recvbuf, True, device, &r)
    if rplan is None or (rplan is not _WHOLE and st.device is not None and device != st.device):
        return False  # (as p2p_recv)
    splan = _p2p_spec(sendbuf, False, device, &s)
    if splan is None:
        return False
    cdef Py_ssize_t cap = max(r.nbytes, _header_bytes)
    if cap > _EAGER_MAX:
        return False
    b = _buffers(-1, cap)
    if b is None:
        return False
    mem = _packed_for_rendezvous(st, &s, splan, device, dest)
    cdef int where = 0  # the scratch's state (_scratch_back)
    try:
        if mem is not None:
            splan = _WHOLE  # the scratch holds the packed bytes
        header = _rendezvous_header(st, &s, splan, device, dest, &reply)
        if header is None:
            if s.nbytes > _EAGER_MAX:
                return False
            _buffers(s.nbytes, -1)
        got = status if status is not None else _mpi_status()
        if header is None:
            if dest != _mpi_proc_null:
                _to_host(b.out.ptr, &s, splan)
            where = 1
            _mpi_sendrecv(comm, [b.out, s.nbytes, _mpi_byte], dest, sendtag, [b.inc, cap, _mpi_byte], source,
                          recvtag, got)
            _delivered(st, 'Sendrecv', &r, b.inc, got, rplan)
        else:
            # receive posted first, as MPI's Sendrecv does; the send completes even when the receive fails
            inner = _mpi_irecv(comm, [b.inc, cap, _mpi_byte], source, recvtag)
            code = _int32_cell()
            rreq = st.control.Irecv([code, _mpi_int], dest, reply)
            where = 2
            hreq = _mpi_isend(comm, [header, _mpi_byte], dest, sendtag)
            try:
                inner.Wait(got)
                _delivered(st, 'Sendrecv', &r, b.inc, got, rplan)
            finally:
                _replied(st, 'Sendrecv', dest, hreq, rreq, code, &where)
    finally:
        _scratch_back(mem, device, s.stream, where)
    p2p_fast_calls += 1
    return True
