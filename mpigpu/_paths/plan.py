"""A device-buffer collective bound to the path that runs it: parsed and checked once (mpigpu/_describe/call.py),
its path agreed with the other ranks (mpigpu/_state/agree.py), its GPU and launch stream resolved, then run
to completion (blocking), enqueued on a stream (stream=), or started as a request (non-blocking,
persistent). A blocking call is a one-shot plan, so every form shares this setup; the Cython fast path
(mpigpu/_paths/engine.py) skips it for the common blocking call once the communicator's team is up.

Paths, when every rank brought device buffers the engine's paths can take: the device engine when the
communicator's team is up and implements the type and op; the hierarchical path when its ranks span
several nodes (node teams joined through host MPI); host MPI with the device pointers when that MPI is
CUDA-aware; the staged path otherwise. When any rank makes the host MPI call instead (host buffers, a
mix of both, buffers only mpi4py can read: a non-contiguous datatype, an element type mpigpu does not
know), every rank makes it: device buffers through host mirrors (the mirrored path).
"""
from mpi4py import MPI

from .. import _cuda
from .._base import host_mpi as _host_mpi, plain as _plain
from .._state import undecided as _undecided
from .._describe.call import build, is_in_place, read_once
from .._base.config import config
from .._ext._intake import is_device
from .._state.comm_state import follow as _state_follow, state_of
from .._describe.strided import as_spec
from .._base.types import NATIVE
from .._state.undecided import Undecided
from ..errors import Error
from .._base.codes import Coll, Placement, Verdict
from . import engine, hier, mirrored, staged
from .support import packing
from .._state import requests

_PARAMS = {mirrored.IN: 'sendbuf', mirrored.OUT: 'recvbuf', mirrored.INOUT: 'buf'}  # by role, in _host_args


def _device_of(st, c):
    """The GPU of the call's buffers, checked to be device memory and all on one device."""
    first = None
    for arg, label in ((c.send, 'sendbuf'), (c.recv, 'recvbuf' if c.coll != Coll.BCAST else 'buf')):
        if arg is None or arg.buf.nbytes == 0:
            continue
        dev = _cuda.device_of(c.name, label, st.rank, arg.buf)
        if first is None:
            first = dev
        elif dev != first:
            raise Error(c.name, f'buffers on devices {first} and {dev}', arg=label, rank=st.rank,
                        error_class=MPI.ERR_BUFFER)
    if first is None:
        first = c.device if c.device is not None and c.device >= 0 else _cuda.current_device()
    return first


def _one_placement(coll, sendbuf, recvbuf):
    """True when this rank's significant buffers are all device memory; False when it mixes host and
    device buffers (legal in MPI: a device send buffer with a host receive buffer), which only the
    host MPI call can take."""
    if coll == Coll.BCAST or recvbuf is None or sendbuf is None or is_in_place(sendbuf):
        return True
    return is_device(sendbuf) == is_device(recvbuf)


def _host_args(coll, sendbuf, recvbuf, op, root):
    """The call's arguments in mpi4py's order, and where its buffers are among them with their roles."""
    if coll == Coll.BCAST:
        return (recvbuf, root), ((0, mirrored.INOUT),)
    if coll == Coll.ALLGATHER:
        args = (sendbuf, recvbuf)
    elif coll == Coll.REDUCE:
        args = (sendbuf, recvbuf, op, root)
    else:
        args = (sendbuf, recvbuf, op)
    return args, ((0, mirrored.IN), (1, mirrored.OUT))


