# The interposer's entry into the fast path (included by _device.pyx): the five engine collectives that C
# code calls below Python (pmpi/interpose.c), read from the call's words without the handler's Python (its
# buffer objects and the mpi4py method call cost 33 of a 1 KB Allreduce's 65 us below Python on an H100
# host, docs/benchmarks.md "The MPI interposer"). Device pointers run as fast_entry runs the same call from
# Python; host buffers are posted for the peers as _front posts them, and the interposer then makes the
# call on the library below (MGI_ENTRY_LOWER, pmpi/engine_entry.h). Anything else returns
# MGI_ENTRY_HANDLER and the interposer hands the call to the handler (mpigpu/_face/interposed.py): mixed
# buffers, a type or op the engine lacks, a communicator the handler has not seen yet (it binds what this
# reads), no device team, undecided non-blocking calls.

cdef extern from "engine_entry.h":
    enum:
        MGI_ENTRY_HANDLER
        MGI_ENTRY_LOWER
        MGI_ENTRY_HANDLER_ONLY
        MGI_HOST_UNPOSTED
        MGI_HOST_HANDLER

cdef extern from *:
    """
    /* Orders the loads before it before those after it (a seqlock reader's second look at its epoch). */
    static inline void mg_fence_acquire(void) { __atomic_thread_fence(__ATOMIC_ACQUIRE); }
    /* Orders the stores before it before those after it (a seqlock writer's cleared epoch, then its data). */
    static inline void mg_fence_release(void) { __atomic_thread_fence(__ATOMIC_RELEASE); }
    /* A counter bumped by threads that may not hold the GIL. */
    static inline void mg_count(unsigned long long *c) { __atomic_fetch_add(c, 1ull, __ATOMIC_RELAXED); }
    """
    void mg_fence_acquire() nogil
    void mg_fence_release() nogil
    void mg_count(unsigned long long *c) nogil

cdef extern from "board.h":
    enum:
        MG_PLACE_HOST_MPI
    uint64_t mg_board_load(const uint64_t *p) nogil
    void mg_board_store(uint64_t *p, uint64_t v) nogil
    int mg_board_post(mg_board *b, int coll, int placement) nogil

PMPI_HOST_UNPOSTED, PMPI_HOST_HANDLER = MGI_HOST_UNPOSTED, MGI_HOST_HANDLER  # the host rule's answers

cdef struct _PmpiCall:
    int coll              # the MG_* code; -1: not an engine collective
    int send, recv        # parameter indices of the buffers (send -1: Bcast's one buffer is recv)
    int sbit, rbit        # their bits in the interposer's device mask
    int scount, rcount    # of the counts (Allgather's two; the others' one count, twice)
    int stype, rtype      # of the datatypes (likewise)
    int op, root, comm    # -1: none

cdef enum:
    _PMPI_MAX_FUNCTIONS = 256
cdef _PmpiCall _pmpi_table[_PMPI_MAX_FUNCTIONS]  # by the interposer's function index
cdef int _pmpi_nfunctions = 0
cdef dict _pmpi_comms = None     # communicator handle -> (mpigpu's wrapper, its state): the handler's dict
cdef dict _pmpi_types = None     # predefined datatype handle -> dtype code
cdef object _pmpi_unsettled = None # the agreements with undecided non-blocking calls (mpigpu._state.undecided)
cdef object _pmpi_fail = None      # (function index, wrapper, exception) -> the MPI error code it returns
cdef int _pmpi_comm_bits = 64, _pmpi_type_bits = 64, _pmpi_op_bits = 64
cdef int _pmpi_err_other = 0       # MPI.ERR_OTHER of the MPI below
cdef unsigned long long _pmpi_count = 0  # calls this entry ran
cdef unsigned long long _pmpi_host_count = 0  # host-buffer calls it posted for the library below
cdef object _pmpi_host_rule = None  # (function index, communicator) -> what its host call needs (engine_entry.h)
cdef dict _pmpi_host_rules = {}     # (communicator class, function index) -> that answer


