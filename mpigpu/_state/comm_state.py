"""Per-communicator state for device buffers: the rank's GPU, the device team (or why there is none),
the team's private control communicator, and what each path keeps for this communicator.

It lives in an MPI attribute of the communicator, so every wrapper of one handle shares it, and is
cached in the wrapper's __dict__ for the hot path. `state_of` is the one lookup.
"""
import atexit
import logging
from contextlib import contextmanager

from mpi4py import MPI

from . import agree as _agree, team as _team, undecided as _undecided
from .. import _cuda
from .._base import deadline as _deadline, plain as _plain
from .._ext._board import routes_changed as _routes_changed
from . import requests
from .._base.config import config
from ..errors import CommunicatorBroken, Error

log = logging.getLogger('mpigpu')

_CACHE = '_mg_state'  # the wrapper's __dict__ key of its state


class CommState:
    """Everything mpigpu attaches to one communicator for device buffers."""

    def __init__(self, comm):
        self.comm = comm  # a plain mpi4py communicator on the same handle (no recursion into mpigpu)
        self.rank = comm.Get_rank()
        self.size = comm.Get_size()
        self.device = None      # the rank's GPU on this communicator, bound by its first device call
        self.team = None        # the device team (mpigpu._ext._device.Team), or None
        self.reason = None      # why there is no team (None: not decided yet; '': there is one)
        self.control = None     # private duplicate made with the team: point-to-point replies ride on it
        self.dep_event = None   # orders a second buffer's producer stream before the launch stream
        self.broken = None      # why device calls on this communicator raise at once (a fault, an abort)
        self.released = False   # True once released: its handle may name another communicator since
        self._abandoned = []    # host MPI requests given up on (their buffers must outlive them)
        self._owned = {}        # path state by class (owned): staging buffers, point-to-point matching
        self.agreement = _agree.Agreement(self)  # how the ranks agree on each collective call's path
        # A communicator spanning nodes whose calls are replayed: the fast path's entry into them
        # (mpigpu/_paths/hier/replay.py), else None
        self.hier_replayed = None
        # What a host-buffer call of an engine collective does to post itself (mpigpu/_ext/_front.pyx):
        # None nothing, a Board a store into it, else a Python call (agreement.host).
        self.host_hook = None if self.size == 1 else self.agreement.host
        _routes_changed()  # (a handle the interposer's entry knew may name this communicator now)

    def owned(self, cls):
        """The instance of `cls` this communicator keeps for a path (made on first use as cls(self));
        released with the communicator through its close()."""
        obj = self._owned.get(cls)
        if obj is None:
            obj = self._owned[cls] = cls(self)
        return obj

    def bind_device(self, call, dev):
        """Binds the rank's GPU at the first device call, which sets up the team (collective)."""
        if self.device is None:
            try:
                self.team, self.reason, self.control = _team.setup(self.comm, self.rank, self.size, dev)
            except _deadline.GaveUp as exc:
                self.abandon(exc.pending, exc.why + ' (at the device team setup)')
                raise CommunicatorBroken(call, self.broken, rank=self.rank) from None
            self.device = dev
            self.dep_event = _cuda.with_device(dev, _cuda.event)
            if self.team is not None:
                self.team.board = self.agreement.team_board()  # what the fast path agrees on
        elif dev != self.device:
            raise Error(call, f'buffer is on device {dev} but this rank uses device {self.device} on this '
                        'communicator', arg='buffer', rank=self.rank, error_class=MPI.ERR_BUFFER)

    # ---- faults: a peer that never arrived, an abort ------------------------------------------------
    def check_usable(self, call):
        """Raises at once on a communicator that a fault or an abort has broken."""
        if self.broken is not None:
            raise CommunicatorBroken(call, f'the communicator is broken: {self.broken}', rank=self.rank)

    def failed(self, call, exc):
        """The mpigpu.Error for the CUDA layer's error `exc` in a call on this communicator. A fault of
        the team (peers that never arrived, an abort, a peer's fault) breaks the communicator: this and
        every later device call on it raise, naming the ranks that never joined the call."""
        if not getattr(exc, 'fault', False):
            return Error(call, str(exc), rank=self.rank, error_class=MPI.ERR_OTHER)
        team = self.team
        why = _cuda.fault_reason(exc.code, config.timeout_s) or 'a peer gave up on a call'
        fault = team.fault if team is not None else 0
        if fault and fault != exc.code:  # the first cause, wherever it was seen
            why = _cuda.fault_reason(fault, config.timeout_s) or why
        missing = team.missing_peers() if team is not None else []
        if missing:
            why += f'; rank{"s" if len(missing) > 1 else ""} {", ".join(map(str, missing))} never joined the call'
        origin = team.fault_origin if team is not None else -1
        if origin >= 0 and origin != self.rank:
            why += f' (rank {origin} saw it first)'
        if self.broken is None:
            self.broken = why
        log.debug('rank %d: %s: communicator broken: %s', self.rank, call, why)
        return CommunicatorBroken(call, why, rank=self.rank)

    @contextmanager
    def errors(self, call):
        """Turns the CUDA layer's errors in the block into this communicator's mpigpu.Error (failed)."""
        try:
            yield
        except _cuda.device_error() as exc:
            raise self.failed(call, exc) from None

    def abandon(self, req, why):
        """A host MPI collective given up (peers never arrived, an abort): MPI cannot cancel it, so its
        request and the buffers it may still write (the paths' state) are kept; the communicator is
        broken."""
        if self.broken is None:
            self.broken = why
        self._abandoned.append(req)

    def abort(self):
        """Ends every kernel and request of this communicator's device team with an error, from any
        thread, and breaks the communicator (mpigpu.abort)."""
        if self.broken is None:
            self.broken = 'the communicator was aborted'
        self.agreement.give_up()  # a wait for the peers' posts ends too, and they learn of it
        team = self.team
        if team is not None:
            team.abort()

    def release(self, collective, mpi=True):
        """Frees the team, the paths' state and events. `collective`: all ranks are here too, so a
        barrier can make sure no peer still uses this rank's workspace (not after a fault: the ranks
        that never arrived would strand the others, and the kernels of the team have all ended).
        `mpi`: MPI may be called (not in the attribute's delete callback)."""
        _routes_changed()  # first: its handle may name another communicator from now on
        team, self.team = self.team, None
        control, self.control = self.control, None
        self.host_hook = None
        self.released = True
        self.agreement.close(collective and (team is None or not team.fault), mpi)
        _routes_changed()  # and after its board is closed: nothing kept meanwhile is used
        if team is not None and team.fault:
            collective = False
        if team is not None:
            if collective:
                try:
                    self.comm.Barrier()
                    if control is not None:
                        control.Free()
                except MPI.Exception:
                    pass
            _cuda.with_device(self.device, team.close)
        if self._abandoned:  # MPI may still write the staging buffers: keep them (a bounded leak)
            _kept.append((self._abandoned, self._owned))
            self._owned = {}
        for obj in self._owned.values():
            # a path whose state is shared with other ranks (the hierarchical path's node teams) waits
            # for them first when they all release
            if collective and hasattr(obj, 'close_collective'):
                obj.close_collective()
            else:
                obj.close()
        self._owned.clear()
        if self.dep_event is not None:
            _cuda.free_event(self.dep_event)
            self.dep_event = None


