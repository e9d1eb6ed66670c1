"""mpigpu's communicators: mpi4py's intracommunicator, intercommunicator and topology classes (same
handles) whose buffer methods take GPU arrays.

Host buffers go to mpi4py unchanged (the added cost is a type check per buffer). Device buffers take
the path their method has: the engine's five collectives through a Plan (mpigpu/_paths/plan.py: the device
engine, or host MPI), point-to-point through mpigpu/_paths/p2p.py, every other buffer method through
the mirrored path, generated from mpi4py's signatures (mpigpu/_face/methods.py). Every communicator made
from one of these is one of these too.
"""
from mpi4py import MPI

from . import bsend as _bsend, methods as _methods, pickling as _pickle, objects
from .. import _cuda
from .._base import plain as _plain
from .._state import comm_state as _state
from .._state.undecided import unsettled as _unsettled
from .._base.codes import Coll
from .._ext import _front
from .._ext._intake import any_device, is_device
from .._paths import p2p
from .._paths.engine import fast_entry
from .._paths.plan import Plan
from ..errors import Error

_ANY_SOURCE, _ANY_TAG = MPI.ANY_SOURCE, MPI.ANY_TAG
_ALLREDUCE, _BCAST, _REDUCE_SCATTER_BLOCK, _REDUCE, _ALLGATHER = (
    Coll.ALLREDUCE, Coll.BCAST, Coll.REDUCE_SCATTER_BLOCK, Coll.REDUCE, Coll.ALLGATHER)
_SUM = MPI.SUM


_any_device = any_device  # a collective with a device buffer (else its host buffers go to mpi4py untouched)


def _general(comm, name, coll, sendbuf, recvbuf, op, root):
    """A blocking engine collective on device buffers that the fast path did not take."""
    return Plan(comm, name, coll, sendbuf, recvbuf, op, root).run()


_front.bind(fast_entry(_front.ENTRY_CAPSULE), _general, _state._CACHE, _state.host_call, _unsettled,
            _state.settle_before, _state.settle_all, _state.follow)
_note_host = _front.note_host  # a host-buffer call of an engine collective, posted for the peers
# mpi4py's methods, bound once (the host path's call is then one lookup fewer)
(_Isend, _Issend, _Irsend, _Ibsend, _Irecv, _Send, _Ssend, _Rsend, _Bsend, _Recv, _Sendrecv, _Sendrecv_replace,
 _Recv_init) = (
    _plain.Comm.Isend, _plain.Comm.Issend, _plain.Comm.Irsend, _plain.Comm.Ibsend, _plain.Comm.Irecv, _plain.Comm.Send,
    _plain.Comm.Ssend, _plain.Comm.Rsend, _plain.Comm.Bsend, _plain.Comm.Recv, _plain.Comm.Sendrecv,
    _plain.Comm.Sendrecv_replace, _plain.Comm.Recv_init)


def _rank(comm):
    st = _state.cached(comm)
    return st.rank if st is not None else comm.Get_rank()




def ours(obj):
    """mpigpu's communicator on the same handle as a plain mpi4py one (anything else unchanged)."""
    cls = _OURS.get(type(obj))
    if cls is None or obj == MPI.COMM_NULL:
        return obj
    return cls(obj)


def _ours_in(result):
    """Results of communicator constructors: ours; (comm, request) pairs (Idup) too."""
    if type(result) is tuple:
        return tuple(ours(x) for x in result)
    return ours(result)


def _receives_specially(comm, buf):
    """A host receive that must take kept messages or look for a GPU sender's header (only on a
    communicator whose device team is up). A function, not a method: mpi4py.util.pkl5 calls
    MPI.Comm.Recv with communicators of mpi4py's own classes."""
    st = _state.cached(comm)
    return st is not None and st.team is not None and (bool(p2p.kept_messages(st)) or p2p.host_checked(st, buf))


