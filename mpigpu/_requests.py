"""Requests for work mpigpu finishes itself: MPI generalized requests, completed when it is done.

A non-blocking or persistent call on device buffers returns an `mpi4py.MPI.Request` (a
generalized request), so `Wait`, `Test`, `Waitall`, `Testall`, `Waitany` of mpi4py work on it, mixed
with any other request. Two kinds of work stand behind one:
- GPU work (a collective enqueued on a stream): done when a CUDA event recorded after it has passed;
- staged point-to-point (Isend/Irecv through pinned host memory): done when the inner MPI request
  on the host copy is, and, for a receive, the copy back to the device has finished.

Who completes the generalized request: the request's own `Wait`/`Test` (fast: the calling thread
waits on the event itself), or, for the class-level `Waitall` and friends that only see the MPI
handle, one agent thread per process that watches outstanding work. The agent needs
MPI_THREAD_MULTIPLE (mpi4py's default); at any lower level there is no agent and non-blocking calls
complete before they return (still correct, not overlapped). Calls from several threads at once are
not supported for the same communicator (as in MPI, the order of collectives must be the same on all
ranks).
"""
import atexit
import ctypes
import threading
import time

from mpi4py import MPI

from . import _engine  # its _device and _with_device (None _device: a build without CUDA)

_POLL_S = 20e-6  # agent's pause between rounds while host MPI work is pending


# ---- CUDA events, pooled per device (creating one per call would cost a driver call) ----------
_events = {}


def _event_put(device, ev):
    _events.setdefault(device, []).append(ev)


def gpu_work(device, stream):
    """A Work for what is enqueued on `stream` so far (device current): a pooled event recorded there."""
    pool = _events.get(device)
    ev = pool.pop() if pool else _engine._device.event_create()
    _engine._device.event_record(ev, stream)
    return Work(device, event=ev)


class Work:
    """One outstanding operation behind a generalized request."""
    __slots__ = ('greq', 'device', 'event', 'inner', 'inner_status', 'on_done', 'lock', 'done', 'error')

    def __init__(self, device, event=None, inner=None, on_done=None):
        self.device = device
        self.event = event        # CUDA event after the GPU work (GPU kind)
        self.inner = inner        # host MPI request (staged point-to-point kind)
        self.inner_status = MPI.Status() if inner is not None else None
        self.on_done = on_done    # run once when the work is done, before completion (copy back)
        self.lock = threading.Lock()
        self.done = False
        self.error = MPI.SUCCESS
        self.greq = None

    # -- status seen by the user (MPI_Grequest query function) --
    def query(self, status):
        st = self.inner_status
        if st is not None:  # a receive: who sent what
            status.Set_source(st.Get_source())
            status.Set_tag(st.Get_tag())
            status.Set_elements(MPI.BYTE, st.Get_count(MPI.BYTE))
        else:  # collectives and sends: MPI's empty status
            status.Set_source(MPI.ANY_SOURCE)
            status.Set_tag(MPI.ANY_TAG)
            status.Set_elements(MPI.BYTE, 0)
        status.Set_cancelled(False)
        status.Set_error(self.error)
        return MPI.SUCCESS

    def block(self):
        """Blocks (GIL released) until the GPU work is done; GPU kind only."""
        _engine._with_device(self.device, _engine._device.event_sync, self.event)

    def finish(self, blocking):
        """Completes the generalized request once the work is done; True when it is (now or before).
        Only one thread at a time touches the inner MPI request (MPI forbids two completing one):
        a non-blocking attempt gives way to a thread already inside."""
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
            elif blocking:
                self.block()
            elif not _engine._with_device(self.device, _engine._device.event_query, self.event):
                return False
            self.done = True
            try:
                if self.on_done is not None:
                    self.on_done()
            except Exception:  # reported through the status, MPI's way for a failed request
                self.error = MPI.ERR_OTHER
            if self.event is not None:
                _event_put(self.device, self.event)
                self.event = None
            self.greq.Complete()
            return True
        finally:
            self.lock.release()


