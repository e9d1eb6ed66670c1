"""The rest of mpi4py's buffer API with GPU arrays (host mirrors): point-to-point, Gather(v),
Scatter(v), Allgatherv, Alltoall(v), Reduce_scatter, Scan, Exscan, with CuPy and PyTorch, checked
bit for bit against plain mpi4py on the same data in NumPy arrays; pointers less aligned than their
type refused. `mpirun -n N python -m pytest -p no:cacheprovider tests/gpu/test_buffer_api.py`."""
import numpy as np
import pytest

import gpucheck as gc
import mpigpu
from gpucheck import MPI, RANK, SIZE, check, cp, torch

LIBS = ('cupy', 'torch') if torch is not None else ('cupy',)
plain = MPI.COMM_WORLD
rank, n = RANK, SIZE


def dev(lib, a):
    return cp.asarray(a) if lib == 'cupy' else torch.from_numpy(a).cuda()


def host(lib, d):
    return cp.asnumpy(d) if lib == 'cupy' else d.cpu().numpy()


def same(lib, d, ref, what):
    check(host(lib, d).tobytes() == ref.tobytes(), f'{lib} {what}')


@pytest.fixture(scope='module')
def comm():
    """A duplicate of COMM_WORLD with no device team (no device collective runs on it): these calls
    take the staged and mirrored paths whatever ran before in this process."""
    c = gc.world.Dup()
    yield c
    gc.free(c)


@pytest.mark.parametrize('lib', LIBS)
def test_buffer_api(comm, lib):
    world = comm
    nxt, prv = (rank + 1) % n, (rank - 1) % n
    x = np.arange(100003, dtype=np.float32) * (rank + 1)
    r, ref = dev(lib, np.zeros_like(x)), np.zeros_like(x)
    world.Sendrecv(dev(lib, x), nxt, 0, r, prv, 0)
    plain.Sendrecv(x, nxt, 0, ref, prv, 0)
    same(lib, r, ref, 'Sendrecv ring')
    if n > 1 and rank < 2:
        if rank == 0:
            world.Send(dev(lib, x), 1, 5)
        else:
            r = dev(lib, np.zeros_like(x))
            world.Recv(r, 0, 5)
            same(lib, r, np.arange(100003, dtype=np.float32), 'Send/Recv')
    counts = [1000 + 7 * i for i in range(n)]
    displs = [sum(counts[:i]) for i in range(n)]
    x = np.arange(counts[rank], dtype=np.float64) + rank
    r, ref = dev(lib, np.zeros(sum(counts))), np.zeros(sum(counts))
    world.Allgatherv(dev(lib, x), [r, counts, displs, MPI.DOUBLE])
    plain.Allgatherv(x, [ref, counts, displs, MPI.DOUBLE])
    same(lib, r, ref, 'Allgatherv')
    root = n - 1
    r, ref = dev(lib, np.zeros(sum(counts))), np.zeros(sum(counts))
    world.Gatherv(dev(lib, x), [r, counts, displs, MPI.DOUBLE] if rank == root else None, root)
    plain.Gatherv(x, [ref, counts, displs, MPI.DOUBLE] if rank == root else None, root)
    same(lib, r, ref, 'Gatherv')
    s = np.arange(sum(counts), dtype=np.float64)
    r, ref = dev(lib, np.zeros(counts[rank])), np.zeros(counts[rank])
    world.Scatterv([dev(lib, s), counts, displs, MPI.DOUBLE] if rank == root else None, r, root)
    plain.Scatterv([s, counts, displs, MPI.DOUBLE] if rank == root else None, ref, root)
    same(lib, r, ref, 'Scatterv')
    x = np.arange(4 * n, dtype=np.int64) + 100 * rank
    r, ref = dev(lib, np.zeros_like(x)), np.zeros_like(x)
    world.Alltoall(dev(lib, x), r)
    plain.Alltoall(x, ref)
    same(lib, r, ref, 'Alltoall')
    x = np.arange(sum(counts), dtype=np.int32) * (rank + 1)
    r, ref = dev(lib, np.zeros(counts[rank], np.int32)), np.zeros(counts[rank], np.int32)
    world.Reduce_scatter(dev(lib, x), r, counts, MPI.SUM)
    plain.Reduce_scatter(x, ref, counts, MPI.SUM)
    same(lib, r, ref, 'Reduce_scatter')
    x = np.arange(1001, dtype=np.float64) * (rank + 1)
    for op in (MPI.SUM, MPI.MAX):
        r, ref = dev(lib, np.zeros_like(x)), np.zeros_like(x)
        world.Scan(dev(lib, x), r, op)
        plain.Scan(x, ref, op)
        same(lib, r, ref, 'Scan')
        r, ref = dev(lib, np.zeros_like(x)), np.zeros_like(x)
        world.Exscan(dev(lib, x), r, op)
        plain.Exscan(x, ref, op)
        if rank:
            same(lib, r, ref, 'Exscan')