class _Comm:
    """What every mpigpu communicator adds to its mpi4py class: point-to-point on device buffers,
    communicators and matched-probe messages of its own kind, Free that releases mpigpu's state."""

    Barrier, Ibarrier = _front.Barrier, _front.Ibarrier  # after the undecided calls (mpigpu/_state/agree.py)

    # ---- point-to-point (mpigpu/_paths/p2p.py): GPU to GPU over peer mappings, or staged ----------
    def Isend(self, buf, dest, tag=0):
        if is_device(buf):
            return p2p.isend(self, 'Isend', _plain.Comm.Isend, buf, dest, tag)
        return _Isend(self, buf, dest, tag)

    def Issend(self, buf, dest, tag=0):
        if is_device(buf):
            return p2p.isend(self, 'Issend', _plain.Comm.Issend, buf, dest, tag)
        return _Issend(self, buf, dest, tag)

    def Irsend(self, buf, dest, tag=0):
        if is_device(buf):
            return p2p.isend(self, 'Irsend', _plain.Comm.Irsend, buf, dest, tag)
        return _Irsend(self, buf, dest, tag)

    def Ibsend(self, buf, dest, tag=0):
        if is_device(buf):
            return p2p.isend(self, 'Ibsend', _plain.Comm.Ibsend, buf, dest, tag)
        return _Ibsend(self, buf, dest, tag)

    def Irecv(self, buf, source=_ANY_SOURCE, tag=_ANY_TAG):
        if is_device(buf) or _receives_specially(self, buf):
            return p2p.irecv(self, buf, source, tag)
        return _Irecv(self, buf, source, tag)

    def Send(self, buf, dest, tag=0):
        if is_device(buf):
            return p2p.send(self, 'Send', buf, dest, tag)
        return _Send(self, buf, dest, tag)

    def Ssend(self, buf, dest, tag=0):
        if is_device(buf):
            return p2p.send(self, 'Ssend', buf, dest, tag)
        return _Ssend(self, buf, dest, tag)

    def Rsend(self, buf, dest, tag=0):
        if is_device(buf):
            return p2p.send(self, 'Rsend', buf, dest, tag)
        return _Rsend(self, buf, dest, tag)

    def Bsend(self, buf, dest, tag=0):
        if is_device(buf):
            return p2p.send(self, 'Bsend', buf, dest, tag)
        return _Bsend(self, buf, dest, tag)

    def Recv(self, buf, source=_ANY_SOURCE, tag=_ANY_TAG, status=None):
        if is_device(buf) or _receives_specially(self, buf):
            return p2p.recv(self, buf, source, tag, status)
        return _Recv(self, buf, source, tag, status)

    def Sendrecv(self, sendbuf, dest, sendtag=0, recvbuf=None, source=_ANY_SOURCE, recvtag=_ANY_TAG,
                 status=None):
        if any_device(sendbuf, recvbuf) or _receives_specially(self, recvbuf):
            return p2p.sendrecv(self, sendbuf, dest, sendtag, recvbuf, source, recvtag, status)
        return _Sendrecv(self, sendbuf, dest, sendtag, recvbuf, source, recvtag, status)

    # Receives that take a GPU sender's header in every form (on host mirrors its bytes landed as data)
    def Sendrecv_replace(self, buf, dest, sendtag=0, source=_ANY_SOURCE, recvtag=_ANY_TAG, status=None):
        if is_device(buf) or _receives_specially(self, buf):
            return p2p.sendrecv_replace(self, buf, dest, sendtag, source, recvtag, status)
        return _Sendrecv_replace(self, buf, dest, sendtag, source, recvtag, status)

    def Recv_init(self, buf, source=_ANY_SOURCE, tag=_ANY_TAG):
        if is_device(buf) or _receives_specially(self, buf):
            return p2p.RecvInit.create(self, buf, source, tag)
        return _Recv_init(self, buf, source, tag)

    def Probe(self, source=_ANY_SOURCE, tag=_ANY_TAG, status=None):
        st = _state.cached(self)
        if st is not None and st.control is not None:
            return p2p.probe(self, source, tag, status, True)
        return _plain.Comm.Probe(self, source, tag, status)

    def Iprobe(self, source=_ANY_SOURCE, tag=_ANY_TAG, status=None):
        st = _state.cached(self)
        if st is not None and st.control is not None:
            return p2p.probe(self, source, tag, status, False)
        return _plain.Comm.Iprobe(self, source, tag, status)

    # Matched probes: the message remembers its communicator (a GPU sender's header may arrive).
    def Mprobe(self, source=_ANY_SOURCE, tag=_ANY_TAG, status=None):
        return objects.message(self, *p2p.matched_probe(self, source, tag, status, True))

    def Improbe(self, source=_ANY_SOURCE, tag=_ANY_TAG, status=None):
        return objects.message(self, *p2p.matched_probe(self, source, tag, status, False))

    def Attach_buffer(self, buf):
        return _bsend.attach(_plain.Comm.Attach_buffer, 'Comm.Attach_buffer', buf, self)

    def Detach_buffer(self):
        return _bsend.detach(_plain.Comm.Detach_buffer, self)

    # ---- release and mpigpu extras -----------------------------------------------------------------
    _mg_constant = False  # True for mpigpu's COMM_WORLD and COMM_SELF: constants, as mpi4py's are

    def Free(self):
        """Releases the device team, workspace and staging buffers, then frees the communicator."""
        if _unsettled:
            _state.settle_before(self)  # undecided calls start first (their requests still complete)
        if not getattr(self, '_mg_constant', False) and self not in _PREDEFINED:
            _state.release(self)
        _plain.Comm.Free(self)  # MPI's error for a predefined or null one

    def free(self):
        # mpi4py's safe free leaves its module constants alone (ours too) and only forgets a handle of
        # a predefined or null communicator: that state stays with the constant
        if getattr(self, '_mg_constant', False):  # getattr: pkl5 passes mpi4py's own objects
            return
        if self not in _PREDEFINED:
            _state.release(self)
        _plain.Comm.free(self)

    # mpi4py's class methods that make communicators from handles make its own classes, whatever
    # class they are called on: these give mpigpu's of the same kind (MPI.Comm.f2py(h) under python -m
    # mpigpu included)
    @classmethod
    def fromhandle(cls, handle):
        return ours(_plain.Comm.fromhandle(handle))

    @classmethod
    def fromint(cls, arg, /):
        return ours(_plain.Comm.fromint(arg))

    @classmethod
    def f2py(cls, arg):
        return ours(_plain.Comm.f2py(arg))

    @classmethod
    def Get_parent(cls):
        return ours(_plain.Comm.Get_parent())

    @classmethod
    def Join(cls, fd):
        return ours(_plain.Comm.Join(fd))

    def Revoke(self):
        # ULFM: a revoked communicator's device work ends as an abort does (then MPI revokes it)
        _state.abort(self)
        _plain.Comm.Revoke(self)

    def engine_status(self):
        """'on', 'off: <why>', or 'not set up yet': whether GPU collectives use the device engine."""
        return _state.engine_status(self)

    def agreement_status(self):
        """How this communicator's ranks agree on each collective call's path (one node: a placement
        board in shared memory; several: a board per node and an exchange among the nodes' leaders
        through host MPI; or 'not set up yet')."""
        return _state.agreement_status(self)

    def __reduce__(self):
        # the predefined communicators pickle by name, as mpi4py's do, and come back as mpigpu's
        return _pickle.by_name(self, ('COMM_WORLD', 'COMM_SELF', 'COMM_NULL')) or super().__reduce__()


