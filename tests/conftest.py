"""Shared helpers: launching multi-rank scripts under mpiexec, fake device buffers; and the pytest glue of
the GPU checks (tests/gpu/test_*.py), which run inside every rank under mpirun: each phase of their
tests (setup, call, teardown) ends with all ranks agreeing, so they fail together and never drift out
of step (gpucheck.end_phase), and each module prints its counted checks on rank 0.

The glue lives here, not in a tests/gpu/conftest.py: the CPU tests import this module by the name
`conftest`, which a second conftest.py would take. It touches neither CUDA nor MPI unless a GPU
module was collected (without a GPU each skips at collection, importing gpucheck)."""
import os
import shutil
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
GPU_DIR = os.path.join(HERE, 'gpu')

# Ranks of an MPI job, from the launcher's environment (Open MPI, MPICH's Hydra, PMIx).
_RANK_VARS = ('OMPI_COMM_WORLD_RANK', 'PMI_RANK', 'PMIX_RANK')

# The CPU tests' MPI jobs run more ranks than a CI machine has cores (3-6 ranks on 2): a rank waiting
# in MPI spins in its progress loop on a core the rank it waits for needs. Yielding there cut a 6-rank
# simulated-node test from 18.1 to 13.3 s on 2 cores (docs/tuning.md, "The tests' MPI jobs"). Set for
# the CPU jobs this process launches (MPICH reads the first, Open MPI the second); not for its GPU jobs
# (gpu_job_environ), nor inside a GPU job's ranks.
_CPU_JOB_YIELD = {'MPIR_CVAR_ENABLE_HEAVY_YIELD': '1', 'OMPI_MCA_mpi_yield_when_idle': '1'}
_YIELD_SET_HERE = () if any(v in os.environ for v in _RANK_VARS) else tuple(
    k for k in _CPU_JOB_YIELD if k not in os.environ)
os.environ.update({k: _CPU_JOB_YIELD[k] for k in _YIELD_SET_HERE})


def gpu_job_environ(**extra):
    """The environment of a GPU job launched from the tests (one rank per GPU, or ranks sharing one with
    cores to spare): without the yield set above for the CPU jobs, with `extra`."""
    env = {k: v for k, v in os.environ.items() if k not in _YIELD_SET_HERE}
    env.update(extra)
    return env


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config):
    # pytest inside every rank of an MPI job (the GPU checks): only rank 0 reports, so its lines do
    # not interleave with the others' progress; it lists every rank's failures (they agree on them),
    # and every rank's exit status still counts.
    rank = next((os.environ[v] for v in _RANK_VARS if v in os.environ), '0')
    if rank.isdigit() and int(rank) > 0:
        config.pluginmanager.set_blocked('terminalreporter')


def pytest_addoption(parser):
    parser.addoption('--quick', action='store_true', default=False,
                     help='GPU checks (tests/gpu): smaller sizes and the auto algorithm only in the sweeps')


# ---- the GPU checks' agreement, summaries and communicator -----------------------------------------
def _gpucheck(path):
    """tests/gpu/gpucheck.py for a test in tests/gpu once a GPU module imported it, else None."""
    if os.path.dirname(str(path)) != GPU_DIR:
        return None
    return sys.modules.get('gpucheck')


def _agreed(item, phase):
    gc = _gpucheck(item.path)
    if gc is None:
        return (yield)
    mark = len(gc.tally.failures)
    try:
        result = yield
    except (KeyboardInterrupt, pytest.exit.Exception):
        raise
    except BaseException as exc:
        gc.end_phase(item, phase, mark, exc)
        raise
    gc.end_phase(item, phase, mark, None)
    return result


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item):
    return (yield from _agreed(item, 'setup'))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    return (yield from _agreed(item, 'call'))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item, nextitem):
    return (yield from _agreed(item, 'teardown'))


@pytest.fixture(scope='module', autouse=True)
def _gpu_module(request):
    """Prints a GPU module's counted checks (summed over the ranks) when it ends."""
    gc = _gpucheck(request.path)
    if gc is None:
        yield
        return
    gc.begin_session(request.config)
    start = gc.snapshot()
    yield
    gc.summary(request.module.__name__.removeprefix('test_').replace('_', ' '), start)


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session):
    gc = sys.modules.get('gpucheck')
    if gc is not None and gc.began:
        gc.summary('all GPU modules of this run', gc.began)


@pytest.fixture(scope='session')
def world():
    """mpigpu.COMM_WORLD with its device team set up by a first collective (made with the default
    settings, before a test changes them). Only for the GPU checks."""
    import gpucheck as gc
    gc.team_up(gc.world)
    return gc.world


def mpiexec():
    exe = shutil.which('mpiexec') or shutil.which('mpirun')
    if exe is None:
        pytest.skip('no mpiexec on PATH (pip install mpich)')
    return exe


def host_emulator(tmp_path_factory, name):
    """tests/<name>.cpp built with the host's C++ compiler against cuda/ (the kernels' index arithmetic
    without nvcc); skips where there is no compiler."""
    cxx = shutil.which('c++') or shutil.which('g++') or shutil.which('clang++')
    if cxx is None:
        pytest.skip('no C++ compiler on PATH')
    exe = str(tmp_path_factory.mktemp(name) / name)
    subprocess.run([cxx, '-std=c++17', '-O2', '-Wall', '-Werror', '-I' + os.path.join(os.path.dirname(HERE), 'cuda'),
                    os.path.join(HERE, name + '.cpp'), '-o', exe], check=True)
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
def fake_layer(request):
    """The fake CUDA layer as mpigpu's CUDA layer for each CPU test in this process (its memory
    registry says which pointers are "device memory"); the real one is put back after. The GPU
    modules (tests/gpu) keep the real one."""
    if str(request.path).startswith(os.path.join(HERE, 'gpu') + os.sep):
        yield None
        return
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
            fake_device.device_memory(self, ptr, max(count, 1) * int(typestr[2:]))
