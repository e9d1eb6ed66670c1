"""The staged path: the engine's five collectives through host MPI, the buffer cut into chunks whose
copies between the device and pinned host memory overlap MPI.

Correct for every call, and the fallback for whatever the device engine does not cover (ranks on
several nodes, shared GPUs, no peer access, user-defined ops, pair types). Collectives that can be
cut elementwise (Allreduce, Bcast, Reduce) run as a pipeline: the device-to-host copy of chunk k+1
and the host-to-device copy of chunk k-1 run on their own streams while MPI works on chunk k.

Types host MPI cannot reduce (float16, bfloat16) are reduced here instead: the raw bytes are
gathered (Allgather / Gather / Alltoall) and every rank reduces them in rank order, accumulating
16-bit floats in float32, exactly as the device engine's one-shot kernel does; so results are
bitwise identical across ranks and between the two paths.
"""
import numpy as np
from mpi4py import MPI

from .. import _cuda
from .._base.codes import Coll, Dtype, Op
from .._base.config import config
from .._base.types import NATIVE, numpy_dtype
from ..errors import Error
from .support.bounded import Bounded
from .support.pinned import SLOTS, Stager


def _pipeline(sg, count, itemsize, src_ptr, dst_ptr, mpi_chunk):
    """src (device) -> pinned -> mpi_chunk(send_view, recv_view, n) -> pinned -> dst (device), in
    chunks, the copies of neighbouring chunks overlapping MPI. src_ptr/dst_ptr 0: that side is off."""
    ce = max(1, config.stage_chunk_bytes // itemsize)
    cb = ce * itemsize
    nchunks = (count + ce - 1) // ce
    sbuf, snp = sg.host('s', SLOTS * cb) if src_ptr else (None, None)
    rbuf, rnp = sg.host('r', SLOTS * cb) if dst_ptr else (None, None)

    def copy_in(k):
        nk = min(ce, count - k * ce) * itemsize
        _cuda.copy(sbuf.ptr + (k % SLOTS) * cb, src_ptr + k * cb, nk, sg.d2h)
        _cuda.record(sg.ev_in[k % SLOTS], sg.d2h)

    if src_ptr:
        copy_in(0)
    for k in range(nchunks):
        n = min(ce, count - k * ce)
        slot = (k % SLOTS) * cb
        if src_ptr:
            if k + 1 < nchunks:
                copy_in(k + 1)
            _cuda.sync_event(sg.ev_in[k % SLOTS])
        if dst_ptr and k >= SLOTS:
            _cuda.sync_event(sg.ev_out[k % SLOTS])  # copy-out of chunk k-3 left the slot
        mpi_chunk(snp[slot:slot + n * itemsize] if src_ptr else None,
                  rnp[slot:slot + n * itemsize] if dst_ptr else None, n)
        if dst_ptr:
            _cuda.copy(dst_ptr + k * cb, rbuf.ptr + slot, n * itemsize, sg.h2d)
            _cuda.record(sg.ev_out[k % SLOTS], sg.h2d)
    if dst_ptr:
        _cuda.sync(sg.h2d)


# ---- host reduction for types host MPI lacks -------------------------------------------------------
def _bf16_to_f32(u16):
    return (u16.astype(np.uint32) << 16).view(np.float32)


def _f32_to_bf16(f32):
    u = f32.view(np.uint32)
    rounded = ((u + np.uint32(0x7FFF) + ((u >> 16) & np.uint32(1))) >> 16).astype(np.uint16)
    nan = np.isnan(f32)
    if nan.any():
        rounded[nan] = ((u[nan] >> 16) | np.uint32(0x40)).astype(np.uint16)
    return rounded


def _combine(op, a, b):
    if op == Op.SUM:
        return a + b
    if op == Op.PROD:
        return a * b
    if op == Op.MAX:
        return np.where(a < b, b, a)
    if op == Op.MIN:
        return np.where(b < a, b, a)
    if op in (Op.LAND, Op.LOR, Op.LXOR):
        x, y = a != 0, b != 0
        r = x & y if op == Op.LAND else x | y if op == Op.LOR else x ^ y
        return r.astype(a.dtype)
    return a & b if op == Op.BAND else a | b if op == Op.BOR else a ^ b


def host_reduce(rows, dtype, op_code):
    """Reduces rows[0] op rows[1] op ... in rank order; 16-bit floats accumulate in float32."""
    if dtype == Dtype.FLOAT16:
        acc = rows[0].astype(np.float32)
        for r in rows[1:]:
            acc = _combine(op_code, acc, r.astype(np.float32))
        return acc.astype(np.float16)
    if dtype == Dtype.BFLOAT16:
        acc = _bf16_to_f32(rows[0])
        for r in rows[1:]:
            acc = _combine(op_code, acc, _bf16_to_f32(r))
        return _f32_to_bf16(acc)
    acc = rows[0].copy()
    with np.errstate(over='ignore'):
        for r in rows[1:]:
            acc = _combine(op_code, acc, r)
    return acc


# ---- collectives -------------------------------------------------------------------------------------
def run(st, c, stream):
    """Runs Call `c` of communicator state `st`, ordered after `stream`; returns once it is done."""
    sg = st.owned(Stager).on(st.device)
    sg.after(stream)
    comm, n, rank = Bounded(st, c.name), st.size, st.rank  # a peer that never arrives ends in an error
    mpi_t = c.mpi_type if c.mpi_type is not None else (NATIVE[c.dtype] if c.dtype >= 0 else None)
    its = c.itemsize
    if c.coll == Coll.BCAST:  # bytes, any type
        is_root = rank == c.root
        _pipeline(sg, c.count * its, 1, c.send_ptr if is_root else 0, 0 if is_root else c.recv_ptr,
                  lambda s, r, k: comm.Bcast([s if is_root else r, k, MPI.BYTE], c.root))
        return
    if c.coll == Coll.ALLGATHER:  # bytes, any type
        nb = c.count * its
        sbuf, snp = sg.host('s', nb)
        rbuf, rnp = sg.host('r', nb * n)
        sg.to_host(sbuf.ptr, c.send_ptr, nb)
        comm.Allgather([snp, nb, MPI.BYTE], [rnp, nb, MPI.BYTE])  # receive count is per rank
        sg.to_device(c.recv_ptr, rbuf.ptr, nb * n)
        return
    if mpi_t is None and (c.op_code < 0 or c.dtype < 0):
        raise Error(c.name, 'this operation needs a host MPI datatype for the element type, and host MPI '
                    'has none', arg='op', rank=rank, error_class=MPI.ERR_TYPE)
    if mpi_t is not None:
        _native(comm, sg, c, mpi_t, rank)
    else:
        _gathered(comm, sg, c, rank, n)


def _native(comm, sg, c, mpi_t, rank):
    its, op = c.itemsize, c.op
    if c.coll == Coll.ALLREDUCE:
        _pipeline(sg, c.count, its, c.send_ptr, c.recv_ptr,
                  lambda s, r, k: comm.Allreduce([s, k, mpi_t], [r, k, mpi_t], op))
    elif c.coll == Coll.REDUCE:
        is_root = rank == c.root
        _pipeline(sg, c.count, its, c.send_ptr, c.recv_ptr if is_root else 0,
                  lambda s, r, k: comm.Reduce([s, k, mpi_t], [r, k, mpi_t] if is_root else None, op, c.root))
    elif c.coll == Coll.REDUCE_SCATTER_BLOCK:
        n = comm.Get_size()
        total = c.count * n * its
        sbuf, snp = sg.host('s', total)
        rbuf, rnp = sg.host('r', c.count * its)
        sg.to_host(sbuf.ptr, c.send_ptr, total)
        # mpi4py reads explicit counts of block collectives per block (per rank)
        comm.Reduce_scatter_block([snp, c.count, mpi_t], [rnp, c.count, mpi_t], op)
        sg.to_device(c.recv_ptr, rbuf.ptr, c.count * its)


def _gathered(comm, sg, c, rank, n):
    its, dt = c.itemsize, c.dtype
    npt = numpy_dtype(dt)
    nb = c.count * its
    if c.coll == Coll.REDUCE_SCATTER_BLOCK:
        sbuf, snp = sg.host('s', nb * n)
        gbuf, gnp = sg.host('g', nb * n)
        sg.to_host(sbuf.ptr, c.send_ptr, nb * n)
        comm.Alltoall([snp, nb, MPI.BYTE], [gnp, nb, MPI.BYTE])
    else:
        sbuf, snp = sg.host('s', nb)
        gbuf, gnp = sg.host('g', nb * n)
        sg.to_host(sbuf.ptr, c.send_ptr, nb)
        if c.coll == Coll.ALLREDUCE:
            comm.Allgather([snp, nb, MPI.BYTE], [gnp, nb, MPI.BYTE])  # receive count is per rank
        else:
            comm.Gather([snp, nb, MPI.BYTE], [gnp, nb, MPI.BYTE] if rank == c.root else None, c.root)
            if rank != c.root:
                return
    rows = gnp[:nb * n].view(npt).reshape(n, c.count)
    out = np.ascontiguousarray(host_reduce(rows, dt, c.op_code))
    rbuf, rnp = sg.host('r', nb)
    rnp[:nb] = out.view(np.uint8)
    sg.to_device(c.recv_ptr, rbuf.ptr, nb)
