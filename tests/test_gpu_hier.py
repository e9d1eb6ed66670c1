"""The hierarchical path's GPU suite (tests/gpu/check_hier.py) in simulated-nodes mode on one GPU: 4 ranks
as 2 x 2, 6 as 3 x 2, 5 as 3 + 2, all ranks sharing the GPU (MPIGPU_SHARED_GPU=1). Skips without CuPy
or a GPU."""
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

pytestmark = pytest.mark.skipif(NGPU < 1, reason='needs a GPU')
HERE = os.path.dirname(os.path.abspath(__file__))


@pytest.mark.parametrize('n,nodes', [(4, 2), (6, 3), (5, 2)])
def test_hier_suite_simulated_nodes(n, nodes):
    exe = shutil.which('mpirun') or shutil.which('mpiexec')
    cmd = [exe, '-n', str(n)]
    if 'Open MPI' in subprocess.run([exe, '--version'], capture_output=True, text=True).stdout:
        cmd += ['--allow-run-as-root', '--oversubscribe']
    cmd += [sys.executable, os.path.join(HERE, 'gpu', 'check_hier.py')]
    env = gpu_job_environ(NCCL_NVLS_ENABLE='0', MPIGPU_TIMEOUT_S='120', MPIGPU_SHARED_GPU='1',
                          MPIGPU_SIMULATE_NODES=str(nodes))
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=3600, env=env)
    assert proc.returncode == 0, proc.stdout[-8000:] + proc.stderr[-4000:]
    assert ' 0 failed' in proc.stdout
