"""Where an exchange call's time goes (not a user tool): `mpirun -n N python3 -m mpi4py
benchmarks/exchange_probe.py [bytes,...]`.

An Alltoall of device buffers (bytes: a rank's whole send buffer) runs as a program calls it, and its
parts run alone, each in a loop of back-to-back calls on every rank:
  call        comm.Alltoall, the whole call
  describe    exchange.describe: reading the arguments into byte ranges (the general path)
  reader      the fast path's reader of the same (mpigpu/_ext/_exchange.pxi)
  decide      the agreement on the call's path (placement board)
  kernel      the team's exchange with the ranges read once, blocking (launch, kernel, wait)
  enqueue     the same without its wait, the stream synchronized after the loop (launch cost + kernel)
  sync        a synchronize of the idle stream
  allgather   the engine's Allgather of one block per rank (the same bytes to every peer), for reference
  resident share  the share of `kernel`'s calls that ran in the resident kernel (0 .. 1)
  nccl        NCCL's grouped send/recv of the same bytes, the stream synchronized (CuPy's binding)
Then the same parts of the redistribute row's call (mpigpu/perf/redistribute.py: an Alltoallv whose send
blocks are a resized vector datatype, on the transport's block shapes), its NCCL baseline (a packing copy,
then grouped send/recv) as `nccl`. Prints rank 0's tables of the slowest rank's medians, us.
"""
import sys

import cupy as cp
import numpy as np

import mpigpu
import probe_common
from mpigpu import _cuda
from mpigpu._base.codes import Coll, Placement
from mpigpu._paths import exchange
from mpigpu._state.comm_state import state_of

comm = mpigpu.COMM_WORLD
rank, n = comm.Get_rank(), comm.Get_size()
cp.cuda.Device(rank % cp.cuda.runtime.getDeviceCount()).use()
SIZES = [int(v) for v in (sys.argv[1] if len(sys.argv) > 1 else '1024,65536,1048576,16777216').split(',')]
ROUNDS, ITERS = probe_common.ROUNDS, probe_common.ITERS
mpigpu.config.exchange_min_bytes = 0  # every size on the transport: the probe times the transport


nccl, nc = probe_common.nccl_comm(comm)


def timed(fn, iters=probe_common.ITERS):
    return probe_common.timed(comm, fn, cp.cuda.get_current_stream().synchronize, iters)


def parts(nbytes):
    count = max(nbytes // 4 // n, 1)
    s = cp.arange(count * n, dtype=cp.float32) + rank
    r = cp.empty_like(s)
    st = state_of(comm)
    comm.Alltoall(s, r)  # the team exists after the first call
    ranges = exchange.describe('Alltoall', rank, n, (s, r))
    stream = cp.cuda.get_current_stream().ptr
    team = st.team
    got = {}
    got['call'] = timed(lambda: comm.Alltoall(s, r))
    got['describe'] = timed(lambda: exchange.describe('Alltoall', rank, n, (s, r)))
    reader = _cuda.device.exchange_ranges_of
    got['reader'] = timed(lambda: reader(int(Coll.ALLTOALL), rank, n, s, r))
    got['kernel'] = timed(lambda: team.exchange(ranges.coll, ranges.send, ranges.recv, ranges.send_bytes, ranges.send_off,
                                                ranges.recv_bytes, ranges.recv_off, stream, True))
    got['enqueue'] = timed(lambda: team.exchange(ranges.coll, ranges.send, ranges.recv, ranges.send_bytes, ranges.send_off,
                                                 ranges.recv_bytes, ranges.recv_off, stream, False))
    got['sync'] = timed(lambda: cp.cuda.get_current_stream().synchronize())
    got['decide'] = timed(lambda: st.agreement.decide('Alltoall', Coll.ALLTOALL, Placement.DEVICE))
    # the engine's call with the same traffic (each rank's block to every rank), for reference
    got['allgather'] = timed(lambda: comm.Allgather(s[:count], r))
    calls0 = team.resident_stats[0]
    timed(lambda: team.exchange(ranges.coll, ranges.send, ranges.recv, ranges.send_bytes, ranges.send_off, ranges.recv_bytes,
                                ranges.recv_off, stream, True))
    got['resident share'] = (team.resident_stats[0] - calls0) / (ROUNDS * ITERS)
    if nc is not None:
        block = count * 4

        def grouped():
            nccl.groupStart()
            for p in range(n):
                nc.send(s.data.ptr + p * block, count, nccl.NCCL_FLOAT32, p, stream)
                nc.recv(r.data.ptr + p * block, count, nccl.NCCL_FLOAT32, p, stream)
            nccl.groupEnd()
            cp.cuda.get_current_stream().synchronize()
        got['nccl'] = timed(grouped)
    return got


def shaped_parts(nbytes):
    from mpigpu.perf import redistribute as rd
    r = rd.RBuffers(cp, 'redistribute', rd.side(nbytes, 4, n), np.float32, n, rank, 0)
    call = rd.mpi_call(comm, r)
    call()  # the team exists after the first call
    args = call.args
    st = state_of(comm)
    ranges = exchange.describe('Alltoallv', rank, n, args)
    assert ranges is not None and ranges.shapes is not None, 'the redistribute call is not on block shapes'
    stream = cp.cuda.get_current_stream().ptr
    team = st.team
    got = {'call': timed(call), 'describe': timed(lambda: exchange.describe('Alltoallv', rank, n, args))}

    def kernel(sync):
        team.exchange(ranges.coll, ranges.send, ranges.recv, ranges.send_bytes, ranges.send_off, ranges.recv_bytes,
                      ranges.recv_off, stream, sync, ranges.shapes)
    got['kernel'] = timed(lambda: kernel(True))
    got['enqueue'] = timed(lambda: kernel(False))
    got['decide'] = timed(lambda: st.agreement.decide('Alltoallv', Coll.ALLTOALLV, Placement.DEVICE))
    if nc is not None:
        base = rd.nccl_call(nccl, nc, r, cp.cuda.get_current_stream())

        def grouped():
            base()
            cp.cuda.get_current_stream().synchronize()
        got['nccl'] = timed(grouped)
    return got


for title, measure in (('Alltoall', parts), ('redistribute', shaped_parts)):
    probe_common.table(comm, f'{title}: {n} ranks, medians of {ROUNDS} rounds of {ITERS} calls, slowest rank, us',
                       SIZES, measure)
