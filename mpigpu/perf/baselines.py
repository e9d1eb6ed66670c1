"""The implementations a row can time: mpigpu itself and the baselines of `--compare`.

Each `Impl.make(coll, ...)` returns a function doing one blocking call on prepared buffers, or raises
`Unavailable` with the reason (the row then shows it instead of numbers; other rows go on).
"""
import os
import socket
from functools import partial

import numpy as np
from mpi4py import MPI

from .._base import plain as _plain
from . import halo, pingpong, redistribute, vrows


class Unavailable(Exception):
    pass


_OPS = {'sum': MPI.SUM, 'prod': MPI.PROD, 'max': MPI.MAX, 'min': MPI.MIN}


class Buffers:
    """send/recv arrays of one row on the chosen memory, filled so sums are exact in any type."""

    def __init__(self, xp, coll, count, dtype, n, rank, inplace, root):
        self.xp = xp
        rcount = count * n if coll == 'allgather' else count
        scount = count * n if coll == 'reduce_scatter_block' else count
        base = xp.arange(max(scount, rcount), dtype=dtype) % 7
        self.send = (base[:scount] + (rank + 1)).astype(dtype)
        self.recv = xp.zeros(rcount, dtype=dtype)
        if inplace:
            if coll == 'allgather':
                self.recv[rank * count:(rank + 1) * count] = self.send
            elif coll in ('allreduce', 'reduce', 'reduce_scatter_block'):
                self.recv = self.send.copy()
        self.coll, self.count, self.n, self.rank, self.inplace, self.root = coll, count, n, rank, inplace, root

    def expected(self, op):
        """(expected recv as numpy, mask of the elements that are defined)."""
        n, r, c = self.n, self.rank, self.count
        xp = self.xp
        host = (xp.asnumpy if hasattr(xp, 'asnumpy') else np.asarray)
        base = host(xp.arange(max(c * n, c), dtype=self.send.dtype) % 7)
        if self.coll in ('allreduce', 'reduce'):
            vals = [base[:c] + (k + 1) for k in range(n)]
            out = vals[0].copy()
            for v in vals[1:]:
                out = out + v if op == 'sum' else out * v if op == 'prod' else np.maximum(out, v) if op == 'max' else np.minimum(out, v)
            return out
        if self.coll == 'reduce_scatter_block':
            vals = [base[:c * n] + (k + 1) for k in range(n)]
            out = vals[0].copy()
            for v in vals[1:]:
                out = out + v if op == 'sum' else out * v if op == 'prod' else np.maximum(out, v) if op == 'max' else np.minimum(out, v)
            return out[r * c:(r + 1) * c]
        if self.coll == 'allgather':
            return np.concatenate([base[:c] + (k + 1) for k in range(n)])
        if self.coll == 'bcast':
            return base[:c] + (self.root + 1)
        if self.coll == 'sendrecv':
            return base[:c] + ((r - 1) % n + 1)
        raise ValueError(self.coll)

    def result(self):
        host = (self.xp.asnumpy if hasattr(self.xp, 'asnumpy') else np.asarray)
        if self.coll == 'bcast':
            return host(self.send)
        if self.inplace and self.coll in ('allreduce', 'reduce'):
            return host(self.recv)
        if self.inplace and self.coll == 'reduce_scatter_block':
            return host(self.recv)[:self.count]
        return host(self.recv)


_POINT_TO_POINT = ('sendrecv', 'pingpong', 'halo')  # rows of point-to-point calls: no stream= form

def make_buffers(xp, coll, count, dtype, n, rank, inplace, root):
    """A row's buffers: Buffers, or for an exchange row vrows.VBuffers or redistribute.RBuffers (out of
    place only)."""
    if coll == 'redistribute':
        return redistribute.RBuffers(xp, coll, count, dtype, n, rank, root)
    if coll == 'halo':
        return halo.HBuffers(xp, coll, count, dtype, n, rank, root)
    if coll == 'pingpong':
        return pingpong.PBuffers(xp, coll, count, dtype, n, rank, root)
    if coll in vrows.COLLS:
        return vrows.VBuffers(xp, coll, count, dtype, n, rank, root)
    return Buffers(xp, coll, count, dtype, n, rank, inplace, root)


