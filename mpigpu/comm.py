"""mpigpu.Intracomm: an mpi4py intracommunicator whose buffer methods take GPU arrays.

Host buffers go to mpi4py unchanged (the only added cost is a type check); device buffers go to the
path that runs them (mpigpu/_plan.py for the engine's five collectives, mpigpu/_paths/ for the rest).
Communicators made from one are wrapped too.
"""
from mpi4py import MPI

from . import _host_mpi, _state
from ._codes import Coll
from ._ext._intake import is_device
from ._paths import mirrored, p2p, requests
from ._paths.engine import try_fast
from ._paths.mirrored import IN, INOUT, OUT
from ._plan import Plan
from .errors import Error

_ANY_SOURCE, _ANY_TAG = MPI.ANY_SOURCE, MPI.ANY_TAG
_ALLREDUCE, _BCAST, _REDUCE_SCATTER_BLOCK, _REDUCE, _ALLGATHER = (
    Coll.ALLREDUCE, Coll.BCAST, Coll.REDUCE_SCATTER_BLOCK, Coll.REDUCE, Coll.ALLGATHER)
_SUM = MPI.SUM
_IN_PLACE = MPI.IN_PLACE


def _device_call(comm, name, sendbuf, recvbuf):
    """True when the call has device buffers; raises when host and device buffers are mixed."""
    s = sendbuf is not None and sendbuf is not MPI.IN_PLACE and is_device(sendbuf)
    r = recvbuf is not None and is_device(recvbuf)
    if s == r or sendbuf is None or sendbuf is MPI.IN_PLACE or recvbuf is None:
        return s or r
    raise Error(name, 'host and device buffers mixed in one call (sendbuf on the %s, recvbuf on the %s)'
                % ('device' if s else 'host', 'device' if r else 'host'), arg='recvbuf',
                rank=comm.Get_rank(), error_class=MPI.ERR_BUFFER)


def _rank(comm):
    st = _state.cached(comm)
    return st.rank if st is not None else comm.Get_rank()


def _stream_handle(name, rank, stream):
    """The cudaStream_t behind `stream=`: an int, a CuPy stream (.ptr) or a PyTorch stream (.cuda_stream)."""
    for attr in ('ptr', 'cuda_stream'):
        if hasattr(stream, attr):
            stream = getattr(stream, attr)
            break
    if isinstance(stream, bool) or not isinstance(stream, int) or stream < 0:
        raise Error(name, f'stream must be a CUDA stream (an int handle, a CuPy or PyTorch stream), not '
                    f'{type(stream).__name__}', arg='stream', rank=rank, error_class=MPI.ERR_ARG)
    return stream


def _wrap(comm):
    if comm == MPI.COMM_NULL or isinstance(comm, Intracomm) or not isinstance(comm, MPI.Intracomm):
        return comm
    return Intracomm(comm)


