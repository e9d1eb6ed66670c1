"""What holds a rooted exchange's bandwidth (not a user tool): `mpirun -n N python3 -m mpi4py
benchmarks/fan_in_probe.py [pair bytes,...]`.

The 30 MB Gatherv runs at 0.77-0.83x NCCL's speed: its root takes ~265 GB/s in, NCCL's grouped receives
~375 (docs/benchmarks.md). This times the exchange with k = 1 .. N-1 peers each sending `pair bytes` to
rank 0 (fan in, an Alltoallv whose other pairs are empty: the Gatherv's pattern for k = N-1) and rank 0
sending as much to each of k peers (fan out: the Scatterv's), beside NCCL's grouped send/recv of the same
pairs, each form in alternating rounds. If the fan in's time grows with k while NCCL's does not, the
root's intake (its draining of the FIFOs, or one pair's rate) is what holds it; if one pair alone is
already slower than NCCL's, a connection's rate is. Prints rank 0's table (us, and GB/s into or out of
rank 0).
"""
import sys

import cupy as cp
import numpy as np

import mpigpu
import probe_common
from mpi4py import MPI

comm = mpigpu.COMM_WORLD
rank, n = comm.Get_rank(), comm.Get_size()
cp.cuda.Device(rank % cp.cuda.runtime.getDeviceCount()).use()
SIZES = [int(v) for v in (sys.argv[1] if len(sys.argv) > 1 else '1048576,7864320').split(',')]
nccl, nc = probe_common.nccl_comm(comm)
stream = cp.cuda.get_current_stream()


def pattern(k, pair, fan_in):
    """(send counts, receive counts) in float32 elements of rank 0's exchange with peers 1 .. k."""
    e = pair // 4
    send, recv = np.zeros(n, np.int64), np.zeros(n, np.int64)
    if rank == 0:
        (recv if fan_in else send)[1:k + 1] = e
    elif rank <= k:
        (send if fan_in else recv)[0] = e
    return send, recv


def forms(k, pair, fan_in):
    sc, rc = pattern(k, pair, fan_in)
    sd, rd = np.concatenate([[0], np.cumsum(sc)[:-1]]), np.concatenate([[0], np.cumsum(rc)[:-1]])
    s, r = cp.ones(max(int(sc.sum()), 1), cp.float32), cp.zeros(max(int(rc.sum()), 1), cp.float32)
    sv, rv = (sc.tolist(), sd.tolist()), (rc.tolist(), rd.tolist())
    got = {'mpigpu': lambda: comm.Alltoallv([s, sv, MPI.FLOAT], [r, rv, MPI.FLOAT])}
    if nc is not None:
        def grouped():
            nccl.groupStart()
            for p in range(n):
                if sc[p]:
                    nc.send(s.data.ptr + int(sd[p]) * 4, int(sc[p]), nccl.NCCL_FLOAT32, p, stream.ptr)
                if rc[p]:
                    nc.recv(r.data.ptr + int(rd[p]) * 4, int(rc[p]), nccl.NCCL_FLOAT32, p, stream.ptr)
            nccl.groupEnd()
            stream.synchronize()
        got['nccl'] = grouped
    return got


rows = []
for pair in SIZES:
    for fan_in in (True, False):
        for k in range(1, n):
            us = probe_common.alternating(comm, forms(k, pair, fan_in), rounds=3, calls=10, warm=2)
            rows.append((pair, 'in' if fan_in else 'out', k, us))
if rank == 0:
    print('| pair bytes | rank 0 | peers | mpigpu us | nccl us | mpigpu GB/s | nccl GB/s |')
    print('|---|---|---|---|---|---|---|')
    for pair, way, k, us in rows:
        nccl_us = us.get('nccl', float('nan'))
        gbs = lambda t: k * pair / t / 1e3  # noqa: E731 - bytes into or out of rank 0 per us -> GB/s
        print(f'| {pair} | {way} | {k} | {us["mpigpu"]:.1f} | {nccl_us:.1f} | {gbs(us["mpigpu"]):.0f} | '
              f'{gbs(nccl_us):.0f} |')
