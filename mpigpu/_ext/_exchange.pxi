# The all-to-all family's fast path (included by _device.pyx): Alltoall, Alltoallv, Allgatherv, Gather,
# Gatherv, Scatter, Scatterv, Neighbor_allgather(v) and Neighbor_alltoall(v) of device arrays in the
# forms programs use, read into per-peer byte ranges and agreed on the board in one Cython call. The
# general path (mpigpu/_paths/exchange.py: describe, then the agreement in Python) cost ~30 us per call
# on 2 H100s where the exchange kernel itself took ~18 (docs/benchmarks.md, "The exchange's fixed
# cost"). Same rules as `describe`: what this path declines (another form, a datatype with gaps,
# anything unusual) the general path reads, and where that one declines too, the host MPI call says
# what is wrong. At the end: the block shapes of a general-path call with derived datatypes, as the
# C call description takes them (Team.exchange's `shapes`).

cdef extern from "mpigpu_cuda.h":
    enum:
        MG_ALLTOALL
        MG_ALLTOALLV
        MG_ALLTOALLW
        MG_ALLGATHERV
        MG_GATHER
        MG_GATHERV
        MG_SCATTER
        MG_SCATTERV
        MG_NEIGHBOR_ALLGATHER
        MG_NEIGHBOR_ALLGATHERV
        MG_NEIGHBOR_ALLTOALL
        MG_NEIGHBOR_ALLTOALLV

cdef enum:
    kMaxBlocks = 64  # the most blocks of a message this path reads (a topology's neighbours, PROC_NULL included)


cdef struct XBuf:
    uintptr_t ptr
    Py_ssize_t nbytes   # the whole buffer
    Py_ssize_t extent   # bytes per element of the message (the datatype's extent, else the array's item)
    Py_ssize_t stream   # the producer's stream (0: none given)
    int device          # its GPU where the array says (-1: the driver is asked)
    bint ro


cdef struct XShaped:
    # One side's blocks of Alltoallv and Alltoallw as this path reads them: block p's shape (size 0: plain
    # bytes) and the bytes [lo, hi) it touches from the buffer's pointer (of a shaped block: from its
    # lowest byte to its highest, as describe's _span counts them).
    mg_block_shape shape[MG_MAX_RANKS]
    Py_ssize_t lo[MG_MAX_RANKS]
    Py_ssize_t hi[MG_MAX_RANKS]
    unsigned long long handle[MG_MAX_RANKS]  # its datatype's handle (shaped blocks: the own block's rule)
    bint any


cdef struct XType:
    # A datatype as this path reads it (describe's _shape): packed bytes per instance, extent, the span
    # of one instance from its displacement [tlb, tub), and its shape where it has gaps.
    Py_ssize_t size, extent, tlb, tub
    unsigned long long handle
    bint shaped
    mg_block_shape shape


cdef object _x_unsettled = ()     # the agreements with undecided non-blocking calls (mpigpu/_state/undecided.py)
cdef object _x_config = None      # mpigpu's config (exchange_min_bytes read per call: tests change it)
cdef object _x_datatype = None    # MPI.Datatype
cdef object _x_in_place_obj = None  # MPI.IN_PLACE
cdef int _x_proc_null = -1          # MPI.PROC_NULL
cdef object _x_last_dt = None     # the last datatype read and its handle and extent (programs repeat them)
cdef object _x_last_handle = None
cdef Py_ssize_t _x_last_extent = -1
cdef unsigned long long _x_calls = 0
cdef object _x_type_of = None     # exchange_read.type_of: a datatype as describe reads it, or None
cdef dict _x_types = {}           # datatype handle -> (the datatype, size, extent, tlb, tub, shape bytes or None)
cdef int kXTypesKept = 64         # datatypes kept read (programs repeat a few; more: the cache starts over)
cdef object kXTypeBound = 1 << 62  # sizes, extents and bounds beyond this: declined (no sum or product below overflows)