class Intracomm(MPI.Intracomm):
    """An `mpi4py.MPI.Intracomm` (same handle) whose buffer methods accept CUDA device arrays."""

    # ---- collectives with MPI semantics --------------------------------------------------------
    # stream=: for device buffers, enqueue on that CUDA stream and return at once, as NCCL does (the
    # result is there when the stream reaches it; usable inside CUDA graph capture once the
    # communicator's first GPU call has set up its team). Producers must be ordered before it.
    def Allreduce(self, sendbuf, recvbuf, op=_SUM, *, stream=None):
        if stream is not None:
            return self._on_stream(_ALLREDUCE, sendbuf, recvbuf, op, 0, stream)
        if try_fast(self, _ALLREDUCE, sendbuf, recvbuf, op):
            return None
        if _device_call(self, 'Allreduce', sendbuf, recvbuf):
            return Plan(self, 'Allreduce', _ALLREDUCE, sendbuf, recvbuf, op, 0,
                        lambda: MPI.Intracomm.Allreduce(self, sendbuf, recvbuf, op)).run()
        return MPI.Intracomm.Allreduce(self, sendbuf, recvbuf, op)

    def Bcast(self, buf, root=0, *, stream=None):
        if stream is not None:
            return self._on_stream(_BCAST, None, buf, None, root, stream)
        if try_fast(self, _BCAST, None, buf, None, root):
            return None
        if is_device(buf):
            return Plan(self, 'Bcast', _BCAST, None, buf, None, root,
                        lambda: MPI.Intracomm.Bcast(self, buf, root)).run()
        return MPI.Intracomm.Bcast(self, buf, root)

    def Reduce_scatter_block(self, sendbuf, recvbuf, op=_SUM, *, stream=None):
        if stream is not None:
            return self._on_stream(_REDUCE_SCATTER_BLOCK, sendbuf, recvbuf, op, 0, stream)
        if try_fast(self, _REDUCE_SCATTER_BLOCK, sendbuf, recvbuf, op):
            return None
        if _device_call(self, 'Reduce_scatter_block', sendbuf, recvbuf):
            return Plan(self, 'Reduce_scatter_block', _REDUCE_SCATTER_BLOCK, sendbuf, recvbuf, op, 0,
                        lambda: MPI.Intracomm.Reduce_scatter_block(self, sendbuf, recvbuf, op)).run()
        return MPI.Intracomm.Reduce_scatter_block(self, sendbuf, recvbuf, op)

    def Reduce(self, sendbuf, recvbuf, op=_SUM, root=0, *, stream=None):
        rbuf = recvbuf if _rank(self) == root else None
        if stream is not None:
            return self._on_stream(_REDUCE, sendbuf, rbuf, op, root, stream)
        if try_fast(self, _REDUCE, sendbuf, rbuf, op, root):
            return None
        if _device_call(self, 'Reduce', sendbuf, rbuf):
            return Plan(self, 'Reduce', _REDUCE, sendbuf, rbuf, op, root,
                        lambda: MPI.Intracomm.Reduce(self, sendbuf, recvbuf, op, root)).run()
        return MPI.Intracomm.Reduce(self, sendbuf, recvbuf, op, root)

    def Allgather(self, sendbuf, recvbuf, *, stream=None):
        if stream is not None:
            return self._on_stream(_ALLGATHER, sendbuf, recvbuf, None, 0, stream)
        if try_fast(self, _ALLGATHER, sendbuf, recvbuf, None):
            return None
        if _device_call(self, 'Allgather', sendbuf, recvbuf):
            return Plan(self, 'Allgather', _ALLGATHER, sendbuf, recvbuf, None, 0,
                        lambda: MPI.Intracomm.Allgather(self, sendbuf, recvbuf)).run()
        return MPI.Intracomm.Allgather(self, sendbuf, recvbuf)

    def _host_call(self, coll, sendbuf, recvbuf, op, root, prefix='', suffix=''):
        base = getattr(MPI.Intracomm, prefix + Coll(coll).mpi_name + suffix)
        if coll == _BCAST:
            return lambda: base(self, recvbuf, root)
        if coll == _ALLGATHER:
            return lambda: base(self, sendbuf, recvbuf)
        if coll == _REDUCE:
            return lambda: base(self, sendbuf, recvbuf, op, root)
        return lambda: base(self, sendbuf, recvbuf, op)

    def _on_stream(self, coll, sendbuf, recvbuf, op, root, stream):
        name = Coll(coll).mpi_name
        handle = _stream_handle(name, _rank(self), stream)
        if try_fast(self, coll, sendbuf, recvbuf, op, root, handle):
            return None
        if not _device_call(self, name, sendbuf, recvbuf):
            raise Error(name, 'stream= needs device buffers (host buffers go to MPI, which has no streams)',
                        arg='stream', rank=self.Get_rank(), error_class=MPI.ERR_ARG)
        Plan(self, name, coll, sendbuf, recvbuf, op, root, self._host_call(coll, sendbuf, recvbuf, op, root),
             stream=handle).run(sync=False)
        return None

    # ---- non-blocking and persistent collectives: generalized requests (mpigpu/_paths/requests.py) ----
    def _nonblocking(self, name, coll, sendbuf, recvbuf, op, root):
        return Plan(self, name, coll, sendbuf, recvbuf, op, root,
                    self._host_call(coll, sendbuf, recvbuf, op, root)).request()

    def Iallreduce(self, sendbuf, recvbuf, op=_SUM):
        if _device_call(self, 'Iallreduce', sendbuf, recvbuf):
            return self._nonblocking('Iallreduce', _ALLREDUCE, sendbuf, recvbuf, op, 0)
        return MPI.Intracomm.Iallreduce(self, sendbuf, recvbuf, op)

    def Ibcast(self, buf, root=0):
        if is_device(buf):
            return self._nonblocking('Ibcast', _BCAST, None, buf, None, root)
        return MPI.Intracomm.Ibcast(self, buf, root)

    def Ireduce_scatter_block(self, sendbuf, recvbuf, op=_SUM):
        if _device_call(self, 'Ireduce_scatter_block', sendbuf, recvbuf):
            return self._nonblocking('Ireduce_scatter_block', _REDUCE_SCATTER_BLOCK, sendbuf, recvbuf, op, 0)
        return MPI.Intracomm.Ireduce_scatter_block(self, sendbuf, recvbuf, op)

    def Ireduce(self, sendbuf, recvbuf, op=_SUM, root=0):
        rbuf = recvbuf if self.Get_rank() == root else None
        if _device_call(self, 'Ireduce', sendbuf, rbuf):
            return self._nonblocking('Ireduce', _REDUCE, sendbuf, rbuf, op, root)
        return MPI.Intracomm.Ireduce(self, sendbuf, recvbuf, op, root)

    def Iallgather(self, sendbuf, recvbuf):
        if _device_call(self, 'Iallgather', sendbuf, recvbuf):
            return self._nonblocking('Iallgather', _ALLGATHER, sendbuf, recvbuf, None, 0)
        return MPI.Intracomm.Iallgather(self, sendbuf, recvbuf)

    def _persistent(self, name, coll, sendbuf, recvbuf, op, root, host_init):
        if not _device_call(self, name, sendbuf, recvbuf):
            return host_init()
        plan = Plan(self, name, coll, sendbuf, recvbuf, op, root, self._host_call(coll, sendbuf, recvbuf, op, root))
        return requests.Persistent.create(plan)

    def Allreduce_init(self, sendbuf, recvbuf, op=_SUM, info=MPI.INFO_NULL):
        return self._persistent('Allreduce_init', _ALLREDUCE, sendbuf, recvbuf, op, 0,
                                lambda: MPI.Intracomm.Allreduce_init(self, sendbuf, recvbuf, op, info))

    def Bcast_init(self, buf, root=0, info=MPI.INFO_NULL):
        return self._persistent('Bcast_init', _BCAST, None, buf, None, root,
                                lambda: MPI.Intracomm.Bcast_init(self, buf, root, info))

    def Reduce_scatter_block_init(self, sendbuf, recvbuf, op=_SUM, info=MPI.INFO_NULL):
        return self._persistent('Reduce_scatter_block_init', _REDUCE_SCATTER_BLOCK, sendbuf, recvbuf, op, 0,
                                lambda: MPI.Intracomm.Reduce_scatter_block_init(self, sendbuf, recvbuf, op, info))

    def Reduce_init(self, sendbuf, recvbuf, op=_SUM, root=0, info=MPI.INFO_NULL):
        rbuf = recvbuf if self.Get_rank() == root else None
        return self._persistent('Reduce_init', _REDUCE, sendbuf, rbuf, op, root,
                                lambda: MPI.Intracomm.Reduce_init(self, sendbuf, recvbuf, op, root, info))

    def Allgather_init(self, sendbuf, recvbuf, info=MPI.INFO_NULL):
        return self._persistent('Allgather_init', _ALLGATHER, sendbuf, recvbuf, None, 0,
                                lambda: MPI.Intracomm.Allgather_init(self, sendbuf, recvbuf, info))

    # ---- point-to-point (mpigpu/_paths/p2p.py): GPU to GPU over peer mappings, or staged ----------------
    def Isend(self, buf, dest, tag=0):
        if is_device(buf):
            return p2p.isend(self, 'Isend', MPI.Intracomm.Isend, buf, dest, tag)
        return MPI.Intracomm.Isend(self, buf, dest, tag)

    def Issend(self, buf, dest, tag=0):
        if is_device(buf):
            return p2p.isend(self, 'Issend', MPI.Intracomm.Issend, buf, dest, tag)
        return MPI.Intracomm.Issend(self, buf, dest, tag)

    def Irsend(self, buf, dest, tag=0):
        if is_device(buf):
            return p2p.isend(self, 'Irsend', MPI.Intracomm.Irsend, buf, dest, tag)
        return MPI.Intracomm.Irsend(self, buf, dest, tag)

    def Ibsend(self, buf, dest, tag=0):
        if is_device(buf):
            return p2p.isend(self, 'Ibsend', MPI.Intracomm.Ibsend, buf, dest, tag)
        return MPI.Intracomm.Ibsend(self, buf, dest, tag)

    def _receives_specially(self, buf):
        """A host receive that must take kept messages or look for a GPU sender's header."""
        st = _state.cached(self)
        return st is not None and st.team is not None and (bool(p2p.kept_messages(st)) or p2p.host_checked(st, buf))

    def Irecv(self, buf, source=_ANY_SOURCE, tag=_ANY_TAG):
        if is_device(buf) or self._receives_specially(buf):
            return p2p.irecv(self, buf, source, tag)
        return MPI.Intracomm.Irecv(self, buf, source, tag)

    def Send(self, buf, dest, tag=0):
        if is_device(buf):
            return p2p.send(self, 'Send', buf, dest, tag)
        return MPI.Intracomm.Send(self, buf, dest, tag)

    def Ssend(self, buf, dest, tag=0):
        if is_device(buf):
            return p2p.send(self, 'Ssend', buf, dest, tag)
        return MPI.Intracomm.Ssend(self, buf, dest, tag)

    def Rsend(self, buf, dest, tag=0):
        if is_device(buf):
            return p2p.send(self, 'Rsend', buf, dest, tag)
        return MPI.Intracomm.Rsend(self, buf, dest, tag)

    def Bsend(self, buf, dest, tag=0):
        if is_device(buf):
            return p2p.send(self, 'Bsend', buf, dest, tag)
        return MPI.Intracomm.Bsend(self, buf, dest, tag)

    def Recv(self, buf, source=_ANY_SOURCE, tag=_ANY_TAG, status=None):
        if is_device(buf) or self._receives_specially(buf):
            return p2p.recv(self, buf, source, tag, status)
        return MPI.Intracomm.Recv(self, buf, source, tag, status)

    def Sendrecv(self, sendbuf, dest, sendtag=0, recvbuf=None, source=_ANY_SOURCE, recvtag=_ANY_TAG,
                 status=None):
        if is_device(sendbuf) or is_device(recvbuf) or self._receives_specially(recvbuf):
            return p2p.sendrecv(self, sendbuf, dest, sendtag, recvbuf, source, recvtag, status)
        return MPI.Intracomm.Sendrecv(self, sendbuf, dest, sendtag, recvbuf, source, recvtag, status)

    def Probe(self, source=_ANY_SOURCE, tag=_ANY_TAG, status=None):
        st = _state.cached(self)
        if st is not None and st.control is not None:
            return p2p.probe(self, source, tag, status, True)
        return MPI.Intracomm.Probe(self, source, tag, status)

    def Iprobe(self, source=_ANY_SOURCE, tag=_ANY_TAG, status=None):
        st = _state.cached(self)
        if st is not None and st.control is not None:
            return p2p.probe(self, source, tag, status, False)
        return MPI.Intracomm.Iprobe(self, source, tag, status)

    def Sendrecv_replace(self, buf, dest, sendtag=0, source=_ANY_SOURCE, recvtag=_ANY_TAG, status=None):
        if is_device(buf):
            return mirrored.run(self, 'Sendrecv_replace', lambda b: MPI.Intracomm.Sendrecv_replace(
                self, b, dest, sendtag, source, recvtag, status), [(buf, INOUT)])
        return MPI.Intracomm.Sendrecv_replace(self, buf, dest, sendtag, source, recvtag, status)

    def _rooted(self, name, sendbuf, recvbuf, root, gathers):
        """Gather(v) (gathers=True) and Scatter(v): which buffers are read and written, per MPI.
        The root-only buffer is not significant elsewhere: it is neither mirrored nor passed on."""
        inplace = sendbuf is MPI.IN_PLACE if gathers else recvbuf is MPI.IN_PLACE
        base = getattr(MPI.Intracomm, name)
        at_root = _rank(self) == root
        if gathers:
            recvbuf = recvbuf if at_root else None
            items = [(sendbuf, IN), (recvbuf, INOUT if inplace else OUT)]
        else:
            sendbuf = sendbuf if at_root else None
            items = [(sendbuf, IN), (recvbuf, OUT)]
        if any(v is not None and v is not MPI.IN_PLACE and is_device(v) for v, _ in items):
            return mirrored.run(self, name, lambda s, r: base(self, s, r, root), items)
        return base(self, sendbuf, recvbuf, root)

    def Gather(self, sendbuf, recvbuf, root=0):
        return self._rooted('Gather', sendbuf, recvbuf, root, True)

    def Gatherv(self, sendbuf, recvbuf, root=0):
        return self._rooted('Gatherv', sendbuf, recvbuf, root, True)

    def Scatter(self, sendbuf, recvbuf, root=0):
        return self._rooted('Scatter', sendbuf, recvbuf, root, False)

    def Scatterv(self, sendbuf, recvbuf, root=0):
        return self._rooted('Scatterv', sendbuf, recvbuf, root, False)

    def _all(self, name, sendbuf, recvbuf, *extra, reduces=False):
        """Allgatherv, Alltoall(v), Reduce_scatter, Scan, Exscan: sendbuf read, recvbuf written."""
        base = getattr(MPI.Intracomm, name)
        if is_device(sendbuf) or is_device(recvbuf):
            role = INOUT if sendbuf is MPI.IN_PLACE else OUT
            return mirrored.run(self, name, lambda s, r: base(self, s, r, *extra),
                               [(sendbuf, IN), (recvbuf, role)], reduces=reduces)
        return base(self, sendbuf, recvbuf, *extra)

    def Allgatherv(self, sendbuf, recvbuf):
        return self._all('Allgatherv', sendbuf, recvbuf)

    def Alltoall(self, sendbuf, recvbuf):
        return self._all('Alltoall', sendbuf, recvbuf)

    def Alltoallv(self, sendbuf, recvbuf):
        return self._all('Alltoallv', sendbuf, recvbuf)

    def Reduce_scatter(self, sendbuf, recvbuf, recvcounts=None, op=_SUM):
        return self._all('Reduce_scatter', sendbuf, recvbuf, recvcounts, op, reduces=True)

    def Scan(self, sendbuf, recvbuf, op=_SUM):
        return self._all('Scan', sendbuf, recvbuf, op, reduces=True)

    def Exscan(self, sendbuf, recvbuf, op=_SUM):
        return self._all('Exscan', sendbuf, recvbuf, op, reduces=True)

    # ---- communicator constructors return wrapped communicators ------------------------------
    def Dup(self, info=None):
        return _wrap(MPI.Intracomm.Dup(self) if info is None else MPI.Intracomm.Dup(self, info))

    def Split(self, color=0, key=0):
        return _wrap(MPI.Intracomm.Split(self, color, key))

    def Split_type(self, split_type, key=0, info=MPI.INFO_NULL):
        return _wrap(MPI.Intracomm.Split_type(self, split_type, key, info))

    def Create(self, group):
        return _wrap(MPI.Intracomm.Create(self, group))

    def Create_group(self, group, tag=0):
        return _wrap(MPI.Intracomm.Create_group(self, group, tag))

    def Free(self):
        """Releases the device team, workspace and staging buffers, then frees the communicator."""
        _state.release(self)
        MPI.Intracomm.Free(self)

    # ---- mpigpu extras ---------------------------------------------------------------------------
    def engine_status(self):
        """'on', 'off: <why>', or 'not set up yet': whether GPU collectives use the device engine."""
        return _state.engine_status(self)


