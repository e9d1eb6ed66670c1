"""Datatype pack and unpack kernels on one GPU (1 rank, CuPy): `python tests/gpu/check_pack.py`
(or under `mpirun -n 1`). Exits 1 on any failure.

- every case of tests/datatype_cases.py (every constructor, nested types, negative strides, resized
  extents, counts > 1), at several alignments of the buffer and of the packed bytes: the kernels'
  packed bytes equal MPI's own packing of a host copy of the same bytes, and unpacking into a device
  copy gives what MPI's unpacking gives on the host copy, byte for byte; bytes outside the type map
  and past the packed length are left alone;
- work ordered on the given stream (a write just before, on the same stream, is seen);
- large cases against CuPy slicing and NumPy: the column halo of an 8192 x 8192 float64 array, the
  three faces of a 512^3 float32 array, a 1M-entry block table with entries of 1..40 bytes;
- timings (printed, not asserted): the column halo packed by the kernel vs
  `cupy.ascontiguousarray(a[:, j])`, unpacked vs `a[:, j] = col`; the 3-D faces; bandwidth of a
  large strided pack against a device-to-device copy of the same bytes.
"""
import os
import sys

import cupy as cp
import numpy as np
from mpi4py import MPI

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..'))
from mpigpu._describe.datatypes import layout, pack_host  # noqa: E402
from mpigpu._ext import _device  # noqa: E402
from datatype_cases import CASES, host_buffer, make, mpi_pack, mpi_unpack  # noqa: E402

dev = cp.cuda.Device(0)
dev.use()
# A blocking stream: ordered after CuPy's work on the legacy default stream (fills, host-to-device copies).
stream = cp.cuda.Stream()
checks, fails = 0, []
GUARD = 0xA5


def check(ok, what):
    global checks
    checks += 1
    if not ok:
        fails.append(what)


def placed(nbytes, misalign):
    """A device uint8 view of nbytes starting `misalign` bytes past a 256-byte boundary, filled with GUARD,
    and its whole allocation (to check the bytes around it)."""
    whole = cp.full(nbytes + 512, GUARD, cp.uint8)
    return whole[256 + misalign:256 + misalign + nbytes], whole, 256 + misalign


# ---- every case against MPI on host copies -----------------------------------------------------------
for name, (_, counts, overlapping) in sorted(CASES.items()):
    dt = make(name)
    lay = layout(dt)
    plan = _device.pack_plan(lay, dev.id)
    for count in counts:
        for misalign, pmis in ((0, 0), (8, 4), (1, 3), (4, 12)):
            what = f'{name} count {count} misalign {misalign}/{pmis}'
            buf, base = host_buffer(dt, count, seed=count + misalign)
            want = mpi_pack(dt, count, buf, base)
            d_buf, _, _ = placed(len(buf), misalign)
            d_buf.set(buf)
            d_out, whole, at = placed(len(want), pmis)
            with stream:
                plan.pack(count, d_buf.data.ptr + base, d_out.data.ptr, stream.ptr)
            stream.synchronize()
            got = whole.get()
            check(got[at:at + len(want)].tobytes() == want, f'pack {what}: bytes differ from MPI_Pack')
            check((got[:at] == GUARD).all() and (got[at + len(want):] == GUARD).all(), f'pack {what}: wrote outside')
            check(np.array_equal(d_buf.get(), buf), f'pack {what}: changed its source')
            if overlapping or not want:
                continue
            noise = np.random.default_rng(count).integers(0, 256, len(want), dtype=np.uint8)
            theirs = buf.copy()
            mpi_unpack(dt, count, noise.tobytes(), theirs, base)
            d_buf, whole, at = placed(len(buf), misalign)
            d_buf.set(buf)
            d_noise, _, _ = placed(len(want), pmis)
            d_noise.set(noise)
            plan.unpack(count, d_noise.data.ptr, d_buf.data.ptr + base, stream.ptr)
            stream.synchronize()
            got = whole.get()
            check(np.array_equal(got[at:at + len(buf)], theirs), f'unpack {what}: bytes differ from MPI_Unpack')
            check((got[:at] == GUARD).all() and (got[at + len(buf):] == GUARD).all(), f'unpack {what}: wrote outside')

# ---- ordering on the given stream ---------------------------------------------------------------------
n = 4096
a = cp.zeros((n, n), cp.float64)
colt = MPI.DOUBLE.Create_vector(n, 1, n).Commit()
plan = _device.pack_plan(layout(colt), dev.id)
out = cp.empty(n, cp.float64)
with stream:
    a[:, 7] = cp.arange(n, dtype=cp.float64)  # enqueued on `stream`, not waited for
    plan.pack(1, a[:, 7].data.ptr, out.data.ptr, stream.ptr)
stream.synchronize()
check(bool((out == cp.arange(n, dtype=cp.float64)).all()), 'pack ordered after earlier work on its stream')
colt.Free()

# ---- large cases -------------------------------------------------------------------------------------
N = 8192
a = cp.random.random((N, N))
col = MPI.DOUBLE.Create_vector(N, 1, N).Commit()
col_plan = _device.pack_plan(layout(col), dev.id)
j = N - 3
packed = cp.empty(N, cp.float64)
col_plan.pack(1, a[:, j].data.ptr, packed.data.ptr, stream.ptr)
stream.synchronize()
check(bool((packed == a[:, j]).all()), 'column halo of 8192^2 float64: pack')
b = a.copy()
twice = packed * 2  # kept alive until the stream is done with it
col_plan.unpack(1, twice.data.ptr, b[:, j].data.ptr, stream.ptr)
stream.synchronize()
expect = a.copy()
expect[:, j] *= 2
check(bool((b == expect).all()), 'column halo of 8192^2 float64: unpack touches the column only')
del b, expect

