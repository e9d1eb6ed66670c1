"""The build: importable without a GPU; with nvcc present at build time, the CUDA engine is in it."""
import shutil

import pytest

import mpigpu


def test_imports_without_gpu_and_reports_availability():
    ok, why = mpigpu.gpu_available()
    assert isinstance(ok, bool) and (ok or why)


@pytest.mark.skipif(shutil.which('nvcc') is None, reason='no nvcc: a CPU-only build is expected')
def test_cuda_engine_built_when_nvcc_exists():
    from mpigpu._ext import _device
    assert _device.MAX_RANKS >= 2 and _device.supports(11, 0)  # float32 SUM
    assert not _device.supports(11, 7)  # BAND on float32: MPI forbids it
    assert _device.device_count() >= 0


def test_python_m_mpigpu_help():
    import subprocess
    import sys
    out = subprocess.run([sys.executable, '-m', 'mpigpu', '--help'], capture_output=True, text=True)
    assert out.returncode == 0 and 'unmodified mpi4py program' in out.stdout
