"""A team of one rank (each rank's COMM_SELF): every collective is a copy of its input into its
output, or nothing (Bcast, in place). A blocking copy of at most MPIGPU_RESIDENT_COPY_MAX_BYTES whose
stream is idle runs in the resident kernel (cuda/resident_kernel.cuh, kResidentCopy); a larger one,
one whose stream is busy and a stream= call launch the copy kernel (cuda/single_rank.cu). Checked:
every dtype and collective in and out of place, unaligned views (every copy width), sizes around
the limit, calls back to back alternating the two paths, a blocking call after work queued on its
stream or after a stream= call in flight; the counters prove which path ran.
`mpirun -n N python -m pytest -p no:cacheprovider tests/gpu/test_one_rank.py`."""
import numpy as np
import pytest

import gpucheck as gc
import mpigpu
from gpucheck import COLLS, DT, MPI, OPS_FOR, cp, record, run_case, settings, spin_stream


@pytest.fixture(scope='module')
def solo(world):
    """A one-rank communicator whose resident instance waits up to a second between calls, so the
    checks between calls do not end it (the limit is fixed when its team is set up)."""
    with settings(resident_us=1e6):
        c = mpigpu.COMM_SELF.Dup()
        gc.team_up(c)
    yield c
    gc.free(c)


def stats(comm):
    """(resident calls, instances launched, calls alone) of the communicator's team."""
    return gc.team(comm).resident_stats


_TINY = []


def ready(comm):
    """The current stream synchronized, then a tiny blocking copy: the next call neither waits for
    queued work nor comes alone (after a gap longer than the linger limit, which a CuPy kernel
    compiled at its first use can make)."""
    if not _TINY:
        _TINY.extend((cp.ones(4, cp.float32), cp.empty(4, cp.float32)))
    cp.cuda.get_current_stream().synchronize()
    comm.Allreduce(*_TINY)


def test_every_collective(solo):
    """Every dtype, every collective in and out of place, aligned and not (an odd element offset
    makes the copy take 1-, 2-, 4- or 8-byte units), counts up to several blocks of the resident grid.
    run_case poisons each output just before the call, so most of these launch (busy stream)."""
    for dtype in DT:
        for count, offset in ((1, 0), (37, 1), (70001, 0), (4099, 3)):
            for coll in COLLS:
                op = None if coll in ('Allgather', 'Bcast') else OPS_FOR[dtype][-1]
                for inplace in ((False,) if coll == 'Bcast' else (False, True)):
                    run_case(solo, coll, dtype, op, count, inplace=inplace, offset=offset)


def test_resident_copies(solo):
    """Out-of-place copies on an idle stream, each the resident kernel's: sizes from one byte to
    several blocks of its grid, every alignment of either pointer, each output against its input."""
    rng = np.random.default_rng(7)
    copies = 0
    launched = []
    for nbytes in (1, 2, 3, 8, 15, 16, 17, 4096, 32768 + 5, 70000, 1 << 20, (2 << 20) - 1):
        for src_off, dst_off in ((0, 0), (1, 0), (0, 2), (4, 4), (8, 8), (3, 5)):
            src = cp.asarray(rng.integers(0, 256, nbytes + src_off, dtype=np.uint8))[src_off:]
            dst = cp.zeros(nbytes + dst_off, cp.uint8)[dst_off:]
            ready(solo)
            s0 = stats(solo)
            solo.Allgather(src, dst)
            if stats(solo)[0] == s0[0]:
                launched.append(f'{nbytes} B {src_off}/{dst_off}: {s0} -> {stats(solo)}')
            copies += 1
            record(f'one rank resident copy {nbytes} B offsets {src_off}/{dst_off}', bool(cp.array_equal(src, dst)),
                   'bytes differ')
    record('one rank: copies on an idle stream ran resident', not launched,
           f'{len(launched)} of {copies} launched: (calls, launches, alone) before -> after: {launched}')