M = 512
cube = cp.random.random((M, M, M), dtype=cp.float32)
faces = {}
for axis in range(3):
    sub = [M] * 3
    sub[axis] = 1
    start = [0, 0, 0]
    start[axis] = M - 2
    dt = MPI.FLOAT.Create_subarray([M] * 3, sub, start).Commit()
    faces[axis] = (dt, _device.pack_plan(layout(dt), dev.id))
    got = cp.empty(M * M, cp.float32)
    faces[axis][1].pack(1, cube.data.ptr, got.data.ptr, stream.ptr)
    stream.synchronize()
    sl = [slice(None)] * 3
    sl[axis] = M - 2
    check(bool((got == cp.ascontiguousarray(cube[tuple(sl)]).ravel()).all()), f'512^3 float32 face {axis}: pack')

rng = np.random.default_rng(5)
lens = rng.integers(1, 41, 1 << 20)
gaps = rng.integers(0, 24, 1 << 20)
offs = np.cumsum(lens + gaps) - (lens + gaps)
big = MPI.BYTE.Create_hindexed(lens.tolist(), offs.tolist()).Commit()
lay = layout(big)
host = rng.integers(0, 256, int(offs[-1] + lens[-1]) + 64, dtype=np.uint8)
d_host = cp.asarray(host)
big_plan = _device.pack_plan(lay, dev.id)
got = cp.empty(lay.size, cp.uint8)
big_plan.pack(1, d_host.data.ptr, got.data.ptr, stream.ptr)
stream.synchronize()
check(got.get().tobytes() == pack_host(lay, 1, host, 0), 'hindexed of 1M entries: pack')
d_back = cp.zeros_like(d_host)
big_plan.unpack(1, got.data.ptr, d_back.data.ptr, stream.ptr)
stream.synchronize()
want = np.zeros_like(host)
idx = lay.byte_offsets(1)
want[idx] = host[idx]
check(np.array_equal(d_back.get(), want), 'hindexed of 1M entries: unpack')
big.Free()


# ---- timings (printed) -------------------------------------------------------------------------------
def timed(fn, reps=200):
    for _ in range(10):
        fn()
    start, stop = cp.cuda.Event(), cp.cuda.Event()
    start.record(stream)
    for _ in range(reps):
        fn()
    stop.record(stream)
    stop.synchronize()
    return cp.cuda.get_elapsed_time(start, stop) * 1e3 / reps  # us


with stream:
    t_kernel = timed(lambda: col_plan.pack(1, a[:, j].data.ptr, packed.data.ptr, stream.ptr))
    t_cupy = timed(lambda: cp.ascontiguousarray(a[:, j]))
    t_kunpack = timed(lambda: col_plan.unpack(1, packed.data.ptr, a[:, j].data.ptr, stream.ptr))
    t_cunpack = timed(lambda: a.__setitem__((slice(None), j), packed))
print(f'column halo of {N} x {N} float64 ({N * 8 >> 10} KiB), per call back to back: pack kernel {t_kernel:.2f} us, '
      f'cupy.ascontiguousarray(a[:, j]) {t_cupy:.2f} us; unpack kernel {t_kunpack:.2f} us, a[:, j] = col {t_cunpack:.2f} us')
with stream:
    for axis, (dt, fplan) in faces.items():
        sl = [slice(None)] * 3
        sl[axis] = M - 2
        got = cp.empty(M * M, cp.float32)
        tk = timed(lambda: fplan.pack(1, cube.data.ptr, got.data.ptr, stream.ptr))
        tc = timed(lambda: cp.ascontiguousarray(cube[tuple(sl)]))
        print(f'{M}^3 float32 face {axis} ({M * M * 4 >> 10} KiB): pack kernel {tk:.2f} us, cupy.ascontiguousarray {tc:.2f} us')
    # bandwidth: every other 16-byte pair of a 1 GiB float64 array, and half of each row of 8192^2
    half = MPI.DOUBLE.Create_vector(N, N // 2, N).Commit()
    hplan = _device.pack_plan(layout(half), dev.id)
    hout = cp.empty(N * N // 2, cp.float64)
    th = timed(lambda: hplan.pack(1, a.data.ptr, hout.data.ptr, stream.ptr), 50)
    tm = timed(lambda: cp.cuda.runtime.memcpyAsync(hout.data.ptr, a.data.ptr, hout.nbytes, 3, stream.ptr), 50)
    print(f'half of each row of {N}^2 float64 ({hout.nbytes >> 20} MiB): pack kernel {th:.1f} us ({2 * hout.nbytes / th / 1e3:.0f} GB/s '
          f'read+write), device copy of the same bytes {tm:.1f} us ({2 * hout.nbytes / tm / 1e3:.0f} GB/s)')
    pairs = MPI.DOUBLE.Create_vector(N * N // 4, 2, 4).Commit()
    pplan = _device.pack_plan(layout(pairs), dev.id)
    tp = timed(lambda: pplan.pack(1, a.data.ptr, hout.data.ptr, stream.ptr), 50)
    print(f'every other 16 bytes of {N}^2 float64 ({hout.nbytes >> 20} MiB packed): pack kernel {tp:.1f} us '
          f'({2 * hout.nbytes / tp / 1e3:.0f} GB/s read+write)')
    half.Free()
    pairs.Free()
col.Free()

for f in fails:
    print('FAIL', f)
print(f'pack: {checks - len(fails)} passed, {len(fails)} failed')
sys.exit(1 if fails else 0)
