"""Per-communicator GPU state and the dispatch of device-buffer collectives:
device engine (one fused kernel over peer mappings) when the team is up, staged path otherwise.

Team setup is collective and lazy (the first GPU call on a communicator), agreed by all ranks, and
cached on the communicator through an MPI attribute, so every wrapper of one handle shares it.
"""
import atexit
import logging

from mpi4py import MPI

from . import _buffers, _requests
from ._config import config
from ._types import ALGO, NATIVE
from .errors import Error

try:
    from ._ext import _device
except ImportError:  # CPU-only build: no nvcc when it was built
    _device = None

log = logging.getLogger('mpigpu')
if config.debug and not log.handlers:
    _h = logging.StreamHandler()
    _h.setFormatter(logging.Formatter('mpigpu: %(message)s'))
    log.addHandler(_h)
    log.setLevel(logging.DEBUG)

_consumer_streams = {}


def gpu_available():
    """(True, '') when this build has the CUDA engine and sees a GPU; else (False, why)."""
    if _device is None:
        return False, 'mpigpu was built without CUDA (nvcc was not found at build time)'
    if _device.device_count() == 0:
        return False, 'no CUDA device or driver is visible'
    return True, ''


def consumer_stream(device):
    """The stream mpigpu offers DLPack producers on `device` (created once per process)."""
    if device is None or device < 0 or _device is None:
        return None
    s = _consumer_streams.get(device)
    if s is None:
        prev = _device.get_device()
        _device.set_device(device)
        try:
            s = _consumer_streams[device] = _device.stream_create()
        finally:
            _device.set_device(prev)
    return s


def _mpi_cuda_aware():
    if config.mpi_cuda_aware == '1':
        return True
    if config.mpi_cuda_aware == '0':
        return False
    import ctypes
    try:
        fn = ctypes.CDLL(None).MPIX_Query_cuda_support
    except (AttributeError, OSError):
        return False
    fn.restype = ctypes.c_int
    try:
        return bool(fn())
    except Exception:
        return False


