"""mpigpu.Intracomm: an mpi4py intracommunicator whose buffer collectives take GPU arrays.

Host buffers go to mpi4py unchanged (the only added cost is a type check); device buffers go to the
device engine or the staged path (_engine.collective). Communicators made from one are wrapped too.
"""
from mpi4py import MPI

from . import _engine, _mirror
from ._config import config
from ._ext._intake import is_device
from ._mirror import IN, INOUT, OUT
from ._types import ALGO, OP_CODE
from .errors import Error

_ANY_SOURCE, _ANY_TAG = MPI.ANY_SOURCE, MPI.ANY_TAG

_SUM = MPI.SUM
_IN_PLACE = MPI.IN_PLACE
_fast = getattr(_engine._device, 'fast_collective', None)
_get_device = getattr(_engine._device, 'get_device', None)


def _try_fast(comm, coll, sendbuf, recvbuf, op, root=0):
    """The Cython fast path, once this communicator's device team is up; False: take the general path."""
    st = comm.__dict__.get('_mg_state')
    if st is None or st.team is None or _get_device() != st.device:
        return False  # the general path switches to the team's device
    if coll in (1, 4):
        code = 0
    elif isinstance(op, MPI.Op):
        code = OP_CODE.get(op.handle, -1)
        if code < 0:
            return False
    else:
        return False
    try:
        return _fast(st.team, st.device, coll, sendbuf, recvbuf, code, root, sendbuf is _IN_PLACE,
                     ALGO.get(config.algo, 0), config.nchannels) == 1
    except _engine._device.DeviceError as exc:
        raise Error(('Allreduce', 'Bcast', 'Reduce_scatter_block', '', 'Allgather')[coll], str(exc),
                    rank=st.rank) from None


def _device_call(comm, name, sendbuf, recvbuf):
    """True when the call has device buffers; raises when host and device buffers are mixed."""
    s = sendbuf is not None and sendbuf is not MPI.IN_PLACE and is_device(sendbuf)
    r = recvbuf is not None and is_device(recvbuf)
    if s == r or sendbuf is None or sendbuf is MPI.IN_PLACE or recvbuf is None:
        return s or r
    raise Error(name, 'host and device buffers mixed in one call (sendbuf on the %s, recvbuf on the %s)'
                % ('device' if s else 'host', 'device' if r else 'host'), arg='recvbuf',
                rank=comm.Get_rank(), error_class=MPI.ERR_BUFFER)


def _wrap(comm):
    if comm == MPI.COMM_NULL or isinstance(comm, Intracomm) or not isinstance(comm, MPI.Intracomm):
        return comm
    return Intracomm(comm)


