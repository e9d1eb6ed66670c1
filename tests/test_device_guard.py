"""The device-pointer guard itself (tests/mpi4py_suite/guard.c, preloaded below mpi4py): memory the fake
CUDA layer registers as device memory, handed straight to plain mpi4py, is caught in every kind of
MPI entry point (point-to-point, matched, persistent, partitioned, collectives, neighbourhood, Pack,
Reduce_local, RMA, Buffer_attach, File), also as MPI.memory / MPI.buffer at a raw address and at an
offset; host memory never is; in its default mode the first hit ends the job with the guard's status.
"""
import os
import re
import subprocess
import sys

import pytest
from conftest import HERE, mpiexec
from mpi4py_suite import guard_build
from mpi4py_suite.fetch import CACHE


@pytest.fixture(scope='module')
def guard():
    try:
        return guard_build.build(CACHE)[0]
    except guard_build.GuardUnavailable as exc:
        if os.environ.get('MPIGPU_CI') == '1':
            pytest.fail(f'the device-pointer guard cannot be built: {exc}')
        pytest.skip(f'the device-pointer guard cannot be built: {exc}')


def leak(guard, mode, tmp_path, env=None):
    e = dict(os.environ, PYTHONUNBUFFERED='1', MPIGPU_GUARD_LOG=str(tmp_path / 'guard.log'))
    e.pop('MPIGPU_GUARD_MODE', None)  # the guard's default mode unless the test asks for another
    e.update(env or {})
    script = os.path.join(HERE, 'mpi', 'guard_leak.py')
    cmd = [mpiexec(), '-n', '1', 'env', f'LD_PRELOAD={guard}', sys.executable, script, mode]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=e, cwd=os.path.join(HERE, 'mpi'))


def test_guard_ends_the_job_at_the_first_device_pointer(guard, tmp_path):
    proc = leak(guard, 'first', tmp_path)
    out = proc.stdout + proc.stderr
    assert proc.returncode == guard_build.EXIT_CODE, f'exit status {proc.returncode}\n{out[-3000:]}'
    assert 'not caught' not in out
    assert 'device pointer reached MPI: MPI_Sendrecv' in out and 'sendbuf=0x' in out, out[-3000:]


def test_guard_catches_every_entry_point_and_passes_host_memory(guard, tmp_path):
    proc = leak(guard, 'each', tmp_path, env={'MPIGPU_GUARD_MODE': 'report'})
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, f'exit status {proc.returncode}\n{out[-3000:]}'
    assert 'entry points; host memory passed' in proc.stdout, out[-3000:]


def test_guard_wraps_the_large_count_and_persistent_forms(guard):
    wrapped = set((guard.parent / 'wrapped.txt').read_text().split())
    for name in ('MPI_Send', 'MPI_Send_c', 'MPI_Isendrecv_replace_c', 'MPI_Psend_init', 'MPI_Precv_init',
                 'MPI_Mrecv_c', 'MPI_Imrecv_c', 'MPI_Alltoallw_init_c', 'MPI_Ineighbor_alltoallw_c',
                 'MPI_Reduce_local_c', 'MPI_Pack_external_c', 'MPI_Unpack_c', 'MPI_File_iwrite_at_all_c',
                 'MPI_File_read_ordered_end', 'MPI_Win_create_c', 'MPI_Win_attach', 'MPI_Rget_accumulate_c',
                 'MPI_Compare_and_swap', 'MPI_Buffer_attach_c', 'MPI_Comm_attach_buffer_c'):
        assert name in wrapped, f'{name} is not wrapped by the guard'
    assert 'MPI_Free_mem' not in wrapped and 'MPI_Get_address' not in wrapped


@pytest.mark.parametrize('n', [1, 3])
def test_device_memory_as_raw_addresses_never_reaches_mpi(guard, tmp_path, n):
    """Issue 35 on CPUs: fake device memory given as MPI.memory / MPI.buffer in every buffer form and
    with strided (vector, resized) datatypes, through mpigpu: staged or refused, never handed to MPI."""
    log = tmp_path / 'guard.log'
    e = dict(os.environ, PYTHONUNBUFFERED='1', MPIGPU_GUARD_LOG=str(log), MPIGPU_GUARD_MODE='report')
    cmd = [mpiexec(), '-n', str(n), 'env', f'LD_PRELOAD={guard}', sys.executable, '-m', 'mpi4py',
           os.path.join(HERE, 'mpi', 'device_forms_guarded.py')]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=e, cwd=os.path.join(HERE, 'mpi'))
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0 and 'device memory forms on' in proc.stdout, out[-4000:]
    hits = {}  # the script's call -> MPI functions and arguments the guard caught
    for m in re.finditer(r'reached MPI: (\w+\(\w+)=.* test \[(.*)\]', log.read_text() if log.exists() else ''):
        hits.setdefault(m.group(2), set()).add(m.group(1) + ')')
    assert not hits, 'device pointers reached MPI:\n' + '\n'.join(f'{c}: {", ".join(sorted(f))}'
                                                                   for c, f in sorted(hits.items()))
