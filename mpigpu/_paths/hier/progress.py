"""Calls of the hierarchical path that return before they are done: `stream=` calls and the non-blocking
and persistent forms. The network phase needs the host (MPI), so one progress thread per process runs
them, in the order they were made, whatever their communicator: the node phases they launch then
meet on every GPU in the program's order (two communicators' kernels launched in different orders on
two GPUs could each wait for the other), as the engine's own non-blocking calls do.

- stream=: an event recorded on the caller's stream orders the call after the work queued there, and
  a one-thread kernel (cuda/host_wait.cu) holds the stream until the progress thread, having run the
  call, writes its number into a word of pinned memory: work queued after the call runs after it,
  as with the engine's kernels. A CUDA graph cannot capture that (the host's part would not replay),
  so a call on a capturing stream raises.
- Iallreduce & co. and Start: a generalized request that the progress thread completes.
- Blocking calls while earlier calls are still queued go through the queue too (MPI's order).

It needs MPI_THREAD_MULTIPLE (mpi4py's default); at a lower level every call completes before it
returns. A failed stream= call cannot raise where it was made: its error is raised by its
communicator's next call (the stream is released all the same, so nothing hangs).
"""
import atexit
import collections
import logging
import threading

import numpy as np
from mpi4py import MPI

from ... import _cuda
from ..._base.config import config
from ...errors import Error
from ..._state import requests

log = logging.getLogger('mpigpu')


def threads():
    """True when calls may complete on the progress thread (MPI_THREAD_MULTIPLE)."""
    return requests.agent.enabled()


class Job:
    __slots__ = ('fn', 'after', 'done', 'exc')

    def __init__(self, fn, after):
        self.fn, self.after, self.done, self.exc = fn, after, threading.Event(), None

    def reraise(self):
        if self.exc is not None:
            raise self.exc


class Progress:
    """The process's progress thread, its queue, and the pinned words that release stream= calls'
    streams (word 0: the number of the last call done; word 1: a call whose stream stopped waiting at
    MPIGPU_TIMEOUT_S)."""

    def __init__(self):
        self.cond = threading.Condition()
        self.jobs = collections.deque()
        self.active = 0          # submitted and not yet done
        self.stopping = False
        self.seq = 0
        self.events = {}         # device -> free events
        self.words = _cuda.pinned_memory(64)
        self.word = np.frombuffer(self.words, np.uint32, count=2)
        self.word[:] = 0
        self.thread = threading.Thread(target=self._loop, name='mpigpu-hier', daemon=True)
        self.thread.start()

    def submit(self, fn, after=None):
        """Queues fn() (then after(job), on the thread, whatever fn did); returns the Job."""
        return self.queue(Job(fn, after))

    def queue(self, job):
        with self.cond:
            self.jobs.append(job)
            self.active += 1
            self.cond.notify_all()
        return job

    def _loop(self):
        while True:
            with self.cond:
                while not self.jobs and not self.stopping:
                    self.cond.wait()
                if not self.jobs:
                    return
                job = self.jobs.popleft()
            try:
                job.fn()
            except BaseException as exc:  # the call's error: its request or the next call reports it
                job.exc = exc
            finally:
                if job.after is not None:
                    try:
                        job.after(job)
                    except Exception as exc:
                        log.debug('mpigpu-hier: completion failed: %s', exc)
                job.done.set()
                with self.cond:
                    self.active -= 1
                    self.cond.notify_all()

    def idle(self):
        with self.cond:
            return self.active == 0

    def drain(self, timeout=None):
        """Waits until every queued call is done (and its stream released); False if `timeout` (s)
        passed first."""
        with self.cond:
            return self.cond.wait_for(lambda: self.active == 0, timeout)

    def event(self, device):
        free = self.events.setdefault(device, [])
        return free.pop() if free else _cuda.with_device(device, _cuda.event)

    def stop(self):
        with self.cond:
            self.stopping = True
            self.cond.notify_all()
        if self.thread is not threading.current_thread():
            self.thread.join(timeout=30)
        for free in self.events.values():
            for ev in free:
                try:
                    _cuda.free_event(ev)
                except Exception:
                    pass
        self.events = {}


_progress = None


def progress():
    """The process's progress thread (started on first use, stopped at exit before MPI ends)."""
    global _progress
    if _progress is None:
        _progress = Progress()
        atexit.register(_stop)  # registered after mpi4py's finalizer: runs before it
    return _progress


def quiet():
    """True when no call waits on the progress thread (or it never started)."""
    return _progress is None or _progress.idle()


def running():
    """The progress thread if it was started, else None."""
    return _progress


def _stop():
    if _progress is not None:
        _progress.stop()


def late():
    """True when a stream= call's stream stopped waiting for it (check() raises that)."""
    return _progress is not None and bool(_progress.word[1])


def check(hs, name, rank):
    """Raises the error of an earlier stream= call of this communicator (once), or of a stream that
    stopped waiting for its call."""
    err, hs.async_error = hs.async_error, None
    if err is not None:
        raise Error(name, f'an earlier stream= call of this communicator failed: {err}', rank=rank,
                    error_class=MPI.ERR_OTHER)
    p = _progress
    if late():
        late_call, p.word[1] = int(p.word[1]), 0
        raise Error(name, f'a stream= call (number {late_call}) was not done within MPIGPU_TIMEOUT_S; work queued '
                    'after it on its stream ran without its result', rank=rank, error_class=MPI.ERR_OTHER)


def blocking(hs, body):
    """Runs body() now, or after the calls still queued (on the thread, with the communicator's device
    current there, waiting for it)."""
    p = _progress
    if p is None or p.idle():
        return body()
    job = p.submit(lambda: _cuda.with_device(hs.device, body))
    job.done.wait()
    job.reraise()


def on_stream(hs, stream, body):
    """A stream= call: body(dep) runs on the progress thread after the work queued on `stream` (event
    dep), and `stream` waits for it on the GPU; returns at once."""
    p = progress()
    ev = p.event(hs.device)
    _cuda.record(ev, stream)
    p.seq = (p.seq + 1) & 0xFFFFFFFF or 1
    seq = p.seq
    _cuda.wait_host(stream, p.words.ptr, seq, config.timeout_s)

    def run():
        _cuda.with_device(hs.device, body, ev)

    def after(job):
        if job.exc is not None and hs.async_error is None:
            hs.async_error = job.exc
            log.debug('mpigpu-hier: stream= call %d failed: %s', seq, job.exc)
        p.word[0] = seq  # releases the stream (after the result, or after the failure)
        p.events[hs.device].append(ev)
    p.submit(run, after)


class _JobWork(requests.Work):
    """A request's work that is done when its job on the progress thread is."""
    __slots__ = ('job',)

    def finish(self, blocking):
        if self.job is not None and not self.job.done.wait(None if blocking else 0):
            return False
        return super().finish(blocking)


def request(hs, stream, body):
    """A non-blocking call: body(dep) queued on the progress thread after the work queued on `stream`;
    returns the request it completes."""
    p = progress()
    ev = p.event(hs.device)
    _cuda.record(ev, stream)
    work = _JobWork(None)
    work.job = None
    greq = MPI.Grequest.Start(work.query, requests._noop, requests._noop)
    work.greq = greq
    req = requests.Request(greq)
    req._work = work

    def run():
        _cuda.with_device(hs.device, body, ev)

    def after(job):
        p.events[hs.device].append(ev)
        job.done.set()  # the request's own finish waits for this
        work.finish(True)  # completes the generalized request (its status reports job's error)
    job = Job(run, after)
    work.job, work.on_done = job, job.reraise
    p.queue(job)
    return req
