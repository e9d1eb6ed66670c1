# The engine's five blocking collectives as methods of mpigpu's intracommunicators (mpigpu/_face/comm.py puts
# them in its class), written in Cython so that the common call (device arrays, the device team up)
# goes from the method to the CUDA layer's fast entry with no Python frame in between: a Python method
# there cost 0.3-0.6 us per call, most of what a one-rank call trailed NCCL by (docs/benchmarks.md,
# "One rank"). They route as the Python methods did: host buffers to mpi4py untouched (once the call is
# posted for the ranks that may pass device buffers, mpigpu/_state/agree.py: a store into the node's
# placement board), `stream=` calls to the stream path, device buffers to the fast entry, else the
# general path (mpigpu._paths.plan.Plan).
from cpython.pycapsule cimport PyCapsule_GetPointer, PyCapsule_IsValid
from cpython.pyport cimport PY_SSIZE_T_MAX
from mpi4py import MPI

from mpigpu._ext._board cimport Board
from mpigpu._ext._intake cimport any_device
from mpigpu._base import plain as _plain
from mpigpu._base.codes import Coll

ctypedef int (*entry_fn)(object comm, int coll, object sendbuf, object recvbuf, object op, int root,
                         Py_ssize_t stream) except -1

cdef int _ALLREDUCE = Coll.ALLREDUCE, _BCAST = Coll.BCAST, _RSB = Coll.REDUCE_SCATTER_BLOCK
cdef int _REDUCE = Coll.REDUCE, _ALLGATHER = Coll.ALLGATHER
cdef object _SUM = MPI.SUM
cdef object _host_allreduce = _plain.Intracomm.Allreduce, _host_bcast = _plain.Intracomm.Bcast
cdef object _host_rsb = _plain.Intracomm.Reduce_scatter_block, _host_reduce = _plain.Intracomm.Reduce
cdef object _host_allgather = _plain.Intracomm.Allgather

cdef entry_fn _entry_c = NULL  # the CUDA layer's fast entry (_device.pyx), called in C
cdef object _entry_py = None   # else a Python one (the CPU tests' fake layer)
cdef object _general = None    # (comm, name, coll, sendbuf, recvbuf, op, root) -> the general path's result
cdef object _state_key = None  # a communicator's state in its __dict__ (mpigpu._state.comm_state)
cdef object _host_slow = None  # (comm, coll, nonblocking, behind): posts a host call the slow way (mpigpu._state.agree)
cdef object _unsettled = ()    # the agreements with undecided non-blocking calls (mpigpu._state.undecided.unsettled)
cdef object _settle = None     # (comm): has them decided before another collective (mpigpu._state.comm_state.settle_before)
cdef object _settle_all = None # (): has every one decided before an engine call (mpigpu._state.comm_state.settle_all)
cdef object _follow = None     # (comm, name, start): a non-blocking call made after them (mpigpu._state.comm_state.follow)
cdef object _host_barrier = _plain.Comm.Barrier, _host_ibarrier = _plain.Comm.Ibarrier

ENTRY_CAPSULE = b'mpigpu.fast_entry'


def bind(entry, general, state_key, host_slow, unsettled, settle, settle_all, follow):
    """What the methods call: `entry` the fast path (a capsule named ENTRY_CAPSULE holding the C
    function, or a Python callable with its arguments), `general` the general path, the key of a
    communicator's state, `host_slow` the posting of a host call without a board at hand, and the set
    of agreements with undecided calls with what decides a communicator's (`settle`) and all of them
    (`settle_all`), and what makes a non-blocking call after them (`follow`)."""
    global _entry_c, _entry_py, _general, _state_key, _host_slow, _unsettled, _settle, _settle_all, _follow
    _unsettled, _settle, _settle_all, _follow = unsettled, settle, settle_all, follow
    if PyCapsule_IsValid(entry, ENTRY_CAPSULE):
        _entry_c, _entry_py = <entry_fn>PyCapsule_GetPointer(entry, ENTRY_CAPSULE), None
    else:
        _entry_c, _entry_py = NULL, entry
    _general, _state_key, _host_slow = general, state_key, host_slow


cdef inline int _note_host(object comm, int coll, bint nonblocking) except -1:
    """Posts this rank's host-buffer call of `coll` on `comm` for its peers (mpigpu/_state/agree.py): nothing
    on one rank, a store into the node's board, else the slow way (the first call's setup, several
    nodes). Never waits for a peer (but at the setup, or a whole ring of calls ahead of the slowest)."""
    cdef dict d
    try:
        d = comm.__dict__
    except AttributeError:  # mpi4py's own objects: their state is found the slow way
        d = None
    st = d.get(_state_key) if d is not None else None
    if st is not None:
        hook = st.host_hook
        if hook is None:
            return 0
        if type(hook) is Board:
            if (<Board>hook).post_host(coll) == 0:
                return 0
            _host_slow(comm, coll, nonblocking, True)  # the slowest rank stayed a whole ring behind: raises
    _host_slow(comm, coll, nonblocking, False)
    return 0


def note_host(comm, int coll, bint nonblocking=False):
    """_note_host for the Python methods (the non-blocking and persistent forms)."""
    _note_host(comm, coll, nonblocking)