class GpuState:
    """Everything mpigpu attaches to one communicator for device buffers."""

    def __init__(self, comm):
        self.comm = comm  # a plain mpi4py.MPI.Intracomm on the same handle (no recursion into mpigpu)
        self.rank = comm.Get_rank()
        self.size = comm.Get_size()
        self.device = None
        self.team = None
        self.reason = None      # why the engine is not used (None: not yet decided)
        self.stager = None
        self.dep_event = None
        self.cuda_aware = None
        self.shadow = None      # duplicate for point-to-point replies (mpigpu/_p2p_ipc.py), with the team
        self.kept = []          # (source, tag, bytes) that Probe took out of MPI, oldest first
        self.reply_tags = {}    # dest -> last reply tag used

    # ---- setup -------------------------------------------------------------------------------
    def bind_device(self, name, device):
        if self.device is None:
            self.device = device
            self.dep_event = _with_device(device, _device.event_create)
            self._setup_team()
        elif device != self.device:
            raise Error(name, f'buffer is on device {device} but this rank uses device {self.device} on '
                        'this communicator', arg='buffer', rank=self.rank, error_class=MPI.ERR_BUFFER)

    def _setup_team(self):
        """Collective: every rank of the communicator takes part, and all agree on the outcome."""
        comm, n = self.comm, self.size
        reason = ''
        node = comm.Split_type(MPI.COMM_TYPE_SHARED)
        try:
            local = node.Get_size() == n
        finally:
            node.Free()
        bus = _device.pci_bus_id(self.device)
        buses = comm.allgather(bus)
        shared = len(set(buses)) != n
        if config.algo == 'staged':
            reason = 'MPIGPU_ALGO=staged'
        elif not local:
            reason = 'the ranks span several nodes (the engine is intra-node)'
        elif n > _device.MAX_RANKS:
            reason = f'{n} ranks; the engine holds at most {_device.MAX_RANKS} per team'
        elif shared and not config.shared_gpu:
            reason = 'several ranks use one GPU (' + ', '.join(f'rank {i}: {b}' for i, b in enumerate(buses)) + ')'
        else:
            for peer, pbus in enumerate(buses):
                if peer == self.rank or pbus == bus:  # a rank sharing this GPU (MPIGPU_SHARED_GPU): no peer access
                    continue
                ordinal = _device.device_by_pci_bus_id(pbus)
                if ordinal < 0:
                    reason = f'GPU {pbus} of rank {peer} is not visible to rank {self.rank} (CUDA_VISIBLE_DEVICES)'
                    break
                if not _device.can_access_peer(self.device, ordinal):
                    reason = f'no peer access from GPU {bus} (rank {self.rank}) to GPU {pbus} (rank {peer})'
                    break
        reason = _agree(comm, reason)
        team = None
        if not reason:
            try:
                team = _with_device(self.device, _device.Team, self.rank, n, self.device, config.chunk_bytes,
                                    config.nslots, config.max_channels, config.timeout_s, config.split_steps,
                                    config.ll128_bytes, config.resident_us, config.resident_blocks,
                                    config.resident_max_bytes)
                handle = team.export_handle()
            except _device.DeviceError as exc:
                handle, reason = None, f'rank {self.rank}: workspace setup failed: {exc}'
            reason = _agree(comm, reason)
        if not reason:
            handles = comm.allgather(handle)
            try:
                for peer, h in enumerate(handles):
                    team.open_peer(peer, h)
            except _device.DeviceError as exc:
                reason = f'rank {self.rank}: mapping a peer workspace failed: {exc}'
            reason = _agree(comm, reason)
        if reason:
            if team is not None:
                team.close()
            self.team, self.reason = None, reason
            log.debug('rank %d: device engine off on this communicator: %s', self.rank, reason)
        else:
            self.team, self.reason = team, ''
            self.shadow = comm.Dup()  # collective, like the setup: every rank is here
            log.debug('rank %d: device engine on (GPU %s, %d ranks%s, workspace %d MiB, resident kernel %s)',
                      self.rank, bus, n, ', sharing GPUs: testing only' if shared else '',
                      team.workspace_bytes >> 20,
                      f'lingering {config.resident_us:g} us' if config.resident_us > 0 else 'off')

    def next_reply_tag(self, dest):
        """A tag for the reply to a point-to-point send to `dest` (per destination, so replies to
        outstanding sends never collide; the shadow communicator carries nothing else)."""
        tag = (self.reply_tags.get(dest, -1) + 1) % 32768
        self.reply_tags[dest] = tag
        return tag

    def stager_for(self, device):
        """The staging streams and pinned buffers of this communicator on `device` (created once)."""
        from ._staged import Stager
        if self.stager is None or self.stager.device != device:
            if self.stager is not None:
                self.stager.close()
            self.stager = Stager(device)
        return self.stager

    def release(self, collective):
        """Frees the team, staging buffers and events. `collective`: all ranks are here too, so a
        barrier can make sure no peer still uses this rank's workspace."""
        team, self.team = self.team, None
        shadow, self.shadow = self.shadow, None
        if team is not None:
            if collective:
                try:
                    self.comm.Barrier()
                    if shadow is not None:
                        shadow.Free()
                except MPI.Exception:
                    pass
            _with_device(self.device, team.close)
        if self.stager is not None:
            self.stager.close()
            self.stager = None
        if self.dep_event is not None:
            _device.event_destroy(self.dep_event)
            self.dep_event = None

    # ---- per call ----------------------------------------------------------------------------
    def resolve(self, c):
        """Checks the buffers' memory and device, binds the rank's device, returns the launch stream."""
        first = None
        for arg, label in ((c.send, 'sendbuf'), (c.recv, 'recvbuf' if c.coll != 1 else 'buf')):
            if arg is None or arg.buf.nbytes == 0:
                continue
            memtype, dev = _device.pointer_info(arg.buf.ptr)
            if memtype not in (_device.MEM_DEVICE, _device.MEM_MANAGED):
                raise Error(c.name, 'buffer claims to be on a CUDA device but its pointer is not device memory',
                            arg=label, rank=self.rank, error_class=MPI.ERR_BUFFER)
            if first is None:
                first = dev
            elif dev != first:
                raise Error(c.name, f'buffers on devices {first} and {dev}', arg=label, rank=self.rank,
                            error_class=MPI.ERR_BUFFER)
        if first is None:
            first = c.device if c.device is not None and c.device >= 0 else _device.get_device()
        self.bind_device(c.name, first)
        return _with_device(self.device, self._stream, c)

    def _stream(self, c):
        """Launch on the producer's stream (CAI v3), or on the stream a DLPack producer synchronized
        to; a second buffer produced on another stream is waited for with an event."""
        stream = None
        for arg in (c.send, c.recv):
            if arg is None:
                continue
            b = arg.buf
            s = consumer_stream(self.device) if b.stream_synced else (b.stream if b.stream >= 0 else 0)
            if stream is None:
                stream = s
            elif s != stream:
                _device.event_record(self.dep_event, s)
                _device.stream_wait_event(stream, self.dep_event)
        return 0 if stream is None else stream


