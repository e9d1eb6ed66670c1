"""Each kernel family once, small and odd-sized, for compute-sanitizer (memcheck, racecheck) on 2 GPUs:
    mpirun -n 2 compute-sanitizer --tool memcheck python -m mpi4py tests/gpu/sanitize_kernels.py
LL and LL128 (Allreduce one- and two-shot, Reduce_scatter_block, Allgather, Bcast one-shot and
scatter), direct one-shot and two-shot Allreduce, Bcast (direct and scatter-forward), Reduce,
Reduce_scatter_block, Allgather, the ring and chain forms of all five, the two-shot LL128
Allreduce on split warps (4 ranks), the resident kernel (its LL and LL128 forms), float16 accumulation, a pointer offset
from 16-byte alignment, a complex128 product 8 bytes off it; results checked so a silent fault
cannot pass."""
import sys

import cupy as cp
import numpy as np
from mpi4py import MPI

import mpigpu
import wide_steps  # this directory, beside the script
from mpigpu._state.comm_state import state_of

# memcheck knows the allocations that exist when a kernel is launched, so a resident kernel instance
# (resident_kernel.cuh) that writes into a buffer allocated after it started is reported as out of
# bounds. The launched kernels are checked with the resident kernel off; it is checked at the end,
# on buffers allocated before its instance starts.
default_resident_us = mpigpu.config.resident_us
mpigpu.config.resident_us = 0
world = mpigpu.COMM_WORLD
rank, n = world.Get_rank(), world.Get_size()
cp.cuda.Device(rank % cp.cuda.runtime.getDeviceCount()).use()
bad = []
for algo in ('ll', 'll128', 'll128-twoshot', 'oneshot', 'twoshot', 'ring'):
    mpigpu.config.algo = algo
    for count in (1, 1001, 70001):
        x = cp.arange(count + 1, dtype=cp.float32)[1:] * (rank + 1)   # offset by 4 bytes
        y = cp.zeros(count, cp.float32)
        world.Allreduce(x, y)
        want = np.arange(1, count + 1, dtype=np.float32) * (n * (n + 1) // 2)
        if not np.array_equal(cp.asnumpy(y), want):
            bad.append(f'{algo} Allreduce {count}')
        h = cp.ones(count, cp.float16) * (rank + 1)
        world.Allreduce(MPI.IN_PLACE, h)
        if not bool((h == n * (n + 1) // 2).all()):
            bad.append(f'{algo} float16 Allreduce {count}')
        r = cp.zeros(count, cp.float32)
        world.Reduce_scatter_block(cp.ones(count * n, cp.float32), r)
        g = cp.zeros(count * n, cp.float32)
        world.Allgather(r, g)
        if not bool((g == n).all()):
            bad.append(f'{algo} Reduce_scatter_block+Allgather {count}')
        # Bcast twice (two roots: the LL128 forms' ack wait; 'll' has no Bcast: auto), then Reduce.
        b = cp.full(count, rank, cp.int64)
        world.Bcast(b, root=n - 1)
        b2 = cp.full(count + 1, rank, cp.int32)[1:]
        world.Bcast(b2, root=0)
        rr = cp.zeros(count, cp.float64)
        world.Reduce(cp.ones(count, cp.float64), rr, root=0)
        if not bool((b == n - 1).all()) or not bool((b2 == 0).all()) or (rank == 0 and not bool((rr == n).all())):
            bad.append(f'{algo} Bcast/Reduce {count}')
        # complex128 product 8 bytes off 16-byte alignment (aligned like its component, as C allows)
        # (filled and read as float64: CuPy's own complex kernels assume 16-byte alignment)
        parts = cp.zeros(2 * count + 1, cp.float64)[1:]
        parts[1::2] = 1.0  # every element 1j
        world.Allreduce(MPI.IN_PLACE, parts.view(cp.complex128), op=MPI.PROD)
        if not bool((cp.asnumpy(parts).view(np.complex128) == 1j ** n).all()):
            bad.append(f'{algo} complex128 PROD Allreduce {count}')
# The two-shot LL128 Allreduce with phase 0 on split warps (shards from 512 KiB on 3+ ranks): an
# odd count, out of place and in place.
mpigpu.config.algo = 'll128-twoshot'
count = (2 << 20) // 4 * n // 4 + 7
x = cp.arange(count, dtype=cp.float32) % 251 * (rank + 1)
y = cp.zeros(count, cp.float32)
world.Allreduce(x, y)
world.Allreduce(MPI.IN_PLACE, x)
want = np.arange(count, dtype=np.float32) % 251 * (n * (n + 1) // 2)
if not np.array_equal(cp.asnumpy(y), want) or not np.array_equal(cp.asnumpy(x), want):
    bad.append(f'll128-twoshot split Allreduce {count}')
mpigpu.config.algo = 'auto'
# Wide steps (select.cu, kMaxFusedSlots): 2 channels, so that a channel's span takes 1-4 FIFO slots
# (2-4 run as one step over them); a burst on one stream with no host sync, so that a call whose
# wide step would wrap past the FIFO's end starts at its next turn.
mpigpu.config.nchannels = 2
s = cp.cuda.Stream(non_blocking=True)
pending = wide_steps.burst(world, s, [1 + i % wide_steps.MAX_SLOTS for i in range(12)])
s.synchronize()
mpigpu.config.nchannels = 0
bad += [f'wide {name} {c}' for name, c, got, want in pending if not bool(cp.array_equal(got, want))]
# The resident kernel (blocking LL and LL128 calls with nothing queued before them): a communicator
# whose instance stays up, each LL and LL128 form (LL to 64 KiB pieces; LL128 one-shot, two-shot with
# phase 0 split on 4 ranks at 2 MiB, blocks, Bcast one-shot and scatter), then freed while its
# instance runs.
mpigpu.config.resident_us = 1e6
res = world.Dup()
bufs = []
counts = (1, 1001, 70001, 1 << 19)
for count in counts:
    bufs.append((count, cp.arange(count + 1, dtype=cp.float32)[1:] * (rank + 1), cp.zeros(count, cp.float32),
                 cp.zeros(count, cp.float32), cp.zeros(count * n, cp.float32), cp.zeros(count, cp.float64),
                 cp.ones(count * n, cp.float32), cp.ones(count, cp.float64), cp.full(count, rank, cp.int32)))
cp.cuda.get_current_stream().synchronize()
for count, x, y, r, g, rr, ones_n, ones, b in bufs:
    res.Allreduce(x, y)
    res.Reduce_scatter_block(ones_n, r)
    res.Allgather(r, g)
    res.Reduce(ones, rr, root=n - 1)
    res.Bcast(b, root=count % n)
for count, x, y, r, g, rr, ones_n, ones, b in bufs:
    want = np.arange(1, count + 1, dtype=np.float32) * (n * (n + 1) // 2)
    if (not np.array_equal(cp.asnumpy(y), want) or not (cp.asnumpy(g) == n).all()
            or (rank == n - 1 and not (cp.asnumpy(rr) == n).all()) or not (cp.asnumpy(b) == count % n).all()):
        bad.append(f'resident kernel {count}')
# every call but the largest Reduce_scatter_block and Allgather (messages past MPIGPU_RESIDENT_MAX_BYTES,
# 2 MiB) and Reduce (4 MiB of float64: the chain, or the direct kernel on 2 ranks)
ran = state_of(res).team.resident_stats[0]
if ran < 4 * len(counts):
    bad.append(f'resident kernel ran {ran} of {5 * len(counts)} calls')
res.Free()
mpigpu.config.resident_us = default_resident_us
cp.cuda.Device().synchronize()
print(f'rank {rank}: sanitize run {"ok" if not bad else "FAILED: " + ", ".join(bad)}', flush=True)
sys.exit(1 if bad else 0)