class Comm(_Comm, MPI.Comm, metaclass=_plain.StandsIn):
    """An `mpi4py.MPI.Comm` whose point-to-point buffer methods accept CUDA device arrays (what
    `MPI.Comm(c)` makes under python -m mpigpu)."""
    stands_for = MPI.Comm


# Every communicator class derives from mpigpu's Comm, as mpi4py's do from its Comm: under python -m
# mpigpu that class is MPI.Comm, which a Cython extension's `MPI.Comm comm` argument checks by the type's
# C-level ancestry, not by isinstance. After the mpi4py class, so that class stays the C base (its
# __new__, which checks a topology's kind); no name of _Comm's is one of those classes' own.


class _EngineCollectives:
    """What an mpigpu intracommunicator adds: the engine's five collectives with MPI semantics and
    their `stream=`, non-blocking and persistent forms. (A mixin, so that each class's mpi4py base
    is its only base with a layout: mpi4py's constructors then check topology kinds, and a program's
    subclass may call MPI.Cartcomm.__new__.)"""

    # ---- the engine's collectives with MPI semantics ------------------------------------------------
    # In Cython (mpigpu/_ext/_front.pyx): host buffers to mpi4py, device buffers to the fast path, else
    # _general or _on_stream below. stream=: for device buffers, enqueue on that CUDA stream and return
    # at once, as NCCL does (the result is there when the stream reaches it; usable inside CUDA graph
    # capture once the communicator's first GPU call has set up its team). Producers must be ordered
    # before it.
    Allreduce, Bcast, Reduce_scatter_block, Reduce, Allgather = (
        _front.Allreduce, _front.Bcast, _front.Reduce_scatter_block, _front.Reduce, _front.Allgather)

    def _on_stream(self, coll, sendbuf, recvbuf, op, root, stream):
        """A stream= call the fast path did not take."""
        name = Coll(coll).mpi_name
        try:
            handle = _cuda.stream_handle(name, _rank(self), stream)
            if not _any_device(sendbuf, recvbuf):
                raise Error(name, 'stream= needs device buffers (host buffers go to MPI, which has no streams)',
                            arg='stream', rank=self.Get_rank(), error_class=MPI.ERR_ARG)
        except Error:
            _state.state_of(self).agreement.refuse(name, coll)  # the peers raise too, rather than wait
            raise
        Plan(self, name, coll, sendbuf, recvbuf, op, root, stream=handle).run(sync=False)
        return None

    # ---- non-blocking and persistent forms: generalized requests (mpigpu/_state/requests.py) -------
    def Iallreduce(self, sendbuf, recvbuf, op=_SUM):
        if _any_device(sendbuf, recvbuf):
            return Plan(self, 'Iallreduce', _ALLREDUCE, sendbuf, recvbuf, op, 0, nonblocking=True).request()
        _note_host(self, _ALLREDUCE, True)
        if _unsettled:  # after this communicator's undecided calls (mpigpu/_state/undecided.py)
            return _state.follow(self, 'Iallreduce', lambda: _plain.Intracomm.Iallreduce(self, sendbuf, recvbuf, op))
        return _plain.Intracomm.Iallreduce(self, sendbuf, recvbuf, op)

    def Ibcast(self, buf, root=0):
        if buf is not None and is_device(buf):
            return Plan(self, 'Ibcast', _BCAST, None, buf, None, root, nonblocking=True).request()
        _note_host(self, _BCAST, True)
        if _unsettled:
            return _state.follow(self, 'Ibcast', lambda: _plain.Intracomm.Ibcast(self, buf, root))
        return _plain.Intracomm.Ibcast(self, buf, root)

    def Ireduce_scatter_block(self, sendbuf, recvbuf, op=_SUM):
        if _any_device(sendbuf, recvbuf):
            return Plan(self, 'Ireduce_scatter_block', _REDUCE_SCATTER_BLOCK, sendbuf, recvbuf, op, 0,
                        nonblocking=True).request()
        _note_host(self, _REDUCE_SCATTER_BLOCK, True)
        if _unsettled:
            return _state.follow(self, 'Ireduce_scatter_block',
                                 lambda: _plain.Intracomm.Ireduce_scatter_block(self, sendbuf, recvbuf, op))
        return _plain.Intracomm.Ireduce_scatter_block(self, sendbuf, recvbuf, op)

    def Ireduce(self, sendbuf, recvbuf, op=_SUM, root=0):
        rbuf = recvbuf if _rank(self) == root else None
        if _any_device(sendbuf, rbuf):
            return Plan(self, 'Ireduce', _REDUCE, sendbuf, rbuf, op, root, nonblocking=True).request()
        _note_host(self, _REDUCE, True)
        if _unsettled:
            return _state.follow(self, 'Ireduce', lambda: _plain.Intracomm.Ireduce(self, sendbuf, recvbuf, op, root))
        return _plain.Intracomm.Ireduce(self, sendbuf, recvbuf, op, root)

    def Iallgather(self, sendbuf, recvbuf):
        if _any_device(sendbuf, recvbuf):
            return Plan(self, 'Iallgather', _ALLGATHER, sendbuf, recvbuf, None, 0, nonblocking=True).request()
        _note_host(self, _ALLGATHER, True)
        if _unsettled:
            return _state.follow(self, 'Iallgather', lambda: _plain.Intracomm.Iallgather(self, sendbuf, recvbuf))
        return _plain.Intracomm.Iallgather(self, sendbuf, recvbuf)

    def Allreduce_init(self, sendbuf, recvbuf, op=_SUM, info=MPI.INFO_NULL):
        if _any_device(sendbuf, recvbuf):
            return Plan(self, 'Allreduce_init', _ALLREDUCE, sendbuf, recvbuf, op, 0).persistent()
        _note_host(self, _ALLREDUCE, False)
        return _plain.Intracomm.Allreduce_init(self, sendbuf, recvbuf, op, info)

    def Bcast_init(self, buf, root=0, info=MPI.INFO_NULL):
        if buf is not None and is_device(buf):
            return Plan(self, 'Bcast_init', _BCAST, None, buf, None, root).persistent()
        _note_host(self, _BCAST, False)
        return _plain.Intracomm.Bcast_init(self, buf, root, info)

    def Reduce_scatter_block_init(self, sendbuf, recvbuf, op=_SUM, info=MPI.INFO_NULL):
        if _any_device(sendbuf, recvbuf):
            return Plan(self, 'Reduce_scatter_block_init', _REDUCE_SCATTER_BLOCK, sendbuf, recvbuf, op,
                        0).persistent()
        _note_host(self, _REDUCE_SCATTER_BLOCK, False)
        return _plain.Intracomm.Reduce_scatter_block_init(self, sendbuf, recvbuf, op, info)

    def Reduce_init(self, sendbuf, recvbuf, op=_SUM, root=0, info=MPI.INFO_NULL):
        rbuf = recvbuf if _rank(self) == root else None
        if _any_device(sendbuf, rbuf):
            return Plan(self, 'Reduce_init', _REDUCE, sendbuf, rbuf, op, root).persistent()
        _note_host(self, _REDUCE, False)
        return _plain.Intracomm.Reduce_init(self, sendbuf, recvbuf, op, root, info)

    def Allgather_init(self, sendbuf, recvbuf, info=MPI.INFO_NULL):
        if _any_device(sendbuf, recvbuf):
            return Plan(self, 'Allgather_init', _ALLGATHER, sendbuf, recvbuf, None, 0).persistent()
        _note_host(self, _ALLGATHER, False)
        return _plain.Intracomm.Allgather_init(self, sendbuf, recvbuf, info)


