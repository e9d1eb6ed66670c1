"""Code written for a CUDA-aware MPI, unchanged, under `python -m mpigpu` on GPUs (issue 35).

    mpirun -n N python -m mpigpu tests/gpu/check_cuda_aware.py      (MPIGPU_SHARED_GPU=1 on one GPU)

Every collective and point-to-point method with device memory given as such code gives it, against
the same call on host memory (plain mpi4py semantics: host buffers go to MPI unchanged), byte for byte:
- raw device addresses wrapped as `MPI.memory.fromaddress(ptr, nbytes)` (and `MPI.buffer`) in each
  specification form: `[m, D]`, `[m, count, D]`, `[m, (counts, displs), D]`, `[m, counts, displs, D]`,
  with MPI.IN_PLACE where the call takes it;
- transposed torch tensors described by the chain a distributed-array library builds from strides,
  `D.Create_vector(n, 1, stride).Create_resized(0, stride_bytes)` per dimension, on their raw address;
- torch, CuPy (also a view at an offset), Numba and JAX arrays passed directly.
Then the speed of item 2 (printed, not asserted): Allreduce, Bcast, Reduce_scatter_block and
Allgather of 64 MiB given as MPI.memory.fromaddress against the same call on the CuPy array.
Exits 1 on any failure; the last lines are a short table.
"""
import os
import sys
import time

# JAX: float64 arrays, and no preallocation of most of the GPU the ranks share
os.environ.setdefault('JAX_ENABLE_X64', '1')
os.environ.setdefault('XLA_PYTHON_CLIENT_PREALLOCATE', 'false')

import cupy as cp
import numpy as np
from mpi4py import MPI

try:
    import torch
except ImportError:
    torch = None

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
cp.cuda.Device(rank % cp.cuda.runtime.getDeviceCount()).use()
if torch is not None:
    torch.cuda.set_device(rank % torch.cuda.device_count())
D = MPI.DOUBLE
C = 4  # elements per rank
failures, checks = [], 0
kept = []


class Device:
    """Buffers of raw device addresses (the wrapper that CUDA-aware code hands mpi4py)."""
    name = 'device'

    def __init__(self, wrap):
        self.wrap = wrap

    def make(self, values):
        a = cp.asarray(np.asarray(values, np.float64))
        kept.append(a)
        return a, self.wrap.fromaddress(a.data.ptr, a.nbytes)

    @staticmethod
    def read(a):
        cp.cuda.runtime.deviceSynchronize()
        return cp.asnumpy(a)


class Host:
    """The same calls on host memory, the reference."""
    name = 'host'

    def make(self, values):
        a = np.array(values, np.float64)
        kept.append(a)
        return a, MPI.memory.fromaddress(a.ctypes.data, a.nbytes)

    @staticmethod
    def read(a):
        return a.copy()


def mine(k=0):
    return np.arange(C, dtype=np.float64) + 10 * rank + k + 1


counts = [C] * size
displs = [C * r for r in range(size)]
vcounts = [r + 1 for r in range(size)]  # uneven v-form counts
vdispls = [sum(vcounts[:r]) for r in range(size)]
nxt, prv = (rank + 1) % size, (rank - 1) % size