class _Finishing:
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


class Request(_Finishing, MPI.Grequest):
    """The generalized request returned by mpigpu's non-blocking calls on device buffers."""


def _noop(*args):
    return MPI.SUCCESS


def start(work, cls=Request):
    """A request of class `cls` for `work` (already under way), watched by the agent."""
    greq = MPI.Grequest.Start(work.query, _noop, _noop)
    work.greq = greq
    req = cls(greq)
    req._work = work
    if _agent.enabled():
        _agent.add(work)
    else:  # no thread may complete it later: finish now
        work.finish(True)
    return req


def completed():
    """A request that is already complete (the work ran before the call returned)."""
    w = Work(None)
    greq = MPI.Grequest.Start(w.query, _noop, _noop)
    w.greq = greq
    w.done = True
    greq.Complete()
    req = Request(greq)
    req._work = w
    return req


class _Agent:
    """One daemon thread per process completing requests whose owner may only wait through MPI."""

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
                except Exception:  # a failed CUDA query or MPI test: the request reports the error
                    w.error = MPI.ERR_OTHER
                    finished.append(w)
                    try:
                        w.done = True
                        w.greq.Complete()
                    except Exception:
                        pass
            if finished:
                with self.cond:
                    self.items = [w for w in self.items if w not in finished]
                continue
            if all(w.inner is None for w in items):
                # GPU work only: sleep in the driver until the oldest is done, or on its lock while
                # its owner finishes it. Never spin here: a Python loop holding the GIL would keep
                # the waiting thread from running for a whole switch interval (milliseconds).
                try:
                    items[0].finish(True)
                except Exception:
                    pass
            else:
                time.sleep(_POLL_S)

    def stop(self):
        with self.cond:
            self.stopping = True
            self.cond.notify()
        if self.thread is not None:
            self.thread.join(timeout=5)


_agent = _Agent()
atexit.register(_agent.stop)  # registered after mpi4py's finalizer, so it runs before MPI ends


def _set_handle(req, other):
    """Makes `req` hold `other`'s MPI handle (mpi4py has no setter; _addressof gives the slot)."""
    ctypes.memmove(MPI._addressof(req), MPI._addressof(other), MPI._sizeof(MPI.Request))


class Persistent(_Finishing, MPI.Prequest):
    """A persistent collective on device buffers (Allreduce_init and friends).

    The call is parsed, checked and planned once; each `Start` enqueues the kernel after the producer's
    stream and points this request at a fresh generalized request, so `Wait`/`Test` here and mpi4py's
    `Waitall`/`Testall` see it complete when the GPU is done. `MPI.Prequest.Startall` of mpi4py
    starts MPI handles only: start these with `Start` (or `mpigpu`'s own `Startall` below)."""

    @classmethod
    def create(cls, plan):
        req = cls()
        req._plan = plan
        req._work = None
        return req

    def Start(self):
        w = self._work
        if w is not None and not w.done:
            from .errors import Error
            raise Error('Start', 'persistent request is still active (Wait or Test it to completion first)',
                        arg='request', rank=self._plan.st.rank, error_class=MPI.ERR_REQUEST)
        work = self._plan.start()
        inner = completed() if work is None else start(work)
        _set_handle(self, inner)
        self._work = inner._work

    def Free(self):
        if self._work is not None and not self._work.done:
            self._work.finish(True)
        if self != MPI.REQUEST_NULL:
            MPI.Prequest.Free(self)
        self._plan = None


def Startall(requests):
    """Starts a list of persistent requests, mpigpu's and mpi4py's alike."""
    plain = [r for r in requests if not isinstance(r, Persistent)]
    for r in requests:
        if isinstance(r, Persistent):
            r.Start()
    if plain:
        MPI.Prequest.Startall(plain)