class Intracomm(_EngineCollectives, MPI.Intracomm, Comm, metaclass=_plain.StandsIn):
    """An `mpi4py.MPI.Intracomm` (same handle) whose buffer methods accept CUDA device arrays."""
    stands_for = MPI.Intracomm


class Intercomm(MPI.Intercomm, Comm, metaclass=_plain.StandsIn):
    """An `mpi4py.MPI.Intercomm` whose buffer methods accept CUDA device arrays (collectives between the
    two groups take the mirrored path; point-to-point is staged)."""
    stands_for = MPI.Intercomm


class Topocomm(_EngineCollectives, MPI.Topocomm, Comm, metaclass=_plain.StandsIn):
    """A topology communicator: its neighbourhood collectives take device arrays (the exchange path
    where every rank brings them, else the mirrored one)."""
    stands_for = MPI.Topocomm


class Cartcomm(_EngineCollectives, MPI.Cartcomm, Comm, metaclass=_plain.StandsIn):
    """An `mpi4py.MPI.Cartcomm` whose buffer methods accept CUDA device arrays."""
    stands_for = MPI.Cartcomm


class Graphcomm(_EngineCollectives, MPI.Graphcomm, Comm, metaclass=_plain.StandsIn):
    """An `mpi4py.MPI.Graphcomm` whose buffer methods accept CUDA device arrays."""
    stands_for = MPI.Graphcomm