cdef inline bint _fast(object comm, int coll, object sendbuf, object recvbuf, object op, int root,
                       Py_ssize_t stream) except -1:
    """True when the fast path ran the call (stream >= 0: enqueued on that stream)."""
    if _unsettled:  # undecided non-blocking calls (any communicator) launch first (mpigpu/_state/undecided.py)
        _settle_all()
    if _entry_c != NULL:
        return _entry_c(comm, coll, sendbuf, recvbuf, op, root, stream) == 1
    return bool(_entry_py(comm, coll, sendbuf, recvbuf, op, root, stream))


cdef Py_ssize_t _handle(object stream):
    """The CUDA stream handle of a `stream=` argument the fast path can take (an int, a CuPy stream's
    .ptr, a PyTorch stream's .cuda_stream), else -1: the stream path checks it and raises."""
    h = stream
    if type(h) is not int:
        h = getattr(stream, 'ptr', None)
        if h is None:
            h = getattr(stream, 'cuda_stream', None)
    if type(h) is not int or h < 0 or h > <object>PY_SSIZE_T_MAX:
        return -1
    return h


cdef inline int _root(object root):
    """`root` as the fast path takes it; -1 (the fast path declines) for anything but an int of C's range:
    the general path raises for it."""
    return root if type(root) is int and -0x7fffffff <= root <= 0x7fffffff else -1


cdef object _on_stream(object comm, int coll, object sendbuf, object recvbuf, object op, object root, object stream):
    cdef Py_ssize_t h = _handle(stream)
    if h >= 0 and _fast(comm, coll, sendbuf, recvbuf, op, _root(root), h):
        return None
    return comm._on_stream(coll, sendbuf, recvbuf, op, root, stream)


cdef object _rank(object comm):
    """This process's rank in `comm` (its state's, else MPI's): mpigpu._face.comm._rank without a Python call,
    which Reduce would make on every call."""
    try:
        st = comm.__dict__.get(_state_key)
    except AttributeError:  # mpi4py's own objects, which these unbound methods may be called on
        st = None
    return st.rank if st is not None else comm.Get_rank()


# ---- the methods (mpi4py's signatures, plus stream=: enqueue on that CUDA stream and return at once,
# as NCCL does; producers must be ordered before it) --------------------------------------------------
def Allreduce(self, sendbuf, recvbuf, op=_SUM, *, stream=None):
    if stream is not None:
        return _on_stream(self, _ALLREDUCE, sendbuf, recvbuf, op, 0, stream)
    if not any_device(sendbuf, recvbuf):
        _note_host(self, _ALLREDUCE, False)
        return _host_allreduce(self, sendbuf, recvbuf, op)
    if _fast(self, _ALLREDUCE, sendbuf, recvbuf, op, 0, -1):
        return None
    return _general(self, 'Allreduce', _ALLREDUCE, sendbuf, recvbuf, op, 0)


def Bcast(self, buf, root=0, *, stream=None):
    if stream is not None:
        return _on_stream(self, _BCAST, None, buf, None, root, stream)
    if not any_device(None, buf):
        _note_host(self, _BCAST, False)
        return _host_bcast(self, buf, root)
    if _fast(self, _BCAST, None, buf, None, _root(root), -1):
        return None
    return _general(self, 'Bcast', _BCAST, None, buf, None, root)


def Reduce_scatter_block(self, sendbuf, recvbuf, op=_SUM, *, stream=None):
    if stream is not None:
        return _on_stream(self, _RSB, sendbuf, recvbuf, op, 0, stream)
    if not any_device(sendbuf, recvbuf):
        _note_host(self, _RSB, False)
        return _host_rsb(self, sendbuf, recvbuf, op)
    if _fast(self, _RSB, sendbuf, recvbuf, op, 0, -1):
        return None
    return _general(self, 'Reduce_scatter_block', _RSB, sendbuf, recvbuf, op, 0)


def Reduce(self, sendbuf, recvbuf, op=_SUM, root=0, *, stream=None):
    rbuf = recvbuf if _rank(self) == root else None  # not significant off the root
    if stream is not None:
        return _on_stream(self, _REDUCE, sendbuf, rbuf, op, root, stream)
    if not any_device(sendbuf, rbuf):
        _note_host(self, _REDUCE, False)
        return _host_reduce(self, sendbuf, recvbuf, op, root)
    if _fast(self, _REDUCE, sendbuf, rbuf, op, _root(root), -1):
        return None
    return _general(self, 'Reduce', _REDUCE, sendbuf, rbuf, op, root)


def Allgather(self, sendbuf, recvbuf, *, stream=None):
    if stream is not None:
        return _on_stream(self, _ALLGATHER, sendbuf, recvbuf, None, 0, stream)
    if not any_device(sendbuf, recvbuf):
        _note_host(self, _ALLGATHER, False)
        return _host_allgather(self, sendbuf, recvbuf)
    if _fast(self, _ALLGATHER, sendbuf, recvbuf, None, 0, -1):
        return None
    return _general(self, 'Allgather', _ALLGATHER, sendbuf, recvbuf, None, 0)


# ---- collectives without buffers: in MPI's order after the undecided non-blocking calls ------------
def Barrier(self):
    if _unsettled:  # a set, empty unless a non-blocking call is undecided (mpigpu/_state/undecided.py)
        _settle(self)
    return _host_barrier(self)


def Ibarrier(self):
    if _unsettled:  # made after the undecided calls, without waiting for them
        return _follow(self, 'Ibarrier', lambda: _host_ibarrier(self))
    return _host_ibarrier(self)