def _with_device(device, fn, *args):
    """fn(*args) with `device` current, the caller's current device restored after: kernels, copies
    and events must be issued on the device that owns their stream."""
    prev = _device.get_device()
    if prev != device:
        _device.set_device(device)
    try:
        return fn(*args)
    finally:
        if prev != device:
            _device.set_device(prev)


def _agree(comm, reason):
    """The first non-empty reason of any rank, on every rank."""
    reasons = comm.allgather(reason)
    return next((r for r in reasons if r), '')


# ---- state registry: an MPI attribute per communicator, released on Free and at exit ------------
_states = []


def _delete_attr(comm, keyval, state):
    state.release(collective=False)
    try:
        _states.remove(state)
    except ValueError:
        pass
    return MPI.SUCCESS


_KEYVAL = MPI.Comm.Create_keyval(delete_fn=_delete_attr)


def state_of(comm):
    """The GpuState of a communicator (created on first use, shared by all its wrappers)."""
    st = comm.Get_attr(_KEYVAL)
    if st is None:
        st = GpuState(MPI.Intracomm(comm))
        comm.Set_attr(_KEYVAL, st)
        _states.append(st)
    return st


def release(comm):
    """Collective release before MPI_Comm_free (the delete callback cannot call MPI)."""
    st = comm.Get_attr(_KEYVAL)
    if st is not None:
        st.release(collective=True)


@atexit.register
def _release_all():
    # Runs before mpi4py finalizes MPI (registered later, so called earlier).
    from . import _p2p_ipc
    _p2p_ipc.close_all()
    for st in _states:
        try:
            st.release(collective=False)
        except Exception:
            pass
    _states.clear()
    for s in _consumer_streams.values():
        try:
            _device.stream_destroy(s)
        except Exception:
            pass
    _consumer_streams.clear()


# ---- dispatch ----------------------------------------------------------------------------------
def stream_handle(name, rank, stream):
    """The cudaStream_t behind `stream=`: an int, a CuPy stream (.ptr) or a PyTorch stream (.cuda_stream)."""
    for attr in ('ptr', 'cuda_stream'):
        if hasattr(stream, attr):
            stream = getattr(stream, attr)
            break
    if isinstance(stream, bool) or not isinstance(stream, int) or stream < 0:
        raise Error(name, f'stream must be a CUDA stream (an int handle, a CuPy or PyTorch stream), not '
                    f'{type(stream).__name__}', arg='stream', rank=rank, error_class=MPI.ERR_ARG)
    return stream


def collective(comm, name, coll, sendbuf, recvbuf, op, root, host_call, stream=None, nonblocking=False):
    """Runs one GPU collective with MPI semantics.

    Blocking (the default): returns once recvbuf holds the result. `stream`: enqueued on that stream,
    returns at once. `nonblocking`: enqueued after the producer's stream, returns a request for it,
    or None when the call already completed (staged path, count 0)."""
    st = comm._mg_state if hasattr(comm, '_mg_state') else _attach(comm)
    if _device is None:
        raise Error(name, gpu_available()[1], arg='buffer', rank=st.rank, error_class=MPI.ERR_BUFFER)
    # With stream=, DLPack producers are asked to order their work before that stream itself: an
    # event towards another stream would cross a CUDA graph capture's boundary.
    stream_for = consumer_stream if stream is None else (lambda device: stream)
    c = _buffers.build(name, coll, st.size, st.rank, sendbuf, recvbuf, op, root, stream_for)
    if c.count == 0:
        return None
    try:
        launch = st.resolve(c)
        if stream is not None:
            launch = stream
        return _with_device(st.device, _run, st, c, launch, host_call, stream is not None or nonblocking,
                            nonblocking)
    except _device.DeviceError as exc:
        raise Error(name, str(exc), rank=st.rank, error_class=MPI.ERR_OTHER) from None


