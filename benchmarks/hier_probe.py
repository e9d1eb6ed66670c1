"""Where a small collective's time goes on the hierarchical path (a communicator spanning nodes, or
simulated nodes): per size, in one run on the same buffers, microseconds per blocking Allreduce of

  mpigpu     the whole call (`comm.Allreduce`: intake, the per-call agreement, the path)
  run        the path alone: a Plan built once and run again and again (no intake, no agreement)
  agree      the agreement's exchange alone: a one-word MPI_Iallreduce (BOR) on a duplicate, waited for
  nccl       NCCL's own all-reduce where each simulated node is a host (the `nccl-nodes` baseline)

and a profile of ranks 0 and 1's whole calls at one size (`--profile BYTES`, top functions by own time:
a node's leader and the other rank of its node). `--agreement net` makes every rank agree through the
exchange among all ranks, as where no node's ranks can share a board (the A/B of the node boards).

    MPIGPU_SIMULATE_NODES=2 mpirun -n 4 --mca btl tcp,self python3 benchmarks/hier_probe.py --out DIR
"""
import argparse
import cProfile
import io
import os
import pstats

import cupy as cp
import numpy as np
from mpi4py import MPI

import mpigpu
import probe_common
from mpigpu._base import codes as _codes
from mpigpu._paths import plan as _plan
from mpigpu.perf import baselines

p = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
p.add_argument('--bytes', default='1024,16384,65536,262144,1048576', help='message sizes (comma separated)')
p.add_argument('--calls', type=int, default=300, help='calls per round')
p.add_argument('--rounds', type=int, default=5, help='rounds of each, alternating')
p.add_argument('--profile', type=int, default=16384, help='bytes of the profiled calls (0: none)')
p.add_argument('--out', default='.', help='folder of the profile')
p.add_argument('--agreement', choices=('auto', 'net'), default='auto',
               help="net: the exchange among all ranks, as where no node's ranks can share a board")
args = p.parse_args()
if args.agreement == 'net':  # no folder for the boards' files: every node falls back to the exchange
    from mpigpu._state import agree as _agree
    _agree._board_dir = lambda: '/proc/mpigpu-no-such-dir'

plain = MPI.COMM_WORLD
comm = mpigpu.COMM_WORLD
rank, n = comm.Get_rank(), comm.Get_size()
cp.cuda.Device(rank % cp.cuda.runtime.getDeviceCount()).use()
x0, y0 = cp.ones(16, cp.float32), cp.zeros(16, cp.float32)
comm.Allreduce(x0, y0)  # sets up the agreement and the hierarchical path before NCCL's baseline
if rank == 0:
    print(comm.engine_status(), '; agreement:', comm.agreement_status(), flush=True)
nccl = baselines.NcclNodesImpl(plain)
dup = plain.Dup()
one, out = np.ones(1, np.int64), np.zeros(1, np.int64)


rows = []
for nb in (int(b) for b in args.bytes.split(',')):
    count = nb // 4
    b = baselines.make_buffers(cp, 'allreduce', count, np.float32, n, rank, False, 0)
    plan = _plan.Plan(comm, 'MPI_Allreduce', _codes.Coll.ALLREDUCE, b.send, b.recv, MPI.SUM, 0)
    forms = probe_common.with_nccl({'mpigpu': lambda: comm.Allreduce(b.send, b.recv), 'run': plan.run,
                                    'agree': lambda: dup.Iallreduce(one, out, MPI.BOR).Wait()}, nccl, b, 'sum', rank)
    best = probe_common.alternating(plain, forms, args.rounds, args.calls, warm=20)
    b.recv.fill(0)
    comm.Allreduce(b.send, b.recv)
    got = float(b.recv[0].get())
    ok = got == float(sum(r + 1 for r in range(n)))  # element 0: base 0 + (rank + 1) on every rank
    rows.append((nb, best, ok))
    if nb == args.profile and rank < 2:  # a node's leader and the other rank of its node
        prof = cProfile.Profile()
        prof.enable()
        for _ in range(args.calls):
            comm.Allreduce(b.send, b.recv)
        prof.disable()
    elif nb == args.profile:
        for _ in range(args.calls):
            comm.Allreduce(b.send, b.recv)

if args.profile and rank < 2:
    s = io.StringIO()
    stats = pstats.Stats(prof, stream=s)
    stats.sort_stats('tottime').print_stats(40)
    stats.sort_stats('cumulative').print_stats(40)
    with open(os.path.join(args.out, f'hier_profile-{args.agreement}-r{rank}.txt'), 'w') as f:
        f.write(s.getvalue())
if rank == 0:
    keys = list(rows[0][1])
    print(f"{'bytes':>9} " + ' '.join(f'{k:>9}' for k in keys) + '  mpigpu/nccl  result')
    for nb, best, ok in rows:
        ratio = best['mpigpu'] / best['nccl'] if 'nccl' in best else float('nan')
        print(f'{nb:>9} ' + ' '.join(f'{best[k]:>9.1f}' for k in keys) + f'  {ratio:>10.2f}  {"ok" if ok else "WRONG"}')
    if args.profile:
        print(f'profile of {args.calls} calls of {args.profile} bytes: {args.out}/hier_profile-{args.agreement}-r*.txt')
