"""Where a device point-to-point call's time goes (not a user tool): `mpirun -n N python3 -m mpi4py
benchmarks/p2p_probe.py [bytes,...]`.

A ring Sendrecv of device arrays (each rank sends to rank + 1, receives from rank - 1) as a program
calls it, and its parts alone, each in a loop of back-to-back calls on every rank:
  eager       comm.Sendrecv on the eager protocol (the bytes through page-locked memory and host MPI:
              mpigpu/_ext/_p2p.pxi)
  rendezvous  the same call with MPIGPU_P2P_IPC_BYTES at its floor: a header through host MPI, the
              receiver copies out of the sender's buffer GPU to GPU and replies
  pingpong    half a round trip of blocking Send/Recv between ranks 0 and 1 (the others wait)
  d2h, h2d    one cudaMemcpyAsync between the array and page-locked memory, then its synchronize
  d2d         the same between two arrays of this GPU
  sync        a synchronize of the idle stream
  host        mpi4py's Sendrecv of the same bytes between page-locked buffers (no GPU)
  nccl        NCCL's grouped send/recv of the same ring, the stream synchronized (CuPy's binding)
Prints rank 0's table of the slowest rank's medians, us.
"""
import sys

import cupy as cp
from mpi4py import MPI

import mpigpu
import probe_common
from mpigpu import _cuda

comm = mpigpu.COMM_WORLD
plain = MPI.COMM_WORLD
rank, n = comm.Get_rank(), comm.Get_size()
cp.cuda.Device(rank % cp.cuda.runtime.getDeviceCount()).use()
SIZES = [int(v) for v in (sys.argv[1] if len(sys.argv) > 1 else '8,1024,32768,262144').split(',')]
ROUNDS, ITERS = probe_common.ROUNDS, probe_common.ITERS
nxt, prv = (rank + 1) % n, (rank - 1) % n


nccl, nc = probe_common.nccl_comm(plain)


def timed(fn, iters=probe_common.ITERS):
    return probe_common.timed(plain, fn, cp.cuda.get_current_stream().synchronize, iters)


def parts(nbytes):
    dm = _cuda.device
    s = cp.arange(max(nbytes // 4, 1), dtype=cp.float32)[:nbytes // 4] + rank
    r = cp.empty_like(s)
    d = cp.empty_like(s)
    nb = s.nbytes
    pin_out, pin_in = dm.PinnedBuffer(max(nb, 1)), dm.PinnedBuffer(max(nb, 1))
    stream = cp.cuda.get_current_stream().ptr
    got = {}
    got['eager'] = timed(lambda: comm.Sendrecv(s, nxt, 0, r, prv, 0))
    floor = mpigpu.config.p2p_ipc_bytes
    mpigpu.config.p2p_ipc_bytes = 128
    got['rendezvous'] = timed(lambda: comm.Sendrecv(s, nxt, 0, r, prv, 0)) if nb >= 128 else float('nan')
    mpigpu.config.p2p_ipc_bytes = floor

    def pingpong():
        if rank == 0:
            comm.Send(s, 1, 1)
            comm.Recv(r, 1, 1)
        elif rank == 1:
            comm.Recv(r, 0, 1)
            comm.Send(s, 0, 1)
    got['pingpong'] = timed(pingpong) / 2 if n > 1 else float('nan')

    def copy(dst, src):
        dm.memcpy_async(dst, src, nb, stream)
        dm.stream_sync(stream)
    got['d2h'] = timed(lambda: copy(pin_out.ptr, s.data.ptr))
    got['h2d'] = timed(lambda: copy(r.data.ptr, pin_in.ptr))
    got['d2d'] = timed(lambda: copy(d.data.ptr, s.data.ptr))
    got['sync'] = timed(lambda: dm.stream_sync(stream))
    got['host'] = timed(lambda: plain.Sendrecv([pin_out, nb, MPI.BYTE], nxt, 0, [pin_in, nb, MPI.BYTE], prv, 0))
    if nc is not None:
        def ring():
            nccl.groupStart()
            nc.send(s.data.ptr, s.size, nccl.NCCL_FLOAT32, nxt, stream)
            nc.recv(r.data.ptr, r.size, nccl.NCCL_FLOAT32, prv, stream)
            nccl.groupEnd()
            cp.cuda.get_current_stream().synchronize()
        got['nccl'] = timed(ring)
    return got


def main():
    comm.Allreduce(cp.ones(4, cp.float32), cp.empty(4, cp.float32))  # the device team, as programs have it
    probe_common.table(plain, f'# ring Sendrecv parts, {n} ranks, slowest rank, median of {ROUNDS} rounds of {ITERS}, us',
                       SIZES, parts)


main()
