"""The staged GPU path: device buffers through pinned host memory and host MPI.

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

from ._config import config
from ._engine import _device, _with_device
from ._types import NATIVE, OPS
from .errors import Error

_NP = {0: np.uint8, 1: np.int8, 2: np.uint8, 3: np.int16, 4: np.uint16, 5: np.int32, 6: np.uint32,
       7: np.int64, 8: np.uint64, 9: np.float16, 10: np.uint16, 11: np.float32, 12: np.float64,
       13: np.complex64, 14: np.complex128}
_SLOTS = 3  # pinned chunk slots per direction: copy-in, MPI and copy-out each hold one


class Stager:
    """Streams, events and grow-only pinned buffers of one communicator's staged path."""

    def __init__(self, device):
        self.device = device

        def make():
            self.d2h = _device.stream_create()
            self.h2d = _device.stream_create()
            self.ev_dep = _device.event_create()
            self.ev_in = [_device.event_create() for _ in range(_SLOTS)]
            self.ev_out = [_device.event_create() for _ in range(_SLOTS)]
        _with_device(device, make)
        self.pinned = {}

    def host(self, key, nbytes):
        """Pinned buffer `key` of at least nbytes, as a uint8 array; reallocated only to grow."""
        buf = self.pinned.get(key)
        if buf is None or buf.nbytes < nbytes:
            # grow geometrically, so a run of slightly larger calls does not pin memory every time
            size = max(nbytes, 1 << 16, 0 if buf is None else buf.nbytes * 3 // 2)
            self.pinned.pop(key, None)
            buf = self.pinned[key] = _device.PinnedBuffer(size)
        return buf, np.frombuffer(buf, dtype=np.uint8, count=buf.nbytes)

    def close(self):
        for s in (self.d2h, self.h2d):
            _device.stream_destroy(s)
        for ev in [self.ev_dep] + self.ev_in + self.ev_out:
            _device.event_destroy(ev)
        self.pinned.clear()

    def after(self, stream):
        """Orders both copy streams after the producer's stream."""
        _device.event_record(self.ev_dep, stream)
        _device.stream_wait_event(self.d2h, self.ev_dep)
        _device.stream_wait_event(self.h2d, self.ev_dep)

    def to_host(self, dst_ptr, src_ptr, nbytes):
        _device.memcpy_async(dst_ptr, src_ptr, nbytes, self.d2h)
        _device.stream_sync(self.d2h)

    def to_device(self, dst_ptr, src_ptr, nbytes):
        _device.memcpy_async(dst_ptr, src_ptr, nbytes, self.h2d)
        _device.stream_sync(self.h2d)

    def pipeline(self, count, itemsize, src_ptr, dst_ptr, mpi_chunk):
        """src (device) -> pinned -> mpi_chunk(send_view, recv_view, n) -> pinned -> dst (device), in
        chunks, the copies of neighbouring chunks overlapping MPI. src_ptr/dst_ptr 0: that side is off."""
        ce = max(1, config.stage_chunk_bytes // itemsize)
        cb = ce * itemsize
        nchunks = (count + ce - 1) // ce
        sbuf, snp = self.host('s', _SLOTS * cb) if src_ptr else (None, None)
        rbuf, rnp = self.host('r', _SLOTS * cb) if dst_ptr else (None, None)

        def copy_in(k):
            nk = min(ce, count - k * ce) * itemsize
            _device.memcpy_async(sbuf.ptr + (k % _SLOTS) * cb, src_ptr + k * cb, nk, self.d2h)
            _device.event_record(self.ev_in[k % _SLOTS], self.d2h)

        if src_ptr:
            copy_in(0)
        for k in range(nchunks):
            n = min(ce, count - k * ce)
            slot = (k % _SLOTS) * cb
            if src_ptr:
                if k + 1 < nchunks:
                    copy_in(k + 1)
                _device.event_sync(self.ev_in[k % _SLOTS])
            if dst_ptr and k >= _SLOTS:
                _device.event_sync(self.ev_out[k % _SLOTS])  # copy-out of chunk k-3 left the slot
            mpi_chunk(snp[slot:slot + n * itemsize] if src_ptr else None,
                      rnp[slot:slot + n * itemsize] if dst_ptr else None, n)
            if dst_ptr:
                _device.memcpy_async(dst_ptr + k * cb, rbuf.ptr + slot, n * itemsize, self.h2d)
                _device.event_record(self.ev_out[k % _SLOTS], self.h2d)
        if dst_ptr:
            _device.stream_sync(self.h2d)


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
    if op == 'SUM':
        return a + b
    if op == 'PROD':
        return a * b
    if op == 'MAX':
        return np.where(a < b, b, a)
    if op == 'MIN':
        return np.where(b < a, b, a)
    if op in ('LAND', 'LOR', 'LXOR'):
        x, y = a != 0, b != 0
        r = x & y if op == 'LAND' else x | y if op == 'LOR' else x ^ y
        return r.astype(a.dtype)
    return a & b if op == 'BAND' else a | b if op == 'BOR' else a ^ b


def host_reduce(rows, dtype, op_code):
    """Reduces rows[0] op rows[1] op ... in rank order; 16-bit floats accumulate in float32."""
    op = OPS[op_code]
    if dtype == 9:
        acc = rows[0].astype(np.float32)
        for r in rows[1:]:
            acc = _combine(op, acc, r.astype(np.float32))
        return acc.astype(np.float16)
    if dtype == 10:
        acc = _bf16_to_f32(rows[0])
        for r in rows[1:]:
            acc = _combine(op, acc, _bf16_to_f32(r))
        return _f32_to_bf16(acc)
    acc = rows[0].copy()
    with np.errstate(over='ignore'):
        for r in rows[1:]:
            acc = _combine(op, acc, r)
    return acc


# ---- collectives -------------------------------------------------------------------------------------
def run_staged(st, c, stream):
    sg = st.stager_for(st.device)
    sg.after(stream)
    comm, n, rank = st.comm, st.size, st.rank
    mpi_t = c.mpi_type if c.mpi_type is not None else (NATIVE[c.dtype] if c.dtype >= 0 else None)
    its = c.itemsize
    if c.coll == 1:  # Bcast: bytes, any type
        is_root = rank == c.root
        sg.pipeline(c.count * its, 1, c.send_ptr if is_root else 0, 0 if is_root else c.recv_ptr,
                    lambda s, r, k: comm.Bcast([s if is_root else r, k, MPI.BYTE], c.root))
        return
    if c.coll == 4:  # Allgather: bytes, any type
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
    if c.coll == 0:
        sg.pipeline(c.count, its, c.send_ptr, c.recv_ptr,
                    lambda s, r, k: comm.Allreduce([s, k, mpi_t], [r, k, mpi_t], op))
    elif c.coll == 3:
        is_root = rank == c.root
        sg.pipeline(c.count, its, c.send_ptr, c.recv_ptr if is_root else 0,
                    lambda s, r, k: comm.Reduce([s, k, mpi_t], [r, k, mpi_t] if is_root else None, op, c.root))
    elif c.coll == 2:
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
    npt = _NP[dt]
    if c.coll == 2:
        nb = c.count * its
        sbuf, snp = sg.host('s', nb * n)
        gbuf, gnp = sg.host('g', nb * n)
        sg.to_host(sbuf.ptr, c.send_ptr, nb * n)
        comm.Alltoall([snp, nb, MPI.BYTE], [gnp, nb, MPI.BYTE])
        rows = gnp[:nb * n].view(npt).reshape(n, c.count)
        out = np.ascontiguousarray(host_reduce(rows, dt, c.op_code))
        rbuf, rnp = sg.host('r', nb)
        rnp[:nb] = out.view(np.uint8)
        sg.to_device(c.recv_ptr, rbuf.ptr, nb)
        return
    nb = c.count * its
    sbuf, snp = sg.host('s', nb)
    gbuf, gnp = sg.host('g', nb * n)
    sg.to_host(sbuf.ptr, c.send_ptr, nb)
    if c.coll == 0:
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