def test_misaligned(world):
    """A pointer less aligned than its type (a raw offset, which no GPU library produces): refused on
    every rank with ERR_BUFFER, also once the team is up and the fast path sees the call first
    (`world`, tests/conftest.py, has set it up)."""
    mis = cp.ndarray((16,), cp.float32, memptr=cp.zeros(65, cp.float32).data + 2)
    for name, call in (('Allreduce', lambda: world.Allreduce(MPI.IN_PLACE, mis)),
                       ('Reduce', lambda: world.Reduce(mis, cp.zeros(16, cp.float32) if rank == 0 else None, root=0)),
                       ('Bcast', lambda: world.Bcast(mis, root=0))):
        try:
            call()
            ok, what = False, f'{name} took a float32 buffer 2 bytes off alignment'
        except mpigpu.Error as exc:
            ok = exc.Get_error_class() == MPI.ERR_BUFFER and 'not aligned to the 4 bytes of float32' in str(exc)
            what = f'{name} misaligned: {exc}'
        check(ok, what)


@pytest.mark.skipif(torch is None, reason='needs PyTorch')
def test_torch_fast_paths(world):
    """PyTorch tensors take the fast paths CuPy arrays take (the engine collectives, the exchange,
    point-to-point), read from their attributes, ordered after PyTorch's current stream (a side stream
    whose work is still running when the call is made), with MPI's results; a tensor that requires grad
    still takes the general path, which refuses it as PyTorch's export does."""
    from mpigpu._cuda import device
    fast = gc.team(world) is not None  # ranks sharing a GPU have no team: every call takes the general path
    dev_ = torch.device('cuda', torch.cuda.current_device())
    x = np.arange(4099, dtype=np.float32) % 101 + rank
    calls = device.engine_fast_calls()
    for name, run, ref in (
            ('Allreduce', lambda t, r: world.Allreduce(t, r), lambda: x * 0 + sum((x - rank) + k for k in range(n))),
            ('Allgather', lambda t, r: world.Allgather(t, r), lambda: np.concatenate([x - rank + k for k in range(n)]))):
        t = torch.from_numpy(x).to(dev_)
        r = torch.zeros(ref().size, dtype=torch.float32, device=dev_)
        run(t, r)
        check(r.cpu().numpy().tobytes() == ref().astype(np.float32).tobytes(), f'torch {name}')
    b = torch.arange(513, dtype=torch.float64, device=dev_) * (rank == 0)
    world.Bcast(b, root=0)
    check(torch.equal(b.cpu(), torch.arange(513, dtype=torch.float64)), 'torch Bcast')
    h = torch.ones(64, dtype=torch.bfloat16, device=dev_)
    world.Allreduce(MPI.IN_PLACE, h)
    check(torch.equal(h.cpu(), torch.full((64,), float(n), dtype=torch.bfloat16)), 'torch bfloat16 Allreduce in place')
    if fast:
        check(device.engine_fast_calls() - calls == 4, f'torch: {device.engine_fast_calls() - calls} of 4 engine calls fast')
    # the producer's stream: the input is written on a side stream behind a long sleep
    side = torch.cuda.Stream()
    src = torch.zeros(1 << 20, dtype=torch.float32, device=dev_)
    out = torch.zeros_like(src)
    torch.cuda.synchronize()
    with torch.cuda.stream(side):
        torch.cuda._sleep(50_000_000)  # ~25 ms of GPU clock cycles
        src.fill_(rank + 1)
        world.Allreduce(src, out)
        got = out.cpu()
    check(bool((got == n * (n + 1) // 2).all()), 'torch Allreduce after its producer stream')
    # the exchange and point-to-point
    xc, pc = device.exchange_fast_calls(), device.fast_p2p_calls()
    a = torch.arange(3 * n, dtype=torch.int64, device=dev_) + 100 * rank
    ar = torch.zeros_like(a)
    world.Alltoall(a, ar)
    want = np.concatenate([np.arange(3 * rank, 3 * rank + 3) + 100 * k for k in range(n)])
    check(ar.cpu().numpy().tobytes() == want.tobytes(), 'torch Alltoall')
    s = torch.full((1000,), rank + 0.5, dtype=torch.float64, device=dev_)
    sr = torch.zeros_like(s)
    world.Sendrecv(s, (rank + 1) % n, 3, sr, (rank - 1) % n, 3)
    check(bool((sr.cpu() == (rank - 1) % n + 0.5).all()), 'torch Sendrecv')
    if fast:
        check(device.exchange_fast_calls() - xc == 1, 'torch Alltoall on the exchange\'s fast path')
        check(device.fast_p2p_calls() - pc == 1 or n == 1, 'torch Sendrecv on the point-to-point fast path')
    g = torch.ones(8, device=dev_, requires_grad=True)
    try:
        world.Allreduce(MPI.IN_PLACE, g)
        refused = False
    except Exception:
        refused = True
    check(refused, 'a tensor that requires grad is refused, as PyTorch refuses to export it')


def test_specification_fast_paths(world):
    """mpi4py's [array, datatype] with the array's own predefined type is the call on the array, on the
    fast paths too (counted: the engine's, the exchange's, point-to-point's); another type reads the bytes
    as that type (the general path), as mpi4py does: both give plain mpi4py's results on the same bytes."""
    from mpigpu._cuda import device
    fast = gc.team(world) is not None
    x = (np.arange(2050, dtype=np.float32) % 89) * (rank + 1)
    ref = np.zeros_like(x)
    plain.Allreduce(x, ref)
    calls = device.engine_fast_calls()
    y = cp.zeros_like(cp.asarray(x))
    world.Allreduce([cp.asarray(x), MPI.FLOAT], [y, MPI.FLOAT])
    same('cupy', y, ref, '[array, MPI.FLOAT] Allreduce')
    b = cp.arange(300, dtype=cp.int64) * (rank == 1 % n)
    world.Bcast((b, MPI.INT64_T), root=1 % n)
    same('cupy', b, np.arange(300, dtype=np.int64), '(array, MPI.INT64_T) Bcast')
    if fast:
        check(device.engine_fast_calls() - calls == 2, 'specifications of the array\'s own type on the fast path')
    xi = x.view(np.int32) & 0x7fff  # the bytes read as int: another type than the array's
    refi = np.zeros_like(xi)
    plain.Allreduce([xi, MPI.INT], [refi, MPI.INT])
    yi = cp.zeros(x.size, cp.float32)
    world.Allreduce([cp.asarray(xi.view(np.float32)), MPI.INT], [yi, MPI.INT])
    same('cupy', yi, refi, '[float32 array, MPI.INT] Allreduce (its bytes as int)')
    xc, pc = device.exchange_fast_calls(), device.fast_p2p_calls()
    a = cp.arange(5 * n, dtype=cp.float64) + 10 * rank
    ar = cp.zeros_like(a)
    world.Alltoall([a, MPI.DOUBLE], [ar, MPI.DOUBLE])
    want = np.concatenate([np.arange(5 * rank, 5 * rank + 5, dtype=np.float64) + 10 * k for k in range(n)])
    same('cupy', ar, want, '[array, MPI.DOUBLE] Alltoall')
    s, r = cp.full(777, rank, cp.int32), cp.zeros(777, cp.int32)
    world.Sendrecv([s, MPI.INT], (rank + 1) % n, 4, [r, MPI.INT], (rank - 1) % n, 4)
    same('cupy', r, np.full(777, (rank - 1) % n, np.int32), '[array, MPI.INT] Sendrecv')
    if fast:
        check(device.exchange_fast_calls() - xc == 1, 'a specified Alltoall on the exchange\'s fast path')
        check(device.fast_p2p_calls() - pc == 1 or n == 1, 'a specified Sendrecv on the point-to-point fast path')