def bind_exchange_entry(unsettled, config, datatype, in_place, int proc_null, type_of):
    """Gives exchange_entry what it reads (see the declarations above)."""
    global _x_unsettled, _x_config, _x_datatype, _x_in_place_obj, _x_last_dt, _x_proc_null, _x_type_of
    _x_unsettled, _x_config, _x_datatype, _x_in_place_obj, _x_last_dt = unsettled, config, datatype, in_place, None
    _x_proc_null, _x_type_of = proc_null, type_of
    _x_types.clear()


def exchange_fast_calls():
    """How many calls exchange_entry ran."""
    return _x_calls


cdef int _xread(object obj, XBuf *b, bint spec) except -1:
    """Reads a contiguous device array (with `spec`, also [array, its own datatype]: _array); 0 where this
    path declines it."""
    cdef int code = -1, dev = -1
    cdef Py_ssize_t count = 0, s = 0
    cdef bint ro = False
    if not (_array(obj, &b.ptr, &count, &code, &dev, &ro, &s) if spec else
            _array_only(obj, &b.ptr, &count, &code, &dev, &ro, &s)):
        return 0
    b.extent = _SIZES[code]
    b.nbytes = count * b.extent
    b.stream, b.device, b.ro = s, dev, ro
    return 1


cdef Py_ssize_t _xextent(object dt) except -2:
    """The extent of a datatype whose bytes have no gaps (lower bound 0, size equal to extent), else -1."""
    global _x_last_dt, _x_last_handle, _x_last_extent
    if not isinstance(dt, _x_datatype):
        return -1  # a typecode string and the like: the general path reads it
    h = dt.handle
    if dt is _x_last_dt and h == _x_last_handle:
        return _x_last_extent
    try:
        lb, extent = dt.Get_extent()
        tlb, textent = dt.Get_true_extent()
        size = dt.Get_size()
    except Exception:  # noqa: BLE001 - a null or freed datatype: the host MPI call says so
        return -1
    e = extent if lb == 0 and tlb == 0 and extent == textent == size and extent > 0 else -1
    _x_last_dt, _x_last_handle, _x_last_extent = dt, h, e
    return e


cdef int _xtype(object dt, XType *t) except -1:
    """Datatype dt as describe reads it (exchange_read.type_of, read once per datatype and kept: a
    derived datatype's layout costs tens of microseconds to read); 0 where describe declines it. The
    kept entry is the datatype object's own: another object of the same handle (or a handle freed and
    made again) is read anew."""
    cdef mg_block_shape shape
    if not isinstance(dt, _x_datatype):
        return 0
    h = dt.handle
    e = _x_types.get(h)
    if e is None or e[0] is not dt:
        got = _x_type_of(dt)
        if got is None:
            return 0
        size, extent, tlb, tub, lay = got
        if not all(-kXTypeBound < v < kXTypeBound for v in (size, extent, tlb, tub)):
            return 0  # no buffer holds an instance of it: the general path says what is wrong
        packed = None
        if lay is not None:
            memset(&shape, 0, sizeof(mg_block_shape))  # padding and unused dimensions too: shapes compare bytewise
            _block_shape(&shape, lay)
            packed = (<char *>&shape)[:sizeof(mg_block_shape)]
        if len(_x_types) >= kXTypesKept:
            _x_types.clear()
        e = _x_types[h] = (dt, size, extent, tlb, tub, packed)
    t.size, t.extent, t.tlb, t.tub = e[1], e[2], e[3], e[4]
    t.handle = <unsigned long long>(h & 0xFFFFFFFFFFFFFFFF)
    t.shaped = e[5] is not None
    if t.shaped:
        memcpy(&t.shape, <const char *>e[5], sizeof(mg_block_shape))
    return 1