def mpi_call(comm, b, op, **kw):
    """The mpi4py-style call of a row on communicator `comm` (mpigpu or plain mpi4py); `kw` takes
    mpigpu's stream= for stream-ordered timing. Bound once (functools.partial): each call is then the
    method's call alone, as in a program, with no keyword dictionary built when there is none."""
    c, root = b.coll, b.root
    if c in vrows.COLLS:
        return vrows.mpi_call(comm, b, **kw)
    if c == 'halo':
        return halo.mpi_call(comm, b)
    if c == 'pingpong':
        return pingpong.mpi_call(comm, b)
    mop = _OPS[op]
    s = MPI.IN_PLACE if b.inplace else b.send
    if c == 'allreduce':
        return partial(comm.Allreduce, s, b.recv, mop, **kw)
    if c == 'bcast':
        return partial(comm.Bcast, b.send, root, **kw)
    if c == 'reduce_scatter_block':
        return partial(comm.Reduce_scatter_block, s, b.recv, mop, **kw)
    if c == 'reduce':
        s2 = s if comm.Get_rank() == root else b.send
        return partial(comm.Reduce, s2, b.recv, mop, root, **kw)
    if c == 'allgather':
        return partial(comm.Allgather, MPI.IN_PLACE if b.inplace else b.send, b.recv, **kw)
    if c == 'sendrecv':
        n, r = comm.Get_size(), comm.Get_rank()
        return partial(comm.Sendrecv, b.send, (r + 1) % n, 0, b.recv, (r - 1) % n, 0)
    raise ValueError(c)


class MpigpuImpl:
    name = 'mpigpu'

    def __init__(self, comm):
        self.comm = comm

    def make(self, b, op, stream=False):
        """The blocking call, or with `stream` (launch, sync): stream= calls and one synchronization."""
        if not stream:
            return mpi_call(self.comm, b, op)
        if b.xp is np or b.coll in _POINT_TO_POINT:
            raise Unavailable('stream-ordered timing needs device buffers and a collective')
        st = b.xp.cuda.get_current_stream()
        return mpi_call(self.comm, b, op, stream=st.ptr), st.synchronize


class Mpi4pyImpl:
    """Plain mpi4py on the same communicator's handle: what mpigpu hands host buffers to. On host
    buffers mpigpu's time over this one is the whole overhead mpigpu adds."""
    name = 'mpi4py'

    def __init__(self, comm):
        self.comm = _plain.Intracomm(comm)

    def make(self, b, op, stream=False):
        if b.xp is not np:
            raise Unavailable('device buffers: plain mpi4py needs a CUDA-aware MPI (see cuda-aware-mpi)')
        if stream:
            raise Unavailable('MPI calls have no stream-ordered form')
        return mpi_call(self.comm, b, op)


def require_staging(b, stream):
    """Raises Unavailable for a row that no staging through the host times: host buffers, stream order."""
    if b.xp is np:
        raise Unavailable('host buffers: nothing to stage')
    if stream:
        raise Unavailable('host staging has no stream-ordered form')


