"""Stream-ordered, non-blocking and persistent GPU calls, CUDA graphs, and non-blocking point-to-point
on GPUs. `mpirun -n N python -m pytest -p no:cacheprovider tests/gpu/test_async.py`.

- stream=: calls enqueued back to back on a non-default stream with inputs produced on it, no host
  synchronization between them; calls alternating between two streams (the team orders them);
- Iallreduce/Ibcast/Ireduce_scatter_block/Ireduce/Iallgather completed by req.Wait, by mpi4py's
  Waitall (the agent thread) and by Test loops; several outstanding at once;
- Allreduce_init/Bcast_init/Reduce_scatter_block_init started many times with new inputs;
- CUDA graph capture (CuPy and PyTorch) of stream= collectives, replayed with new inputs: the
  engine's sequence numbers live in device memory, so replays continue them;
- Isend/Irecv rings, Probe then Irecv with statuses, Waitall over mixed requests;
- timings (printed, not asserted; the timed calls' results are checked): blocking call vs persistent
  Start+Wait vs stream= back to back.
"""
import time

import numpy as np
import pytest

import gpucheck as gc
import mpigpu
from gpucheck import MPI, check, cp, torch

SIZES = (1, 1000, 300_001, 4 << 20)  # elements: LL, LL, one/two-shot, large
rank, n = gc.RANK, gc.SIZE
plain = MPI.COMM_WORLD


def allsum(count, salt):
    """sum over ranks of (arange(count) % 97) * (r + 1) + salt, in float32 (exact: small integers)."""
    base = (np.arange(count) % 97).astype(np.float32)
    return base * (n * (n + 1) / 2) + salt * n


def mine(count, salt, xp=cp):
    return (xp.arange(count) % 97).astype(xp.float32) * (rank + 1) + salt


# `world` (tests/conftest.py) sets the team up before any capture.
def test_stream_back_to_back(world):
    """stream= back to back, inputs produced on the same stream; then alternating streams."""
    s1, s2 = cp.cuda.Stream(non_blocking=True), cp.cuda.Stream(non_blocking=True)
    for count in SIZES:
        outs = []
        with s1:
            for it in range(4):
                x = mine(count, it)
                y = cp.full(count, -1, cp.float32)
                world.Allreduce(x, y, MPI.SUM, stream=s1)
                outs.append((it, y, x))
        s1.synchronize()
        for it, y, _ in outs:
            check(np.array_equal(cp.asnumpy(y), allsum(count, it)), f'Allreduce stream= count {count} iter {it}')
        # alternate streams without host synchronization: the team orders the calls
        ys = []
        for it in range(4):
            s = (s1, s2)[it % 2]
            with s:
                x = mine(count, 10 + it)
                y = cp.zeros(count, cp.float32)
            s.synchronize()  # the inputs are ready; the collectives themselves are not synchronized
            world.Allreduce(x, y, MPI.SUM, stream=s)
            ys.append((it, y))
        s1.synchronize()
        s2.synchronize()
        for it, y in ys:
            check(np.array_equal(cp.asnumpy(y), allsum(count, 10 + it)), f'Allreduce two streams count {count} iter {it}')


def test_stream_rooted_and_blocks(world):
    """stream= Bcast and Reduce from every root, Reduce_scatter_block then Allgather; host buffers
    with stream= are refused."""
    s1 = cp.cuda.Stream(non_blocking=True)
    with s1:
        for root in range(n):
            b = mine(5000, root) if rank == root else cp.zeros(5000, cp.float32)
            world.Bcast(b, root, stream=s1.ptr)
            r = cp.zeros(5000, cp.float32)
            world.Reduce(mine(5000, 1), r, MPI.SUM, root, stream=s1)
            s1.synchronize()
            check(np.array_equal(cp.asnumpy(b), (np.arange(5000) % 97).astype(np.float32) * (root + 1) + root),
                  f'Bcast stream= root {root}')
            if rank == root:
                check(np.array_equal(cp.asnumpy(r), allsum(5000, 1)), f'Reduce stream= root {root}')
        x = mine(1024 * n, 3)
        r = cp.zeros(1024, cp.float32)
        world.Reduce_scatter_block(x, r, MPI.SUM, stream=s1)
        g = cp.zeros(1024 * n, cp.float32)
        world.Allgather(r, g, stream=s1)
        s1.synchronize()
        check(np.array_equal(cp.asnumpy(g), allsum(1024 * n, 3)), 'Reduce_scatter_block + Allgather stream=')
    try:
        world.Allreduce(np.ones(3), np.zeros(3), stream=s1)
        check(False, 'stream= with host buffers must raise')
    except mpigpu.Error:
        check(True, '')


