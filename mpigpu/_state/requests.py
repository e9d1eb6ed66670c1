"""Requests for work mpigpu finishes itself: MPI generalized requests, completed when it is done.

A non-blocking or persistent call on device buffers returns an `mpi4py.MPI.Request` (a
generalized request), so `Wait`, `Test`, `Waitall`, `Testall`, `Waitany` of mpi4py work on it, mixed
with any other request. Two kinds of work stand behind one:
- GPU work (a collective enqueued on a stream): `GpuRequest`, created and completed in C
  (cuda/completion.cu) once a CUDA event recorded after the kernel has passed. Its own `Wait`/`Test`
  wait on the event with the GIL released and complete it on the calling thread; for mpi4py's
  class-level `Waitall` and friends, which only see the MPI handle, a C watcher thread polls the
  events. No Python runs between the kernel and the completion, which keeps a persistent
  `Start` + `Wait` cheaper than the blocking call.
- staged point-to-point (Isend/Irecv through pinned host memory): `Work` with the inner MPI request on
  the host copy, done when it is and, for a receive, the copy back to the device has finished;
  completed by the request's own `Wait`/`Test` or by one Python agent thread.
Completing a request from another thread needs MPI_THREAD_MULTIPLE (mpi4py's default); at a lower
level there is no watcher and no agent, and non-blocking calls complete before they return (still
correct, not overlapped). Calls from several threads at once are not supported for the same
communicator (as in MPI, the order of collectives must be the same on all ranks).
"""
import atexit
import ctypes
import logging
import struct
import threading
import time

from mpi4py import MPI

from .. import _cuda
from .._base import plain as _plain
from ..errors import Error

_POLL_S = 20e-6  # agent's pause between rounds while host MPI work is pending
log = logging.getLogger('mpigpu')


# ---- GPU work: generalized requests completed in C -------------------------------------------
_c_ready = None  # None: not tried yet; True: cuda/completion.cu has the MPI functions; False: not


def _mpi_functions():
    """Addresses of the MPI functions the C completion calls, from the MPI library mpi4py loaded."""
    names = ('MPI_Grequest_start', 'MPI_Grequest_complete', 'MPI_Status_set_elements',
             'MPI_Status_set_cancelled')
    for lib in (MPI.__file__, None):  # the extension's own dependencies, then the global scope
        try:
            dll = ctypes.CDLL(lib)
            return [ctypes.cast(getattr(dll, n), ctypes.c_void_p).value for n in names]
        except (OSError, AttributeError):
            continue
    return None


def _status_offsets():
    """Byte offsets of MPI_SOURCE and MPI_TAG in this MPI's MPI_Status, found by writing marks."""
    st = MPI.Status()
    st.Set_source(0x5A5A01)
    st.Set_tag(0x5A5A02)
    raw = ctypes.string_at(MPI._addressof(st), MPI._sizeof(MPI.Status))
    return raw.find(struct.pack('=i', 0x5A5A01)), raw.find(struct.pack('=i', 0x5A5A02))


def c_completion():
    """True when GPU requests are created and completed in C (set up on first use)."""
    global _c_ready
    if _c_ready is None:
        _c_ready = False
        fns = _mpi_functions() if getattr(_cuda.device, 'request_init', None) is not None else None
        src, tag = _status_offsets() if fns is not None else (-1, -1)
        if fns is None or min(src, tag) < 0 or src % 4 or tag % 4:
            log.debug('GPU requests complete before they return: MPI functions or status layout not found')
        else:
            _cuda.device.request_init(*fns, MPI._handleof(MPI.BYTE), src, tag, MPI.ANY_SOURCE,
                                         MPI.ANY_TAG, MPI.ERR_OTHER, MPI._sizeof(MPI.Request))
            atexit.register(_cuda.device.request_shutdown)  # runs before mpi4py finalizes MPI
            _c_ready = True
    return _c_ready


class _WaitsForGpu:
    """Wait/Test that finish the GPU work on the calling thread (GIL released), then let MPI free
    or reset the request; mpi4py's class-level Waitall & co. rely on the watcher instead. Work that
    ended in a fault of its team completes the request with MPI's error and raises the
    communicator's error (`_failed(exc)`: set by whoever made the request)."""
    _ticket = 0
    _failed = None

    def Wait(self, status=None):
        if self._ticket:
            try:
                _cuda.device.request_wait(self._ticket)
            except _cuda.device_error() as exc:
                super().Wait(status)  # completed with the error: MPI frees it
                raise (self._failed(exc) if self._failed is not None else exc) from None
        return super().Wait(status)

    def Test(self, status=None):
        if self._ticket:
            try:
                if not _cuda.device.request_test(self._ticket):
                    return False
            except _cuda.device_error() as exc:
                super().Test(status)
                raise (self._failed(exc) if self._failed is not None else exc) from None
        return super().Test(status)