cdef int _xblock(XBuf *b, XShaped *sh, int i, const XType *t, Py_ssize_t count, Py_ssize_t off, size_t *size,
                 size_t *at) except -1:
    """Block i of a v- or w-message: count instances of t from byte `off` of buffer b, its packed bytes
    and offset into *size and *at and its shape and span into sh; 0 where it lies beyond the buffer (the
    host MPI call says what is wrong)."""
    cdef Py_ssize_t lo, hi
    if count > b.nbytes or off > b.nbytes or (t.extent and count > b.nbytes // t.extent + 1) or \
            (t.size and count > PY_SSIZE_T_MAX // t.size):
        return 0  # beyond any buffer (and no product below overflows: _xtype bounds the type's figures)
    lo, hi = off, off
    if count:
        lo, hi = off + t.tlb, off + (count - 1) * t.extent + t.tub
        if lo < 0 or hi > b.nbytes:
            return 0
    size[0], at[0] = <size_t>(count * t.size), <size_t>off
    sh.lo[i], sh.hi[i] = lo, hi
    sh.handle[i] = t.handle
    if t.shaped and count:
        sh.shape[i] = t.shape
        sh.any = True
    else:
        sh.shape[i].size = 0
    return 1


cdef int _xints(object seq, int n, Py_ssize_t *out) except -1:
    """n non-negative ints from a list, tuple or NumPy array; 0 where it is anything else."""
    cdef int i
    if type(seq) is not list and type(seq) is not tuple:
        to_list = getattr(seq, 'tolist', None)  # a NumPy array
        if to_list is None:
            return 0
        seq = to_list()
        if type(seq) is not list:
            return 0
    if len(seq) != n:
        return 0
    for i in range(n):
        v = seq[i]
        if type(v) is not int or v < 0 or v > <object>PY_SSIZE_T_MAX:
            return 0
        out[i] = v
    return 1


cdef int _xsimple(object obj, int blocks, XBuf *b, Py_ssize_t *size) except -1:
    """An array (bare, or [array, its own datatype]) as a simple message of `blocks` equal blocks: *size the
    bytes of one; 0: declined."""
    if not _xread(obj, b, True):
        return 0
    if b.nbytes % (b.extent * blocks):
        return 0
    size[0] = b.nbytes // blocks
    return 1


cdef int _xvector(object spec, int n, XBuf *b, size_t *sizes, size_t *offs, XShaped *sh) except -1:
    """A v-message [array, counts, displs, datatype] of n blocks (at most kMaxBlocks) in mpi4py's forms
    with the counts given (packing.vector_spec's rules): each block's bytes and offset; 0 where this
    path declines it. With `sh` (Alltoallv: one block per rank), a datatype with gaps the kernel follows
    too, each block's shape and span into sh; without, contiguous datatypes only."""
    cdef Py_ssize_t counts[kMaxBlocks]
    cdef Py_ssize_t displs[kMaxBlocks]
    cdef Py_ssize_t extent, at = 0, k = 0
    cdef XType t
    cdef int i
    if type(spec) is not list and type(spec) is not tuple:
        return 0
    k = len(spec)
    c = d = dt = None
    if k == 2:
        c = spec[1]
        if type(c) is tuple and len(c) == 2:
            c, d = c
    elif k == 3:
        c, dt = spec[1], spec[2]
        if type(c) is tuple and len(c) == 2:
            c, d = c
    elif k == 4:
        c, d, dt = spec[1], spec[2], spec[3]
    else:
        return 0
    if n > kMaxBlocks or c is None or not _xread(spec[0], b, False) or not _xints(c, n, counts):
        return 0
    if d is not None and not _xints(d, n, displs):
        return 0
    if dt is not None:
        extent = _xextent(dt)
        if extent <= 0:
            if sh == NULL or not _xtype(dt, &t):
                return 0
            b.extent = t.extent
            if b.extent <= 0:
                return 0
            sh.any = False
            for i in range(n):
                if d is None:
                    displs[i] = at
                    at += counts[i]
                if displs[i] > b.nbytes // b.extent or \
                        not _xblock(b, sh, i, &t, counts[i], displs[i] * b.extent, &sizes[i], &offs[i]):
                    return 0
            return 1
        b.extent = extent
    if sh != NULL:
        sh.any = False
    for i in range(n):
        if d is None:
            displs[i] = at
            at += counts[i]
        if counts[i] > b.nbytes // b.extent or displs[i] > b.nbytes // b.extent:
            return 0
        sizes[i] = <size_t>(counts[i] * b.extent)
        offs[i] = <size_t>(displs[i] * b.extent)
        if sizes[i] and offs[i] + sizes[i] > <size_t>b.nbytes:
            return 0  # beyond the array: the host MPI call says what is wrong
        if sh != NULL:
            sh.shape[i].size = 0
            sh.lo[i], sh.hi[i] = <Py_ssize_t>offs[i], <Py_ssize_t>(offs[i] + sizes[i])
    return 1


cdef int _xwvector(object spec, int n, XBuf *b, size_t *sizes, size_t *offs, XShaped *sh) except -1:
    """A w-message of n blocks in mpi4py's forms (message_vector_w): [array, counts, byte displacements,
    datatypes], [array, (counts, displacements), datatypes] or [array, datatypes] (one of each at 0):
    each block's bytes, offset, shape and span; 0 where this path declines it (counts or displacements
    not given as sequences, a datatype describe declines)."""
    cdef Py_ssize_t counts[kMaxBlocks]
    cdef Py_ssize_t displs[kMaxBlocks]
    cdef XType t
    cdef int i
    if type(spec) is not list and type(spec) is not tuple or n > kMaxBlocks:
        return 0
    k = len(spec)
    if k == 2:
        types = spec[1]
        for i in range(n):
            counts[i], displs[i] = 1, 0
    elif k == 3:
        cd, types = spec[1], spec[2]
        if (type(cd) is not tuple and type(cd) is not list) or len(cd) != 2:
            return 0
        if not _xints(cd[0], n, counts) or not _xints(cd[1], n, displs):
            return 0
    elif k == 4:
        types = spec[3]
        if not _xints(spec[1], n, counts) or not _xints(spec[2], n, displs):
            return 0
    else:
        return 0
    if (type(types) is not list and type(types) is not tuple) or len(types) != n:
        return 0
    if not _xread(spec[0], b, False):
        return 0
    sh.any = False
    for i in range(n):
        if counts[i] == 0:  # an empty block's datatype is not read (describe's _wmessage)
            sizes[i], offs[i] = 0, <size_t>displs[i]
            sh.shape[i].size = 0
            sh.lo[i] = sh.hi[i] = displs[i]
            if not isinstance(types[i], _x_datatype):
                return 0
            continue
        if not _xtype(types[i], &t) or t.extent <= 0:
            return 0
        if not _xblock(b, sh, i, &t, counts[i], displs[i], &sizes[i], &offs[i]):
            return 0
    return 1


cdef inline bint _x_in_place(object buf):
    return buf is None or buf is _x_in_place_obj


cdef void _xblocks(int n, Py_ssize_t size, size_t *sizes, size_t *offs) noexcept:
    """A simple message's n equal blocks of `size` bytes, back to back."""
    cdef int p
    for p in range(n):
        sizes[p], offs[p] = <size_t>size, <size_t>(p * size)


cdef int _xpeers(object seq, int n, int *out, int *k) except -1:
    """A topology side's neighbours (ranks below n, or PROC_NULL) into out[:*k]; 0 where it declines."""
    cdef int i
    if type(seq) is not list or len(seq) > kMaxBlocks:
        return 0
    k[0] = len(seq)
    for i in range(k[0]):
        v = seq[i]
        if type(v) is not int or not (v == _x_proc_null or 0 <= v < n):
            return 0
        out[i] = v
    return 1


cdef int _xonto(const int *peers, int k, int n, const size_t *sizes, const size_t *offs, size_t *got,
                size_t *at) except -1:
    """exchange._onto_ranks: blocks addressed to neighbours as per-rank ranges; 0 where a rank is a
    neighbour twice (two ranges of one pair)."""
    cdef bint seen[MG_MAX_RANKS]
    cdef int i, p
    for p in range(n):
        seen[p] = False
    for i in range(k):
        p = peers[i]
        if p == _x_proc_null:
            continue
        if seen[p]:
            return 0
        seen[p] = True
        got[p], at[p] = sizes[i], offs[i]
    return 1


cdef int _xneighbors(int coll, int n, object sendbuf, object recvbuf, object edges, mg_exchange_call *x,
                     XBuf *send, XBuf *recv) except -1:
    """describe's _neighborly for Neighbor_allgather(v) and Neighbor_alltoall(v) in the forms this path
    reads: block i to the i-th destination, block j from the j-th source; 0 where it declines."""
    cdef int src[kMaxBlocks]
    cdef int dst[kMaxBlocks]
    cdef size_t sizes[kMaxBlocks]
    cdef size_t offs[kMaxBlocks]
    cdef int ki = 0, ko = 0, i
    cdef Py_ssize_t size = 0
    if type(edges) is not tuple or len(edges) != 2 or _x_in_place(sendbuf) or _x_in_place(recvbuf):
        return 0  # no topology, or in place (MPI has no such form): the general path
    if not _xpeers(edges[0], n, src, &ki) or not _xpeers(edges[1], n, dst, &ko):
        return 0
    if coll == MG_NEIGHBOR_ALLGATHER or coll == MG_NEIGHBOR_ALLGATHERV:
        if not _xsimple(sendbuf, 1, send, &size):
            return 0
        for i in range(ko):
            sizes[i], offs[i] = <size_t>size, 0
    elif coll == MG_NEIGHBOR_ALLTOALL:
        if ko == 0 or not _xsimple(sendbuf, ko, send, &size):
            return 0
        _xblocks(ko, size, sizes, offs)
    elif not _xvector(sendbuf, ko, send, sizes, offs, NULL):
        return 0
    if not _xonto(dst, ko, n, sizes, offs, x.send_bytes, x.send_off):
        return 0
    if coll == MG_NEIGHBOR_ALLGATHER or coll == MG_NEIGHBOR_ALLTOALL:
        if ki == 0 or not _xsimple(recvbuf, ki, recv, &size):
            return 0
        _xblocks(ki, size, sizes, offs)
    elif not _xvector(recvbuf, ki, recv, sizes, offs, NULL):
        return 0
    return _xonto(src, ki, n, sizes, offs, x.recv_bytes, x.recv_off)


cdef int exchange_ranges(int coll, int me, int n, object sendbuf, object recvbuf, int root, object edges,
                         mg_exchange_call *x, XBuf *send, XBuf *recv, int *read, XShaped *shaped) except -1:
    """describe (mpigpu/_paths/exchange.py) for the forms this path reads (`edges`: a topology's
    (sources, destinations), for the neighbourhood collectives): fills x, and the arrays read into send
    and recv (*read: 1 for send, 2 for recv, or both); 0 where it declines the call. Alltoallv and
    Alltoallw take datatypes with gaps too: their blocks' shapes in shaped[0] (send) and shaped[1]
    (receive), which x then points at."""
    cdef Py_ssize_t size = 0
    cdef int p
    cdef bint at_root = me == root
    memset(x, 0, sizeof(mg_exchange_call))
    x.coll = coll
    read[0] = 0
    shaped[0].any = shaped[1].any = False
    if coll == MG_ALLTOALL or coll == MG_ALLTOALLV or coll == MG_ALLTOALLW:
        if _x_in_place(sendbuf) or (type(sendbuf) is list and len(<list>sendbuf) and
                                    _x_in_place((<list>sendbuf)[0])):
            return 0  # its own block would be overwritten while it is sent
        if coll == MG_ALLTOALL:
            if not _xsimple(sendbuf, n, send, &size):
                return 0
            _xblocks(n, size, x.send_bytes, x.send_off)
            if not _xsimple(recvbuf, n, recv, &size):
                return 0
            _xblocks(n, size, x.recv_bytes, x.recv_off)
        elif coll == MG_ALLTOALLV:
            if not _xvector(sendbuf, n, send, x.send_bytes, x.send_off, &shaped[0]) or \
                    not _xvector(recvbuf, n, recv, x.recv_bytes, x.recv_off, &shaped[1]):
                return 0
        elif not _xwvector(sendbuf, n, send, x.send_bytes, x.send_off, &shaped[0]) or \
                not _xwvector(recvbuf, n, recv, x.recv_bytes, x.recv_off, &shaped[1]):
            return 0
        if shaped[0].any or shaped[1].any:
            x.send_shape, x.recv_shape = shaped[0].shape, shaped[1].shape
        read[0] = 3
    elif coll == MG_ALLGATHERV:
        if not _xvector(recvbuf, n, recv, x.recv_bytes, x.recv_off, NULL):
            return 0
        read[0] = 2
        if _x_in_place(sendbuf):  # its own block is already in place: sent from there
            size = x.recv_bytes[me]
            x.send = recv.ptr + x.recv_off[me]
        elif _xsimple(sendbuf, 1, send, &size):
            read[0] = 3
        else:
            return 0
        for p in range(n):
            x.send_bytes[p] = <size_t>size
    elif coll == MG_GATHER or coll == MG_GATHERV:
        if at_root:
            if coll == MG_GATHERV:
                if not _xvector(recvbuf, n, recv, x.recv_bytes, x.recv_off, NULL):
                    return 0
            elif _xsimple(recvbuf, n, recv, &size):
                _xblocks(n, size, x.recv_bytes, x.recv_off)
            else:
                return 0
            read[0] = 2
        if at_root and _x_in_place(sendbuf):  # the root's own block is in place: nothing to copy
            x.send = recv.ptr + x.recv_off[me]
            x.send_bytes[root] = x.recv_bytes[me]
        elif _xsimple(sendbuf, 1, send, &size):
            x.send_bytes[root] = <size_t>size
            read[0] |= 1
        else:
            return 0
    elif coll == MG_NEIGHBOR_ALLGATHER or coll == MG_NEIGHBOR_ALLGATHERV or coll == MG_NEIGHBOR_ALLTOALL or \
            coll == MG_NEIGHBOR_ALLTOALLV:
        if not _xneighbors(coll, n, sendbuf, recvbuf, edges, x, send, recv):
            return 0
        read[0] = 3
    elif coll == MG_SCATTER or coll == MG_SCATTERV:
        if at_root:
            if coll == MG_SCATTERV:
                if not _xvector(sendbuf, n, send, x.send_bytes, x.send_off, NULL):
                    return 0
            elif _xsimple(sendbuf, n, send, &size):
                _xblocks(n, size, x.send_bytes, x.send_off)
            else:
                return 0
            read[0] = 1
        if at_root and _x_in_place(recvbuf):
            x.send_bytes[me] = 0  # the root's own block stays where it is
        elif _xsimple(recvbuf, 1, recv, &size):
            x.recv_bytes[root] = <size_t>size
            read[0] |= 2
        else:
            return 0
    else:
        return 0
    if read[0] & 2:
        if recv.ro:
            return 0  # the general path raises for a read-only receive buffer
        x.recv = recv.ptr
    if read[0] & 1:
        x.send = send.ptr
    if x.send == 0:
        x.send = x.recv
    if x.send_bytes[me] != x.recv_bytes[me]:
        return 0  # its own block would not fit (host MPI says what is wrong)
    if x.send_shape != NULL:
        return 0 if _xoverlap_shaped(x, me, n, &shaped[0], &shaped[1]) else 1
    return 0 if _xoverlap(x, me, n) else 1


cdef bint _xoverlap(const mg_exchange_call *x, int me, int n) noexcept:
    """exchange._overlap: bytes this rank sends overlap bytes it receives (aliased buffers)."""
    cdef uintptr_t a, b, c, d
    cdef int p, q
    cdef size_t own = x.send_bytes[me]
    cdef uintptr_t src = x.send + x.send_off[me], dst = x.recv + x.recv_off[me]
    cdef bint own_copied = own != 0 and src != dst
    for p in range(n + 1):
        if p < n:
            if p == me or x.send_bytes[p] == 0:
                continue
            a, b = x.send + x.send_off[p], x.send + x.send_off[p] + x.send_bytes[p]
        elif own_copied:
            a, b = src, src + own
        else:
            continue
        for q in range(n + 1):
            if q < n:
                if q == me or x.recv_bytes[q] == 0:
                    continue
                c, d = x.recv + x.recv_off[q], x.recv + x.recv_off[q] + x.recv_bytes[q]
            elif own_copied:
                c, d = dst, dst + own
            else:
                continue
            if a < d and c < b:
                return True
    return False


cdef bint _xoverlap_shaped(const mg_exchange_call *x, int me, int n, const XShaped *s, const XShaped *r) noexcept:
    """_xoverlap for blocks with shapes: each block from its lowest byte to its highest (describe's
    _overlap). The own block is no overlap where both its sides are the same bytes, both plain or both of
    one datatype (describe's rule: the same layout object, decoded once per handle)."""
    cdef uintptr_t a, b, c, d
    cdef int p, q
    cdef bint same = x.send + x.send_off[me] == x.recv + x.recv_off[me] and (
        (s.shape[me].size == 0 and r.shape[me].size == 0) or
        (s.shape[me].size != 0 and r.shape[me].size != 0 and s.handle[me] == r.handle[me]))
    for p in range(n):
        if x.send_bytes[p] == 0 or (p == me and same):
            continue
        a, b = x.send + <uintptr_t>s.lo[p], x.send + <uintptr_t>s.hi[p]
        for q in range(n):
            if x.recv_bytes[q] == 0 or (q == me and same):
                continue
            c, d = x.recv + <uintptr_t>r.lo[q], x.recv + <uintptr_t>r.hi[q]
            if a < d and c < b:
                return True
    return False


def exchange_ranges_of(int coll, int me, int n, sendbuf, recvbuf, int root=-1, edges=None):
    """exchange_ranges for tests: (send, recv, send_bytes, send_off, recv_bytes, recv_off) as lists, or
    None where the fast path declines (buffers' devices not checked)."""
    cdef mg_exchange_call x
    cdef XBuf send, recv
    cdef XShaped shaped[2]
    cdef int read = 0
    cdef bint rooted = coll == MG_GATHER or coll == MG_GATHERV or coll == MG_SCATTER or coll == MG_SCATTERV
    if n < 1 or n > MG_MAX_RANKS or not 0 <= me < n or (rooted and not 0 <= root < n):
        return None  # exchange_entry checks the same before it reads
    if not exchange_ranges(coll, me, n, sendbuf, recvbuf, root, edges, &x, &send, &recv, &read, shaped):
        return None
    return (x.send, x.recv, [x.send_bytes[p] for p in range(n)], [x.send_off[p] for p in range(n)],
            [x.recv_bytes[p] for p in range(n)], [x.recv_off[p] for p in range(n)])


def exchange_shapes_of(int coll, int me, int n, sendbuf, recvbuf):
    """The block shapes exchange_ranges read for Alltoallv or Alltoallw, for tests: (send, recv) lists
    of None (plain bytes) or (start, block, size, extent, ((count, stride), ...)) per rank, or None
    where the fast path declines the call."""
    cdef mg_exchange_call x
    cdef XBuf send, recv
    cdef XShaped shaped[2]
    cdef int read = 0, p, d
    if n < 1 or n > MG_MAX_RANKS or not 0 <= me < n:
        return None
    if not exchange_ranges(coll, me, n, sendbuf, recvbuf, -1, None, &x, &send, &recv, &read, shaped):
        return None
    out = []
    for k in range(2):
        side = []
        for p in range(n):
            sh = &shaped[k].shape[p]
            side.append(None if x.send_shape == NULL or sh.size == 0 else
                        (sh.start, sh.block, sh.size, sh.extent, tuple((sh.count[d], sh.stride[d]) for d in range(sh.ndims))))
        out.append(side)
    return tuple(out)


cpdef int exchange_entry(object comm, int coll, object sendbuf, object recvbuf, object root,
                         object edges=None, object on_stream=None) except -1:
    """Runs a blocking call of the all-to-all family on device arrays on the exchange transport when
    the call is one this path reads, the communicator's team is up on the current device and every rank
    brought device arrays (`edges`: a neighbourhood collective's topology, as exchange_ranges takes it):
    1 when it ran, 0 for the general path (the verdict stashed on the board where the ranks agreed on
    another path). `on_stream`: the stream= form's stream handle (an int): the call is enqueued there
    and returns at once, its producers ordered before it by the caller, as the general path's."""
    global _x_calls
    cdef mg_exchange_call x
    cdef XBuf bufs[2]
    cdef XShaped shaped[2]
    cdef int read = 0, i, current = -1, who = -1, verdict, r = 0
    cdef Py_ssize_t stream = 0
    cdef size_t total = 0
    cdef Team team
    if _x_unsettled:
        return 0  # undecided non-blocking calls start first (the general path settles them)
    try:
        attrs = comm.__dict__
    except AttributeError:
        return 0
    st = attrs.get(_entry_key)
    if st is None:
        return 0
    t = st.team
    if type(t) is not Team:
        return 0
    team = <Team>t
    if team.t == NULL or team.nranks > MG_MAX_RANKS:
        return 0
    if root is not None:
        if type(root) is not int or root < 0 or root >= team.nranks:
            return 0
        r = root
    if mg_get_device(&current) != 0 or current != team.device:
        return 0
    if not exchange_ranges(coll, team.rank, team.nranks, sendbuf, recvbuf, r, edges, &x, &bufs[0], &bufs[1],
                           &read, shaped):
        return 0
    for i in range(team.nranks):
        total += x.send_bytes[i] + x.recv_bytes[i]
    if total < <size_t>_x_config.exchange_min_bytes:
        return 0  # the general path votes for the mirrors
    for i in range(2):
        if not read & (1 << i):
            continue
        if on_stream is None:
            if read == 3 and bufs[0].stream != bufs[1].stream:
                return 0  # two producers' streams: the general path orders them
            stream = bufs[i].stream
        if bufs[i].nbytes and not (bufs[i].device == team.device if bufs[i].device >= 0
                                   else _on_device(bufs[i].ptr, team.device)):
            return 0
    board = team.board
    if board is not None:
        if type(board) is not Board:
            return 0  # the ranks agree on the general path (across nodes, a broken communicator)
        if (<Board>board).post_device(coll) != 0:
            (<Board>board).stash(MG_VERDICT_TIMEOUT, MG_BOARD_BEHIND)  # nothing posted
            return 0
        verdict = (<Board>board).wait_device(coll, &who)
        if verdict != MG_VERDICT_DEVICE:
            (<Board>board).stash(verdict, who)
            return 0
    elif team.nranks != 1:
        return 0
    try:
        if on_stream is None:
            team.run_exchange(&x, <uintptr_t>stream)
        else:
            team.launch_exchange(&x, <uintptr_t><Py_ssize_t>on_stream)
    except DeviceError as exc:
        raise _entry_failed(st, coll, exc) from None
    _x_calls += 1
    return 1


cdef int _shapes(mg_exchange_call *x, shapes, mg_block_shape *send, mg_block_shape *recv) except -1:
    """Points x at the block shapes of `shapes` ((send, recv) per-rank lists of a regular layout or
    None), filled into the arrays send and recv (MG_MAX_RANKS each); None: every block plain."""
    cdef int r
    if shapes is None:
        return 0
    memset(send, 0, sizeof(mg_block_shape) * MG_MAX_RANKS)
    memset(recv, 0, sizeof(mg_block_shape) * MG_MAX_RANKS)
    for r, lay in enumerate(shapes[0]):
        if lay is not None:
            _block_shape(&send[r], lay)
    for r, lay in enumerate(shapes[1]):
        if lay is not None:
            _block_shape(&recv[r], lay)
    x.send_shape, x.recv_shape = send, recv
    return 0


cdef int _block_shape(mg_block_shape *s, lay) except -1:
    """s from a regular layout (mpigpu/_describe/datatypes.py) of at most MG_SHAPE_MAX_DIMS dimensions."""
    cdef int d
    dims = lay.dims
    if not lay.regular or len(dims) > MG_SHAPE_MAX_DIMS:
        raise DeviceError(MG_ERR_ARG, f'exchange: a block shape of {len(dims)} dimensions or a block table')
    s.start, s.block, s.size, s.extent = lay.start, lay.block, lay.size, lay.extent
    s.ndims = len(dims)
    for d in range(s.ndims):
        s.count[d], s.stride[d] = dims[d]
    return 0


cdef int _then(mg_exchange_call *x, then, mg_rows_reduction *red) except -1:
    """Points x at the reduction `then` ((dtype, op, dst, src, row_bytes, nrows, count), filled into red)
    that follows the exchange; None: none."""
    if then is None:
        return 0
    red.dtype, red.op, red.dst, red.src, red.row_bytes, red.nrows, red.count = then
    x.then = red
    return 0