class Distgraphcomm(_EngineCollectives, MPI.Distgraphcomm, Comm, metaclass=_plain.StandsIn):
    """An `mpi4py.MPI.Distgraphcomm` whose buffer methods accept CUDA device arrays."""
    stands_for = MPI.Distgraphcomm


_PREDEFINED = (MPI.COMM_NULL, MPI.COMM_SELF, MPI.COMM_WORLD)  # mpi4py's (compared by handle)
_OURS = {MPI.Comm: Comm, MPI.Intracomm: Intracomm, MPI.Intercomm: Intercomm, MPI.Topocomm: Topocomm, MPI.Cartcomm: Cartcomm,
         MPI.Graphcomm: Graphcomm, MPI.Distgraphcomm: Distgraphcomm}


def _constructor(name, base):
    """A communicator constructor whose results (plain mpi4py communicators) become mpigpu's."""
    def method(self, *args, **kwargs):
        if _unsettled:
            _state.settle_before(self)  # a collective: the undecided calls before it first
        return _ours_in(base(self, *args, **kwargs))
    method.__name__ = method.__qualname__ = name
    method.__doc__ = base.__doc__
    return method


def _ordered(name, base):
    """A collective without buffers (Barrier, the pickled collectives) that has the communicator's
    undecided non-blocking calls decided first (MPI's order of collectives; mpigpu/_state/agree.py)."""
    def method(self, *args, **kwargs):
        if _unsettled:
            _state.settle_before(self)
        return base(self, *args, **kwargs)
    method.__name__ = method.__qualname__ = name
    method.__doc__ = base.__doc__
    return method


