"""The exchange transport on GPUs at every size class (cuda/exchange_kernel.cuh): one step, many steps
through the FIFO (its slots reused), many channels, blocks at any byte offset (1- and 2-byte elements at
odd displacements: the kernel's narrow words), zero blocks, back to back with the engine's collectives
on the same team (its counters are its own), on a split communicator, and the all-to-all family's
other forms at 4 MiB per pair. Every result is checked against values each rank computes itself.

    mpirun -n 2..8 python3 -m mpi4py tests/gpu/exchange_sizes.py   (one GPU per rank)
"""
import os

os.environ.setdefault('MPIGPU_EXCHANGE_MIN_BYTES', '0')  # the transport at every size, small ones too
import cupy as cp  # noqa: E402
import numpy as np  # noqa: E402
from mpi4py import MPI  # noqa: E402

cp.cuda.Device(MPI.COMM_WORLD.Get_rank() % cp.cuda.runtime.getDeviceCount()).use()
import mpigpu  # noqa: E402
from mpigpu._paths import exchange  # noqa: E402

world = mpigpu.COMM_WORLD
checks = 0


def value(src, dst, i, dtype):
    """Element i of the block rank src sends rank dst: distinct per pair and position."""
    top = 1 << 20 if np.dtype(dtype).kind == 'f' else int(np.iinfo(dtype).max)
    return ((np.asarray(i, np.int64) * 7 + src * 131 + dst * 17) % top).astype(dtype)


