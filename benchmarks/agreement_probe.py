"""What the per-call agreement costs (mpigpu/_state/agree.py), in one run on the same buffers: blocking calls
of the engine's fast path with the placement board on and off (the communicator's board handed to its
device team, or not), and host-buffer calls with their post on the board on and off, in alternating
rounds, the best round of each. Every rank switches at the same round, so the board stays in step.

    mpirun -n 4 python3 benchmarks/agreement_probe.py      # one rank per GPU
    mpiexec -n 2 python3 benchmarks/agreement_probe.py --host-only   # CPUs: the host rows alone

Prints per row: microseconds per call off / on and the difference (on - off).
"""
import argparse
import time

import numpy as np
from mpi4py import MPI

import mpigpu
from mpigpu._state import comm_state as _state

p = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
p.add_argument('--host-only', action='store_true', help='only host buffers (no GPU)')
p.add_argument('--bytes', default='8,8192', help='message sizes (comma separated)')
p.add_argument('--calls', type=int, default=2000, help='calls per round')
p.add_argument('--rounds', type=int, default=11, help='rounds of each, alternating')
args = p.parse_args()

plain = MPI.COMM_WORLD
comm = mpigpu.COMM_WORLD
rank, n = comm.Get_rank(), comm.Get_size()
cp = None
if not args.host_only:
    import cupy as cp
    cp.cuda.Device(rank % cp.cuda.runtime.getDeviceCount()).use()


def best_rounds(call, switch):
    """(us per call with the agreement off, on): alternating rounds, the best of each."""
    best = {False: float('inf'), True: float('inf')}
    for r in range(2 * args.rounds):
        on = bool(r % 2)
        switch(on)
        for _ in range(50):
            call()
        plain.Barrier()
        t0 = time.perf_counter()
        for _ in range(args.calls):
            call()
        dt = (time.perf_counter() - t0) / args.calls * 1e6
        best[on] = min(best[on], plain.allreduce(dt, op=MPI.MAX))
    switch(True)
    return best[False], best[True]


rows = []
st = None
for nb in (int(b) for b in args.bytes.split(',')):
    count = max(nb // 4, 1)
    if cp is not None:
        x, y = cp.ones(count, cp.float32), cp.zeros(count, cp.float32)
        comm.Allreduce(x, y)  # sets up the agreement and the team
        st = _state.state_of(comm)
        board = st.agreement.board

        def device_switch(on, team=st.team, board=board):
            team.board = board if on else None
        off, on = best_rounds(lambda: comm.Allreduce(x, y), device_switch)
        rows.append((f'Allreduce {nb} B, device (engine fast path)', off, on))
    hx, hy = np.ones(count, np.float32), np.zeros(count, np.float32)
    comm.Allreduce(hx, hy)
    st = _state.state_of(comm)
    hook = st.host_hook

    def host_switch(on, st=st, hook=hook):
        st.host_hook = hook if on else None
    off, on = best_rounds(lambda: comm.Allreduce(hx, hy), host_switch)
    rows.append((f'Allreduce {nb} B, host buffers', off, on))
    off, on = best_rounds(lambda: comm.Bcast(hx, root=0), host_switch)
    rows.append((f'Bcast {nb} B, host buffers', off, on))

if rank == 0:
    print(f'# {n} ranks; agreement: {comm.agreement_status()}; engine: {comm.engine_status()}')
    print(f'# best of {args.rounds} alternating rounds of {args.calls} calls; us per call')
    print(f'{"row":46s} {"off":>9s} {"on":>9s} {"on-off":>8s}')
    for label, off, on in rows:
        print(f'{label:46s} {off:9.3f} {on:9.3f} {on - off:+8.3f}')
