"""The staged path, end to end with host MPI, where host memory plays device memory: a fake CUDA
layer copies with memmove, so the chunked pipeline, pinned-buffer reuse, in-place layouts and the
rank-order fallback for float16/bfloat16 run on a CPU. Run under mpiexec -n 1..4 (tests/test_mpi.py)."""
import numpy as np
from mpi4py import MPI

from fake_device import FakeCAI, install, pinned_made

install()
from mpigpu._describe import call as _call
from mpigpu._base import config as _config
from mpigpu._state import comm_state as _state  # noqa: E402
from mpigpu._base.codes import Coll  # noqa: E402
from mpigpu._paths import staged  # noqa: E402

_config.config.stage_chunk_bytes = 4096  # many chunks even for small tests


comm = MPI.COMM_WORLD
rank, n = comm.Get_rank(), comm.Get_size()
state = _state.CommState(comm)  # no team: the staged path alone
state.device = 0


def run(name, coll, send, recv, op=MPI.SUM, root=0):
    c = _call.build(name, coll, n, rank, send, recv, op, root, lambda d: None)
    if c.count:
        staged.run(state, c, 0)


def inputs(count, dt, salt):
    rows = [np.random.default_rng(100 * k + salt).uniform(-1, 1, count).astype(dt) for k in range(n)]
    return rows


def reduce_f32(rows):
    acc = rows[0].astype(np.float32)
    for r in rows[1:]:
        acc = acc + r.astype(np.float32)
    return acc


for count in (1, 1000, 5000, 70001):
    for dt in (np.float32, np.float64, np.int32, np.float16):
        rows = inputs(count, dt, 1) if dt != np.int32 else [np.arange(count, dtype=dt) * (k + 1) for k in range(n)]
        expect = reduce_f32(rows).astype(dt) if dt == np.float16 else sum(r.astype(np.float64) for r in rows)
        # Allreduce out of place and in place
        out = np.full(count, 7, dt)
        run('Allreduce', Coll.ALLREDUCE, FakeCAI(rows[rank]), FakeCAI(out))
        assert np.allclose(out.astype(np.float64), np.asarray(expect, np.float64), rtol=1e-5, atol=1e-5), (count, dt)
        if dt == np.float16:  # rank-order float32 accumulation, bit for bit
            assert out.tobytes() == np.asarray(expect).tobytes()
        buf = rows[rank].copy()
        run('Allreduce', Coll.ALLREDUCE, MPI.IN_PLACE, FakeCAI(buf))
        assert np.allclose(buf.astype(np.float64), np.asarray(expect, np.float64), rtol=1e-5, atol=1e-5)
        # Reduce to the last rank, in place at the root
        root = n - 1
        out = np.full(count, 7, dt)
        run('Reduce', Coll.REDUCE, FakeCAI(rows[rank]), FakeCAI(out) if rank == root else None, root=root)
        if rank == root:
            assert np.allclose(out.astype(np.float64), np.asarray(expect, np.float64), rtol=1e-5, atol=1e-5)
        # Bcast from every root
        for root in range(n):
            b = rows[rank].copy()
            run('Bcast', Coll.BCAST, None, FakeCAI(b), root=root)
            assert b.tobytes() == rows[root].tobytes()
        # Allgather, out of place and in place
        out = np.zeros(count * n, dt)
        run('Allgather', Coll.ALLGATHER, FakeCAI(rows[rank]), FakeCAI(out))
        assert out.tobytes() == np.concatenate(rows).tobytes()
        out = np.zeros(count * n, dt)
        out[rank * count:(rank + 1) * count] = rows[rank]
        run('Allgather', Coll.ALLGATHER, MPI.IN_PLACE, FakeCAI(out))
        assert out.tobytes() == np.concatenate(rows).tobytes()
    # Reduce_scatter_block, out of place and in place
    for dt in (np.float32, np.float16):
        rows = inputs(count * n, dt, 2)
        full = reduce_f32(rows).astype(dt) if dt == np.float16 else sum(r.astype(np.float64) for r in rows)
        out = np.zeros(count, dt)
        run('Reduce_scatter_block', Coll.REDUCE_SCATTER_BLOCK, FakeCAI(rows[rank]), FakeCAI(out))
        part = np.asarray(full)[rank * count:(rank + 1) * count]
        assert np.allclose(out.astype(np.float64), part.astype(np.float64), rtol=1e-5, atol=1e-5)
        buf = rows[rank].copy()
        run('Reduce_scatter_block', Coll.REDUCE_SCATTER_BLOCK, MPI.IN_PLACE, FakeCAI(buf))
        assert np.allclose(buf[:count].astype(np.float64), part.astype(np.float64), rtol=1e-5, atol=1e-5)

# pinned staging memory is reused, not allocated per call: a handful of grow steps at most
assert len(pinned_made) <= 12, pinned_made
comm.Barrier()
if rank == 0:
    print(f'staged path on {n} ranks: ok ({len(pinned_made)} pinned allocations)')
