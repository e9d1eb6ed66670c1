"""The request side of the fault model without a GPU: cuda/completion.cu compiled for the host with
stand-ins for the CUDA runtime and MPI (tests/host/completion_faults.cpp), so a request whose kernel
recorded a fault is seen to complete with the fault's code. Needs a C++ compiler and the CUDA
headers (found beside nvcc); skipped without them."""
import os
import shutil
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _cuda_include():
    candidates = [os.environ.get('CUDA_HOME', ''), os.environ.get('CUDA_PATH', '')]
    nvcc = shutil.which('nvcc')
    if nvcc:
        real = os.path.realpath(nvcc)
        candidates.append(os.path.dirname(os.path.dirname(real)))
        try:  # a wrapper script: ask nvcc where its toolkit is
            out = subprocess.run([nvcc, '--dryrun', '-x', 'cu', '-c', os.devnull], capture_output=True, text=True,
                                 timeout=60)
            for tok in (out.stderr + out.stdout).split():
                if tok.startswith('-I') and tok.rstrip('"').endswith('include'):
                    candidates.append(os.path.dirname(tok[2:].strip('"')))
        except (OSError, subprocess.SubprocessError):
            pass
    candidates.append('/usr/local/cuda')
    for c in candidates:
        if c and os.path.isfile(os.path.join(c, 'include', 'cuda_runtime.h')):
            return os.path.join(c, 'include')
    return None


def test_request_completes_with_the_fault_of_its_call(tmp_path):
    cxx = shutil.which('g++') or shutil.which('c++')
    inc = _cuda_include()
    if cxx is None or inc is None:
        pytest.skip('needs a C++ compiler and the CUDA headers')
    exe = str(tmp_path / 'completion_faults')
    build = [cxx, '-std=c++17', '-O1', '-Wall', '-I', os.path.join(ROOT, 'cuda'), '-I', inc,
             os.path.join(ROOT, 'tests', 'host', 'completion_faults.cpp'), '-x', 'c++',
             os.path.join(ROOT, 'cuda', 'completion.cu'), '-lpthread', '-o', exe]
    out = subprocess.run(build, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-4000:]
    run = subprocess.run([exe], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0 and run.stdout.strip() == 'ok', run.stdout + run.stderr
