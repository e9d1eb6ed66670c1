# The five engine collectives' fast path: the common call read, agreed and run in one Cython call
# (included by _device.pyx).

# ---- fast path -----------------------------------------------------------------------------------
# The common call (arrays as _arrays.pxi reads them, types and counts that match) is handled here
# without Python-level parsing. Anything else returns 0 and takes the general path
# (mpigpu/_paths/plan.py over mpigpu/_describe/call.py), which also produces the precise error messages.

# A pointer less aligned than its type takes the general path, which refuses it (mpigpu._describe.call.build).
cdef tuple _ALIGN = ALIGNMENTS


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