def bind_pmpi_entry(table, comms, types, unsettled, fail, handle_bits, err_other, host_rule):
    """Gives the interposer's entry what it reads (see the declarations above): `table` one row per
    function index, (coll, send, recv, sbit, rbit, scount, rcount, stype, rtype, op, root, comm) or None
    (coll -1 and only comm set: a function whose host-buffer calls `host_rule` rules); `handle_bits`
    (communicator, datatype, op) the bits of the MPI's handles; `fail` never raises."""
    global _pmpi_nfunctions, _pmpi_comms, _pmpi_types, _pmpi_unsettled, _pmpi_fail, _pmpi_host_rule
    global _pmpi_comm_bits, _pmpi_type_bits, _pmpi_op_bits, _pmpi_err_other
    cdef int i
    if len(table) > _PMPI_MAX_FUNCTIONS:
        raise ValueError(f'the interposer has {len(table)} functions; its entry takes {_PMPI_MAX_FUNCTIONS}')
    _pmpi_nfunctions = 0
    for i in range(len(table)):
        row = table[i] if table[i] is not None else (-1,) * 12
        _pmpi_table[i].coll, _pmpi_table[i].send, _pmpi_table[i].recv = row[0], row[1], row[2]
        _pmpi_table[i].sbit, _pmpi_table[i].rbit = row[3], row[4]
        _pmpi_table[i].scount, _pmpi_table[i].rcount = row[5], row[6]
        _pmpi_table[i].stype, _pmpi_table[i].rtype = row[7], row[8]
        _pmpi_table[i].op, _pmpi_table[i].root, _pmpi_table[i].comm = row[9], row[10], row[11]
    _pmpi_comms, _pmpi_types, _pmpi_unsettled = comms, types, unsettled
    _pmpi_host_rule = host_rule
    _pmpi_host_rules.clear()
    _pmpi_fail, _pmpi_err_other = fail, err_other
    _pmpi_comm_bits, _pmpi_type_bits, _pmpi_op_bits = handle_bits
    _pmpi_nfunctions = len(table)


def pmpi_entry_address():
    """The entry's address, for the interposer (mpigpu_pmpi_set_engine)."""
    return <uintptr_t>&_pmpi_entry


def pmpi_entry_calls():
    """How many calls below Python the entry ran."""
    return _pmpi_count


def pmpi_entry_host_calls():
    """How many host-buffer calls below Python were posted for the library below: by the entry, and by the
    interposer from the routes the entry kept."""
    return _pmpi_host_count + _host_routes.posts


def pmpi_entry_host_fast_calls():
    """Of those, how many the interposer posted from the routes the entry kept, with no GIL."""
    return _host_routes.posts


def pmpi_handoff_end():
    """The handler's call is over: a verdict the entry handed it (_fast.pxi) is no longer waited for."""
    if _pmpi_handoffs:
        _pmpi_end_handoff()


cdef inline object _pmpi_handle(intptr_t word, int bits):
    """A handle word as mpi4py writes the handle (the handler's rule: MPICH's C int sign-extended to an
    unsigned 64-bit value, Open MPI's pointer as is)."""
    cdef uint64_t w = <uint64_t><uintptr_t>word, m
    if bits < 64:
        m = ((<uint64_t>1) << bits) - 1
        w &= m
        if (w >> (bits - 1)) & 1:
            w |= ~m
    return w


cdef inline int _pmpi_int(intptr_t word) noexcept:
    """An int parameter (the word's low 32 bits, as C passed them)."""
    return <int><uint32_t><uintptr_t>word


cdef inline bint _pmpi_in_place(intptr_t word) noexcept:
    """MPI_IN_PLACE: Open MPI's (void *)1, MPICH's (void *)-1."""
    return word == 1 or word == -1


