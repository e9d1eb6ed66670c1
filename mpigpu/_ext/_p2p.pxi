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

from cpython.pythread cimport PyThread_get_thread_ident

cdef enum:
    # The largest message this path sends eagerly when it cannot use a rendezvous: its page-locked
    # buffers grow to it and stay (two per thread); larger ones stage on the general path's pool.
    _EAGER_MAX = 4 << 20
    # Threads that may hold buffers here; a program that makes more takes the general path on the rest.
    _MAX_THREADS = 64

cdef object _p2p_key = None           # a communicator's state in its __dict__ (mpigpu._state.comm_state)
cdef object _p2p_kept_type = None     # p2p.P2pState: messages Probe took out of MPI, and reply tags
cdef object _p2p_config = None        # mpigpu's config (MPIGPU_P2P_IPC_BYTES read per call: tests change it)
cdef object _p2p_ipc = None           # mpigpu._paths.p2p_ipc: usable, header_at, parse, receive, check_reply
cdef object _p2p_truncated = None     # (st, name, nbytes, capacity) -> the truncation Error
cdef object _mpi_send = None, _mpi_ssend = None, _mpi_isend = None, _mpi_issend = None
cdef object _mpi_recv = None, _mpi_irecv = None, _mpi_sendrecv = None
cdef object _mpi_byte = None, _mpi_int = None, _mpi_status = None, _mpi_proc_null = None
cdef object _int32_cell = None        # () -> a one-element int32 array (a rendezvous's reply)
cdef int _header_bytes = 0
cdef dict _p2p_buffers = {}           # thread id -> _P2pBuffers
cdef unsigned long long p2p_fast_calls = 0  # calls this path completed (tests check it ran)


cdef class _P2pBuffers:
    """One thread's page-locked buffers: the outgoing and the incoming message."""
    cdef PinnedBuffer out, inc


def bind_fast_p2p(state_key, kept_type, config, ipc, truncated, plain_comm, mpi, int32_cell):
    """Gives the point-to-point fast path what it reads (see the declarations above)."""
    global _p2p_key, _p2p_kept_type, _p2p_config, _p2p_ipc, _p2p_truncated, _int32_cell, _header_bytes
    global _mpi_send, _mpi_ssend, _mpi_isend, _mpi_issend, _mpi_recv, _mpi_irecv, _mpi_sendrecv
    global _mpi_byte, _mpi_int, _mpi_status, _mpi_proc_null
    _p2p_key, _p2p_kept_type, _p2p_config, _p2p_ipc = state_key, kept_type, config, ipc
    _p2p_truncated, _int32_cell, _header_bytes = truncated, int32_cell, ipc.HEADER_BYTES
    _mpi_send, _mpi_ssend, _mpi_isend, _mpi_issend = plain_comm.Send, plain_comm.Ssend, plain_comm.Isend, plain_comm.Issend
    _mpi_recv, _mpi_irecv, _mpi_sendrecv = plain_comm.Recv, plain_comm.Irecv, plain_comm.Sendrecv
    _mpi_byte, _mpi_int, _mpi_status, _mpi_proc_null = mpi.BYTE, mpi.INT, mpi.Status, mpi.PROC_NULL


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
    uintptr_t ptr
    Py_ssize_t nbytes
    Py_ssize_t stream
    int code


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


cdef int _to_host(uintptr_t dst, const _P2pArray *a) except -1:
    """The array's bytes into page-locked `dst`, after its producer's work."""
    cdef int e
    if a.nbytes:
        check(mg_memcpy_async(dst, a.ptr, <size_t>a.nbytes, <uintptr_t>a.stream), 'cudaMemcpyAsync')
        with nogil:
            e = mg_stream_sync(<uintptr_t>a.stream)
        check(e, 'cudaStreamSynchronize')
    return 0


cdef int _to_device(const _P2pArray *a, uintptr_t src, Py_ssize_t nbytes) except -1:
    """nbytes from page-locked `src` into the array, done when this returns."""
    cdef int e
    if nbytes:
        check(mg_memcpy_async(a.ptr, src, <size_t>nbytes, <uintptr_t>a.stream), 'cudaMemcpyAsync')
        with nogil:
            e = mg_stream_sync(<uintptr_t>a.stream)
        check(e, 'cudaStreamSynchronize')
    return 0


cdef object _state(object comm):
    try:
        return comm.__dict__.get(_p2p_key)
    except AttributeError:  # mpi4py's own objects
        return None


cdef bint _has_kept(object st):
    kept = st._owned.get(_p2p_kept_type)
    return kept is not None and len(kept.kept) != 0


cdef object _rendezvous_header(object st, const _P2pArray *a, int device, int dest, int *reply):
    """p2p_ipc's header for sending the array GPU to GPU to `dest` (`reply` set to the tag of the
    receiver's reply), or None: this message goes eagerly. Its producer's work is done when a header
    comes back (the receiver reads the buffer at once)."""
    cdef int e
    if a.nbytes < <Py_ssize_t>_p2p_config.p2p_ipc_bytes or dest == _mpi_proc_null or not _p2p_ipc.usable(st):
        return None
    reply[0] = st.owned(_p2p_kept_type).next_reply_tag(dest)
    header = _p2p_ipc.header_at(st, a.ptr, a.nbytes, device, dest, reply[0])
    if header is not None:
        with nogil:
            e = mg_stream_sync(<uintptr_t>a.stream)
        check(e, 'cudaStreamSynchronize')
    return header