class StagedImpl:
    """How users move GPU arrays through a non-CUDA-aware MPI today: asnumpy -> MPI -> asarray."""
    name = 'staged'

    def __init__(self, comm):
        self.comm = _plain.Intracomm(comm)

    def make(self, b, op, stream=False):
        require_staging(b, stream)
        if b.coll in ('halo', 'pingpong'):
            raise Unavailable(f'staged times the engine rows and sendrecv: for {b.coll} compare hand (staging by hand)')
        if b.coll in vrows.COLLS:
            # this row's staged path is mpigpu's own with its device path off (MPIGPU_EXCHANGE=0), a
            # setting of the whole run; within a run, `hand` stages as a program would
            raise Unavailable(f'staged times the engine rows: for {b.coll} compare hand (staging by hand), or '
                              'run mpigpu-perf again with MPIGPU_EXCHANGE=0')
        xp, comm, mop = b.xp, self.comm, _OPS[op]
        c, root = b.coll, b.root

        def run():
            s = xp.asnumpy(b.recv if (b.inplace and c != 'allgather') else b.send)
            r = np.empty(b.recv.shape, b.recv.dtype) if c not in ('bcast',) else None
            if c == 'allreduce':
                comm.Allreduce(MPI.IN_PLACE if b.inplace else s, r if not b.inplace else s, mop)
                b.recv.set(s if b.inplace else r)
            elif c == 'bcast':
                comm.Bcast(s, root)
                b.send.set(s)
            elif c == 'reduce_scatter_block':
                comm.Reduce_scatter_block(s, r, mop)
                b.recv.set(r)
            elif c == 'reduce':
                comm.Reduce(s, r, mop, root)
                if comm.Get_rank() == root:
                    b.recv.set(r)
            elif c == 'allgather':
                if b.inplace:
                    h = xp.asnumpy(b.recv)
                    comm.Allgather(MPI.IN_PLACE, h)
                    b.recv.set(h)
                else:
                    comm.Allgather(s, r)
                    b.recv.set(r)
            elif c == 'sendrecv':
                n, rk = comm.Get_size(), comm.Get_rank()
                comm.Sendrecv(s, (rk + 1) % n, 0, r, (rk - 1) % n, 0)
                b.recv.set(r)
            xp.cuda.get_current_stream().synchronize()
        return run


class CudaAwareMpiImpl:
    """Device pointers straight to MPI, where the MPI library is CUDA-aware."""
    name = 'cuda-aware-mpi'

    def __init__(self, comm):
        from .._base.host_mpi import cuda_aware
        self.comm = _plain.Intracomm(comm)
        self.ok = cuda_aware()

    def make(self, b, op, stream=False):
        if b.xp is np:
            raise Unavailable('host buffers')
        if stream:
            raise Unavailable('MPI calls have no stream-ordered form')
        if not self.ok:
            raise Unavailable('this MPI is not CUDA-aware (MPIX_Query_cuda_support)')
        call = mpi_call(self.comm, b, op)

        def run():
            b.xp.cuda.get_current_stream().synchronize()
            call()
        return run


