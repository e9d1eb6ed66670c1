"""mpi4jax's allreduce on GPU arrays, timed in the mode MPI4JAX_USE_CUDA_MPI sets: 1, device pointers
handed to MPI (under `python -m mpigpu` the interposer takes them to mpigpu's engine); 0, mpi4jax's own
staging (copies to host memory, MPI on them, copies back). One mode per run (mpi4jax reads the variable
at import); run it in both and compare (benchmarks/device_session.sh has no part for it):

    MPI4JAX_USE_CUDA_MPI=1 mpirun -n 2 python -m mpigpu benchmarks/mpi4jax_caller.py
    MPI4JAX_USE_CUDA_MPI=0 mpirun -n 2 python -m mpigpu benchmarks/mpi4jax_caller.py

Each rank puts its arrays on the GPU of its rank among those JAX sees (jax.device_put: JAX took no notice
of JAX_CUDA_VISIBLE_DEVICES set in the script, and both ranks' arrays sat on GPU 0); the header shows
each rank's CUDA device as the driver numbers it, mpi4jax's staging switch, and how many device calls
mpigpu ran. Prints one line per size: bytes, us per call (slowest rank, median of
5 rounds), the same timing of a jit-compiled call without MPI beside it (JAX's own cost per call), and
checks the sums.
"""
import ctypes
import os
import statistics
import time

from mpi4py import MPI

comm = MPI.COMM_WORLD
rank, n = comm.Get_rank(), comm.Get_size()
os.environ.setdefault('XLA_PYTHON_CLIENT_PREALLOCATE', 'false')

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import mpi4jax  # noqa: E402

mode = os.environ.get('MPI4JAX_USE_CUDA_MPI', '')
gpu = jax.devices()[rank % len(jax.devices())]
step = jax.jit(lambda x: mpi4jax.allreduce(x, op=MPI.SUM))
local = jax.jit(lambda x: x * 2.0 + 1.0)  # no MPI: what a jit-compiled call costs JAX alone


def timed(fn, x, iters, each=False):
    """us per call of fn(x): the slowest rank's median of 5 rounds of iters calls (each: every call
    waited for before the next is made, so none is dispatched while another runs)."""
    times = []
    for _ in range(5):
        comm.Barrier()
        t0 = time.perf_counter()
        for _ in range(iters):
            y = fn(x)
            if each:
                y.block_until_ready()
        y.block_until_ready()
        times.append((time.perf_counter() - t0) / iters * 1e6)
    return comm.allreduce(statistics.median(times), op=MPI.MAX)


rows = []
for nbytes in [1 << 10, 64 << 10, 1 << 20, 8 << 20, 64 << 20]:
    count = nbytes // 4
    x = jax.device_put((jnp.arange(count, dtype=jnp.float32) % 1000) + rank, gpu)
    want = (jnp.arange(count, dtype=jnp.float32) % 1000) * n + n * (n - 1) / 2
    got = step(x).block_until_ready()
    assert bool(jnp.all(got == want)), f'rank {rank}: wrong sum at {nbytes} B'
    iters = max(5, min(500, int(0.05 / max(1e-6, nbytes / 20e9))))
    iters = comm.allreduce(iters, op=MPI.MIN)
    local(x).block_until_ready()
    rows.append((nbytes, timed(step, x, iters), timed(step, x, iters, each=True), timed(local, x, iters)))


def ordinal(array):
    """The CUDA device (the driver's numbering, all GPUs visible) holding array's memory: JAX numbers
    only the devices it was told to see, so its device ids do not show whether two ranks share a GPU."""
    cuda, out = ctypes.CDLL('libcuda.so.1'), ctypes.c_int(-1)
    cuda.cuPointerGetAttribute(ctypes.byref(out), 9, ctypes.c_uint64(array.unsafe_buffer_pointer()))  # ..._ORDINAL
    return out.value


# ranks sharing a GPU have no device team: every call of theirs is staged through host MPI
devices = comm.gather(ordinal(x), root=0)
try:
    import mpigpu
    handled = mpigpu.interposer_status()['handled_calls']
except ImportError:  # plain mpi4py, for the baseline
    handled = 'no mpigpu'
handled = comm.gather(handled, root=0)
from mpi4jax._src.xla_bridge import mpi_xla_bridge_cuda  # noqa: E402
staging = comm.gather(mpi_xla_bridge_cuda.get_copy_to_host(), root=0)
if rank == 0:
    print(f'# mpi4jax {mpi4jax.__version__} allreduce, jax {jax.__version__}, {n} ranks on CUDA devices {devices}, '
          f'MPI4JAX_USE_CUDA_MPI={mode} (mpi4jax copies to host: {staging}), device calls handled by mpigpu per '
          f'rank {handled}')
    for nbytes, us, waited, alone in rows:
        print(f'mpi4jax allreduce mode={mode} {nbytes} B: {us:.1f} us, each waited for {waited:.1f} us '
              f'(jit x*2+1 alone: {alone:.1f} us)')
