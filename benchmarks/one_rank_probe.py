"""One-rank probe (not a user tool): `mpirun -n 1 python benchmarks/one_rank_probe.py [--mb 32,64,128]`.

A collective of one rank is a copy of its input into its output (or nothing, in place): this puts
mpigpu's blocking out-of-place and in-place Allreduce beside NCCL's (cupy.cuda.nccl, one rank, stream
synchronized after each call), the driver's copy (cudaMemcpyAsync + synchronize) and a plain CuPy copy
kernel, per size, interleaved round by round; best of the rounds' medians, us per call. Says where a
one-rank call's time goes: the copy itself, or host work around it.
"""
import sys
import time

import cupy as cp
import numpy as np
from cupy.cuda import nccl
from mpi4py import MPI

import mpigpu
from mpigpu import _cuda
from mpigpu._base.codes import Algo, Coll, Dtype, Op
from mpigpu._ext._intake import any_device
from mpigpu._state.comm_state import state_of

dm = _cuda.device

comm = mpigpu.COMM_SELF
SIZES = [8, 1 << 10, 64 << 10, 1 << 20, 4 << 20, 8 << 20, 16 << 20, 32 << 20, 64 << 20, 128 << 20, 256 << 20]
if len(sys.argv) > 2 and sys.argv[1] == '--mb':  # other sizes, in MiB: --mb 32,64,128
    SIZES = [int(m) << 20 for m in sys.argv[2].split(',')]
ROUNDS, BUDGET_S = 7, 0.05

nc = nccl.NcclCommunicator(1, nccl.get_unique_id(), 0)
stream = cp.cuda.Stream(non_blocking=True)

_copy = cp.RawKernel(r'''
extern "C" __global__ void copy16(const uint4 *__restrict__ s, uint4 *__restrict__ d, size_t n) {
  size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x, step = (size_t)gridDim.x * blockDim.x;
  for (; i + 3 * step < n; i += 4 * step) {
    uint4 a = s[i], b = s[i + step], c = s[i + 2 * step], e = s[i + 3 * step];
    d[i] = a; d[i + step] = b; d[i + 2 * step] = c; d[i + 3 * step] = e;
  }
  for (; i < n; i += step) d[i] = s[i];
}''', 'copy16')
SMS = cp.cuda.Device().attributes['MultiProcessorCount']


def python_allreduce(comm, sendbuf, recvbuf, op=MPI.SUM, *, stream=None):
    """The Allreduce method as a Python function, as it was before mpigpu/_ext/_front.pyx: what the
    Cython method saves is this column's time less mpigpu's."""
    if stream is not None:
        raise NotImplementedError
    if not any_device(sendbuf, recvbuf):
        raise NotImplementedError
    if dm.fast_entry(comm, Coll.ALLREDUCE, sendbuf, recvbuf, op):
        return None
    raise RuntimeError('the fast path declined')


def idle_waits():
    """us per call of cudaStreamQuery and cudaStreamSynchronize, from CuPy, on idle streams (legacy default and non-blocking): what a call that has nothing to copy waits at
    least."""
    out = {}
    rt = cp.cuda.runtime
    for name, ptr in (('legacy', 1), ('non-blocking', stream.ptr)):
        for what, fn in (('query', rt.streamQuery), ('synchronize', rt.streamSynchronize)):
            best = min(timed(lambda: fn(ptr), 8) for _ in range(ROUNDS))
            out[f'{what} ({name})'] = best
    return out


def timed(fn, nbytes):
    reps = max(3, min(2000, int(BUDGET_S / max(nbytes / 2.0e12, 8e-6))))
    for _ in range(3):
        fn()
    t0 = time.perf_counter()
    for _ in range(reps):
        fn()
    return (time.perf_counter() - t0) / reps * 1e6


def main():
    rows = []
    comm.Allreduce(cp.ones(4, cp.float32), cp.empty(4, cp.float32))  # the team
    for nbytes in SIZES:
        n = nbytes // 4
        x = cp.arange(n, dtype=cp.float32)
        y = cp.empty_like(x)
        with stream:
            xs, ys = cp.arange(n, dtype=cp.float32), cp.empty(n, cp.float32)
        stream.synchronize()
        units = nbytes // 16

        def mg_out():
            comm.Allreduce(x, y, op=MPI.SUM)

        def mg_in():
            comm.Allreduce(MPI.IN_PLACE, y, op=MPI.SUM)

        def nccl_out():
            nc.allReduce(xs.data.ptr, ys.data.ptr, n, nccl.NCCL_FLOAT32, nccl.NCCL_SUM, stream.ptr)
            stream.synchronize()

        def nccl_in():
            nc.allReduce(ys.data.ptr, ys.data.ptr, n, nccl.NCCL_FLOAT32, nccl.NCCL_SUM, stream.ptr)
            stream.synchronize()

        def memcpy():
            cp.cuda.runtime.memcpyAsync(ys.data.ptr, xs.data.ptr, nbytes, cp.cuda.runtime.memcpyDeviceToDevice,
                                        stream.ptr)
            stream.synchronize()

        def kernel():
            _copy((min(SMS * 8, max(1, units // 256)),), (256,), (xs, ys, np.uint64(units)), stream=stream)
            stream.synchronize()

        def mg_stream():
            with stream:
                comm.Allreduce(xs, ys, op=MPI.SUM)

        def memcpy_legacy():
            cp.cuda.runtime.memcpyAsync(y.data.ptr, x.data.ptr, nbytes, cp.cuda.runtime.memcpyDeviceToDevice, 1)
            cp.cuda.Stream.null.synchronize()

        st = state_of(comm)
        args = (Coll.ALLREDUCE, Algo.AUTO, Dtype.FLOAT32, Op.SUM, xs.data.ptr, ys.data.ptr, n, 0, 0, stream.ptr, True)

        def team_run():
            st.team.run(*args)

        def python_method():
            python_allreduce(comm, x, y, MPI.SUM)

        def mg_bcast():
            comm.Bcast(y)

        def nccl_bcast():
            nc.bcast(ys.data.ptr, n, nccl.NCCL_FLOAT32, 0, stream.ptr)
            stream.synchronize()

        impls = {'mpigpu': mg_out, 'NCCL': nccl_out, 'memcpy': memcpy, 'kernel': kernel,
                 'mpigpu in place': mg_in, 'NCCL in place': nccl_in, 'mpigpu Bcast': mg_bcast,
                 'NCCL Bcast': nccl_bcast, 'mpigpu (stream)': mg_stream, 'memcpy (legacy)': memcpy_legacy,
                 'team.run': team_run, 'Python method': python_method}
        res = {k: [] for k in impls}
        for _ in range(ROUNDS):
            for k, fn in impls.items():
                res[k].append(timed(fn, nbytes))
        best = {k: min(v) for k, v in res.items()}
        assert cp.array_equal(y, x)
        rows.append((nbytes, best))
    print('idle stream, us per call: ' + ', '.join(f'{k} {v:.2f}' for k, v in idle_waits().items()))
    keys = list(rows[0][1])
    print('bytes | ' + ' | '.join(keys) + ' | NCCL/mpigpu | in place | Bcast')
    for nbytes, best in rows:
        print(f'{nbytes} | ' + ' | '.join(f'{best[k]:.1f}' for k in keys)
              + f' | {best["NCCL"] / best["mpigpu"]:.2f}x | {best["NCCL in place"] / best["mpigpu in place"]:.2f}x'
              + f' | {best["NCCL Bcast"] / best["mpigpu Bcast"]:.2f}x')


main()