class NcclImpl:
    """NCCL through cupy.cuda.nccl, synchronized after every call as MPI semantics require."""
    name = 'nccl'
    env = {}  # NCCL's environment for this baseline, set before its communicator (NCCL reads it once)

    def __init__(self, comm):
        self.err = None
        for key, value in self.settings(comm).items():
            os.environ[key] = value
        try:
            from cupy.cuda import nccl
        except Exception as exc:
            self.err = f'cupy.cuda.nccl unavailable: {exc}'
            comm.allgather(None)
            return
        self.nccl = nccl
        uid = nccl.get_unique_id() if comm.Get_rank() == 0 else None
        uid = comm.bcast(uid, root=0)
        self.comm = nccl.NcclCommunicator(comm.Get_size(), uid, comm.Get_rank())
        comm.allgather(None)

    def settings(self, comm):
        return dict(self.env)

    _DT = {'float32': 'NCCL_FLOAT32', 'float64': 'NCCL_FLOAT64', 'float16': 'NCCL_FLOAT16',
           'int32': 'NCCL_INT32', 'int64': 'NCCL_INT64', 'int8': 'NCCL_INT8', 'uint8': 'NCCL_UINT8',
           'uint32': 'NCCL_UINT32', 'uint64': 'NCCL_UINT64'}
    _OP = {'sum': 'NCCL_SUM', 'prod': 'NCCL_PROD', 'max': 'NCCL_MAX', 'min': 'NCCL_MIN'}

    def make(self, b, op, stream=False):
        if self.err:
            raise Unavailable(self.err)
        if b.xp is np:
            raise Unavailable('host buffers')
        nc, cm, stream_mode = self.nccl, self.comm, stream
        if b.coll in vrows.COLLS:  # grouped point-to-point, of bytes (vrows.nccl_call)
            stream = b.xp.cuda.get_current_stream()
            return self.timed_form(vrows.nccl_call(nc, cm, b, stream), stream, stream_mode)
        if b.coll in ('halo', 'pingpong'):  # halo: packed, sent and unpacked; pingpong: a round trip
            stream = b.xp.cuda.get_current_stream()
            row = halo if b.coll == 'halo' else pingpong
            return self.timed_form(row.nccl_call(nc, cm, b, stream), stream, stream_mode)
        name = b.send.dtype.name
        if name not in self._DT:
            raise Unavailable(f'NCCL has no {name}')
        dt, nop = getattr(nc, self._DT[name]), getattr(nc, self._OP[op])
        stream = b.xp.cuda.get_current_stream()
        rp = b.recv.data.ptr
        sp = self.input_of(b, b.send.data.ptr, rp)
        c, count, root = b.coll, b.count, b.root
        if c == 'allreduce':
            call = lambda: cm.allReduce(sp, rp, count, dt, nop, stream.ptr)
        elif c == 'bcast':
            bp = b.send.data.ptr
            call = lambda: cm.bcast(bp, count, dt, root, stream.ptr)
        elif c == 'reduce_scatter_block':
            call = lambda: cm.reduceScatter(sp, rp, count, dt, nop, stream.ptr)
        elif c == 'reduce':
            call = lambda: cm.reduce(sp, rp, count, dt, nop, root, stream.ptr)
        elif c == 'allgather':
            call = lambda: cm.allGather(sp, rp, count, dt, stream.ptr)
        elif c == 'sendrecv':  # the ring exchange of mpi_call: send to rank+1, receive from rank-1
            n, r = b.n, b.rank

            def call():
                nc.groupStart()
                cm.send(b.send.data.ptr, count, dt, (r + 1) % n, stream.ptr)
                cm.recv(rp, count, dt, (r - 1) % n, stream.ptr)
                nc.groupEnd()
        else:
            raise Unavailable(f'no NCCL {c} in this tool')
        return self.timed_form(call, stream, stream_mode)

    @staticmethod
    def input_of(b, send, recv):
        """The address a row's NCCL call reads (send, recv: the addresses of b's buffers, or of copies):
        in place, the receive buffer (Allgather: this rank's block of it)."""
        if not b.inplace:
            return send
        return recv + b.rank * b.count * b.send.itemsize if b.coll == 'allgather' else recv

    @staticmethod
    def timed_form(call, stream, stream_mode):
        """What make() returns for an enqueueing `call`: (launch, sync) for stream timing, else one
        blocking call (MPI semantics: synchronized after every call)."""
        if stream_mode:
            return call, stream.synchronize

        def run():
            call()
            stream.synchronize()
        return run


class NcclSocketImpl(NcclImpl):
    """NCCL forced onto its socket transport between every pair of GPUs (no peer-to-peer, no shared
    memory): with simulated nodes, the network NCCL would use between real nodes."""
    name = 'nccl-socket'
    env = {'NCCL_P2P_DISABLE': '1', 'NCCL_SHM_DISABLE': '1'}


class NcclNodesImpl(NcclImpl):
    """NCCL told that each simulated node is a host of its own (NCCL_HOSTID): NVLink inside a node,
    its network transport (sockets) between them, as on real nodes."""
    name = 'nccl-nodes'

    def settings(self, comm):
        node, _rail, _local, _nodes = rails(comm)
        first = node.bcast(comm.Get_rank(), root=0)
        node.Free()
        return {'NCCL_HOSTID': f'{socket.gethostname()}-node{first}'}


def rails(comm):
    """(node communicator, rail communicator, local rank, node sizes) of `comm` as mpigpu cuts it
    (MPIGPU_SIMULATE_NODES included)."""
    from .._state.topology import node_comm
    plain = _plain.Intracomm(comm)
    node = node_comm(plain)
    local = node.Get_rank()
    first = node.bcast(plain.Get_rank(), root=0)
    table = plain.allgather((first, node.Get_size()))
    firsts = sorted({f for f, _n in table})
    sizes = [dict(table)[f] for f in firsts]
    rail = plain.Split(local, firsts.index(first))
    return node, rail, local, sizes


