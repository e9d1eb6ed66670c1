"""mpigpu's subclasses of mpi4py's other classes that take buffers: Message (matched receives), Datatype
(Pack, Unpack), Op (Reduce_local), File (reads and writes) and Win (RMA origin buffers).

As with communicators, host buffers go to mpi4py untouched and device buffers take the mirrored path
(methods generated from mpi4py's signatures by mpigpu/_face/methods.py), except where a call's buffer must
outlive it: an RMA operation's origin buffer is MPI's until the epoch's synchronization, so `Win` keeps
its mirrors until then and copies results back there; window memory itself must be host memory.
mpi4py makes objects of the class a method is called on, so a datatype derived from one of these
(`Create_vector`, `Dup` ...) and a window or file opened through these classes is one of these too.
"""
import ctypes

from mpi4py import MPI

from .. import _cuda
from . import methods as _methods, pickling as _pickle
from .._base import plain as _plain
from .._ext._intake import is_device
from .._paths import mirrored, p2p
from .._paths.support import packed
from .._state import requests
from .._paths.mirrored import IN, INOUT, OUT
from .._state.comm_state import local_state, state_of
from ..errors import BufferArgumentError


class _Constant:
    """mpigpu's objects standing for mpi4py's module constants (MPI.INT, MPI.SUM in python -m mpigpu):
    their safe free leaves them alone, as mpi4py's does its own; fromhandle makes mpigpu's class."""
    _mg_constant = False

    def free(self):
        if not self._mg_constant:
            super().free()

    @classmethod
    def fromhandle(cls, handle):
        plain = next(k for k in cls.__mro__ if k.__module__.startswith('mpi4py'))
        return cls(plain.fromhandle.__func__(plain, handle))


def constant(obj):
    """Marks one of mpigpu's objects as standing for an mpi4py constant; returns it."""
    obj._mg_constant = True
    return obj


def _null(obj, null):
    """Sets `obj`'s handle to that of `null` (a consumed message) without freeing anything."""
    ctypes.memmove(MPI._addressof(obj), MPI._addressof(null), MPI._sizeof(type(null)))


class Message(MPI.Message, metaclass=_plain.StandsIn):
    """A matched-probe message (Mprobe, Improbe, Message.Probe, Message.Iprobe) that a device buffer
    can receive. On a communicator whose senders may send GPU-to-GPU headers, a message of a header's
    size was received at the probe (`_kept`), and the receive copies the payload from the sender's GPU.
    Its methods also take mpi4py's own messages (mpi4py.util.pkl5 calls MPI.Message.Recv on them)."""
    stands_for = MPI.Message
    _state = None
    _kept = None

    @classmethod
    def Probe(cls, comm, source=MPI.ANY_SOURCE, tag=MPI.ANY_TAG, status=None):
        return message(comm, *p2p.matched_probe(comm, source, tag, status, True))

    @classmethod
    def Iprobe(cls, comm, source=MPI.ANY_SOURCE, tag=MPI.ANY_TAG, status=None):
        return message(comm, *p2p.matched_probe(comm, source, tag, status, False))

    def Recv(self, buf, status=None):
        kept = getattr(self, '_kept', None)
        if kept is None and (buf is None or not is_device(buf)):
            return _plain.Message.Recv(self, buf, status)
        st = getattr(self, '_state', None) or local_state()
        if kept is not None:
            self._kept = None
        p2p.matched_recv(st, 'Message.Recv', self if kept is None else None, kept, buf, status)
        _null(self, MPI.MESSAGE_NULL)

    def Irecv(self, buf):
        if getattr(self, '_kept', None) is not None:
            status = MPI.Status()
            self.Recv(buf, status)
            return requests.completed(status)
        if buf is not None and is_device(buf):
            st = getattr(self, '_state', None) or local_state()
            return mirrored.start(st, 'Message.Irecv', lambda b: _plain.Message.Irecv(self, b),
                                  [(buf, OUT)], receive=True)
        return _plain.Message.Irecv(self, buf)


