"""What the per-call agreement's exchange across nodes could cost (not a user tool; host MPI only, no GPU):
microseconds per exchange of one 16-byte record per rank, each a non-blocking MPI collective polled
until done (as mpigpu/_state/agree.py's 'net' mode waits), in alternating rounds:

  iallreduce   MPI_Iallreduce (BOR) over every rank (what 'net' mode does)
  iallgather   MPI_Iallgather of the records, OR-ed by each rank
  leaders-*    the same over one rank per (simulated) node: what a node board plus a leaders'
               exchange would leave on the network
  allreduce    blocking MPI_Allreduce over every rank, for reference

    MPIGPU_SIMULATE_NODES=2 mpirun -n 4 --mca btl tcp,self python3 benchmarks/agreement_net_probe.py
"""
import argparse
import os
import time

import numpy as np
from mpi4py import MPI

p = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
p.add_argument('--calls', type=int, default=2000, help='exchanges per round')
p.add_argument('--rounds', type=int, default=5, help='rounds of each, alternating')
args = p.parse_args()

world = MPI.COMM_WORLD
rank, n = world.Get_rank(), world.Get_size()
nodes = max(1, int(os.environ.get('MPIGPU_SIMULATE_NODES', '1')))
per_node = -(-n // nodes)
leader = rank % per_node == 0
leaders = world.Split(0 if leader else MPI.UNDEFINED, rank)
send = np.array([1, 4], np.int64)


def polled(req):
    while not req.Test():
        pass


def iallreduce(comm):
    out = np.zeros(2, np.int64)
    return lambda: polled(comm.Iallreduce(send, out, MPI.BOR))


def iallgather(comm):
    out = np.zeros(2 * comm.Get_size(), np.int64)

    def run():
        polled(comm.Iallgather(send, out))
        np.bitwise_or.reduce(out.reshape(-1, 2), axis=0)
    return run


def allreduce(comm):
    out = np.zeros(2, np.int64)
    return lambda: comm.Allreduce(send, out, MPI.BOR)


forms = {'iallreduce': iallreduce(world), 'iallgather': iallgather(world), 'allreduce': allreduce(world)}
if leader:
    forms.update({'leaders-iallreduce': iallreduce(leaders), 'leaders-iallgather': iallgather(leaders)})
names = world.bcast(list(forms), root=0)
best = {k: float('inf') for k in names}
for _ in range(args.rounds):
    for k in names:
        fn = forms.get(k)
        world.Barrier()
        t0 = time.perf_counter()
        if fn is not None:
            for _ in range(args.calls):
                fn()
        us = (time.perf_counter() - t0) / args.calls * 1e6 if fn is not None else 0.0
        best[k] = min(best[k], world.allreduce(us, op=MPI.MAX))
if rank == 0:
    print(f'{n} ranks, {nodes} nodes of {per_node}; us per exchange (slowest rank, best of {args.rounds} rounds):')
    for k in names:
        print(f'  {k:<20} {best[k]:8.1f}')