class NetBoundImpl:
    """The network's bound for the hierarchical path: host MPI's own collective of the bytes each GPU
    sends between nodes, on NumPy buffers over the rails (every node the same size: 1/L of the
    message per rail; otherwise the leaders carry it whole). No GPU, no copy, no node phase."""
    name = 'net-bound'
    checks = False  # it moves the network's share of the bytes only: nothing to check

    def __init__(self, comm):
        node, self.rail, local, sizes = rails(comm)
        node.Free()
        self.share = sizes[0] if len(set(sizes)) == 1 else 1
        self.active = len(set(sizes)) == 1 or local == 0
        self.nodes = len(sizes)

    def make(self, b, op, stream=False):
        if stream:
            raise Unavailable('host MPI has no stream-ordered form')
        if self.nodes < 2:
            raise Unavailable('one node: nothing crosses the network (set MPIGPU_SIMULATE_NODES)')
        if not self.active:
            return lambda: None
        rail, mop, c = self.rail, _OPS[op], b.coll
        dt, per = np.dtype(b.send.dtype.name), max(1, b.count // self.share)
        if dt == np.float16:  # host MPI reduces no 16-bit floats: as many bytes of float32
            dt, per = np.dtype(np.float32), max(1, per // 2)
        send = np.ones(per, dt)
        recv = np.empty(per, dt)
        if c == 'allreduce':
            return lambda: rail.Allreduce(send, recv, mop)
        if c == 'bcast':
            return lambda: rail.Bcast(send, 0)
        if c == 'reduce':
            return lambda: rail.Reduce(send, recv, mop, 0)
        block = max(1, b.count * b.send.itemsize // dt.itemsize)  # a rank's block, in bytes as its type's
        if c == 'allgather':
            blk, whole = np.ones(block, dt), np.empty(block * self.nodes, dt)
            return lambda: rail.Allgather(blk, whole)
        if c == 'reduce_scatter_block':
            blk, out = np.ones(block * self.nodes, dt), np.empty(block, dt)
            return lambda: rail.Reduce_scatter_block(blk, out, mop)
        raise Unavailable(f'no network bound for {c}')


IMPLS = {impl.name: impl for impl in (NcclImpl, NcclSocketImpl, NcclNodesImpl, StagedImpl, CudaAwareMpiImpl,
                                      Mpi4pyImpl, NetBoundImpl)}

def _hier_state(comm):
    from .._paths.hier.state import HierState
    from .._state.comm_state import state_of
    hs = state_of(comm)._owned.get(HierState)
    return hs if hs is not None and hs.multi_node else None


def forget_form(comm):
    """Before a row: the form of the hierarchical path's last call is forgotten (a row whose calls take
    another path then shows none)."""
    hs = _hier_state(comm)
    if hs is not None:
        hs.last_form = None


def form_of(comm):
    """The form the hierarchical path gave the last call on `comm` ('rail' / 'leader'), or None."""
    hs = _hier_state(comm)
    return hs.last_form if hs is not None else None


def predicted_us(comm, coll, count, itemsize):
    """The cost model's time (us) for the form the hierarchical path gave the last call on `comm`, a call
    of `count` elements of `itemsize` bytes as the path counts them (Reduce_scatter_block's block,
    Allgather's contribution), from the network figures measured at setup; None off that path."""
    from .._base import config as _config
    from .._base.codes import Coll
    from .._paths.hier import model
    hs = _hier_state(comm)
    if hs is None or hs.last_form is None:
        return None
    forms = model.predict(Coll[coll.upper()], count * itemsize, hs.shape, _config.config.hier_chunk_bytes, itemsize)
    return forms[hs.last_form][0] * 1e6 if hs.last_form in forms else None
