"""What the resident kernel's linger costs a program, and what it saves (not a user tool):
`mpirun -n N python3 -m mpi4py benchmarks/linger_probe.py`.

After a blocking LL or LL128 call the resident instance waits for the next one (at most
MPIGPU_RESIDENT_US), holding MPIGPU_RESIDENT_BLOCKS SMs. Communicators with different limits (set
before each team is made; argv[1], default 100,25,0) run, interleaved over rounds:
  call+gemm      a 1 KB Allreduce, then a float32 GEMM on the caller's stream, then its synchronize
  call+axpy      the same with a memory-bound elementwise kernel
  call+devsync   a 1 KB Allreduce, then cudaDeviceSynchronize (as torch.cuda.synchronize() does)
  20 calls+gemm  20 back-to-back 1 KB Allreduces, then the GEMM: the wait after a burst
  gap G us       1 KB Allreduces with G us of host work between them: the call alone
Prints rank 0's table of the slowest rank's medians, us.
"""
import sys
import time

import cupy as cp
from mpi4py import MPI

import mpigpu
from mpigpu._base.codes import Algo, Coll, Dtype, Op
from mpigpu._state.comm_state import state_of

comm = mpigpu.COMM_WORLD
rank, n = comm.Get_rank(), comm.Get_size()
cp.cuda.Device(rank % cp.cuda.runtime.getDeviceCount()).use()
LINGERS = [float(v) for v in (sys.argv[1] if len(sys.argv) > 1 else '100,25,0').split(',')]
ROUNDS, ITERS = 5, 60

x = cp.ones(256, cp.float32)
y = cp.empty_like(x)
comms = {}
for us in LINGERS:
    mpigpu.config.resident_us = us
    comms[us] = comm.Dup()
    comms[us].Allreduce(x, y)  # the team is made at the first call, with the linger of that moment
ga = cp.random.rand(2048, 2048, dtype=cp.float32)
gb = cp.random.rand(2048, 2048, dtype=cp.float32)
gout = cp.empty_like(ga)
sa = cp.random.rand(1024, 1024, dtype=cp.float32)
sout = cp.empty_like(sa)
va = cp.ones(16 << 20, cp.float32)
vout = cp.empty_like(va)
stream = cp.cuda.get_current_stream()


def gemm():
    cp.matmul(ga, gb, out=gout)


def small_gemm():
    cp.matmul(sa, sa, out=sout)


def axpy():
    cp.multiply(va, 2.0, out=vout)


def spin(us):
    end = time.perf_counter() + us * 1e-6
    while time.perf_counter() < end:
        pass


def med(v):
    v = sorted(v)
    return v[len(v) // 2]


def run_loop(c, work, gap_us=0.0, time_call=False, calls=1):
    """Median us per iteration (or of the call alone) over ITERS iterations."""
    out = []
    for _ in range(ITERS):
        t0 = time.perf_counter()
        for _ in range(calls if c is not None else 0):
            c.Allreduce(x, y)
        t1 = time.perf_counter()
        if work is not None:
            work()
            stream.synchronize()
        elif gap_us:
            spin(gap_us)
        t2 = time.perf_counter()
        out.append((t1 - t0 if time_call else t2 - t0) * 1e6)
    return med(out)


def devsync():
    cp.cuda.runtime.deviceSynchronize()


cases = [('gemm 2048 alone', None, gemm, 0, False, 1), ('gemm 1024 alone', None, small_gemm, 0, False, 1),
         ('axpy 64 MB alone', None, axpy, 0, False, 1)]
for us in LINGERS:
    cases += [(f'call+gemm 2048 [{us:g}]', us, gemm, 0, False, 1),
              (f'call+gemm 1024 [{us:g}]', us, small_gemm, 0, False, 1),
              (f'call+axpy 64 MB [{us:g}]', us, axpy, 0, False, 1),
              (f'call+devsync [{us:g}]', us, devsync, 0, False, 1),
              (f'20 calls+gemm 2048 [{us:g}]', us, gemm, 0, False, 20)]
    for gap in (0, 10, 20, 50, 80, 150):
        cases.append((f'call after {gap} us gap [{us:g}]', us, None, gap, True, 1))
results = {name: [] for name, *_ in cases}
for _ in range(ROUNDS):
    for name, us, work, gap, time_call, calls in cases:
        comm.Barrier()
        spin(300)  # every instance idles out between cases
        v = run_loop(comms[us] if us is not None else None, work, gap, time_call, calls)
        results[name].append(comm.allreduce(v, op=MPI.MAX))

def per_call(fn, iters=5000):
    for _ in range(50):
        fn()
    comm.Barrier()
    t0 = time.perf_counter()
    for _ in range(iters):
        fn()
    return comm.allreduce((time.perf_counter() - t0) / iters * 1e6, op=MPI.MAX)


z = cp.empty(0, cp.float32)
zr = cp.empty(0, cp.float32)
c100 = comms[LINGERS[0]]
host = {
    'comm.Allreduce, 0 elements (the host path to the engine)': per_call(lambda: c100.Allreduce(z, zr)),
    'comm.Allreduce, 1 KB': per_call(lambda: c100.Allreduce(x, y)),
    'team.run, 1 KB (the engine alone)': per_call(lambda: state_of(c100).team.run(
        Coll.ALLREDUCE, Algo.AUTO, Dtype.FLOAT32, Op.SUM, x.data.ptr, y.data.ptr, 256, 0, 0, stream.ptr, True)),
    'cupy.cuda.get_current_stream()': per_call(cp.cuda.get_current_stream),
    'cudaStreamQuery (stream.done)': per_call(lambda: stream.done),
}
if rank == 0:
    for k, v in host.items():
        print(f'# {k}: {v:.2f} us')
    print(f'# {n} ranks, medians of {ITERS} iterations, slowest rank; min..max over {ROUNDS} rounds (us)')
    for name, v in results.items():
        print(f'{name:>34}: {med(v):9.1f}  ({min(v):.1f}..{max(v):.1f})')
    for us, c in comms.items():
        print(f'# limit {us:g} us: (resident calls, instances launched, calls alone) {state_of(c).team.resident_stats}')
for c in comms.values():
    c.Free()
