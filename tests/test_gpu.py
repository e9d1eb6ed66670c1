"""The GPU checks (tests/gpu/test_*.py) under mpirun, one item per module and rank count: 2 ranks and
one per GPU; with MPIGPU_SHARED_GPU=1 (ranks share GPUs, docs/tuning.md) 2 and 4 ranks on any number
of GPUs. `python3 -m pytest tests/test_gpu.py -k p2p` runs one module. Skips cleanly without CuPy or
without enough GPUs."""
import os
import shutil
import subprocess
import sys

import pytest
from conftest import gpu_job_environ

cupy = pytest.importorskip('cupy')
try:
    NGPU = cupy.cuda.runtime.getDeviceCount()
except Exception:
    NGPU = 0

HERE = os.path.dirname(os.path.abspath(__file__))
GPU_DIR = os.path.join(HERE, 'gpu')
SHARED = os.environ.get('MPIGPU_SHARED_GPU', '0').strip().lower() in ('1', 'yes', 'true', 'on')
MODULES = sorted(f[:-3] for f in os.listdir(GPU_DIR) if f.startswith('test_') and f.endswith('.py'))
RANKS = sorted({2, 4} if SHARED else {2, max(NGPU, 2)})

pytestmark = pytest.mark.skipif(NGPU < (1 if SHARED else 2),
                                reason='needs 2 or more GPUs, or 1 with MPIGPU_SHARED_GPU=1')


@pytest.mark.parametrize('n', RANKS, ids=lambda n: f'n{n}')
@pytest.mark.parametrize('module', MODULES)
def test_gpu_module(module, n):
    exe = shutil.which('mpirun') or shutil.which('mpiexec')
    cmd = [exe, '-n', str(n)]
    if 'Open MPI' in subprocess.run([exe, '--version'], capture_output=True, text=True).stdout:
        cmd += ['--allow-run-as-root', '--oversubscribe']
    cmd += [sys.executable, '-m', 'pytest', '-p', 'no:cacheprovider', '-q', os.path.join(GPU_DIR, module + '.py')]
    env = gpu_job_environ(NCCL_NVLS_ENABLE='0', MPIGPU_TIMEOUT_S='60', PYTHONUNBUFFERED='1')
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1800, env=env)
    assert proc.returncode == 0, proc.stdout[-8000:] + proc.stderr[-4000:]
    assert ' 0 failed (' in proc.stdout, proc.stdout[-8000:]