class Plan:
    """One collective call on device buffers, ready to run (MPI_Allreduce and MPI_Allreduce_init alike).

    Its ranks agree on its path first (mpigpu/_state/agree.py): the engine's paths when every rank brought
    device buffers they can take, else (`host_mpi`) the host MPI call every rank makes."""
    __slots__ = ('comm', 'st', 'c', 'name', 'coll', 'stream', 'engine_args', 'hier', 'device', 'args', 'buffers',
                 'host_mpi', 'inplace', 'undecided', '_dev', '_user_stream')

    def __init__(self, comm, name, coll, sendbuf, recvbuf, op, root, stream=None, nonblocking=False):
        """`stream`: a stream= call's stream, which DLPack producers are asked to order their work before
        (an event towards another stream would cross a CUDA graph capture's boundary). `nonblocking`:
        an I* call (its ranks' first engine collective then agrees without waiting)."""
        self.comm, self.name, self.coll = comm, name, coll
        st = self.st = state_of(comm)
        self.engine_args = self.device = self.c = self.undecided = self._dev = None
        self._user_stream = stream
        self.hier = self.host_mpi = False
        self.inplace = coll != Coll.BCAST and is_in_place(sendbuf)
        stream_for = _cuda.consumer_stream if stream is None else (lambda device: stream)
        agreement = st.agreement
        try:
            # Everything this rank can check before its peers hear of the call: a rank that refuses its
            # own call says so (its peers raise too, instead of waiting for it).
            st.check_usable(name)
            _cuda.require(name, st.rank)
            sendbuf, recvbuf = read_once(sendbuf, stream_for), read_once(recvbuf, stream_for)
            if config.strided_arrays:
                sendbuf, recvbuf = self._strided(name, coll, sendbuf, recvbuf)
            self.args, self.buffers = _host_args(coll, sendbuf, recvbuf, op, root)
            placement = Placement.HOST_MPI
            if _one_placement(coll, sendbuf, recvbuf):
                c = self.c = build(name, coll, st.size, st.rank, sendbuf, recvbuf, op, root, stream_for)
                if c.mirror is None:
                    placement = Placement.DEVICE
                    if c.count:
                        with _cuda.errors_as(name, st.rank):
                            self._dev = _device_of(st, c)
        except Exception:  # an mpigpu.Error, or what a broken export raised while it was read
            agreement.refuse(name, coll, nonblocking)
            raise
        verdict = agreement.decide(name, coll, placement, nonblocking, self._started if nonblocking else None)
        if isinstance(verdict, Undecided):  # its request decides it (mpigpu/_state/agree.py)
            self.undecided = verdict
        else:
            self._bind(verdict)

    def _bind(self, verdict):
        """Binds the call to the path its ranks agreed on (`verdict`)."""
        if verdict != Verdict.DEVICE:
            self.host_mpi = True  # the host MPI call, as every rank makes it
            return
        st, c, name = self.st, self.c, self.name
        if c.count == 0:
            return
        with _cuda.errors_as(name, st.rank):
            st.bind_device(name, self._dev)
            launch = _cuda.with_device(st.device, _cuda.launch_stream,
                                       [a.buf for a in (c.send, c.recv) if a is not None], st.device, st.dep_event)
        self.stream = launch if self._user_stream is None else self._user_stream
        self.device = st.device
        if engine.runs(st, c):
            self.engine_args = engine.launch_args(c, self.stream)
        else:  # several nodes: the hierarchical path (its first call sets it up, collectively)
            with _cuda.errors_as(name, st.rank):
                self.hier = hier.runs(st, c)

    def _started(self, verdict):
        """An undecided non-blocking call, once agreed: binds it and starts it; returns its request."""
        self._bind(verdict)
        return self._start_request()

    def _strided(self, name, coll, sendbuf, recvbuf):
        """Bare arrays that are not contiguous as specifications through their strides (_describe/strided.py)."""
        method, in_place = Coll(coll).mpi_name, coll != Coll.BCAST and is_in_place(sendbuf)
        if coll != Coll.BCAST and not in_place:
            sendbuf = as_spec(sendbuf, packing.form_of(self.comm, method, 'sendbuf', in_place), name, self.st.rank)
        param = 'buf' if coll == Coll.BCAST else 'recvbuf'
        return sendbuf, as_spec(recvbuf, packing.form_of(self.comm, method, param, in_place), name, self.st.rank)

    def _mpi4py(self, prefix='', suffix=''):
        """mpi4py's method of this collective (prefix 'I': its non-blocking form; suffix '_init': its
        persistent form)."""
        name = Coll(self.coll).mpi_name
        return getattr(_plain.Intracomm, prefix + (name[0].lower() + name[1:] if prefix else name) + suffix)

    def _mirrored(self, form=''):
        """The call on host mirrors of its buffers, as the host MPI call every rank makes: blocking,
        started ('start': its request), or persistent ('persistent': a request of mpi4py's *_init)."""
        base = self._mpi4py('I' if form == 'start' else '', '_init' if form == 'persistent' else '')
        args = list(self.args)

        def call(*hosts):
            for (i, _role), h in zip(self.buffers, hosts):
                args[i] = h
            return base(self.comm, *args)
        method = Coll(self.coll).mpi_name
        items = [(self.args[i], r, packing.form_of(self.comm, method, _PARAMS[r], self.inplace))
                 for i, r in self.buffers]
        reduces = self.coll not in engine.NO_OP
        if form == 'start':
            return mirrored.start(self.st, self.name, call, items, reduces)
        if form == 'persistent':
            return mirrored.Persistent.create(self.st, self.name, call, items, reduces)
        return mirrored.run(self.st, self.name, call, items, reduces)

    def persistent(self):
        """The persistent request of an *_init call: the engine's (requests.Persistent), or mpi4py's
        persistent request on host mirrors where the ranks agreed on the host MPI call."""
        if self.host_mpi:
            return self._mirrored('persistent')
        return requests.Persistent.create(self)

    def run(self, sync=True):
        """Runs the call: `sync`, returns with the result (MPI blocking); else the engine's kernel may
        still run when it returns (stream=). Host MPI paths complete before returning either way."""
        if self.host_mpi:
            self._mirrored()
        elif self.c.count:
            with self.st.errors(self.name):
                _cuda.with_device(self.device, self._run, sync)

    def request(self):
        """Starts the call and returns a request for it (non-blocking). An undecided call's request
        starts it once its ranks agree (when it is waited for or tested, by the request thread, at this
        rank's next collective on the communicator, or at its next engine call on any; mpigpu/_state/undecided.py)."""
        u = self.undecided
        if u is not None:
            agreement = self.st.agreement
            return requests.start(requests.Deferred(lambda blocking: agreement.started(u, blocking)),
                                  requests.DeferredRequest)
        return self._start_request()

    def _start_request(self):
        if self.host_mpi:  # after the communicator's undecided calls, where it has some (a post made now)
            return _state_follow(self.comm, self.name, lambda: self._mirrored('start'))
        if not self.c.count:
            return requests.completed()
        with self.st.errors(self.name):
            return _cuda.with_device(self.device, self._request)

    def _run(self, sync):
        if self.engine_args is not None:
            self.st.team.run(*self.engine_args, sync)
        elif self.hier:
            hier.run(self.st, self.c, self.stream, sync)
        else:
            self._host_path()

    def _request(self):
        if self.engine_args is not None:
            st, name = self.st, self.c.name
            if not requests.c_completion():
                st.team.run(*self.engine_args, True)
                return requests.completed()
            # the request completes with the kernel's fault, if it has one (Team.run_request)
            return requests.start_gpu(requests.GpuRequest(), lambda addr, watch: st.team.run_request(
                *self.engine_args, addr, watch), lambda exc: st.failed(name, exc))
        if self.hier:
            return hier.request(self.st, self.c, self.stream)
        self._host_path()
        return requests.completed()

    def _host_path(self):
        """Host MPI runs the call: with the device pointers where it is CUDA-aware (but it reduces no
        16-bit floats: those stay staged), through pinned host memory otherwise."""
        c = self.c
        mpi_can = c.coll in engine.NO_OP or c.mpi_type is not None or (c.dtype >= 0 and NATIVE[c.dtype] is not None)
        if _host_mpi.cuda_aware() and mpi_can:
            _cuda.sync(self.stream)  # CUDA-aware MPI reads device memory without stream ordering
            self._mpi4py()(self.comm, *self.args)
        else:
            staged.run(self.st, c, self.stream)

    def start(self, req):
        """Starts one round into persistent request `req` (points it at the round's generalized
        request); returns the ticket of the GPU work, or 0 when the round already completed."""
        st, c = self.st, self.c
        if _undecided.pending():
            _undecided.settle()  # the engine's kernels meet their peers' in launch order (mpigpu/_state/undecided.py)
        st.check_usable(c.name)
        if c.count == 0:
            requests.set_handle(req, requests.completed())
            return 0
        if self.hier:
            with _cuda.errors_as(c.name, st.rank):
                requests.set_handle(req, _cuda.with_device(self.device, hier.request, st, c, self.stream))
            return 0
        if st.team is None and self.engine_args is not None:
            raise Error(c.name, 'persistent request used after its communicator was freed', rank=st.rank,
                        error_class=MPI.ERR_REQUEST)
        with st.errors(c.name):
            if self.engine_args is not None and requests.c_completion():
                run, args = st.team.run_request, self.engine_args
                if _cuda.current_device() == self.device and requests.agent.enabled():
                    return run(*args, MPI._addressof(req), True)  # the common case, one Cython call
                return _cuda.with_device(self.device, requests.start_gpu, req,
                                         lambda addr, watch: run(*args, addr, watch))._ticket
            _cuda.with_device(self.device, self._run, True)  # staged or CUDA-aware: done on return
            requests.set_handle(req, requests.completed())
            return 0