def _is_classmethod(plain, name):
    return any(isinstance(k.__dict__.get(name), classmethod) for k in plain.__mro__)


# The methods of mpi4py's communicator classes that make communicators: their results become ours
# (mpi4py makes Dup and Split of a subclass's own type; Create_cart, Merge and the like make its own
# classes). Class methods (Create_from_group) make the class they are called on.
_MAKES = ('Dup', 'Dup_with_info', 'Idup', 'Idup_with_info', 'Split', 'Split_type', 'Create', 'Create_group',
          'Create_cart', 'Create_graph', 'Create_dist_graph', 'Create_dist_graph_adjacent', 'Create_intercomm',
          'Merge', 'Accept', 'Connect', 'Spawn', 'Spawn_multiple', 'Sub', 'Shrink', 'Ishrink')
# Collectives without buffer arguments (the generated buffer methods look for undecided calls themselves;
# Barrier and Ibarrier are _front's, in Cython: a Python frame costs a host Barrier 0.3 us).
_ORDERED = ('Barrier_init', 'barrier', 'ibarrier', 'bcast', 'gather', 'scatter', 'allgather',
            'alltoall', 'reduce', 'allreduce', 'scan', 'exscan', 'Agree', 'Disconnect')
for _cls in (Comm, Intracomm, Intercomm, Topocomm, Cartcomm, Graphcomm, Distgraphcomm):
    for _name in _MAKES:
        if hasattr(_cls.stands_for, _name) and not _is_classmethod(_cls.stands_for, _name):
            setattr(_cls, _name, _constructor(_name, getattr(_cls.stands_for, _name)))
    for _name in _ORDERED:
        if hasattr(_cls.stands_for, _name) and _name not in _cls.__dict__:
            setattr(_cls, _name, _ordered(_name, getattr(_cls.stands_for, _name)))
    _methods.install(_cls, _state.state_of)


# mpigpu's predefined communicators (mpigpu.COMM_WORLD; the drop-in puts them under mpi4py's names)
COMM_WORLD = Intracomm(MPI.COMM_WORLD)
COMM_SELF = Intracomm(MPI.COMM_SELF)
COMM_WORLD._mg_constant = COMM_SELF._mg_constant = True
