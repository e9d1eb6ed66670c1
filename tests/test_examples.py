"""The examples run on CPUs (host buffers) under mpiexec."""
import os
import subprocess
import sys

import pytest

from conftest import mpiexec

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.parametrize('n', [1, 3])
def test_allreduce_hello(n):
    cmd = [mpiexec(), '-n', str(n), sys.executable, '-m', 'mpi4py',
           os.path.join(ROOT, 'examples', 'allreduce_hello.py'), '--host']
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f'{n} ranks, host buffers: sum of ranks = {n * (n - 1) // 2}' in proc.stdout


@pytest.mark.parametrize('n', [1, 3])
def test_jacobi_halo_unchanged_through_python_m_mpigpu(n):
    cmd = [mpiexec(), '-n', str(n), sys.executable, '-m', 'mpigpu',
           os.path.join(ROOT, 'examples', 'jacobi_halo.py'), '--host', '--n', '40', '--steps', '60']
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f'{n} ranks, host arrays: matches serial' in proc.stdout


def test_broadcast_parameters():
    cmd = [mpiexec(), '-n', '3', sys.executable, '-m', 'mpi4py',
           os.path.join(ROOT, 'examples', 'broadcast_parameters.py'), '--host']
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert 'all equal to rank 0' in proc.stdout
    # --host broadcasts the 8 MB its help promises (within one tensor, never more)
    line, = proc.stdout.strip().splitlines()
    amount = float(line.split(' MB in ')[0].split()[-1])
    assert 7.0 <= amount <= 8.0, line


@pytest.mark.parametrize('name', ['allreduce_hello', 'broadcast_parameters', 'data_parallel_training',
                                  'jacobi_halo'])
def test_help_says_what_it_runs(name):
    proc = subprocess.run([sys.executable, os.path.join(ROOT, 'examples', f'{name}.py'), '--help'],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and proc.stdout.startswith(f'usage: {name}.py') and '--host' in proc.stdout


def test_python_m_mpigpu_aborts_on_failure(tmp_path):
    prog = tmp_path / 'bad.py'
    prog.write_text('from mpi4py import MPI\nif MPI.COMM_WORLD.Get_rank() == 1:\n    raise ValueError("x")\n'
                    'MPI.COMM_WORLD.Barrier()\n')
    proc = subprocess.run([mpiexec(), '-n', '2', sys.executable, '-m', 'mpigpu', str(prog)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0 and 'ValueError' in proc.stderr


@pytest.mark.parametrize('n', [1, 3])
def test_data_parallel_training(n):
    cmd = [mpiexec(), '-n', str(n), sys.executable, '-m', 'mpi4py',
           os.path.join(ROOT, 'examples', 'data_parallel_training.py'), '--host']
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert 'parameters match single-process training' in proc.stdout