# The other non-blocking collectives and Isendrecv(_replace) on device buffers run their blocking
# form and return a completed request (with the receive's status for Isendrecv): MPI's results,
# without overlap. A program whose ranks rely on one of these not blocking (starting it, then sending
# what a peer needs to start it) would wait forever.
_BLOCKING_FORM = {
    'Iallgatherv': 'Allgatherv', 'Igather': 'Gather', 'Igatherv': 'Gatherv', 'Iscatter': 'Scatter',
    'Iscatterv': 'Scatterv', 'Ialltoall': 'Alltoall', 'Ialltoallv': 'Alltoallv', 'Iscan': 'Scan',
    'Iexscan': 'Exscan', 'Ireduce_scatter': 'Reduce_scatter', 'Isendrecv': 'Sendrecv',
    'Isendrecv_replace': 'Sendrecv_replace',
}


def _completing(name, blocking):
    base = getattr(MPI.Intracomm, name)
    receives = name.startswith('Isendrecv')

    def method(self, *args, **kwargs):
        values = list(args) + list(kwargs.values())
        if any(v is not None and v is not MPI.IN_PLACE and is_device(v) for v in values):
            if not receives:
                getattr(self, blocking)(*args, **kwargs)
                return requests.completed()
            status = MPI.Status()
            getattr(self, blocking)(*args, status=status, **kwargs)
            return requests.completed(status)
        return base(self, *args, **kwargs)
    method.__name__ = method.__qualname__ = name
    method.__doc__ = base.__doc__
    return method


