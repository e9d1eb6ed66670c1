"""The GPU suite (tests/gpu/check_collectives.py) under mpirun on every GPU of the machine.
Skips cleanly without CuPy or with fewer than 2 GPUs."""
import os
import shutil
import subprocess
import sys

import pytest

cupy = pytest.importorskip('cupy')
try:
    NGPU = cupy.cuda.runtime.getDeviceCount()
except Exception:
    NGPU = 0

pytestmark = pytest.mark.skipif(NGPU < 2, reason='needs 2 or more GPUs')
HERE = os.path.dirname(os.path.abspath(__file__))


@pytest.mark.parametrize('n', sorted({2, NGPU}))
def test_gpu_suite(n):
    exe = shutil.which('mpirun') or shutil.which('mpiexec')
    cmd = [exe, '-n', str(n)]
    if 'Open MPI' in subprocess.run([exe, '--version'], capture_output=True, text=True).stdout:
        cmd += ['--allow-run-as-root', '--oversubscribe']
    cmd += [sys.executable, os.path.join(HERE, 'gpu', 'check_collectives.py')]
    env = dict(os.environ, NCCL_NVLS_ENABLE='0', MPIGPU_TIMEOUT_S='60')
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1800, env=env)
    assert proc.returncode == 0, proc.stdout[-8000:] + proc.stderr[-4000:]
    assert ' 0 failed' in proc.stdout