def cases(mem):
    """{name: function(mem) -> arrays to compare}; each function runs one call on `mem`'s buffers."""
    mk = mem.make

    def allreduce(form):
        (_, s), (r, rm) = mk(mine()), mk(np.zeros(C))
        if form == 'typed':
            comm.Allreduce([s, D], [rm, D])
        elif form == 'counted':
            comm.Allreduce([s, C, D], [rm, C, D])
        else:
            r, rm = mk(mine())
            comm.Allreduce(MPI.IN_PLACE, [rm, C, D])
        return [r]

    def bcast(form):
        b, bm = mk(mine() if rank == 0 else np.zeros(C))
        comm.Bcast([bm, D] if form == 'typed' else [bm, C, D], root=0)
        return [b]

    def reduce(form):
        root = size - 1
        r, rm = mk(np.zeros(C) if form != 'in_place' else mine())
        s = mk(mine())[1]
        if form == 'in_place' and rank == root:
            comm.Reduce(MPI.IN_PLACE, [rm, C, D], MPI.MAX, root)
        else:
            comm.Reduce([s, C, D], [rm, C, D], MPI.MAX, root)
        return [r] if rank == root else []

    def allgather(form):
        r, rm = mk(np.zeros(C * size))
        if form == 'in_place':
            r, rm = mk(np.concatenate([mine() if q == rank else np.zeros(C) for q in range(size)]))
            comm.Allgather(MPI.IN_PLACE, [rm, C, D])
        else:
            comm.Allgather([mk(mine())[1], C, D], [rm, C, D])
        return [r]

    def allgatherv(form):
        r, rm = mk(np.zeros(sum(vcounts)))
        s = mk(mine()[:vcounts[rank]])[1]
        if form == 'tuple':
            comm.Allgatherv([s, D], [rm, (vcounts, vdispls), D])
        else:
            comm.Allgatherv([s, D], [rm, vcounts, vdispls, D])
        return [r]

    def alltoall(form):
        s = mk(np.arange(C * size) + 100 * rank)[1]
        r, rm = mk(np.zeros(C * size))
        comm.Alltoall([s, C, D], [rm, C, D])
        return [r]

    def alltoallv(form):
        s = mk(np.arange(sum(vcounts)) + 100 * rank)[1]
        r, rm = mk(np.zeros((rank + 1) * size))
        rc = [rank + 1] * size
        rd = [(rank + 1) * q for q in range(size)]
        if form == 'tuple':
            comm.Alltoallv([s, (vcounts, vdispls), D], [rm, (rc, rd), D])
        else:
            comm.Alltoallv([s, vcounts, vdispls, D], [rm, rc, rd, D])
        return [r]

    def gather(form):
        r, rm = mk(np.zeros(C * size))
        comm.Gather([mk(mine())[1], C, D], [rm, C, D] if rank == 0 else None, root=0)
        return [r] if rank == 0 else []

    def gatherv(form):
        r, rm = mk(np.zeros(sum(vcounts)))
        s = mk(mine()[:vcounts[rank]])[1]
        comm.Gatherv([s, D], [rm, (vcounts, vdispls), D] if rank == 0 else None, root=0)
        return [r] if rank == 0 else []

    def scatter(form):
        s = mk(np.arange(C * size) + 0.5)[1]
        r, rm = mk(np.zeros(C))
        comm.Scatter([s, C, D] if rank == 0 else None, [rm, C, D], root=0)
        return [r]

    def scatterv(form):
        s = mk(np.arange(sum(vcounts)) + 0.25)[1]
        r, rm = mk(np.zeros(vcounts[rank]))
        comm.Scatterv([s, vcounts, vdispls, D] if rank == 0 else None, [rm, D], root=0)
        return [r]

    def reduce_scatter_block(form):
        s = mk(np.arange(C * size) + rank)[1]
        r, rm = mk(np.zeros(C))
        comm.Reduce_scatter_block([s, C, D], [rm, C, D])  # a block collective's count is per rank
        return [r]

    def reduce_scatter(form):
        s = mk(np.arange(sum(vcounts)) * (rank + 1))[1]
        r, rm = mk(np.zeros(vcounts[rank]))
        comm.Reduce_scatter([s, D], [rm, D], vcounts)
        return [r]

    def scan(form):
        r, rm = mk(np.zeros(C))
        (comm.Scan if form == 'scan' else comm.Exscan)([mk(mine())[1], C, D], [rm, C, D])
        return [r] if form == 'scan' or rank > 0 else []

    def sendrecv(form):
        r, rm = mk(np.zeros(C))
        comm.Sendrecv([mk(mine())[1], C, D], nxt, 5, [rm, C, D], prv, 5)
        return [r]

    def sendrecv_replace(form):
        b, bm = mk(mine())
        comm.Sendrecv_replace([bm, D], nxt, 6, prv, 6)
        return [b]

    def send_recv(form):
        r, rm = mk(np.zeros(C))
        s = mk(mine())[1]
        if form == 'blocking':
            if rank % 2 == 0:
                comm.Send([s, C, D], nxt, 7)
                comm.Recv([rm, C, D], prv, 7)
            else:
                comm.Recv([rm, C, D], prv, 7)
                comm.Send([s, C, D], nxt, 7)
        else:
            reqs = [comm.Irecv([rm, C, D], prv, 8), comm.Isend([s, C, D], nxt, 8)]
            MPI.Request.Waitall(reqs)
        return [r]

    out = {}
    for fn, forms in ((allreduce, ('typed', 'counted', 'in_place')), (bcast, ('typed', 'counted')),
                      (reduce, ('counted', 'in_place')), (allgather, ('counted', 'in_place')),
                      (allgatherv, ('tuple', 'flat')), (alltoall, ('counted',)), (alltoallv, ('tuple', 'flat')),
                      (gather, ('counted',)), (gatherv, ('tuple',)), (scatter, ('counted',)),
                      (scatterv, ('flat',)), (reduce_scatter_block, ('counted',)), (reduce_scatter, ('typed',)),
                      (scan, ('scan', 'exscan')), (sendrecv, ('counted',)), (sendrecv_replace, ('typed',)),
                      (send_recv, ('blocking', 'nonblocking'))):
        for form in forms:
            out[f'{fn.__name__}[{form}]'] = (lambda fn=fn, form=form: fn(form))
    return out