class LocalState:
    """The state of objects that are not communicators (messages, datatypes, ops, files, windows):
    the rank that errors name (COMM_WORLD's) and the staging buffers their mirrored calls use."""

    def __init__(self):
        self.rank = MPI.COMM_WORLD.Get_rank()
        self._owned = {}

    owned = CommState.owned

    def close(self):
        for obj in self._owned.values():
            obj.close()
        self._owned.clear()


_local = None


def local_state(obj=None):
    """The one LocalState of this process (its argument, an object's, is ignored: they share it)."""
    global _local
    if _local is None:
        _local = LocalState()
    return _local


# ---- registry: an MPI attribute per communicator, released on Free and at exit ------------------
_states = []
_kept = []  # (abandoned requests, path state) of broken communicators, kept for MPI (CommState.release)


def _delete_attr(comm, keyval, state):
    state.release(collective=False, mpi=False)
    try:
        _states.remove(state)
    except ValueError:
        pass
    return MPI.SUCCESS


_KEYVAL = MPI.Comm.Create_keyval(delete_fn=_delete_attr)


def cached(comm):
    """The state of a wrapper that already has one, else None (the hot path's lookup; mpi4py's own
    objects, which mpigpu's unbound methods may be called on, have no __dict__)."""
    try:
        return comm.__dict__.get(_CACHE)
    except AttributeError:
        return None