def engine_runs(st, c):
    """True when the device engine (not staging) runs this call."""
    return st.team is not None and c.dtype >= 0 and (c.coll in (1, 4) or (
        c.op_code >= 0 and _device.supports(c.dtype, c.op_code)))


def _run(st, c, stream, host_call, leave_running=False, want_request=False):
    if engine_runs(st, c):
        st.team.run(c.coll, ALGO.get(config.algo, 0), c.dtype, c.op_code, c.send_ptr, c.recv_ptr, c.count,
                    c.root, config.nchannels, stream, not leave_running)
        return _requests.gpu_request(st.device, stream) if want_request else None
    # Staging and CUDA-aware MPI run through host MPI calls: they complete before returning, also
    # for stream= and non-blocking calls (ordered after `stream` like any call).
    if st.cuda_aware is None:
        st.cuda_aware = _mpi_cuda_aware()
    # CUDA-aware MPI takes device pointers, but like any MPI it cannot reduce 16-bit floats: those
    # stay on the staged path, which reduces them itself.
    from ._staged import run_staged  # imported here: _staged imports this module
    mpi_can = c.coll in (1, 4) or c.mpi_type is not None or (c.dtype >= 0 and NATIVE[c.dtype] is not None)
    if st.cuda_aware and mpi_can:
        _device.stream_sync(stream)  # CUDA-aware MPI reads device memory without stream ordering
        host_call()
        return None
    run_staged(st, c, stream)
    return None


class Plan:
    """A persistent collective's call, parsed and checked once (MPI_Allreduce_init and friends)."""
    __slots__ = ('st', 'c', 'stream', 'host_call', 'args', 'device')

    def __init__(self, comm, name, coll, sendbuf, recvbuf, op, root, host_call):
        st = self.st = comm._mg_state if hasattr(comm, '_mg_state') else _attach(comm)
        if _device is None:
            raise Error(name, gpu_available()[1], arg='buffer', rank=st.rank, error_class=MPI.ERR_BUFFER)
        c = self.c = _buffers.build(name, coll, st.size, st.rank, sendbuf, recvbuf, op, root, consumer_stream)
        self.host_call = host_call
        self.args = None
        self.device = None
        if c.count == 0:
            return
        try:
            self.stream = st.resolve(c)
        except _device.DeviceError as exc:
            raise Error(name, str(exc), rank=st.rank, error_class=MPI.ERR_OTHER) from None
        self.device = st.device
        if engine_runs(st, c):
            self.args = (c.coll, ALGO.get(config.algo, 0), c.dtype, c.op_code, c.send_ptr, c.recv_ptr, c.count,
                         c.root, config.nchannels, self.stream)

    def start(self, req):
        """Starts one round into persistent request `req` (points it at the round's generalized
        request); returns the ticket of the GPU work, or 0 when the round already completed."""
        st, c = self.st, self.c
        if c.count == 0:
            _requests._set_handle(req, _requests.completed())
            return 0
        if st.team is None and self.args is not None:
            raise Error(c.name, 'persistent request used after its communicator was freed', rank=st.rank,
                        error_class=MPI.ERR_REQUEST)
        try:
            if self.args is not None and _requests.c_completion():
                run, args = st.team.run_request, self.args
                if _device.get_device() == self.device and _requests._agent.enabled():
                    return run(*args, MPI._addressof(req), True)  # the common case, one Cython call
                return _with_device(self.device, _requests.start_gpu, req,
                                    lambda addr, watch: run(*args, addr, watch))._ticket
            _with_device(self.device, _run, st, c, self.stream, self.host_call)  # staged: done on return
            _requests._set_handle(req, _requests.completed())
            return 0
        except _device.DeviceError as exc:
            raise Error(c.name, str(exc), rank=st.rank, error_class=MPI.ERR_OTHER) from None


def _attach(comm):
    """Caches the state on the wrapper object (its __dict__), where the fast path looks it up."""
    st = state_of(comm)
    try:
        comm._mg_state = st
    except AttributeError:
        pass
    return st


def engine_status(comm):
    """('on' | 'off: why' | 'not set up yet') for a communicator."""
    st = state_of(comm)
    if st.reason is None:
        return 'not set up yet (the first GPU collective sets it up)'
    return 'on' if st.team is not None else f'off: {st.reason}'
