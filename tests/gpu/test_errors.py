"""Rejected device-buffer collectives raise mpigpu.Error naming the argument and the rank, and leave
recvbuf untouched; a host send buffer with a device receive buffer is not rejected (MPI's result). `mpirun -n N python -m pytest -p no:cacheprovider tests/gpu/test_errors.py`."""
import numpy as np

import mpigpu
from gpucheck import MPI, cp, record


def test_rejected_calls(world):
    r = world.Get_rank()
    x = cp.ones(10, cp.float32)
    y = cp.full(10, 7, cp.float32)
    cases = [
        ('BAND on float', lambda: world.Allreduce(x, y, MPI.BAND), 'op'),
        ('count mismatch', lambda: world.Allreduce(x, cp.full(9, 7, cp.float32)), 'recvbuf'),
        ('non-contiguous', lambda: world.Allreduce(cp.ones(20, cp.float32)[::2], y), 'sendbuf'),
        ('type mismatch', lambda: world.Allreduce(cp.ones(10, cp.float64), y), 'recvbuf'),
        ('bad root', lambda: world.Bcast(y, root=world.Get_size()), 'root'),
    ]
    for label, fn, arg in cases:
        try:
            fn()
            record(f'error case {label}', False, 'did not raise')
        except mpigpu.Error as e:
            record(f'error case {label}', e.arg == arg and f'rank {r}' in str(e), f'wrong message: {e}')
        record(f'error case {label} leaves recvbuf', bool((y == 7).all()), 'recvbuf changed')
    # a host send buffer with a device receive buffer is legal (MPI's result through the host MPI call)
    z = cp.full(10, 7, cp.float32)
    world.Allreduce(np.ones(10, np.float32), z)
    record('host sendbuf, device recvbuf', bool((z == world.Get_size()).all()), f'{z[:3]}')
