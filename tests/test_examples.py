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