def compare(name, run_dev, run_host, read_dev, read_host):
    global checks
    checks += 1
    try:
        got = [read_dev(a) for a in run_dev()]
    except Exception as exc:  # noqa: BLE001 -- recorded: a refusal is a failure here
        failures.append(f'{name}: rank {rank}: {type(exc).__name__}: {exc}')
        return
    want = [read_host(a) for a in run_host()]
    if len(got) != len(want) or any(g.tobytes() != w.tobytes() for g, w in zip(got, want)):
        failures.append(f'{name}: rank {rank}: {got} != {want}')


def forms():
    for wrap in (MPI.memory, MPI.buffer):
        dev, host = cases(Device(wrap)), cases(Host())
        for name in dev:
            compare(f'{wrap.__name__}.fromaddress {name}', dev[name], host[name], Device.read, Host.read)
            kept.clear()


# ---- strided tensors with chained datatypes (a transposed torch tensor) --------------------------

def chain(shape, strides, base=D):
    """The datatype a distributed-array library builds for a strided tensor: from the innermost
    dimension out, a vector over the dimension's stride resized to one element, then the whole resized
    to the outermost stride (so a count of shape[0] walks the first dimension)."""
    itemsize = base.Get_size()
    t = base
    for n, stride in zip(reversed(shape[1:]), reversed(strides[1:])):
        t = t.Create_vector(n, 1, stride).Create_resized(0, itemsize)
    t = t.Create_resized(0, strides[0] * itemsize)
    t.Commit()
    return t


def strided_spec(t):
    """[MPI.memory at t's address over its whole extent, t.shape[0], the chained type]."""
    extent = (sum((n - 1) * s for n, s in zip(t.shape, t.stride())) + 1) * t.element_size()
    return [MPI.memory.fromaddress(t.data_ptr(), extent), t.shape[0], chain(list(t.shape), list(t.stride()))]


def transposed(rows, cols, offset):
    """A (cols x rows) transposed view of a contiguous rows x cols float64 CUDA tensor."""
    return (torch.arange(rows * cols, dtype=torch.float64, device='cuda') + offset).reshape(rows, cols).T


