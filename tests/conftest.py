"""Shared helpers: launching multi-rank scripts under mpiexec, fake device buffers."""
import os
import shutil
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))


def mpiexec():
    exe = shutil.which('mpiexec') or shutil.which('mpirun')
    if exe is None:
        pytest.skip('no mpiexec on PATH (pip install mpich)')
    return exe


def run_ranks(n, script, *args, timeout=300, env=None):
    """Runs tests/mpi/<script> on n ranks through `python -m mpi4py`, so an exception on any rank
    calls MPI_Abort and ends the job instead of leaving the other ranks waiting."""
    cmd = [mpiexec(), '-n', str(n), sys.executable, '-m', 'mpi4py', os.path.join(HERE, 'mpi', script), *args]
    e = dict(os.environ)
    e.update(env or {})
    e.setdefault('PYTHONUNBUFFERED', '1')
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=e)
    if proc.returncode != 0:
        raise AssertionError(f'{" ".join(cmd)} exited {proc.returncode}\n--- stdout\n{proc.stdout[-6000:]}'
                             f'\n--- stderr\n{proc.stderr[-6000:]}')
    return proc.stdout


sys.path.insert(0, os.path.join(HERE, 'mpi'))
import fake_device  # noqa: E402  (tests/mpi: the fake CUDA layer)


@pytest.fixture(autouse=True)
def fake_layer():
    """The fake CUDA layer as mpigpu's CUDA layer for each test in this process (its memory
    registry says which pointers are "device memory"); the real one is put back after."""
    from mpigpu import _cuda
    real = _cuda.device
    fake_device.install()
    yield fake_device
    _cuda.device = real


class FakeCAI:
    """An object exporting the CUDA Array Interface over arbitrary (host) memory, for parsing tests;
    the memory counts as device memory for the fake CUDA layer (register=False: host memory)."""

    def __init__(self, array=None, *, typestr=None, shape=None, ptr=None, readonly=False, strides=None,
                 version=3, stream=1, register=True):
        self.array = array
        if array is not None:
            typestr = typestr or array.dtype.str
            shape = shape if shape is not None else array.shape
            ptr = array.ctypes.data if ptr is None else ptr
        self.__cuda_array_interface__ = {
            'shape': tuple(shape), 'typestr': typestr, 'data': (ptr, readonly), 'version': version,
            'strides': strides, 'stream': stream,
        }
        if register and ptr:
            count = 1
            for s in shape:
                count *= s
            fake_device.register(ptr, max(count, 1) * int(typestr[2:]), self)