class GpuRequest(_WaitsForGpu, MPI.Request):
    """The request of a non-blocking collective on device buffers."""


def start_gpu(req, launch, failed=None):
    """Points `req` at a generalized request for GPU work: `launch(request_address, watch)` enqueues
    the work and starts the request there (the work's device current), returning its ticket.
    `failed(exc)`: the error its Wait and Test raise when the work ended in a fault."""
    watch = agent.enabled()
    ticket = launch(MPI._addressof(req), watch)
    req._ticket = ticket
    if failed is not None:
        req._failed = failed
    if not watch:  # nobody could complete it while the program waits through MPI: finish now
        _cuda.device.request_wait(ticket)
    return req


# ---- staged point-to-point: the inner MPI request, completed from Python ----------------------
class Work:
    """One outstanding point-to-point operation: an inner MPI request (None: nothing to wait for) and
    what to do once it has completed (`on_done`: copy back, reply to a sender, return buffers)."""
    __slots__ = ('greq', 'device', 'inner', 'inner_status', 'on_done', 'lock', 'done', 'error', 'exc',
                 'receive', 'received', 'source', 'tag')

    def __init__(self, device, inner=None, on_done=None, receive=False):
        self.device = device
        self.inner = inner
        self.inner_status = MPI.Status() if inner is not None else None
        self.on_done = on_done
        self.lock = threading.Lock()
        self.done = False
        self.error = MPI.SUCCESS
        self.exc = None           # what on_done raised (blocking callers raise it again)
        self.receive = receive    # a receive reports who sent what; other work MPI's empty status
        self.received = None      # bytes that arrived, where the inner status does not say it
        self.source = None        # sender and tag, where no inner request received the message
        self.tag = None
        self.greq = None

    def source_of(self):
        return self.source if self.source is not None else self.inner_status.Get_source()

    # -- status seen by the user (MPI_Grequest query function) --
    def query(self, status):
        if self.receive:
            st = self.inner_status
            status.Set_source(self.source_of())
            status.Set_tag(self.tag if self.tag is not None else st.Get_tag())
            got = self.received if self.received is not None else st.Get_count(MPI.BYTE) if st is not None else 0
            status.Set_elements(MPI.BYTE, got)  # (0: a kept message whose delivery failed)
        else:
            status.Set_source(MPI.ANY_SOURCE)
            status.Set_tag(MPI.ANY_TAG)
            status.Set_elements(MPI.BYTE, 0)
        st = self.inner_status if self.inner is not None else None
        status.Set_cancelled(st is not None and st.Is_cancelled())
        status.Set_error(self.error)
        return self.error

    def finish(self, blocking):
        """Completes the operation (and its generalized request) once the inner request has; True
        when it is done (now or before). Only one thread at a time touches the inner MPI request
        (MPI forbids two completing one): a non-blocking attempt gives way to a thread inside."""
        if not self.lock.acquire(blocking):
            return False
        try:
            if self.done:
                return True
            if self.inner is not None:
                if blocking:
                    self.inner.Wait(self.inner_status)
                elif not self.inner.Test(self.inner_status):
                    return False
            self.done = True
            on_done, self.on_done = self.on_done, None  # what it holds (the caller's buffers) goes with it
            try:
                if on_done is not None:
                    on_done()
            except Exception as exc:  # reported through the status, MPI's way for a failed request
                self.exc = exc
                self.error = exc.Get_error_class() if isinstance(exc, MPI.Exception) else MPI.ERR_OTHER
            finally:
                on_done = None
            if self.greq is not None:
                self.greq.Complete()
                release_handle(self.greq)  # the user's request holds it; this copy must not outlive it
            return True
        finally:
            self.lock.release()


class Deferred(Work):
    """Work whose operation starts later: `begin(blocking)` returns the operation's request once it
    has started, None while it cannot yet (a non-blocking collective whose ranks have not all said
    which path they take: mpigpu/_state/agree.py), or raises why it never will."""
    __slots__ = ('begin',)

    def __init__(self, begin):
        super().__init__(None)
        self.begin = begin

    def finish(self, blocking):
        if not self.lock.acquire(blocking):
            return False
        try:
            if self.done:
                return True
            try:
                if self.begin is not None:
                    self.inner = self.begin(blocking)
                    if self.inner is None:
                        return False
                    self.begin = None
                if blocking:
                    self.inner.Wait()
                elif not self.inner.Test():
                    return False
            except Exception as exc:  # the request reports it; its own Wait and Test raise it
                self.exc = exc.with_traceback(None)  # its frames would keep the call's buffers
                self.error = exc.Get_error_class() if isinstance(exc, MPI.Exception) else MPI.ERR_OTHER
            self.done = True
            self.inner = self.begin = None
            self.greq.Complete()
            release_handle(self.greq)
            return True
        finally:
            self.lock.release()