def test_nonblocking(world):
    for count in SIZES:
        xs = [mine(count, k) for k in range(3)]
        ys = [cp.zeros(count, cp.float32) for _ in range(3)]
        reqs = [world.Iallreduce(x, y, MPI.SUM) for x, y in zip(xs, ys)]
        MPI.Request.Waitall(reqs)
        for k, y in enumerate(ys):
            check(np.array_equal(cp.asnumpy(y), allsum(count, k)), f'Iallreduce Waitall count {count} #{k}')
        y = cp.zeros(count, cp.float32)
        req = world.Iallreduce(xs[0], y, MPI.SUM)
        while not req.Test():
            pass
        check(np.array_equal(cp.asnumpy(y), allsum(count, 0)), f'Iallreduce Test loop count {count}')
        b = mine(count, 7) if rank == n - 1 else cp.zeros(count, cp.float32)
        world.Ibcast(b, n - 1).Wait()
        check(np.array_equal(cp.asnumpy(b), (np.arange(count) % 97).astype(np.float32) * n + 7), f'Ibcast count {count}')
    x = mine(999 * n, 2)
    r = cp.zeros(999, cp.float32)
    g = cp.zeros(999 * n, cp.float32)
    q1 = world.Ireduce_scatter_block(x, r, MPI.SUM)
    q1.Wait()
    q2 = world.Iallgather(r, g)
    r0 = cp.zeros(999 * n, cp.float32)
    q3 = world.Ireduce(x, r0, MPI.SUM, 0)
    MPI.Request.Waitall([q2, q3])
    check(np.array_equal(cp.asnumpy(g), allsum(999 * n, 2)), 'Ireduce_scatter_block + Iallgather')
    if rank == 0:
        check(np.array_equal(cp.asnumpy(r0), allsum(999 * n, 2)), 'Ireduce')


def test_persistent(world):
    for count in SIZES:
        x, y = cp.zeros(count, cp.float32), cp.zeros(count, cp.float32)
        p = world.Allreduce_init(x, y, MPI.SUM)
        for it in range(5):
            x[...] = mine(count, it)
            p.Start()
            (p.Wait() if it % 2 else MPI.Request.Waitall([p]))
            check(np.array_equal(cp.asnumpy(y), allsum(count, it)), f'Allreduce_init count {count} round {it}')
        p.Free()
    b = cp.zeros(777, cp.float32)
    q = world.Bcast_init(b, 1 % n)
    rs_in, rs_out = cp.zeros(100 * n, cp.float32), cp.zeros(100, cp.float32)
    q2 = world.Reduce_scatter_block_init(rs_in, rs_out, MPI.MAX)
    for it in range(3):
        if rank == 1 % n:
            b[...] = it + 1
        rs_in[...] = cp.arange(100 * n, dtype=cp.float32) * (rank + 1) + it
        mpigpu.Startall([q, q2])
        MPI.Request.Waitall([q, q2])
        check(bool((b == it + 1).all()), f'Bcast_init round {it}')
        want = np.arange(100 * n, dtype=np.float32)[rank * 100:(rank + 1) * 100] * n + it
        check(np.array_equal(cp.asnumpy(rs_out), want), f'Reduce_scatter_block_init round {it}')


def test_cupy_graphs(world):
    for count in (1000, 300_001, 4 << 20):
        gs = cp.cuda.Stream(non_blocking=True)
        x, y = cp.zeros(count, cp.float32), cp.zeros(count, cp.float32)
        with gs:
            world.Allreduce(x, y, MPI.SUM, stream=gs)  # warm-up outside capture
            gs.synchronize()
            gs.begin_capture()
            world.Allreduce(x, y, MPI.SUM, stream=gs)
            world.Allreduce(MPI.IN_PLACE, y, MPI.MAX, stream=gs)
            graph = gs.end_capture()
            for it in range(4):
                x[...] = mine(count, it)
                graph.launch(gs)
                gs.synchronize()
                check(np.array_equal(cp.asnumpy(y), allsum(count, it)), f'CuPy graph replay count {count} #{it}')
            # eager calls between replays keep the sequence consistent
            y2 = cp.zeros(count, cp.float32)
            world.Allreduce(x, y2, MPI.SUM)
            graph.launch(gs)
            gs.synchronize()
            check(np.array_equal(cp.asnumpy(y), allsum(count, 3)), f'CuPy graph after eager call count {count}')


