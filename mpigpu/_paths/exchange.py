"""The exchange path: Alltoall, Alltoallv, Alltoallw, Allgatherv, Gather, Gatherv, Scatter, Scatterv and
the neighbourhood collectives (Neighbor_allgather(v), Neighbor_alltoall(v/w): each block to or from its
neighbour, a topology's edges read once) on device buffers, GPU to GPU over the device team's exchange
transport (cuda/exchange_kernel.cuh).

Each of them is "rank r sends a byte range of its input to rank p, which writes it at an offset of its
output": `describe` reads this rank's arguments into those ranges (`Ranges`; a block of a derived datatype with
gaps as its packed bytes and its layout, which the kernel follows: cuda/block_shape.cuh), or None where
only the mirrored path can read them (a datatype the kernel cannot follow, a specification it does not
take, an intercommunicator, host memory among the significant buffers, in-place Alltoall(v) of blocks with
gaps). The ranks agree on the
call's path as for the engine's collectives (mpigpu/_state/agree.py: a host rank of the call posts on the
placement board, comm's generated method): the exchange when every rank described its call, else the
host MPI call on every rank (device buffers through mirrors, mpigpu/_paths/mirrored.py), which also
raises mpi4py's own errors for arguments it refuses. `run` takes the blocking calls, `on_stream` their
stream= forms, `start` their non-blocking (I*) forms, `persistent` their *_init forms.
"""
from mpi4py import MPI

from .. import _cuda
from .._base.codes import Placement, Verdict
from .._base.config import config
from .._state import undecided as _undecided
from .._state.undecided import Undecided, unsettled
from ..errors import Error
from .exchange_read import CODES, describe, edges_of, type_of
from .._state import requests

# CODES (exchange_read): the blocking methods this path takes, with their code on the placement board.
# The methods the fast path reads (mpigpu/_ext/_exchange.pxi); the others only `describe`.
FAST = frozenset(('Alltoall', 'Alltoallv', 'Alltoallw', 'Allgatherv', 'Gather', 'Gatherv', 'Scatter', 'Scatterv',
                  'Neighbor_allgather', 'Neighbor_allgatherv', 'Neighbor_alltoall', 'Neighbor_alltoallv'))
_exchanged = [0]  # calls this process ran on the exchange transport (calls(): tests and debugging)


def calls():
    """How many calls this process has run on the exchange transport (either path)."""
    fast = getattr(_cuda.device, 'exchange_fast_calls', None)
    return _exchanged[0] + (fast() if fast is not None else 0)


def fast_entry():
    """The CUDA layer's fast path for these calls (mpigpu/_ext/_exchange.pxi: the common forms read and
    agreed in one Cython call), bound to what it reads, or None where the layer has none (the CPU
    tests' fake layer): `entry(comm, code, sendbuf, recvbuf, root or None, edges_of(state) or None)` is 1
    when it ran the call, else 0 and `run` takes it."""
    entry = getattr(_cuda.device, 'exchange_entry', None)
    if entry is None:
        return None
    _cuda.device.bind_exchange_entry(unsettled, config, MPI.Datatype, MPI.IN_PLACE, MPI.PROC_NULL, type_of)
    return entry


def _ranges_for(st, name, args):
    """The Ranges of blocking call `name` on this rank, or None where this rank votes for the host MPI
    call (describe declined it, fewer bytes than MPIGPU_EXCHANGE_MIN_BYTES, buffers on another GPU)."""
    edges = edges_of(st) if name.startswith('Neighbor_') else None
    ranges = describe(name, st.rank, st.size, args, edges)
    if ranges is not None and sum(ranges.send_bytes) + sum(ranges.recv_bytes) < config.exchange_min_bytes:
        return None  # a small call: the mirrors' fixed cost is the smaller (every rank then takes them)
    if ranges is not None and st.device is not None and ranges.device not in (None, st.device):
        return None  # buffers on another GPU than the communicator's: the mirrors take them
    return ranges


def start(st, name, blocking, args, host_start):
    """The non-blocking form `name` (Ialltoall ... Ineighbor_alltoallw) of blocking call `blocking` on
    device buffers: its request (start_work)."""
    return start_work(st, name, CODES[blocking], lambda: _ranges_for(st, blocking, args), host_start)


def start_work(st, name, code, read, host_start):
    """The request of non-blocking call `name` (board code `code`; read() its work: Ranges, a Reduction,
    or None where this rank votes for the host MPI call). On the exchange transport, enqueued on the
    buffers' stream with a request that completes after the kernel, where every rank described its call
    and the communicator's team is up already (a team is set up by a blocking call: a rank without one
    votes for the host); else host_start(), the host MPI call on mirrors in MPI's order. Its ranks agree
    without waiting (mpigpu/_state/agree.py): the request of a call whose peers have not all posted starts its
    path once they have."""
    _usable(st, name, code, True)
    work = read() if st.team is not None else None
    placement = Placement.DEVICE if work is not None else Placement.HOST_MPI
    agreement = st.agreement

    def started(verdict):
        return _request(st, name, work) if verdict == Verdict.DEVICE else host_start()
    verdict = agreement.decide(name, code, placement, True, started)
    if isinstance(verdict, Undecided):  # its request decides it
        return requests.start(requests.Deferred(lambda wait: agreement.started(verdict, wait)),
                              requests.DeferredRequest)
    return started(verdict)


def persistent(st, name, blocking, args, host_init):
    """The persistent form `name` (Alltoall_init ... Neighbor_alltoallw_init) of blocking call `blocking`
    on device buffers (persistent_work)."""
    return persistent_work(st, name, CODES[blocking], lambda: _ranges_for(st, blocking, args), host_init)