cdef int _pmpi_entry(int fid, const intptr_t *args, unsigned mask, const int *ordinals) noexcept with gil:
    """The call of function `fid` with parameter words `args` (mask: bit b where its b-th buffer is device
    memory, ordinals[b] its device, as the interposer asked the driver): MPI_SUCCESS or an MPI error code
    once run here, MGI_ENTRY_LOWER for a host-buffer call posted for the peers, MGI_ENTRY_HANDLER where the
    handler must take it."""
    global _pmpi_count
    cdef _PmpiCall f
    cdef Team team
    cdef uintptr_t sp = 0, rp = 0
    cdef Py_ssize_t count = 0, own = 0, sc = 0, rc = 0
    cdef int rd = -1, code = 0, root = 0, current = -1, n, rank, scnt, rcnt, algo = MG_ALGO_AUTO, nchannels = 0
    cdef bint in_place, off_root, one_buffer
    # the routes' epoch before anything is read: what _pmpi_host keeps is of this epoch, so a change of
    # the routes while it reads (another thread, while it waited without the GIL) leaves it unused
    cdef uint64_t epoch = mg_board_load(_host_epoch)
    if fid < 0 or fid >= _pmpi_nfunctions or _pmpi_comms is None or _entry_ops is None:
        return MGI_ENTRY_HANDLER
    f = _pmpi_table[fid]
    if _pmpi_unsettled:
        return MGI_ENTRY_HANDLER
    if mask == 0:
        return _pmpi_host(fid, f.coll, args[f.comm], epoch) if f.comm >= 0 else MGI_ENTRY_HANDLER
    if f.coll < 0:
        return MGI_ENTRY_HANDLER
    try:  # reading the call: nothing has happened yet, so anything unusual is the handler's
        kept = _pmpi_comms.get(_pmpi_handle(args[f.comm], _pmpi_comm_bits))
        if kept is None:
            return MGI_ENTRY_HANDLER
        comm, st = kept
        t = st.team  # None once the communicator was freed (its state released): the handler makes a new wrapper
        if type(t) is not Team:  # none yet, across nodes (the hierarchical path), the CPU tests' fake team
            return MGI_ENTRY_HANDLER
        team = <Team>t
        if team.t == NULL:
            return MGI_ENTRY_HANDLER
        n, rank = team.nranks, team.rank
        rd = _pmpi_types.get(_pmpi_handle(args[f.rtype], _pmpi_type_bits), -1)
        if rd < 0:
            return MGI_ENTRY_HANDLER
        if f.op >= 0:
            code = _entry_ops.get(_pmpi_handle(args[f.op], _pmpi_op_bits), -1)
            if code < 0 or not mg_supports(rd, code):
                return MGI_ENTRY_HANDLER
        root = _pmpi_int(args[f.root]) if f.root >= 0 else 0
        if root < 0 or root >= n:
            return MGI_ENTRY_HANDLER
        in_place = f.send >= 0 and _pmpi_in_place(args[f.send])
        off_root = f.coll == MG_REDUCE and rank != root
        one_buffer = in_place or f.coll == MG_BCAST
        if off_root and in_place:
            return MGI_ENTRY_HANDLER  # MPI_IN_PLACE off the root: the handler's call raises
        if f.coll == MG_ALLGATHER and not in_place and _pmpi_types.get(
                _pmpi_handle(args[f.stype], _pmpi_type_bits), -1) != rd:
            return MGI_ENTRY_HANDLER
        scnt, rcnt = _pmpi_int(args[f.scount]), _pmpi_int(args[f.rcount])
        if rcnt <= 0 or (scnt <= 0 and not in_place):  # (in place, MPI ignores an Allgather's sendcount)
            return MGI_ENTRY_HANDLER  # zero counts (rare) and negative ones (errors) on the handler's path
        # the elements of each buffer, as the fast path reads them from arrays (geometry's inputs)
        if f.coll == MG_REDUCE_SCATTER_BLOCK:
            sc, rc = <Py_ssize_t>n * rcnt, (<Py_ssize_t>n * rcnt if in_place else rcnt)
        elif f.coll == MG_ALLGATHER:
            sc, rc = scnt, <Py_ssize_t>n * rcnt
        else:
            sc = rc = rcnt
        if geometry(f.coll, n, rank, not one_buffer, sc, not off_root, rc, one_buffer, &count, &own) != GEOMETRY_OK:
            return MGI_ENTRY_HANDLER
        # every buffer the call reads or writes here is device memory on the team's GPU (the interposer
        # asked the driver; a second question would cost 0.1-0.2 us a buffer), which is current
        if not off_root and ordinals[f.rbit] != team.device:
            return MGI_ENTRY_HANDLER
        if not one_buffer and ordinals[f.sbit] != team.device:
            return MGI_ENTRY_HANDLER
        if mg_get_device(&current) != 0 or current != team.device:
            return MGI_ENTRY_HANDLER
        rp = 0 if off_root else <uintptr_t>args[f.recv]
        sp = rp + <uintptr_t>(own * _SIZES[rd]) if one_buffer else <uintptr_t>args[f.send]
        if (sp | rp) % <uintptr_t>_ALIGN[rd]:
            return MGI_ENTRY_HANDLER
        if team.nranks != 1:
            cfg = _entry_config
            algo, nchannels = _entry_algos.get(cfg.algo, MG_ALGO_AUTO), cfg.nchannels
    except BaseException:
        return MGI_ENTRY_HANDLER
    try:  # the call: agreed with the peers and run (on the legacy default stream: a C caller's work is done)
        if _run_read(team, f.coll, algo, rd, code, sp, rp, count, root, in_place, nchannels, -1, 0) == 0:
            board = team.board
            if type(board) is Board and (<Board>board).has_stash():
                _pmpi_begin_handoff(<Board>board)  # agreed on another path: the handler's call takes the verdict
            return MGI_ENTRY_HANDLER
        _pmpi_count += 1
        return 0
    except BaseException as exc:
        err = exc
    if isinstance(err, DeviceError):
        try:
            err = _entry_failed(st, f.coll, err)  # the mpigpu.Error the same call from Python raises
        except BaseException as exc:
            err = exc
    return _pmpi_error(fid, comm, err)


