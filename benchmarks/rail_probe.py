"""Where the hierarchical Bcast's time goes from 2 MB up (not a user tool): per size, in one run on the
same buffers, microseconds per blocking call of

  mpigpu   comm.Bcast of the whole buffer from rank 0 (the form and chunks the model picks)
  rails    the network phase alone: every rail's NCCL broadcast of its 1/L shard at once, from the root's
           node, the net stream synchronized (what the rail form's network phase does in one chunk)
  rail0    rail 0's broadcast of the same shard alone (the other rails' ranks wait at a barrier)
  leaders  the leaders' broadcast of the whole buffer (the leader form's network phase)
  nccl     NCCL's own broadcast where each simulated node is a host (the `nccl-nodes` baseline)

    MPIGPU_SIMULATE_NODES=2 mpirun -n 4 --mca btl tcp,self python3 -m mpi4py benchmarks/rail_probe.py
"""
import argparse

import cupy as cp
import numpy as np
from mpi4py import MPI

import mpigpu
import probe_common
from mpigpu import _cuda
from mpigpu._paths.hier.state import HierState
from mpigpu._state.comm_state import state_of
from mpigpu.perf import baselines

p = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
p.add_argument('--mb', default='2,4,8,16,32,64', help='message sizes in MiB (comma separated)')
p.add_argument('--calls', type=int, default=8, help='calls per round')
p.add_argument('--rounds', type=int, default=3, help='rounds of each, alternating')
args = p.parse_args()

plain = MPI.COMM_WORLD
comm = mpigpu.COMM_WORLD
rank, n = comm.Get_rank(), comm.Get_size()
cp.cuda.Device(rank % cp.cuda.runtime.getDeviceCount()).use()
x0 = cp.ones(16, cp.float32)
comm.Bcast(x0, root=0)  # sets up the agreement and the hierarchical path before NCCL's baseline
hs = state_of(comm)._owned[HierState]
if rank == 0:
    print(comm.engine_status(), flush=True)
if hs.dnet is None:
    raise SystemExit('the network phases are not on NCCL here: nothing to probe')
topo, t, dm = hs.topo, hs.transport, _cuda.device
L = topo.nlocal
nccl = baselines.NcclNodesImpl(plain)


def net_bcast(ptr, nbytes, ranks):
    def run():
        if ranks is None or topo.local in ranks:
            hs.dnet.bcast(t, ptr, nbytes, 0, hs.net_stream)
            dm.stream_sync(hs.net_stream)
    return run


rows = []
for mb in (int(m) for m in args.mb.split(',')):
    count = (mb << 20) // 4
    b = baselines.make_buffers(cp, 'bcast', count, np.float32, n, rank, False, 0)
    shard = count // L * 4
    mine = b.send.data.ptr + topo.local * shard
    forms = probe_common.with_nccl({'mpigpu': lambda: comm.Bcast(b.send, root=0),
                                    'rails': net_bcast(mine, shard, None),
                                    'rail0': net_bcast(b.send.data.ptr, shard, (0,)),
                                    'leaders': net_bcast(b.send.data.ptr, count * 4, (0,))}, nccl, b, 'sum', rank)
    rows.append((mb, probe_common.alternating(plain, forms, args.rounds, args.calls)))

if rank == 0:
    keys = list(rows[0][1])
    print(f"{'MiB':>5} " + ' '.join(f'{k:>9}' for k in keys) + '  (us per call, slowest rank, best round)')
    for mb, best in rows:
        print(f'{mb:>5} ' + ' '.join(f'{best[k]:>9.1f}' for k in keys))