for _name, _blocking in _BLOCKING_FORM.items():
    if hasattr(MPI.Intracomm, _name):
        setattr(Intracomm, _name, _completing(_name, _blocking))


# Buffer methods mpigpu has no device path for (persistent point-to-point, Alltoallw, the persistent
# forms of the mirrored collectives): with a device buffer and an MPI that is not CUDA-aware they
# raise instead of passing a device pointer to MPI, which would crash the process.
_UNSUPPORTED = (
    'Send_init', 'Ssend_init', 'Rsend_init', 'Bsend_init', 'Recv_init',
    'Psend_init', 'Precv_init', 'Alltoallw', 'Ialltoallw', 'Reduce_scatter_init', 'Allgatherv_init',
    'Gather_init', 'Gatherv_init', 'Scatter_init', 'Scatterv_init', 'Alltoall_init', 'Alltoallv_init',
    'Alltoallw_init', 'Scan_init', 'Exscan_init',
)


def _guard(name):
    base = getattr(MPI.Intracomm, name)

    def method(self, *args, **kwargs):
        for value in list(args) + list(kwargs.values()):
            if value is not None and is_device(value):
                if not _host_mpi.cuda_aware():
                    raise Error(name, 'device buffers are not supported by this method yet (use the blocking '
                                'form, which mpigpu handles)', arg='buffer', rank=_rank(self),
                                error_class=MPI.ERR_BUFFER)
                break
        return base(self, *args, **kwargs)
    method.__name__ = method.__qualname__ = name
    method.__doc__ = base.__doc__
    return method


for _name in _UNSUPPORTED:
    if hasattr(MPI.Intracomm, _name):
        setattr(Intracomm, _name, _guard(_name))