def attached(comm):
    """The CommState attached to the communicator's handle now (the MPI attribute; None where none is, as
    after the communicator was freed), whatever a wrapper has cached."""
    return comm.Get_attr(_KEYVAL)


def settle_before(comm):
    """Before a collective of any kind on `comm`: its undecided non-blocking calls are decided and
    started first (MPI's order of collectives; mpigpu/_state/undecided.py). Called where
    _undecided.unsettled is not empty."""
    st = cached(comm)
    if st is None:
        try:
            st = comm.Get_attr(_KEYVAL)
        except MPI.Exception:
            return
    if st is not None and st.agreement.undecided:
        st.agreement.settle_before('collective')


def follow(comm, name, start):
    """A non-blocking collective's host MPI call (`start()` returns its request), made at once, or,
    where the communicator has undecided calls, once they have started: a request for it now."""
    st = cached(comm)
    if st is None:
        try:
            st = comm.Get_attr(_KEYVAL)
        except MPI.Exception:
            st = None
    if st is None or not st.agreement.undecided or _undecided.deciding_here():
        return start()
    agreement = st.agreement
    u = _undecided.follow(agreement, name, start)
    return requests.start(requests.Deferred(lambda blocking: agreement.started(u, blocking)),
                          requests.DeferredRequest)


def settle_all():
    """Before an engine call on any communicator: every undecided call of the process starts first
    (the engine's kernels meet their peers' in launch order; mpigpu/_state/undecided.py)."""
    _undecided.settle()


def state_of(comm):
    """The CommState of a communicator (created on first use, shared by all its wrappers)."""
    d = getattr(comm, '__dict__', None)
    st = d.get(_CACHE) if d is not None else None
    if st is None:
        st = comm.Get_attr(_KEYVAL)
        if st is None:
            st = CommState(_plain_object(comm))
            comm.Set_attr(_KEYVAL, st)
            _states.append(st)
        if d is not None:
            d[_CACHE] = st
    return st


def _plain_object(comm):
    """A plain mpi4py communicator object on the same handle as `comm`."""
    cls = _plain.Intercomm if comm.Is_inter() else _plain.Intracomm
    return cls(comm)


def release(comm):
    """Collective release before MPI_Comm_free (the delete callback cannot call MPI)."""
    st = comm.Get_attr(_KEYVAL)
    if st is not None:
        st.release(collective=True)


@atexit.register
def _release_all():
    # Runs before mpi4py finalizes MPI (registered later, so called earlier).
    for st in _states:
        try:
            st.release(collective=False)
        except Exception:
            pass
    _states.clear()
    if _local is not None:
        _local.close()
    _cuda.release_streams()


def abort(comm):
    """mpigpu.abort: ends every device kernel and request of `comm` with an error, from any thread;
    the communicator is then broken (every later device call on it raises; Free works)."""
    state_of(comm).abort()


def engine_status(comm):
    """'on', 'hierarchical: ...' (a path's own account: ranks on several nodes), 'off: why' or 'not set
    up yet' for a communicator."""
    st = state_of(comm)
    if st.reason is None:
        return 'not set up yet (the first GPU collective sets it up)'
    if st.team is not None:
        return 'on'
    for obj in st._owned.values():
        status = getattr(obj, 'engine_status', None)
        if status is not None and status():
            return status()
    return f'off: {st.reason}'


def agreement_status(comm):
    """How the ranks of a communicator agree on the path of each collective call (mpigpu/_state/agree.py)."""
    return state_of(comm).agreement.describe()


def host_call(comm, coll, nonblocking=False, behind=False):
    """Posts a host-buffer call of an engine collective on `comm` where mpigpu._ext._front has no board
    at hand: the communicator's first call (its state made here, the setup), several nodes; `behind`:
    its board post timed out (raises)."""
    state_of(comm).agreement.host(coll, nonblocking, behind)