class Intracomm(MPI.Intracomm):
    """An `mpi4py.MPI.Intracomm` (same handle) whose buffer methods accept CUDA device arrays."""

    # ---- collectives with MPI semantics --------------------------------------------------------
    def Allreduce(self, sendbuf, recvbuf, op=_SUM):
        if _try_fast(self, 0, sendbuf, recvbuf, op):
            return None
        if _device_call(self, 'Allreduce', sendbuf, recvbuf):
            return _engine.collective(self, 'Allreduce', 0, sendbuf, recvbuf, op, 0,
                                      lambda: MPI.Intracomm.Allreduce(self, sendbuf, recvbuf, op))
        return MPI.Intracomm.Allreduce(self, sendbuf, recvbuf, op)

    def Bcast(self, buf, root=0):
        if _try_fast(self, 1, None, buf, None, root):
            return None
        if is_device(buf):
            return _engine.collective(self, 'Bcast', 1, None, buf, None, root,
                                      lambda: MPI.Intracomm.Bcast(self, buf, root))
        return MPI.Intracomm.Bcast(self, buf, root)

    def Reduce_scatter_block(self, sendbuf, recvbuf, op=_SUM):
        if _try_fast(self, 2, sendbuf, recvbuf, op):
            return None
        if _device_call(self, 'Reduce_scatter_block', sendbuf, recvbuf):
            return _engine.collective(self, 'Reduce_scatter_block', 2, sendbuf, recvbuf, op, 0,
                                      lambda: MPI.Intracomm.Reduce_scatter_block(self, sendbuf, recvbuf, op))
        return MPI.Intracomm.Reduce_scatter_block(self, sendbuf, recvbuf, op)

    def Reduce(self, sendbuf, recvbuf, op=_SUM, root=0):
        st = self.__dict__.get('_mg_state')
        rbuf = recvbuf if (st.rank if st is not None else self.Get_rank()) == root else None
        if _device_call(self, 'Reduce', sendbuf, rbuf):
            return _engine.collective(self, 'Reduce', 3, sendbuf, rbuf, op, root,
                                      lambda: MPI.Intracomm.Reduce(self, sendbuf, recvbuf, op, root))
        return MPI.Intracomm.Reduce(self, sendbuf, recvbuf, op, root)

    def Allgather(self, sendbuf, recvbuf):
        if _try_fast(self, 4, sendbuf, recvbuf, None):
            return None
        if _device_call(self, 'Allgather', sendbuf, recvbuf):
            return _engine.collective(self, 'Allgather', 4, sendbuf, recvbuf, None, 0,
                                      lambda: MPI.Intracomm.Allgather(self, sendbuf, recvbuf))
        return MPI.Intracomm.Allgather(self, sendbuf, recvbuf)

    # ---- the rest of the buffer API: device buffers through host mirrors (mpigpu/_mirror.py) ----
    def Send(self, buf, dest, tag=0):
        if is_device(buf):
            return _mirror.run(self, 'Send', lambda b: MPI.Intracomm.Send(self, b, dest, tag), [(buf, IN)])
        return MPI.Intracomm.Send(self, buf, dest, tag)

    def Ssend(self, buf, dest, tag=0):
        if is_device(buf):
            return _mirror.run(self, 'Ssend', lambda b: MPI.Intracomm.Ssend(self, b, dest, tag), [(buf, IN)])
        return MPI.Intracomm.Ssend(self, buf, dest, tag)

    def Rsend(self, buf, dest, tag=0):
        if is_device(buf):
            return _mirror.run(self, 'Rsend', lambda b: MPI.Intracomm.Rsend(self, b, dest, tag), [(buf, IN)])
        return MPI.Intracomm.Rsend(self, buf, dest, tag)

    def Bsend(self, buf, dest, tag=0):
        if is_device(buf):
            return _mirror.run(self, 'Bsend', lambda b: MPI.Intracomm.Bsend(self, b, dest, tag), [(buf, IN)])
        return MPI.Intracomm.Bsend(self, buf, dest, tag)

    def Recv(self, buf, source=_ANY_SOURCE, tag=_ANY_TAG, status=None):
        if is_device(buf):
            return _mirror.run(self, 'Recv', lambda b: MPI.Intracomm.Recv(self, b, source, tag, status),
                               [(buf, OUT)])
        return MPI.Intracomm.Recv(self, buf, source, tag, status)

    def Sendrecv(self, sendbuf, dest, sendtag=0, recvbuf=None, source=_ANY_SOURCE, recvtag=_ANY_TAG,
                 status=None):
        if is_device(sendbuf) or is_device(recvbuf):
            return _mirror.run(self, 'Sendrecv', lambda s, r: MPI.Intracomm.Sendrecv(
                self, s, dest, sendtag, r, source, recvtag, status), [(sendbuf, IN), (recvbuf, OUT)])
        return MPI.Intracomm.Sendrecv(self, sendbuf, dest, sendtag, recvbuf, source, recvtag, status)

    def Sendrecv_replace(self, buf, dest, sendtag=0, source=_ANY_SOURCE, recvtag=_ANY_TAG, status=None):
        if is_device(buf):
            return _mirror.run(self, 'Sendrecv_replace', lambda b: MPI.Intracomm.Sendrecv_replace(
                self, b, dest, sendtag, source, recvtag, status), [(buf, INOUT)])
        return MPI.Intracomm.Sendrecv_replace(self, buf, dest, sendtag, source, recvtag, status)

    def _rooted(self, name, sendbuf, recvbuf, root, gathers):
        """Gather(v) (gathers=True) and Scatter(v): which buffers are read and written, per MPI.
        The root-only buffer is not significant elsewhere: it is neither mirrored nor passed on."""
        inplace = sendbuf is MPI.IN_PLACE if gathers else recvbuf is MPI.IN_PLACE
        base = getattr(MPI.Intracomm, name)
        st = self.__dict__.get('_mg_state')
        at_root = (st.rank if st is not None else self.Get_rank()) == root
        if gathers:
            recvbuf = recvbuf if at_root else None
            items = [(sendbuf, IN), (recvbuf, INOUT if inplace else OUT)]
        else:
            sendbuf = sendbuf if at_root else None
            items = [(sendbuf, IN), (recvbuf, OUT)]
        if any(v is not None and v is not MPI.IN_PLACE and is_device(v) for v, _ in items):
            return _mirror.run(self, name, lambda s, r: base(self, s, r, root), items)
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
            return _mirror.run(self, name, lambda s, r: base(self, s, r, *extra),
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
        _engine.release(self)
        MPI.Intracomm.Free(self)

    # ---- mpigpu extras ---------------------------------------------------------------------------
    def engine_status(self):
        """'on', 'off: <why>', or 'not set up yet': whether GPU collectives use the device engine."""
        return _engine.engine_status(self)


# Buffer methods mpigpu has no device path for yet (non-blocking, persistent, Alltoallw, matched
# probes): with a device buffer and an MPI that is not CUDA-aware they raise instead of passing a
# device pointer to MPI, which would crash the process.
_UNSUPPORTED = (
    'Isend', 'Issend', 'Irsend', 'Ibsend', 'Irecv', 'Isendrecv', 'Isendrecv_replace', 'Send_init', 'Ssend_init',
    'Rsend_init', 'Bsend_init', 'Recv_init', 'Psend_init', 'Precv_init', 'Alltoallw', 'Iallreduce', 'Ibcast',
    'Ireduce', 'Ireduce_scatter_block', 'Ireduce_scatter', 'Iallgather', 'Iallgatherv', 'Igather', 'Igatherv',
    'Iscatter', 'Iscatterv', 'Ialltoall', 'Ialltoallv', 'Ialltoallw', 'Iscan', 'Iexscan', 'Allreduce_init',
    'Bcast_init', 'Reduce_init', 'Reduce_scatter_block_init', 'Reduce_scatter_init', 'Allgather_init',
    'Allgatherv_init', 'Gather_init', 'Gatherv_init', 'Scatter_init', 'Scatterv_init', 'Alltoall_init',
    'Alltoallv_init', 'Alltoallw_init', 'Scan_init', 'Exscan_init',
)


def _guard(name):
    base = getattr(MPI.Intracomm, name)

    def method(self, *args, **kwargs):
        for value in list(args) + list(kwargs.values()):
            if value is not None and is_device(value):
                st = self.__dict__.get('_mg_state') or _engine._attach(self)
                if st.cuda_aware is None:
                    st.cuda_aware = _engine._mpi_cuda_aware()
                if not st.cuda_aware:
                    raise Error(name, 'device buffers are not supported by this method yet (use the blocking '
                                'form, which mpigpu handles)', arg='buffer', rank=st.rank,
                                error_class=MPI.ERR_BUFFER)
                break
        return base(self, *args, **kwargs)
    method.__name__ = method.__qualname__ = name
    method.__doc__ = base.__doc__
    return method


for _name in _UNSUPPORTED:
    if hasattr(MPI.Intracomm, _name):
        setattr(Intracomm, _name, _guard(_name))