@pytest.mark.skipif(torch is None, reason='needs PyTorch')
def test_torch_graphs(world):
    for count in (1000, 4 << 20):
        tx = torch.zeros(count, device='cuda')
        ty = torch.zeros(count, device='cuda')
        side = torch.cuda.Stream()
        with torch.cuda.stream(side):
            world.Allreduce(tx, ty, MPI.SUM, stream=torch.cuda.current_stream())
        torch.cuda.synchronize()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            world.Allreduce(tx, ty, MPI.SUM, stream=torch.cuda.current_stream())
            ty.mul_(2)
        for it in range(3):
            tx.copy_((torch.arange(count, device='cuda') % 97).float() * (rank + 1) + it)
            g.replay()
            torch.cuda.synchronize()
            check(np.array_equal(ty.cpu().numpy(), allsum(count, it) * 2), f'PyTorch graph replay count {count} #{it}')


def test_point_to_point(world):
    """Isend/Irecv rings with host messages mixed in, Waitall over both; Probe then Irecv."""
    nxt, prv = (rank + 1) % n, (rank - 1) % n
    for count in (0, 10, 1 << 20):
        a = mine(count, 1)
        ra = cp.full(count, -1, cp.float32)
        hb, hr = np.arange(3, dtype=np.int64) + rank, np.zeros(3, np.int64)
        reqs = [world.Irecv(ra, prv, 5), world.Isend(a, nxt, 5), world.Irecv(hr, nxt, 6), world.Isend(hb, prv, 6)]
        MPI.Request.Waitall(reqs)
        check(np.array_equal(cp.asnumpy(ra), (np.arange(count) % 97).astype(np.float32) * (prv + 1) + 1),
              f'Isend/Irecv ring count {count}')
        check(np.array_equal(hr, np.arange(3) + nxt), 'host Isend/Irecv mixed in')
    if n > 1:
        if rank == 0:
            world.Isend(cp.arange(50, dtype=cp.int32), 1, tag=9).Wait()
        elif rank == 1:
            st = MPI.Status()
            world.Probe(0, 9, st)
            got = cp.zeros(st.Get_count(MPI.INT), cp.int32)
            st2 = MPI.Status()
            world.Irecv(got, 0, 9).Wait(st2)
            check(st2.Get_count(MPI.INT) == 50 and st2.Get_source() == 0 and st2.Get_tag() == 9, 'Irecv status')
            check(np.array_equal(cp.asnumpy(got), np.arange(50, dtype=np.int32)), 'Probe then Irecv')


def test_timings(world):
    """Per-call host time of a 1 KB Allreduce in each form (printed, not asserted); the timed calls'
    results are checked as assertions (not counted, so the module's count stays the script's)."""
    x, y = cp.ones(256, cp.float32), cp.zeros(256, cp.float32)
    p = world.Allreduce_init(x, y, MPI.SUM)

    def timed(fn, k=300):
        for _ in range(20):
            fn()
        cp.cuda.Device().synchronize()
        plain.Barrier()
        t0 = time.perf_counter()
        for _ in range(k):
            fn()
        cp.cuda.Device().synchronize()
        return plain.allreduce((time.perf_counter() - t0) / k * 1e6, op=MPI.MAX)

    start_s = [0.0]

    def start_wait():
        t0 = time.perf_counter()
        p.Start()
        start_s[0] += time.perf_counter() - t0
        p.Wait()

    def nb():
        world.Iallreduce(x, y, MPI.SUM).Wait()

    results = []

    def result(form):
        """The timed calls' output: every element the number of ranks."""
        cp.cuda.Device().synchronize()
        results.append((form, bool((y == n).all())))
        y.fill(0)
        cp.cuda.Device().synchronize()

    t_block = timed(lambda: world.Allreduce(x, y, MPI.SUM))
    result('blocking')
    start_s[0] = 0.0
    t_pers = timed(start_wait)
    result('persistent')
    t_start = plain.allreduce(start_s[0] / 320 * 1e6, op=MPI.MAX)  # 20 warm-up + 300 timed calls
    t_nb = timed(nb)
    result('Iallreduce')
    cur = cp.cuda.get_current_stream()
    t_stream = timed(lambda: world.Allreduce(x, y, MPI.SUM, stream=cur))
    result('stream=')
    p.Free()
    for form, ok in results:
        gc.record(f'timed 1 KB Allreduce, {form}', ok, 'wrong result')
    gc.say(f'1 KB Allreduce, us per call: blocking {t_block:.1f}, persistent Start+Wait {t_pers:.1f} '
           f'(Start alone {t_start:.1f}), '
           f'Iallreduce+Wait {t_nb:.1f}, stream= back to back {t_stream:.1f}')