def message(comm, msg, kept):
    """The Message of a matched probe on `comm` (None when Improbe found none)."""
    if msg is None and kept is None:
        return None
    m = Message(msg) if msg is not None else Message()
    m._state, m._kept = state_of(comm), kept
    if msg is not None:
        _null(msg, MPI.MESSAGE_NULL)  # ours holds the handle now
    return m


class Datatype(_Constant, MPI.Datatype):
    """An `mpi4py.MPI.Datatype` whose Pack and Unpack take device buffers: packed on the GPU where both
    buffers are on one, through host mirrors otherwise (and for Pack_external's representation)."""

    def Pack(self, inbuf, outbuf, position, comm):
        if is_device(inbuf) or is_device(outbuf):
            st = local_state()
            done = packed.pack(st, self, inbuf, outbuf, position)
            if done is not None:
                return done
            return mirrored.run(st, 'Datatype.Pack', lambda i, o: MPI.Datatype.Pack(self, i, o, position, comm),
                                [(inbuf, IN), (outbuf, INOUT)])
        return MPI.Datatype.Pack(self, inbuf, outbuf, position, comm)

    def Unpack(self, inbuf, position, outbuf, comm):
        if is_device(inbuf) or is_device(outbuf):
            st = local_state()
            done = packed.unpack(st, self, inbuf, position, outbuf)
            if done is not None:
                return done
            return mirrored.run(st, 'Datatype.Unpack', lambda i, o: MPI.Datatype.Unpack(self, i, position, o, comm),
                                [(inbuf, IN), (outbuf, INOUT)])
        return MPI.Datatype.Unpack(self, inbuf, position, outbuf, comm)

    def __reduce__(self):
        return _pickle.by_name(self, _DATATYPE_NAMES) or super().__reduce__()


class Op(_Constant, MPI.Op, metaclass=_plain.StandsIn):
    """An `mpi4py.MPI.Op` whose Reduce_local takes device buffers."""
    stands_for = MPI.Op

    def __reduce__(self):
        return _pickle.by_name(self, _OP_NAMES) or super().__reduce__()


class File(_Constant, MPI.File, metaclass=_plain.StandsIn):
    """An `mpi4py.MPI.File` whose reads and writes take device buffers."""
    stands_for = MPI.File

    def __reduce__(self):
        return _pickle.by_name(self, _FILE_NAMES) or super().__reduce__()


# RMA operations whose origin buffers MPI may use until the epoch's synchronization, and how: IN
# buffers are copied at the call, OUT ones back at the synchronization.
_RMA = {'Put': ('origin',), 'Get': ('origin',), 'Accumulate': ('origin',),
        'Get_accumulate': ('origin', 'result'), 'Fetch_and_op': ('origin', 'result'),
        'Compare_and_swap': ('origin', 'compare', 'result')}
# Synchronizations that complete the RMA operations of this rank (all of them, or those towards one
# target rank: their first argument).
_COMPLETES_ALL = ('Fence', 'Complete', 'Unlock_all', 'Flush_all', 'Flush_local_all')
_COMPLETES_TARGET = ('Unlock', 'Flush', 'Flush_local')
# The RMA operations not yet completed, per window handle: [(target rank, mirrors)]. By handle, not by
# object: a window's operations and its synchronization may come through different objects (a Python
# caller's Win and the one the interposer's handler keeps for a C caller's calls on the same window).
_pending_by_window = {}