def persistent_work(st, name, code, read, host_init):
    """The persistent request of `name` (board code `code`, read() its work): its path agreed once, here,
    as a blocking call's is (every rank makes the *_init call); on the transport, a request whose every
    Start enqueues the work read now (requests.Persistent), else host_init(), mpi4py's persistent
    request on mirrors."""
    _usable(st, name, code, False)
    work = read()
    placement = Placement.DEVICE if work is not None else Placement.HOST_MPI
    if st.agreement.decide(name, code, placement) != Verdict.DEVICE:
        return host_init()
    with _cuda.errors_as(name, st.rank):
        st.bind_device(name, work.device if work.device is not None else _default_device(st))
    if st.team is None:  # no device team on this communicator (agreed at its setup): every rank stages
        return host_init()
    keep = getattr(work, 'keep', None)
    if keep is not None:
        keep(st.device)  # what it needs on the GPU, made once for all its rounds
    return requests.Persistent.create(_Rounds(st, name, work))


class _Rounds:
    """A persistent call's rounds on the transport: what requests.Persistent starts."""

    def __init__(self, st, name, work):
        self.st, self.name, self.work = st, name, work

    def start(self, req):
        """Starts one round into `req`: returns the GPU work's ticket, or 0 when the round already
        completed (no C completion: the CPU tests' fake layer)."""
        st, w = self.st, self.work
        if _undecided.pending():
            _undecided.settle()  # kernels meet their peers' in launch order (mpigpu/_state/undecided.py)
        st.check_usable(self.name)
        if st.team is None:
            raise Error(self.name, 'persistent request used after its communicator was freed', rank=st.rank,
                        error_class=MPI.ERR_REQUEST)
        t = st.team

        def launch(addr, watch):
            return w.request(t, _launch_stream(st, w), addr, watch)
        with st.errors(self.name):
            if requests.c_completion():
                _exchanged[0] += 1
                return _cuda.with_device(st.device, requests.start_gpu, req, launch)._ticket
            _cuda.with_device(st.device, _run, st, w)
        _exchanged[0] += 1
        requests.set_handle(req, requests.completed())
        return 0


def _usable(st, name, code, nonblocking):
    """Raises on a communicator that a fault or an abort has broken, as Plan does, telling the peers
    (they raise too, instead of waiting for this rank's post)."""
    try:
        st.check_usable(name)
    except Exception:
        st.agreement.refuse(name, code, nonblocking)
        raise


def _default_device(st):
    """The GPU of a call none of whose buffers holds a byte: the communicator's, else the current one."""
    return st.device if st.device is not None else _cuda.current_device()


def _request(st, name, work):
    """The request of an agreed non-blocking call: GPU work that a generalized request completes
    (requests.start_gpu), or, without C completion (the CPU tests' fake layer), the call run now."""
    with st.errors(name):
        req = _cuda.with_device(st.device, _start_request, st, name, work)
    _exchanged[0] += 1
    return req


def _start_request(st, name, work):
    stream = _launch_stream(st, work)
    t = st.team
    if not requests.c_completion():
        work.run(t, stream)
        return requests.completed()
    req = requests.start_gpu(requests.GpuRequest(), lambda addr, watch: work.request(t, stream, addr, watch),
                             lambda exc: st.failed(name, exc))
    work.bind(req, stream)
    return req


def run(st, name, args, host_call):
    """Runs blocking call `name` on device buffers (run_work)."""
    return run_work(st, name, CODES[name], lambda: _ranges_for(st, name, args), host_call)


def run_work(st, name, code, read, host_call, stream=None):
    """Runs blocking call `name` (board code `code`; read() its work, or None where this rank votes for
    the host MPI call): on the exchange transport when every rank described its call and the
    communicator's team is up, else host_call() (the host MPI call on mirrors), as every rank of the
    call does. With `stream` (the stream= form) the work is enqueued on that CUDA stream (its producers
    ordered before it by the caller, as with NCCL) and the call returns at once, the result there when
    the stream reaches it; where the ranks take the host MPI call instead, the stream is synchronized
    first, so the result is there before the call returns, which the stream's later work sees too."""
    _usable(st, name, code, False)
    work = read()
    placement = Placement.DEVICE if work is not None else Placement.HOST_MPI
    verdict = st.agreement.decide(name, code, placement)
    if verdict == Verdict.DEVICE:
        with _cuda.errors_as(name, st.rank):
            st.bind_device(name, work.device if work.device is not None else _default_device(st))
    # a verdict for the host MPI call, or no device team on this communicator (agreed at its setup)
    if verdict != Verdict.DEVICE or st.team is None:
        if stream is not None:
            with _cuda.errors_as(name, st.rank):
                _cuda.sync(stream)
        return host_call()
    with st.errors(name):
        if stream is None:
            _cuda.with_device(st.device, _run, st, work)
        else:
            _cuda.with_device(st.device, work.enqueue, st.team, stream)
    _exchanged[0] += 1
    return None


def on_stream(st, name, args, stream, host_call):
    """The stream= form of blocking call `name` (run_work with its stream)."""
    return run_work(st, name, CODES[name], lambda: _ranges_for(st, name, args), host_call, stream)


def _launch_stream(st, work):
    """The stream the call is enqueued on: its first buffer's producer stream, after the others'."""
    return _cuda.launch_stream(work.bufs, st.device, st.dep_event)


def _run(st, work):
    work.run(st.team, _launch_stream(st, work))