cdef int _delivered(object st, str name, const _P2pArray *a, PinnedBuffer inc, object status) except -1:
    """What a receive into the array took into `inc` goes to the array: a header's payload from the
    sender's buffer (the status then reports the payload), else the bytes themselves."""
    cdef Py_ssize_t n = status.Get_count(_mpi_byte)
    if n == _header_bytes and _p2p_ipc.usable(st):
        fields = _p2p_ipc.parse(inc, n)
        if fields is not None:
            got = _p2p_ipc.receive(st, name, fields, status.Get_source(), a.ptr, a.nbytes, a.stream)
            status.Set_elements(_mpi_byte, got)
            return 0
    if n > a.nbytes:
        raise _p2p_truncated(st, name, n, a.nbytes)
    _to_device(a, inc.ptr, n)
    return 0


cdef int _replied(object st, str name, int dest, object hreq, object rreq, object code) except -1:
    """The end of a rendezvous send: the header delivered and the receiver's reply in."""
    hreq.Wait()
    rreq.Wait()
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
    """Send (Ssend with `synchronous`) of a device array; False when the general path must take it."""
    global p2p_fast_calls
    cdef _P2pArray a
    cdef int device = -1, reply = 0
    st = _state(comm)
    if not _ready(st, &device) or not _p2p_array(buf, False, device, &a):
        return False
    header = _rendezvous_header(st, &a, device, dest, &reply)
    if header is not None:
        code = _int32_cell()
        rreq = st.control.Irecv([code, _mpi_int], dest, reply)
        hreq = (_mpi_issend if synchronous else _mpi_isend)(comm, [header, _mpi_byte], dest, tag)
        _replied(st, 'Ssend' if synchronous else 'Send', dest, hreq, rreq, code)
    else:
        if a.nbytes > _EAGER_MAX:
            return False
        b = _buffers(a.nbytes, -1)
        if b is None:
            return False
        if dest != _mpi_proc_null:
            _to_host(b.out.ptr, &a)
        (_mpi_ssend if synchronous else _mpi_send)(comm, [b.out, a.nbytes, _mpi_byte], dest, tag)
    p2p_fast_calls += 1
    return True


cpdef bint p2p_recv(object comm, object buf, int source, int tag, object status) except -1:
    """Recv into a device array; False when the general path must take it (messages kept by Probe)."""
    global p2p_fast_calls
    cdef _P2pArray a
    cdef int device = -1
    st = _state(comm)
    if not _ready(st, &device) or _has_kept(st) or not _p2p_array(buf, True, device, &a):
        return False
    cdef Py_ssize_t cap = max(a.nbytes, _header_bytes)
    if cap > _EAGER_MAX:
        return False
    b = _buffers(-1, cap)
    if b is None:
        return False
    s = status if status is not None else _mpi_status()
    _mpi_recv(comm, [b.inc, cap, _mpi_byte], source, tag, s)
    _delivered(st, 'Recv', &a, b.inc, s)
    p2p_fast_calls += 1
    return True


cpdef bint p2p_sendrecv(object comm, object sendbuf, int dest, int sendtag, object recvbuf, int source,
                        int recvtag, object status) except -1:
    """Sendrecv of device arrays; False when the general path must take it."""
    global p2p_fast_calls
    cdef _P2pArray s, r
    cdef int device = -1, reply = 0
    st = _state(comm)
    if (not _ready(st, &device) or _has_kept(st) or not _p2p_array(recvbuf, True, device, &r)
            or not _p2p_array(sendbuf, False, device, &s)):
        return False
    cdef Py_ssize_t cap = max(r.nbytes, _header_bytes)
    if cap > _EAGER_MAX:
        return False
    b = _buffers(-1, cap)
    if b is None:
        return False
    header = _rendezvous_header(st, &s, device, dest, &reply)
    if header is None:
        if s.nbytes > _EAGER_MAX:
            return False
        _buffers(s.nbytes, -1)
    got = status if status is not None else _mpi_status()
    if header is None:
        if dest != _mpi_proc_null:
            _to_host(b.out.ptr, &s)
        _mpi_sendrecv(comm, [b.out, s.nbytes, _mpi_byte], dest, sendtag, [b.inc, cap, _mpi_byte], source, recvtag,
                      got)
        _delivered(st, 'Sendrecv', &r, b.inc, got)
    else:
        # receive posted first, as MPI's Sendrecv does; the send completes even when the receive fails
        inner = _mpi_irecv(comm, [b.inc, cap, _mpi_byte], source, recvtag)
        code = _int32_cell()
        rreq = st.control.Irecv([code, _mpi_int], dest, reply)
        hreq = _mpi_isend(comm, [header, _mpi_byte], dest, sendtag)
        try:
            inner.Wait(got)
            _delivered(st, 'Sendrecv', &r, b.inc, got)
        finally:
            _replied(st, 'Sendrecv', dest, hreq, rreq, code)
    p2p_fast_calls += 1
    return True
