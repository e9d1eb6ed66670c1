"""Halo exchanges with MPI derived datatypes on CuPy arrays, three ways in one run (issue: derived
datatypes packed on the GPU):

- derived: the halo described by an MPI datatype (a column: Create_vector; a face of a 3-D block:
  Create_subarray), Sendrecv through mpigpu, which packs and unpacks it on the GPU;
- by hand: the halo packed with CuPy (ascontiguousarray of the slice), sent contiguous, unpacked
  with CuPy (slice assignment): what a program does without derived datatypes;
- mirror: the same derived-datatype Sendrecv run on host mirrors of the whole array (mpigpu's path
  for datatypes before GPU packing): the whole extent crosses PCIe both ways.

    mpirun -n 1 python benchmarks/halo.py        (on 1 rank each rank is its own neighbour)

Prints per case the time per exchange of each way and the ratios derived / by hand (the target is
at most 1.5x) and mirror / derived (at least 50x).
"""
import argparse
import time

import cupy as cp
from mpi4py import MPI as _MPI

import mpigpu
from mpigpu import MPI
from mpigpu._paths import mirrored
from mpigpu._paths.mirrored import IN, OUT
from mpigpu._state.comm_state import state_of

p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
p.add_argument('--n2', type=int, default=8192, help='side of the 2-D float64 array (default 8192)')
p.add_argument('--n3', type=int, default=512, help='side of the 3-D float32 block (default 512)')
p.add_argument('--reps', type=int, default=20, help='timed exchanges per way (default 20)')
p.add_argument('--mirror-reps', type=int, default=3, help='timed exchanges of the mirror way (default 3)')
a = p.parse_args()

comm = mpigpu.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
cp.cuda.Device(rank % cp.cuda.runtime.getDeviceCount()).use()
right, left = (rank + 1) % size, (rank - 1) % size


def timed(fn, reps):
    fn()
    cp.cuda.get_current_stream().synchronize()
    comm.Barrier()
    t0 = time.perf_counter()
    for _ in range(reps):
        fn()
    cp.cuda.get_current_stream().synchronize()
    return comm.allreduce((time.perf_counter() - t0) / reps, op=_MPI.MAX)


def mirror_sendrecv(send, recv):
    """The Sendrecv on host mirrors of both whole buffers (the datatype then read by host MPI)."""
    st = state_of(comm)
    mirrored.run(st, 'Sendrecv', lambda s, r: _MPI.Comm.Sendrecv(comm, s, right, 7, r, left, 7),
                 [(send, IN, mirrored.WHOLE), (recv, OUT, mirrored.WHOLE)])


def case(name, arr, dtype, send_slice, recv_slice):
    """One halo: `dtype` (one element's extent) describes arr[send_slice[0]] (sent right) and
    arr[recv_slice[0]] (received from the left) at element offsets send_slice[1] and recv_slice[1]."""
    send_off = send_slice[1]
    recv_off = recv_slice[1]
    send_spec = [arr, (1, send_off), dtype]
    recv_spec = [arr, (1, recv_off), dtype]

    def derived():
        comm.Sendrecv(send_spec, right, 7, recv_spec, left, 7)

    def by_hand():
        out = cp.ascontiguousarray(arr[send_slice[0]])
        inbox = cp.empty_like(out)
        comm.Sendrecv(out, right, 8, inbox, left, 8)
        arr[recv_slice[0]] = inbox

    def mirror():
        mirror_sendrecv(send_spec, recv_spec)
    halo = int(arr[send_slice[0]].nbytes)
    t_d, t_h = timed(derived, a.reps), timed(by_hand, a.reps)
    t_m = timed(mirror, a.mirror_reps)
    if rank == 0:
        print(f'{name:28s} {halo / 1024:9.0f} KiB  derived {t_d * 1e6:9.1f} us  by hand {t_h * 1e6:9.1f} us  '
              f'mirror {t_m * 1e6:11.1f} us  derived/by hand {t_d / t_h:5.2f}x  mirror/derived {t_m / t_d:7.1f}x',
              flush=True)
    return t_d / t_h, t_m / t_d


