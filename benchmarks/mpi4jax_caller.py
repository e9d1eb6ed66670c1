"""mpi4jax's allreduce on GPU arrays, timed in the mode MPI4JAX_USE_CUDA_MPI sets: 1, device pointers
handed to MPI (under `python -m mpigpu` the interposer takes them to mpigpu's engine); 0, mpi4jax's own
staging (copies to host memory, MPI on them, copies back). One mode per run (mpi4jax reads the variable
at import); run it in both and compare (benchmarks/device_session.sh has no part for it):

    MPI4JAX_USE_CUDA_MPI=1 mpirun -n 2 python -m mpigpu benchmarks/mpi4jax_caller.py
    MPI4JAX_USE_CUDA_MPI=0 mpirun -n 2 python -m mpigpu benchmarks/mpi4jax_caller.py

Each rank takes the GPU of its rank (JAX_CUDA_VISIBLE_DEVICES, set here before JAX starts; the header
shows where each rank's array is). Prints one line per size: bytes, us per call (slowest rank, median of
5 rounds), and checks the sums.
"""
import os
import statistics
import time

from mpi4py import MPI

comm = MPI.COMM_WORLD
rank, n = comm.Get_rank(), comm.Get_size()
os.environ.setdefault('JAX_CUDA_VISIBLE_DEVICES', str(rank))
os.environ.setdefault('XLA_PYTHON_CLIENT_PREALLOCATE', 'false')

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import mpi4jax  # noqa: E402

mode = os.environ.get('MPI4JAX_USE_CUDA_MPI', '')
step = jax.jit(lambda x: mpi4jax.allreduce(x, op=MPI.SUM))
rows = []
for nbytes in [1 << 10, 64 << 10, 1 << 20, 8 << 20, 64 << 20]:
    count = nbytes // 4
    x = (jnp.arange(count, dtype=jnp.float32) % 1000) + rank
    want = (jnp.arange(count, dtype=jnp.float32) % 1000) * n + n * (n - 1) / 2
    got = step(x).block_until_ready()
    assert bool(jnp.all(got == want)), f'rank {rank}: wrong sum at {nbytes} B'
    iters = max(5, min(500, int(0.05 / max(1e-6, nbytes / 20e9))))
    iters = comm.allreduce(iters, op=MPI.MIN)
    times = []
    for _ in range(5):
        comm.Barrier()
        t0 = time.perf_counter()
        for _ in range(iters):
            y = step(x)
        y.block_until_ready()
        times.append((time.perf_counter() - t0) / iters * 1e6)
    rows.append((nbytes, comm.allreduce(statistics.median(times), op=MPI.MAX)))
devices = comm.gather(f'{x.devices()}', root=0)  # ranks sharing a GPU have no device team: every call staged
if rank == 0:
    print(f'# mpi4jax {mpi4jax.__version__} allreduce, jax {jax.__version__}, {n} ranks on {devices}, '
          f'MPI4JAX_USE_CUDA_MPI={mode}')
    for nbytes, us in rows:
        print(f'mpi4jax allreduce mode={mode} {nbytes} B: {us:.1f} us')