class Win(_Constant, MPI.Win, metaclass=_plain.StandsIn):
    """An `mpi4py.MPI.Win` whose RMA operations take device origin buffers: each keeps its host
    mirror until the synchronization that completes it (Fence, Complete, Unlock, Flush ...), where
    results are copied back. Window memory must be host memory (MPI.Win.Allocate gives such)."""
    stands_for = MPI.Win

    def __reduce__(self):
        return _pickle.by_name(self, _WIN_NAMES) or super().__reduce__()

    @classmethod
    def Create(cls, memory, disp_unit=1, info=MPI.INFO_NULL, comm=MPI.COMM_SELF):
        if memory is not None and memory is not MPI.BOTTOM and is_device(memory):
            raise BufferArgumentError('Win.Create', 'device memory is not supported as window memory: other ranks read '
                        'and write it through MPI (use host memory, e.g. MPI.Win.Allocate)', arg='memory',
                        rank=local_state().rank, error_class=MPI.ERR_BUFFER)
        return super().Create(memory, disp_unit, info, comm)

    def _pending(self):
        return _pending_by_window.setdefault(self.handle, [])

    def _complete(self, target=None):
        """Copies the results of the completed operations (towards `target`, or all) back and lets go
        of their mirrors."""
        pending = self._pending()
        keep = []
        st = local_state()
        try:
            with _cuda.errors_as('Win', st.rank):
                for op_target, mirrors in pending:
                    if target is not None and op_target != target:
                        keep.append((op_target, mirrors))
                        continue
                    for m in mirrors:
                        m.copy_out(st)
        finally:
            for op_target, mirrors in pending:
                if (op_target, mirrors) not in keep:
                    for m in mirrors:
                        m.release()
            pending[:] = keep
            if not keep:
                _pending_by_window.pop(self.handle, None)


def _rma(name, base):
    """An RMA operation whose device buffers are mirrored until their epoch completes."""
    import inspect
    params = [p for p in inspect.signature(base).parameters if p != 'self']
    bufs = _RMA[name]

    def method(self, *args, **kwargs):
        bound = dict(zip(params, args), **kwargs)
        if not any(bound.get(b) is not None and is_device(bound[b]) for b in bufs):
            return base(self, *args, **kwargs)
        st = local_state()
        items = [(bound.get(b), _methods.role(name, b)) for b in bufs]
        _cuda.require(name, st.rank)
        with _cuda.errors_as(name, st.rank):
            hosts, mirrors = mirrored.mirror_all(st, name, items, name != 'Put' and name != 'Get', pooled=True)
        try:
            bound.update(zip(bufs, hosts))
            result = base(self, **bound)
        except BaseException:
            for m in mirrors:
                m.release()
            raise
        self._pending().append((bound.get('target_rank'), mirrors))
        return result
    method.__name__ = method.__qualname__ = name
    method.__doc__ = base.__doc__
    return method


def _completing(name, base, per_target):
    def method(self, *args, **kwargs):
        result = base(self, *args, **kwargs)
        if _pending_by_window.get(self.handle):
            self._complete(args[0] if per_target and args else kwargs.get('rank') if per_target else None)
        return result
    method.__name__ = method.__qualname__ = name
    method.__doc__ = base.__doc__
    return method


def _freeing(base):
    """Free: a window freed with operations still pending (MPI calls that erroneous) lets go of their host
    copies without copying back, so a later window on the same handle never writes into them."""
    def Free(self):
        for _, mirrors in _pending_by_window.pop(self.handle, ()):
            for m in mirrors:
                m.release()
        return base(self)
    Free.__doc__ = base.__doc__
    return Free


Win.Free = _freeing(MPI.Win.Free)
for _name in _RMA:
    setattr(Win, _name, _rma(_name, getattr(MPI.Win, _name)))
for _name in _COMPLETES_ALL + _COMPLETES_TARGET:
    setattr(Win, _name, _completing(_name, getattr(MPI.Win, _name), _name in _COMPLETES_TARGET))

for _cls in (Message, Datatype, Op, File, Win):
    _methods.install(_cls, local_state)

# The names of mpi4py's predefined datatypes and ops (pickled by name).
_DATATYPE_NAMES = tuple(n for n in dir(MPI) if type(getattr(MPI, n)) is MPI.Datatype)
_OP_NAMES = tuple(n for n in dir(MPI) if type(getattr(MPI, n)) is MPI.Op)
_WIN_NAMES = tuple(n for n in dir(MPI) if type(getattr(MPI, n)) is MPI.Win)
_FILE_NAMES = tuple(n for n in dir(MPI) if type(getattr(MPI, n)) is MPI.File)