def tensors():
    if torch is None:
        return
    R, K = 3, 2 * size  # each rank's tensor is K x R (transposed from R x K)
    sync = torch.cuda.synchronize

    def logical(t):
        return t.cpu().numpy().ravel()  # the datatype's element order is the tensor's logical order

    def check(name, got, want):
        global checks
        checks += 1
        if got.tobytes() != want.tobytes():
            failures.append(f'strided {name}: rank {rank}: {got} != {want}')

    def attempt(name, fn):
        try:
            fn()
        except Exception as exc:  # noqa: BLE001
            global checks
            checks += 1
            failures.append(f'strided {name}: rank {rank}: {type(exc).__name__}: {exc}')

    def allgather():
        t = transposed(R, K, 100 * rank)
        out = torch.zeros(size * t.numel(), dtype=torch.float64, device='cuda')
        spec = strided_spec(t)
        comm.Allgather(spec, [MPI.memory.fromaddress(out.data_ptr(), out.numel() * 8), t.numel(), D])
        sync()
        want = np.zeros(size * t.numel())
        comm.Allgather(logical(t), want)
        check('Allgather(transposed sendbuf)', out.cpu().numpy(), want)

    def allgatherv_gatherv_scatterv():
        t = transposed(R, K, 100 * rank)
        rows = [K] * size
        out = torch.zeros(size * t.numel(), dtype=torch.float64, device='cuda')
        cnt = [r * R for r in rows]
        dsp = [sum(cnt[:q]) for q in range(size)]
        outm = MPI.memory.fromaddress(out.data_ptr(), out.numel() * 8)
        comm.Allgatherv(strided_spec(t), [outm, (cnt, dsp), D])
        sync()
        want = np.zeros(size * t.numel())
        comm.Allgatherv(logical(t), [want, (cnt, dsp), D])
        check('Allgatherv(transposed sendbuf)', out.cpu().numpy(), want)
        out.zero_()
        comm.Gatherv(strided_spec(t), [outm, (cnt, dsp), D] if rank == 0 else None, root=0)
        sync()
        if rank == 0:
            comm_want = want
            check('Gatherv(transposed sendbuf)', out.cpu().numpy(), comm_want)
        # Scatterv into transposed tensors: root sends K rows of R to each rank, each lands in a
        # transposed (K x R) view, element order logical
        recv = transposed(R, K, 0)
        recv.zero_()
        src = torch.arange(size * K * R, dtype=torch.float64, device='cuda') + 0.5
        comm.Scatterv([MPI.memory.fromaddress(src.data_ptr(), src.numel() * 8), (cnt, dsp), D]
                      if rank == 0 else None, strided_spec(recv), root=0)
        sync()
        check('Scatterv(transposed recvbuf)', logical(recv), src.cpu().numpy()[dsp[rank]:dsp[rank] + cnt[rank]])

    def alltoallv():
        t = transposed(R, K, 100 * rank)  # K rows: K // size rows to each rank
        per = K // size
        spec = strided_spec(t)
        cnt, dsp = [per] * size, [per * q for q in range(size)]
        out = torch.zeros(t.numel(), dtype=torch.float64, device='cuda')
        rc, rd = [per * R] * size, [per * R * q for q in range(size)]
        comm.Alltoallv([spec[0], (cnt, dsp), spec[2]],
                       [MPI.memory.fromaddress(out.data_ptr(), out.numel() * 8), (rc, rd), D])
        sync()
        want = np.zeros(t.numel())
        comm.Alltoallv([logical(t), ([per * R] * size, [per * R * q for q in range(size)]), D], [want, (rc, rd), D])
        check('Alltoallv(transposed sendbuf)', out.cpu().numpy(), want)

    def point_to_point():
        t = transposed(R, K, 100 * rank)
        recv = transposed(R, K, 0)
        recv.zero_()
        comm.Sendrecv(strided_spec(t), nxt, 9, strided_spec(recv), prv, 9)
        sync()
        check('Sendrecv(transposed both)', logical(recv), logical(transposed(R, K, 100 * prv)))
        recv.zero_()
        reqs = [comm.Irecv(strided_spec(recv), prv, 10), comm.Isend(strided_spec(t), nxt, 10)]
        MPI.Request.Waitall(reqs)
        sync()
        check('Isend/Irecv(transposed both)', logical(recv), logical(transposed(R, K, 100 * prv)))
        recv.zero_()
        if rank % 2 == 0:
            comm.Send(strided_spec(t), nxt, 11)
            comm.Recv(strided_spec(recv), prv, 11)
        else:
            comm.Recv(strided_spec(recv), prv, 11)
            comm.Send(strided_spec(t), nxt, 11)
        sync()
        check('Send/Recv(transposed both)', logical(recv), logical(transposed(R, K, 100 * prv)))

    def allreduce_bcast():
        # a reduction on the chained type: the element type decides (issue 29), so the result is the
        # element-wise sum of the ranks' tensors in logical order, whatever host MPI does with such a
        # type (Open MPI and MPICH refuse some derived types in reductions)
        t = transposed(R, K, 100 * rank)
        out = transposed(R, K, 0)
        out.zero_()
        send = strided_spec(t)
        comm.Allreduce(send, strided_spec(out)[:2] + [send[2]])
        sync()
        got = logical(out)
        want = sum(logical(transposed(R, K, 100 * r)) for r in range(size))
        if got.tobytes() != want.tobytes():
            failures.append(f'strided Allreduce(transposed both): rank {rank}: {got} != {want}')
        global checks
        checks += 1
        b = transposed(R, K, 7 if rank == 0 else 0)
        if rank:
            b.zero_()
        comm.Bcast(strided_spec(b), root=0)
        sync()
        check('Bcast(transposed buf)', logical(b), logical(transposed(R, K, 7)))

    for fn in (allgather, allgatherv_gatherv_scatterv, alltoallv, point_to_point, allreduce_bcast):
        attempt(fn.__name__, fn)
        comm.Barrier()


# ---- arrays of each framework, passed directly --------------------------------------------------