cdef int _pmpi_host(int fid, int coll, intptr_t comm_word, uint64_t epoch) noexcept:
    """A host-buffer call of function `fid` (an engine collective's code `coll`, else -1): posted for the
    communicator's peers as mpigpu's method of that name posts it (its board, or nothing to post),
    MGI_ENTRY_LOWER; MGI_ENTRY_HANDLER where the handler must see it (a communicator it has not seen or
    that was released, a post that needs Python: several nodes, a board refusing it; a function whose
    method does more than post: receives, methods of their own)."""
    global _pmpi_host_count
    cdef int rule
    try:
        kept = _pmpi_comms.get(_pmpi_handle(comm_word, _pmpi_comm_bits))
        if kept is None:
            return MGI_ENTRY_HANDLER
        st = kept[1]
        if st.released:  # the handle now names another communicator: the handler makes its wrapper
            return MGI_ENTRY_HANDLER
        if coll < 0:
            key = (type(kept[0]), fid)
            got = _pmpi_host_rules.get(key)
            if got is None:
                got = _pmpi_host_rules[key] = _pmpi_host_rule(fid, kept[0])
            rule = got
            if rule == MGI_HOST_HANDLER:
                return MGI_ENTRY_HANDLER
            if rule == MGI_HOST_UNPOSTED:
                hook = st.host_hook
                if hook is None or type(hook) is Board:
                    _host_keep(epoch, comm_word, hook, fid, MGI_HOST_UNPOSTED)
                mg_count(&_pmpi_host_count)
                return MGI_ENTRY_LOWER
            coll = rule
        hook = st.host_hook
        if hook is None or (type(hook) is Board and (<Board>hook).post_host(coll) == 0):
            _host_keep(epoch, comm_word, hook, fid, coll)
            mg_count(&_pmpi_host_count)
            return MGI_ENTRY_LOWER
    except BaseException:
        pass
    return MGI_ENTRY_HANDLER