class Finishing:
    """Wait/Test that finish the work on the calling thread (no round trip through the agent);
    mpi4py's class-level Waitall/Testall/Waitany see a plain MPI request that the agent completes."""

    def Wait(self, status=None):
        w = getattr(self, '_work', None)
        if w is not None:
            w.finish(True)
        return super().Wait(status)

    def Test(self, status=None):
        w = getattr(self, '_work', None)
        if w is not None:
            w.finish(False)
        return super().Test(status)


class Request(Finishing, MPI.Grequest):
    """The generalized request of staged point-to-point calls and of calls completed on return."""


class DeferredRequest(Request):
    """The request of Deferred work: its Wait and Test raise the work's own error (mpigpu.Error)."""

    def Wait(self, status=None):
        w = self._work
        w.finish(True)
        return self._done(w, status, MPI.Grequest.Wait)

    def Test(self, status=None):
        w = self._work
        if not w.finish(False):
            return False
        return self._done(w, status, MPI.Grequest.Test)

    def _done(self, w, status, complete):
        if w.exc is None:
            return complete(self, status)
        exc, w.exc = w.exc, None  # raised once, as MPI reports a request's error once
        if not MPI.Request.__bool__(self):  # completed already (mpi4py's Waitall reported the error)
            return complete(self, status)
        try:
            complete(self, status)  # MPI frees the request; its error status is this one
        except MPI.Exception:
            pass
        raise exc


def _noop(*args):
    return MPI.SUCCESS


def start(work, cls=Request):
    """A request of class `cls` for `work` (already under way), watched by the agent."""
    greq = MPI.Grequest.Start(work.query, _noop, _noop)
    work.greq = greq
    req = cls(greq)  # the user's object; work.greq completes the same handle, then lets go of it
    req._work = work
    if agent.enabled():
        agent.add(work)
    else:  # no thread may complete it later: finish now
        work.finish(True)
    return req


def completed(status=None):
    """A request that is already complete (the work ran before the call returned); `status`: the
    receive's status it reports (MPI's empty status without one)."""
    w = Work(None, receive=status is not None)
    if status is not None:
        w.source, w.tag, w.received = status.Get_source(), status.Get_tag(), status.Get_count(MPI.BYTE)
    greq = MPI.Grequest.Start(w.query, _noop, _noop)
    w.greq = greq
    w.done = True
    greq.Complete()
    req = Request(greq)
    release_handle(greq)
    req._work = w
    return req


class _Agent:
    """One daemon thread per process completing staged point-to-point requests whose owner may only
    wait through MPI (GPU requests have the C watcher)."""

    def __init__(self):
        self.cond = threading.Condition()
        self.items = []
        self.thread = None
        self.stopping = False
        self._enabled = None

    def enabled(self):
        if self._enabled is None:
            self._enabled = MPI.Is_initialized() and MPI.Query_thread() == MPI.THREAD_MULTIPLE
        return self._enabled

    def add(self, work):
        with self.cond:
            self.items.append(work)
            if self.thread is None:
                self.thread = threading.Thread(target=self._loop, name='mpigpu-requests', daemon=True)
                self.thread.start()
            self.cond.notify()

    def _loop(self):
        while True:
            with self.cond:
                while not self.items and not self.stopping:
                    self.cond.wait()
                if self.stopping:
                    return
                items = list(self.items)
            finished = []
            for w in items:
                try:
                    if w.finish(False):
                        finished.append(w)
                except Exception:  # a failed MPI test or copy: the request reports the error
                    w.error = MPI.ERR_OTHER
                    finished.append(w)
                    try:
                        w.done = True
                        w.greq.Complete()
                        release_handle(w.greq)
                    except Exception:
                        pass
            if finished:
                with self.cond:
                    self.items = [w for w in self.items if w not in finished]
                continue
            time.sleep(_POLL_S)

    def stop(self):
        with self.cond:
            self.stopping = True
            self.cond.notify()
        if self.thread is not None:
            self.thread.join(timeout=5)


agent = _Agent()
atexit.register(agent.stop)  # registered after mpi4py's finalizer, so it runs before MPI ends


def set_handle(req, other):
    """Makes `req` hold `other`'s MPI handle (mpi4py has no setter; _addressof gives the slot); `other`
    lets go of it, so only `req` frees or completes it."""
    ctypes.memmove(MPI._addressof(req), MPI._addressof(other), MPI._sizeof(MPI.Request))
    release_handle(other)