# the checks of correctness first: one exchange of each halo against CuPy's slices
results = []
n2 = a.n2
grid = cp.random.default_rng(rank).random((n2, n2))
# one element's extent, so a specification's displacement counts elements: [grid, (1, j), column] is column j
column = MPI.DOUBLE.Create_vector(n2, 1, n2).Create_resized(0, 8).Commit()
row = MPI.DOUBLE.Create_contiguous(n2).Create_resized(0, 8).Commit()
before = cp.asnumpy(grid[:, 1])
comm.Sendrecv([grid, (1, 1), column], right, 1, [grid, (1, 0), column], left, 1)
got = cp.asnumpy(grid[:, 0])
want = comm.sendrecv(before, right, 2, None, left, 2)
assert (got == want).all(), 'column halo: wrong bytes'
results.append(case('2-D column (vector)', grid, column, (cp.s_[:, n2 - 2], n2 - 2), (cp.s_[:, 0], 0)))
results.append(case('2-D row (contiguous)', grid, row, (cp.s_[n2 - 2, :], (n2 - 2) * n2), (cp.s_[0, :], 0)))
column.Free()
row.Free()
del grid

n3 = a.n3
block = cp.random.default_rng(rank).random((n3, n3, n3), dtype=cp.float32)
faces = []
for axis in range(3):
    sub = [n3, n3, n3]
    sub[axis] = 1
    start_hi, start_lo = [0, 0, 0], [0, 0, 0]
    start_hi[axis] = n3 - 2
    hi = MPI.FLOAT.Create_subarray([n3] * 3, sub, start_hi).Commit()
    lo = MPI.FLOAT.Create_subarray([n3] * 3, sub, start_lo).Commit()
    idx_hi = tuple(slice(n3 - 2, n3 - 1) if k == axis else slice(None) for k in range(3))
    idx_lo = tuple(slice(0, 1) if k == axis else slice(None) for k in range(3))
    before = cp.asnumpy(block[idx_hi])
    comm.Sendrecv([block, 1, hi], right, 3, [block, 1, lo], left, 3)
    want = comm.sendrecv(before, right, 4, None, left, 4)
    assert (cp.asnumpy(block[idx_lo]) == want).all(), f'3-D face {axis}: wrong bytes'
    faces.append((axis, hi, lo, idx_hi, idx_lo))


def face_case(axis, hi, lo, idx_hi, idx_lo):
    def derived():
        comm.Sendrecv([block, 1, hi], right, 7, [block, 1, lo], left, 7)

    def by_hand():
        out = cp.ascontiguousarray(block[idx_hi])
        inbox = cp.empty_like(out)
        comm.Sendrecv(out, right, 8, inbox, left, 8)
        block[idx_lo] = inbox

    def mirror():
        mirror_sendrecv([block, 1, hi], [block, 1, lo])
    halo = int(block[idx_hi].nbytes)
    t_d, t_h = timed(derived, a.reps), timed(by_hand, a.reps)
    t_m = timed(mirror, a.mirror_reps)
    if rank == 0:
        print(f'{"3-D face, axis %d (subarray)" % axis:28s} {halo / 1024:9.0f} KiB  derived {t_d * 1e6:9.1f} us  '
              f'by hand {t_h * 1e6:9.1f} us  mirror {t_m * 1e6:11.1f} us  derived/by hand {t_d / t_h:5.2f}x  '
              f'mirror/derived {t_m / t_d:7.1f}x', flush=True)
    return t_d / t_h, t_m / t_d


for f in faces:
    results.append(face_case(*f))
    f[1].Free()
    f[2].Free()
if rank == 0:
    worst = max(r[0] for r in results)
    least = min(r[1] for r in results)
    print(f'halo: {len(results)} halos correct; derived/by hand at most {worst:.2f}x (target <= 1.5x), '
          f'mirror/derived at least {least:.1f}x (target >= 50x), {size} rank(s)', flush=True)