def alltoallv_case(comm, per_pair, dtype, offset):
    """Alltoallv of about per_pair elements per pair (uneven), blocks starting `offset` elements in and
    placed in reverse rank order."""
    global checks
    n, me = comm.Get_size(), comm.Get_rank()
    sc = [max(0, per_pair + ((me + 2 * p) % 3 - 1) * (per_pair // 4) - (p == (me + 1) % n and per_pair < 3))
          for p in range(n)]
    rc = [max(0, per_pair + ((p + 2 * me) % 3 - 1) * (per_pair // 4) - (me == (p + 1) % n and per_pair < 3))
          for p in range(n)]
    sd, at = [0] * n, offset
    for p in reversed(range(n)):
        sd[p], at = at, at + sc[p]
    send = np.concatenate([np.zeros(offset, dtype)] + [value(me, p, np.arange(sc[p]), dtype) for p in reversed(range(n))])
    rd, at = [0] * n, offset
    for p in reversed(range(n)):
        rd[p], at = at, at + rc[p]
    recv = cp.full(at, 0, dtype)
    mt = MPI._typedict[np.dtype(dtype).char]
    before = exchange.calls()
    comm.Alltoallv([cp.asarray(send), (sc, sd), mt], [recv, (rc, rd), mt])
    got = cp.asnumpy(recv)
    for p in range(n):
        want = value(p, me, np.arange(rc[p]), dtype)
        assert np.array_equal(got[rd[p]:rd[p] + rc[p]], want), \
            f'Alltoallv {per_pair} x {np.dtype(dtype).name} at {offset}: block from {p} differs on rank {me}'
    assert exchange.calls() - before == 1, 'not on the exchange transport'
    checks += 1


def family_case(comm, count):
    """Alltoall, Allgatherv, Gather(v), Scatter(v) of `count` float32 per block."""
    global checks
    n, me = comm.Get_size(), comm.Get_rank()
    x = cp.arange(n * count, dtype=cp.float32) + 1000 * me
    y = cp.empty(n * count, cp.float32)
    comm.Alltoall(x, y)
    want = np.concatenate([np.arange(me * count, (me + 1) * count, dtype=np.float32) + 1000 * p for p in range(n)])
    assert np.array_equal(cp.asnumpy(y), want), f'Alltoall {count}'
    comm.Allgatherv(x[:count], y)
    want = np.concatenate([np.arange(count, dtype=np.float32) + 1000 * p for p in range(n)])
    assert np.array_equal(cp.asnumpy(y), want), f'Allgatherv {count}'
    for root in range(n):
        y.fill(-1)
        comm.Gather(x[:count], y if me == root else None, root)
        if me == root:
            assert np.array_equal(cp.asnumpy(y), want), f'Gather {count} root {root}'
        z = cp.full(count, -1, cp.float32)
        comm.Scatter(y if me == root else None, z, root)
        exp = np.arange(count, dtype=np.float32) + 1000 * me
        assert np.array_equal(cp.asnumpy(z), exp), f'Scatter {count} root {root}'
    checks += 1


def interleaved(comm):
    """Engine collectives and exchanges back to back on one team, no synchronization between."""
    global checks
    n, me = comm.Get_size(), comm.Get_rank()
    a = cp.ones(1 << 20, cp.float32)
    for k in range(20):
        comm.Allreduce(MPI.IN_PLACE, a)
        alltoallv_case(comm, 1000 + 37 * k, np.int32, k % 3)
        comm.Bcast(a, root=k % n)
    want = np.float32(1)
    for _ in range(20):  # the float32 sums in rank order (n ** 20 itself is not a float32 for n = 3)
        total = want
        for _ in range(n - 1):
            total = np.float32(total + want)
        want = total
    assert float(a[0]) == float(want), f'Allreduce between exchanges: {float(a[0])} != {float(want)}'
    checks += 1


for per_pair in (1, 3, 17, 4096, 100_003, 1 << 20, 6_000_000):
    for dtype, offset in ((np.float32, 0), (np.uint8, 1), (np.int16, 3), (np.int64, 2)):
        if per_pair * np.dtype(dtype).itemsize > 64 << 20:
            continue
        alltoallv_case(world, per_pair, dtype, offset)
for _ in range(50):  # many small calls: the FIFO's slots wrap many times
    alltoallv_case(world, 4096, np.float32, 0)
family_case(world, 5)
family_case(world, 1 << 20)
interleaved(world)


def team_with(knob, value, cases):
    """A Dup of world whose device team is set up under mpigpu.config.<knob> = value (a team reads its knobs
    at its first device call: the cases (per pair, dtype, offset) run here), the knob restored after."""
    before = getattr(mpigpu.config, knob)
    setattr(mpigpu.config, knob, value)
    comm = world.Dup()
    try:
        for per_pair, dtype, offset in cases:
            alltoallv_case(comm, per_pair, dtype, offset)
    finally:
        setattr(mpigpu.config, knob, before)
    return comm


# receivers that drain in rounds (MPIGPU_EXCHANGE_DRAIN) on odd ranks, in arrival order on even ones
# (by default only a rank that receives alone, shares of two steps or more, does): a
# rank's own choice, which its peers' sends never depend on
mixed = team_with('exchange_drain', 'rounds' if world.Get_rank() % 2 else 'arrival',
                  ((100_003, np.float32, 1), (6_000_000, np.int64, 1), (4096, np.float32, 1)))
family_case(mixed, 1 << 20)
mixed.Free()
# every call's slots at the sender, read across the link (MPIGPU_EXCHANGE_SLOTS=sender, a team knob: every
# rank; by default only the fan-out calls' are)
pulled = team_with('exchange_slots', 'sender', ((1, np.uint8, 1), (100_003, np.float32, 1), (6_000_000, np.int64, 2)))
for _ in range(20):
    alltoallv_case(pulled, 4096, np.float32, 0)
family_case(pulled, 1 << 20)
pulled.Free()
# every channel in the same round order (MPIGPU_EXCHANGE_ROUNDS=aligned, a team knob; by default each
# channel starts at another peer)
aligned = team_with('exchange_rounds', 'aligned', ((100_003, np.float32, 1), (6_000_000, np.int64, 2)))
family_case(aligned, 1 << 20)
aligned.Free()
if world.Get_size() > 2:
    half = world.Split(world.Get_rank() % 2, world.Get_rank())
    alltoallv_case(half, 100_003, np.float32, 1)
    family_case(half, 777)
    half.Free()

total = MPI.COMM_WORLD.allreduce(checks)
if world.Get_rank() == 0:
    print(f'exchange sizes on {world.Get_size()} ranks: {total} checks passed')