# Where a communicator's host-buffer calls go, kept in C (pmpi/host_routes.h) for the interposer, which posts
# them in the call's wrapper with no GIL and no Python: the GIL, the dict lookups and the attribute reads of
# _pmpi_host cost 0.3-0.9 us a call (docs/benchmarks.md, "Host buffers below Python without the GIL"). A
# slot is a communicator's handle word, the board its host calls are posted on (NULL: nothing to post) and,
# per function, what the call posts (a collective code), MGI_HOST_UNPOSTED, or MGI_HOST_UNKNOWN (asked of
# Python first). _pmpi_host fills it, under the GIL, only where its own answer was to post on a Board or
# nothing; the slot holds the routes' epoch of that moment (_board.pyx) and is used only while the epoch
# has not moved since.
cdef extern from "host_routes.h":
    enum:
        MGI_HOST_SLOTS
        MGI_HOST_UNKNOWN
        MGI_HOST_ROUTES_VERSION
    ctypedef struct mgi_host_slot:
        uint64_t epoch
        intptr_t comm
        mg_board *board
        signed char post[1]  # (MGI_HOST_FUNCTIONS: memset by sizeof)
    ctypedef struct mgi_host_routes:
        uint32_t size, version
        const uint64_t *epoch
        unsigned long long posts
        mgi_host_slot slots[1]  # (MGI_HOST_SLOTS)

cdef mgi_host_routes _host_routes
_host_routes.size, _host_routes.version = sizeof(mgi_host_routes), MGI_HOST_ROUTES_VERSION
_host_routes.epoch = routes_epoch()
cdef PyObject *_host_owners[MGI_HOST_SLOTS]  # slot i's Board, not freed while the slot points into it (its
                                             # mapping is closed only after its communicator's release moved
                                             # the epoch)
cdef int _host_next = 0          # the slot taken for the next communicator
cdef uint64_t *_host_epoch = routes_epoch()


def pmpi_host_routes_address():
    """The address of the routes of host-buffer calls, for the interposer (mpigpu_pmpi_set_host_routes)."""
    return <uintptr_t>&_host_routes


cdef void _host_keep(uint64_t e, intptr_t comm_word, object hook, int fid, int post) noexcept:
    """With the GIL: function `fid`'s host calls on this communicator post `post` (a collective code or
    MGI_HOST_UNPOSTED) on `hook` (a Board, or None: nothing to post), as _pmpi_host found in epoch `e`
    (read before it looked; a slot of an epoch that has moved on since is never used)."""
    global _host_next
    cdef mgi_host_slot *s = NULL
    cdef mg_board *board = &(<Board>hook).b if hook is not None else NULL
    cdef int i, at = -1
    for i in range(MGI_HOST_SLOTS):
        if _host_routes.slots[i].comm == comm_word and _host_routes.slots[i].epoch != 0:
            at = i
            break
    if at >= 0 and _host_routes.slots[at].epoch == e and _host_routes.slots[at].board == board:
        _host_routes.slots[at].post[fid] = <signed char>post
        return
    if at < 0:
        at = _host_next
        _host_next = (_host_next + 1) % MGI_HOST_SLOTS
    s = &_host_routes.slots[at]
    mg_board_store(&s.epoch, 0)
    mg_fence_release()
    Py_XDECREF(_host_owners[at])
    _host_owners[at] = NULL
    if hook is not None:
        Py_INCREF(hook)
        _host_owners[at] = <PyObject *>hook
    s.comm, s.board = comm_word, board
    memset(s.post, MGI_HOST_UNKNOWN, sizeof(s.post))
    s.post[fid] = <signed char>post
    mg_board_store(&s.epoch, e)


cdef int _pmpi_error(int fid, object comm, object exc) noexcept:
    """exc as the MPI error code the handler gives a failed call (through the communicator's handler)."""
    try:
        return _pmpi_fail(fid, comm, exc)
    except BaseException:  # (it does not raise; an exception cannot cross back into the C caller)
        return _pmpi_err_other