def frameworks():
    global checks
    want = np.zeros(C)
    comm.Allreduce(mine(), want)
    makers = {'cupy': lambda v: cp.asarray(v), 'cupy view at offset 3': lambda v: cp.asarray(np.r_[[9, 9, 9], v])[3:]}
    if torch is not None:
        makers['torch'] = lambda v: torch.tensor(v, device='cuda')
        makers['torch view at offset 2'] = lambda v: torch.tensor(np.r_[[9, 9], v], device='cuda')[2:]
    try:
        from numba import cuda as ncuda
        makers['numba'] = lambda v: ncuda.to_device(np.ascontiguousarray(v))
    except Exception:  # noqa: BLE001 -- numba without its CUDA target: not checked
        pass
    try:
        import jax
        import jax.numpy as jnp
        gpus = jax.devices('gpu')
        # on this rank's GPU: JAX puts arrays on its first device otherwise, another rank's GPU
        makers['jax (sendbuf)'] = lambda v: jax.device_put(jnp.asarray(v), gpus[rank % len(gpus)])
        cp.cuda.Device(rank % cp.cuda.runtime.getDeviceCount()).use()  # JAX's start made another current
    except Exception:  # noqa: BLE001
        pass
    for name, make in makers.items():
        checks += 1
        try:
            s = make(mine())
            r = cp.zeros(C)
            comm.Allreduce(s, r)
            got = cp.asnumpy(r)
            if got.tobytes() != want.tobytes():
                failures.append(f'{name} Allreduce: rank {rank}: {got} != {want}')
            if not name.startswith('jax'):
                r2 = make(np.zeros(C))
                comm.Allreduce(s, r2)
                back = np.asarray(r2.cpu() if hasattr(r2, 'cpu') else (r2.copy_to_host() if hasattr(r2, 'copy_to_host')
                                                                      else cp.asnumpy(r2)))
                if back.tobytes() != want.tobytes():
                    failures.append(f'{name} Allreduce into {name}: rank {rank}: {back} != {want}')
        except Exception as exc:  # noqa: BLE001
            failures.append(f'{name}: rank {rank}: {type(exc).__name__}: {exc}')
        comm.Barrier()


# ---- speed: MPI.memory.fromaddress against the CuPy array ---------------------------------------

def speed(nbytes=64 << 20, iters=10):
    cp.cuda.Device(rank % cp.cuda.runtime.getDeviceCount()).use()  # JAX's calls may have made another current
    n = nbytes // 4
    a, b = cp.ones(n, cp.float32), cp.zeros(n * size, cp.float32)
    F = MPI.FLOAT
    ma, mb = MPI.memory.fromaddress(a.data.ptr, a.nbytes), MPI.memory.fromaddress(b.data.ptr, b.nbytes)
    calls = {
        'Allreduce': (lambda: comm.Allreduce(a, b[:n]), lambda: comm.Allreduce([ma, n, F], [mb, n, F])),
        'Bcast': (lambda: comm.Bcast(a, 0), lambda: comm.Bcast([ma, n, F], 0)),
        'Reduce_scatter_block': (lambda: comm.Reduce_scatter_block(b, a), lambda: comm.Reduce_scatter_block([mb, n, F], [ma, n, F])),
        'Allgather': (lambda: comm.Allgather(a, b), lambda: comm.Allgather([ma, n, F], [mb, n, F])),
    }
    rows = []
    for name, (cupy_call, mem_call) in calls.items():
        times = {'cupy': [], 'memory': []}
        for fn in (cupy_call, mem_call):
            fn()  # warm-up: team, workspace
        for i in range(iters):
            for key, fn in ((('cupy', cupy_call), ('memory', mem_call)) if i % 2 == 0
                            else (('memory', mem_call), ('cupy', cupy_call))):
                comm.Barrier()
                t0 = time.perf_counter()
                fn()
                cp.cuda.runtime.deviceSynchronize()
                times[key].append(time.perf_counter() - t0)
        tc, tm = np.median(times['cupy']), np.median(times['memory'])
        rows.append((name, tc * 1e3, tm * 1e3, tc / tm))
    return rows


def main():
    forms()
    tensors()
    frameworks()
    allfail = comm.allgather(failures)
    total = comm.allreduce(checks)
    if rank == 0:
        bad = [f for fs in allfail for f in fs]
        for f in bad[:40]:
            print('FAIL', f)
        sys.stdout.flush()
    rows = speed()
    if rank == 0:
        print(f'cuda-aware forms: {total - len(bad)} passed, {len(bad)} failed ({size} ranks)')
        print(f'speed, 64 MiB, {size} ranks (median of 10; ratio = CuPy time / MPI.memory time):')
        for name, tc, tm, ratio in rows:
            print(f'  {name:22s} cupy {tc:8.3f} ms  MPI.memory {tm:8.3f} ms  ratio {ratio:5.2f}')
        sys.stdout.flush()
    return 1 if any(allfail) else 0


if __name__ == '__main__':
    sys.exit(main())