def release_handle(req):
    """Sets a request object's handle to MPI_REQUEST_NULL without freeing it (another object owns it)."""
    ctypes.memmove(MPI._addressof(req), MPI._addressof(MPI.REQUEST_NULL), MPI._sizeof(MPI.Request))


class Startable:
    """mpigpu's persistent requests: their Start is mpigpu's, so mpigpu.Startall starts them (mpi4py's
    Prequest.Startall knows MPI handles only).

    Each round runs on a generalized request whose handle MPI sets to MPI_REQUEST_NULL when it
    completes, so between rounds (made, or completed, and not freed) the object holds no handle. It
    still behaves as MPI's inactive persistent request does: it is true and equal only to itself, never
    to REQUEST_NULL, until Free. A subclass says when it is freed (`_freed`)."""

    def _freed(self):
        raise NotImplementedError

    def _active(self):
        """A round started and not yet completed by Wait or Test."""
        return MPI.Request.__bool__(self)

    def _check_startable(self, rank):
        """Raises MPI's ERR_REQUEST for a Start while the previous round runs or after Free."""
        if self._active():  # the previous round's request: not yet completed by Wait or Test
            raise Error('Start', 'persistent request is still active (Wait or Test it to completion first)',
                        arg='request', rank=rank, error_class=MPI.ERR_REQUEST)
        if self._freed():
            raise Error('Start', 'persistent request was freed', arg='request', rank=rank,
                        error_class=MPI.ERR_REQUEST)

    def _inactive(self):
        return not self._active() and not self._freed()

    def __bool__(self):
        return self._active() or not self._freed()

    def __eq__(self, other):
        if self._inactive() or (isinstance(other, Startable) and other._inactive()):
            return self is other
        return MPI.Request.__eq__(self, other)

    def __ne__(self, other):
        eq = self.__eq__(other)
        return eq if eq is NotImplemented else not eq

    __hash__ = None  # as mpi4py's requests


class Persistent(Startable, _WaitsForGpu, MPI.Prequest):
    """A persistent collective on device buffers (Allreduce_init and friends).

    The call is parsed, checked and planned once; each `Start` enqueues the kernel after the producer's
    stream and points this request at a fresh generalized request (created in C), so `Wait`/`Test`
    here and mpi4py's `Waitall`/`Testall` see it complete when the GPU is done. `MPI.Prequest.Startall`
    starts these where MPI is mpigpu's (`python -m mpigpu`, `from mpigpu import MPI`: Prequest below);
    mpi4py's own, called by that name elsewhere, starts MPI handles only: use `mpigpu.Startall` there."""

    @classmethod
    def create(cls, plan):
        """The request of `plan` (its `st`, `name` and `start(req)`: mpigpu._paths.plan.Plan, or the exchange's
        persistent call)."""
        req = cls()
        st, name = plan.st, plan.name
        req._plan, req._rank = plan, st.rank
        req._failed = lambda exc: st.failed(name, exc)  # not the plan: Free lets go of its buffers
        return req

    _plan = None

    def _freed(self):
        return self._plan is None

    def Start(self):
        self._check_startable(self._rank)
        self._ticket = self._plan.start(self)

    def Free(self):
        if self._active():
            self.Wait()
        self._plan = None


def Startall(requests):
    """Starts a list of persistent requests, mpigpu's and mpi4py's alike, in the list's order (MPI starts
    them so): which of them are mpigpu's depends on each rank's own buffers, so starting mpigpu's first
    could start two collectives in different orders on different ranks. Runs of mpi4py's go in one call."""
    plain = []
    for r in requests:
        if not isinstance(r, Startable):
            plain.append(r)
            continue
        if plain:
            _plain.Prequest.Startall(plain)
            plain = []
        r.Start()
    if plain:
        _plain.Prequest.Startall(plain)


class Prequest(MPI.Prequest, metaclass=_plain.StandsIn):
    """mpi4py's Prequest under its name in `python -m mpigpu` and `from mpigpu import MPI`: its class
    method Startall starts mpigpu's persistent requests (device buffers) with MPI's."""
    stands_for = MPI.Prequest

    @classmethod
    def Startall(cls, requests):
        Startall(requests)

    # mpi4py's constructors from handles make its own class, whatever class they are called on
    @classmethod
    def fromhandle(cls, handle):
        return cls(_plain.Prequest.fromhandle(handle))

    @classmethod
    def fromint(cls, arg):
        return cls(_plain.Prequest.fromint(arg))

    @classmethod
    def f2py(cls, arg):
        return cls(_plain.Prequest.f2py(arg))
