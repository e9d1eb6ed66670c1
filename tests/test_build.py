"""The build: importable without a GPU; with nvcc present at build time, the CUDA engine is in it."""
import shutil

import pytest

import mpigpu


def test_imports_without_gpu_and_reports_availability():
    ok, why = mpigpu.gpu_available()
    assert isinstance(ok, bool) and (ok or why)


@pytest.mark.skipif(shutil.which('nvcc') is None, reason='no nvcc: a CPU-only build is expected')
def test_cuda_engine_built_when_nvcc_exists():
    from mpigpu._base.codes import Dtype, Op
    from mpigpu._ext import _device
    assert _device.MAX_RANKS >= 2 and _device.supports(Dtype.FLOAT32, Op.SUM)
    assert not _device.supports(Dtype.FLOAT32, Op.BAND)  # MPI forbids it
    assert _device.device_count() >= 0


def test_python_m_mpigpu_help():
    import subprocess
    import sys
    out = subprocess.run([sys.executable, '-m', 'mpigpu', '--help'], capture_output=True, text=True)
    assert out.returncode == 0 and 'unmodified mpi4py program' in out.stdout


def test_gpu_archs_auto_keeps_what_nvcc_compiles():
    # cuda/gpu_archs.py (meson's gpu_archs=auto): a GPU nvcc knows is taken as it is; one newer than
    # nvcc's newest gets that newest (its PTX runs through the driver's JIT); one older than nvcc's
    # oldest is left out; no GPU gives nothing (meson then uses its default, PTX for compute_80).
    import importlib.util
    import os
    path = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), 'cuda', 'gpu_archs.py')
    spec = importlib.util.spec_from_file_location('gpu_archs', path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    nvcc = [75, 80, 86, 89, 90, 100, 120]
    assert mod.choose([90], nvcc) == [90]
    assert mod.choose([90, 80, 90], nvcc) == [80, 90]
    assert mod.choose([130], nvcc) == [120]
    assert mod.choose([87], nvcc) == [86]
    assert mod.choose([70], nvcc) == []
    assert mod.choose([], nvcc) == []
    assert mod.choose([90], []) == [90]  # nvcc could not say: trust the GPU
