"""A device-buffer collective bound to the path that runs it: parsed and checked once (mpigpu/_call.py),
its GPU and launch stream resolved, then run to completion (blocking), enqueued on a stream
(stream=), or started as a request (non-blocking, persistent). A blocking call is a one-shot plan, so
every form shares this setup; the Cython fast path (mpigpu/_paths/engine.py) skips it for the common
blocking call once the communicator's team is up.

Paths: the device engine when the communicator's team is up and implements the type and op; host MPI
with the device pointers when that MPI is CUDA-aware; the staged path otherwise.
"""
from mpi4py import MPI

from . import _cuda, _host_mpi
from ._call import build
from ._state import state_of
from ._types import NATIVE
from .errors import Error
from ._paths import engine, requests, staged


def _launch_stream(st, c):
    """Checks the buffers' memory and device, binds the rank's GPU (team setup on the first call) and
    returns the stream to launch on: the producer's (CAI v3), or the one a DLPack producer was asked
    to order its work before; a second buffer produced on another stream is waited for with an event."""
    first = None
    for arg, label in ((c.send, 'sendbuf'), (c.recv, 'recvbuf' if c.recv is not c.send else 'buf')):
        if arg is None or arg.buf.nbytes == 0:
            continue
        dev = _cuda.device_of(c.name, label, st.rank, arg.buf)
        if first is None:
            first = dev
        elif dev != first:
            raise Error(c.name, f'buffers on devices {first} and {dev}', arg=label, rank=st.rank,
                        error_class=MPI.ERR_BUFFER)
    if first is None:
        first = c.device if c.device is not None and c.device >= 0 else _cuda.device.get_device()
    st.bind_device(c.name, first)
    return _cuda.with_device(st.device, _order_streams, st, c)


def _order_streams(st, c):
    dm = _cuda.device
    stream = None
    for arg in (c.send, c.recv):
        if arg is None:
            continue
        s = _cuda.stream_of(arg.buf, st.device)
        if stream is None:
            stream = s
        elif s != stream:
            dm.event_record(st.dep_event, s)
            dm.stream_wait_event(stream, st.dep_event)
    return 0 if stream is None else stream


class Plan:
    """One collective call on device buffers, ready to run (MPI_Allreduce and MPI_Allreduce_init alike)."""
    __slots__ = ('st', 'c', 'stream', 'host_call', 'engine_args', 'device')

    def __init__(self, comm, name, coll, sendbuf, recvbuf, op, root, host_call, stream=None):
        """`host_call()`: the same call through mpi4py (for a CUDA-aware MPI). `stream`: a stream= call's
        stream, which DLPack producers are asked to order their work before (an event towards another
        stream would cross a CUDA graph capture's boundary)."""
        st = self.st = state_of(comm)
        _cuda.require(name, st.rank)
        stream_for = _cuda.consumer_stream if stream is None else (lambda device: stream)
        c = self.c = build(name, coll, st.size, st.rank, sendbuf, recvbuf, op, root, stream_for)
        self.host_call = host_call
        self.engine_args = self.device = None
        if c.count == 0:
            return
        with _cuda.errors_as(name, st.rank):
            launch = _launch_stream(st, c)
        self.stream = launch if stream is None else stream
        self.device = st.device
        if engine.runs(st, c):
            self.engine_args = engine.launch_args(c, self.stream)

    def run(self, sync=True):
        """Runs the call: `sync`, returns with the result (MPI blocking); else the engine's kernel may
        still run when it returns (stream=). Host MPI paths complete before returning either way."""
        if self.c.count:
            with _cuda.errors_as(self.c.name, self.st.rank):
                _cuda.with_device(self.device, self._run, sync)

    def request(self):
        """Starts the call and returns a request for it (non-blocking)."""
        if not self.c.count:
            return requests.completed()
        with _cuda.errors_as(self.c.name, self.st.rank):
            return _cuda.with_device(self.device, self._request)

    def _run(self, sync):
        if self.engine_args is not None:
            self.st.team.run(*self.engine_args, sync)
        else:
            self._host_path()

    def _request(self):
        if self.engine_args is not None:
            self.st.team.run(*self.engine_args, False)
            return requests.gpu_request(self.device, self.stream)
        self._host_path()
        return requests.completed()

    def _host_path(self):
        """Host MPI runs the call: with the device pointers where it is CUDA-aware (but it reduces no
        16-bit floats: those stay staged), through pinned host memory otherwise."""
        c = self.c
        mpi_can = c.coll in engine._NO_OP or c.mpi_type is not None or (c.dtype >= 0 and NATIVE[c.dtype] is not None)
        if _host_mpi.cuda_aware() and mpi_can:
            _cuda.device.stream_sync(self.stream)  # CUDA-aware MPI reads device memory without stream ordering
            self.host_call()
        else:
            staged.run(self.st, c, self.stream)

    def start(self, req):
        """Starts one round into persistent request `req` (points it at the round's generalized
        request); returns the ticket of the GPU work, or 0 when the round already completed."""
        st, c = self.st, self.c
        if c.count == 0:
            requests.set_handle(req, requests.completed())
            return 0
        if st.team is None and self.engine_args is not None:
            raise Error(c.name, 'persistent request used after its communicator was freed', rank=st.rank,
                        error_class=MPI.ERR_REQUEST)
        with _cuda.errors_as(c.name, st.rank):
            if self.engine_args is not None and requests.c_completion():
                run, args = st.team.run_request, self.engine_args
                if _cuda.device.get_device() == self.device and requests.agent.enabled():
                    return run(*args, MPI._addressof(req), True)  # the common case, one Cython call
                return _cuda.with_device(self.device, requests.start_gpu, req,
                                         lambda addr, watch: run(*args, addr, watch))._ticket
            _cuda.with_device(self.device, self._run, True)  # staged or CUDA-aware: done on return
            requests.set_handle(req, requests.completed())
            return 0
