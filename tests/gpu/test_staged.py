"""The staged path (MPIGPU_ALGO=staged: through host MPI, in chunks copied to and from pinned host
memory): every (dtype, op) pair of the five collectives with CuPy and PyTorch buffers, and sizes
from 0 to 9 MiB in and out of place.
`mpirun -n N python -m pytest -p no:cacheprovider tests/gpu/test_staged.py`."""
import pytest

import gpucheck as gc
from gpucheck import OPS_FOR, SIZE, run_case, settings, torch
from mpigpu._base import host_mpi as _host_mpi


@pytest.fixture(scope='module')
def staged(world):
    """A communicator made and used with MPIGPU_ALGO=staged (no device team), after COMM_WORLD's
    team was set up with the default."""
    gc.say('MPI reports CUDA-aware:', _host_mpi.cuda_aware())
    with settings(algo='staged'):
        comm = world.Dup()
        yield comm
        gc.say('staged engine:', comm.engine_status())
        gc.free(comm)


def test_every_pair(staged):
    for dtype, ops in OPS_FOR.items():
        for op in ops:
            run_case(staged, 'Allreduce', dtype, op, 1001)
            run_case(staged, 'Reduce', dtype, op, 1001, root=SIZE - 1)
            run_case(staged, 'Reduce_scatter_block', dtype, op, 1001)
        run_case(staged, 'Bcast', dtype, 'SUM', 1001, root=SIZE - 1)
        run_case(staged, 'Allgather', dtype, 'SUM', 1001)
        if torch is not None and dtype not in ('uint16', 'uint32', 'uint64'):
            run_case(staged, 'Allreduce', dtype, ops[0], 1001, lib='torch', inplace=True)
            run_case(staged, 'Bcast', dtype, 'SUM', 1001, lib='torch')


def test_sizes(staged):
    for count in (0, 1, 1003, (9 << 20) // 4 + 3):
        for coll in gc.COLLS:
            for dtype in ('float32', 'float16'):
                run_case(staged, coll, dtype, 'SUM', count, root=SIZE - 1)
                if coll != 'Bcast':
                    run_case(staged, coll, dtype, 'SUM', count, root=0, inplace=True)