def test_limit(solo):
    """Copies just under, at and over MPIGPU_RESIDENT_COPY_MAX_BYTES: the first two resident, the last
    launched (after ending the waiting instance); each one's bytes all arrive."""
    limit = mpigpu.config.resident_copy_max_bytes
    for nbytes, resident in ((limit - 16, True), (limit, True), (limit + 16, False), (4 * limit + 4, False)):
        n = nbytes // 4
        x = cp.arange(n, dtype=cp.int32) * 3 + 1
        y = cp.full(n, -1, cp.int32)
        ready(solo)
        before = stats(solo)
        solo.Allreduce(x, y, MPI.SUM)
        ran = stats(solo)[0] - before[0]
        record(f'one rank {nbytes} B: path', ran == (1 if resident else 0),
               f'{ran} resident calls; (calls, launches, alone) {before} -> {stats(solo)}')
        record(f'one rank {nbytes} B: result', bool(cp.array_equal(x, y)), 'copy differs')


def test_back_to_back(solo):
    """Calls back to back with no check between them, alternating resident and launched copies and
    their outputs, each from the one before: a copy that began before the previous one ended, or
    read its input early, breaks the chain."""
    small = [cp.zeros(1000, cp.float64) for _ in range(2)]
    large = [cp.zeros((mpigpu.config.resident_copy_max_bytes // 8) + 100, cp.float64) for _ in range(2)]
    small[0][:] = cp.arange(1000)
    large[0][:] = cp.arange(large[0].size)
    for i in range(200):
        src, dst = small[i % 2], small[(i + 1) % 2]
        solo.Allreduce(src, dst, MPI.SUM)
        if i % 10 == 0:
            big_src, big_dst = large[(i // 10) % 2], large[(i // 10 + 1) % 2]
            solo.Allreduce(big_src, big_dst, MPI.SUM)
    record('one rank back to back: small chain', bool(cp.array_equal(small[0], cp.arange(1000))), 'chain broken')
    record('one rank back to back: large chain', bool(cp.array_equal(large[0], cp.arange(large[0].size))),
           'chain broken')


def test_stream_order(solo):
    """A blocking copy whose input is still being produced on its stream launches after that work
    (stream order) and sees its result; one after a stream= copy on another stream waits for it."""
    x = cp.zeros(4096, cp.float32)
    y = cp.zeros(4096, cp.float32)
    cp.cuda.get_current_stream().synchronize()
    before = stats(solo)[0]
    spin_stream(2000)
    x.fill(7)  # queued behind the spin
    solo.Allreduce(x, y, MPI.SUM)
    record('one rank busy stream: launched', stats(solo)[0] == before, f'{stats(solo)[0] - before} resident calls')
    record('one rank busy stream: result', bool((y == 7).all()), 'read its input before the stream produced it')
    s = cp.cuda.Stream(non_blocking=True)
    z = cp.zeros(4096, cp.float32)
    w = cp.zeros(4096, cp.float32)
    cp.cuda.get_current_stream().synchronize()
    with s:
        spin_stream(2000)
        y.fill(9)
    solo.Allreduce(y, z, MPI.SUM, stream=s.ptr)  # queued on s, behind the fill
    solo.Allreduce(z, w, MPI.SUM)  # blocking on the current stream: after the stream= call
    record('one rank after stream=: result', bool((w == 9).all()), f'got {float(w[0])}')
    s.synchronize()


def test_host_bytes(solo):
    """The one-rank Allgather of an int8 buffer against NumPy, by bytes (no tolerance)."""
    h = np.random.default_rng(5).integers(-128, 127, 333, dtype=np.int8)
    x, y = cp.asarray(h), cp.zeros(333, cp.int8)
    solo.Allgather(x, y)
    record('one rank Allgather int8 bytes', np.array_equal(cp.asnumpy(y), h), 'bytes differ')
