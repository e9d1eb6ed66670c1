"""The MPI interposer (pmpi/, mpigpu/_interpose; issue 49) on CPUs: a C program that passes device memory
(the fake driver's, which nothing but the driver's copies may touch) to MPI gets MPI's results under
LD_PRELOAD, and crashes without it (so the fake is a real test); in a `python -m mpigpu` process MPI
calls made below Python with device pointers run on mpigpu's paths through the handler; the table the
library was built from is the one Python reads.

Needs gcc and mpicc (the mpich wheel has both); without them these tests skip, and fail under
MPIGPU_CI=1."""
import ctypes
import os
import shutil
import subprocess
import sys

import pytest
from conftest import mpiexec

from mpigpu import _interpose
from mpigpu._interpose.functions import TABLE

HERE = os.path.dirname(os.path.abspath(__file__))


def _tool(name):
    exe = shutil.which(name)
    if exe is None:
        if os.environ.get('MPIGPU_CI') == '1':
            pytest.fail(f'{name} is needed to test the interposer')
        pytest.skip(f'no {name} on PATH')
    return exe


def _build(cmd):
    res = subprocess.run(cmd, capture_output=True, text=True)
    assert res.returncode == 0, f'{" ".join(cmd)}\n{res.stderr[-3000:]}'


@pytest.fixture(scope='module')
def programs(tmp_path_factory):
    """The fake driver (libcuda.so.1) and the C program, built once."""
    out = tmp_path_factory.mktemp('pmpi')
    driver = out / 'libcuda.so.1'
    _build([_tool('gcc'), '-shared', '-fPIC', '-O1', '-Wall', '-Wl,-soname,libcuda.so.1', '-o', str(driver),
            os.path.join(HERE, 'pmpi', 'fake_libcuda.c'), '-lpthread'])
    (out / 'libcuda.so').symlink_to('libcuda.so.1')
    program = out / 'device_calls'
    _build([_tool('mpicc'), '-O1', '-Wall', '-o', str(program), os.path.join(HERE, 'pmpi', 'device_calls.c'),
            f'-L{out}', '-lcuda'])
    # a Cython extension that calls MPI through mpi4py.libmpi
    import sysconfig

    import mpi4py
    csrc = out / 'cython_caller.c'
    _build([sys.executable, '-m', 'cython', '-3', '-I', mpi4py.get_include(), '-o', str(csrc),
            os.path.join(HERE, 'pmpi', 'cython_caller.pyx')])
    _build([_tool('mpicc'), '-shared', '-fPIC', '-O1', '-I', sysconfig.get_paths()['include'], '-I',
            mpi4py.get_include(), '-o', str(out / ('cython_caller' + sysconfig.get_config_var('EXT_SUFFIX'))),
            str(csrc)])
    return out, driver, program


def _run(cmd, env, timeout=120):
    e = dict(os.environ, PYTHONUNBUFFERED='1')
    e.update(env)
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=e)


def test_table_is_the_one_built():
    lib = ctypes.CDLL(_interpose.path())
    _interpose._check_table(lib)  # raises where the library was built from another table
    assert lib.mpigpu_pmpi_count() == len(TABLE)


def test_engine_entry_reads_the_engine_collectives_parameters():
    """The engine's C entry (_device's _pmpi_entry.pxi) reads each engine collective's call at the parameter
    indices engine_row gives: every index names a parameter of the kind it reads, the buffers' bits are
    their places in the device mask, and no other function of the table is given to it."""
    from mpigpu._base.codes import ENGINE_COLLS
    from mpigpu._face.interposed import engine_row
    rows = {fn.name: (fn, engine_row(fn)) for fn in TABLE}
    assert sorted(name for name, (fn, row) in rows.items() if row) == sorted(c.mpi_name for c in ENGINE_COLLS)
    for name, (fn, row) in rows.items():
        if row is None:
            continue
        coll, send, recv, sbit, rbit, scount, rcount, stype, rtype, op, root, comm = row
        kind = {i: p.kind for i, p in enumerate(fn.params)}
        assert coll == next(int(c) for c in ENGINE_COLLS if c.mpi_name == name)
        assert fn.params[recv].is_buffer and fn.buffers[rbit] == recv, name
        assert (send, sbit) == (-1, -1) if name == 'Bcast' else (fn.params[send].is_buffer and fn.buffers[sbit] == send)
        assert kind[scount] == kind[rcount] == 'int' and kind[stype] == kind[rtype] == 'type', name
        assert (op == -1) if name in ('Bcast', 'Allgather') else kind[op] == 'op', name
        assert root == fn.root and (root == -1 or fn.params[root].name == 'root'), name
        assert kind[comm] == 'comm', name


@pytest.mark.parametrize('argv,runner', [
    (['python', '-m', 'mpigpu', 'x.py'], True),
    (['python', '-X', 'dev', '-u', '-m', 'mpigpu', '-c', 'pass'], True),
    (['python', '-mmpigpu'], True),
    (['python', '-m', 'mpi4py', '-m', 'mpigpu'], False),
    (['python', 'x.py', '-m', 'mpigpu'], False),
    (['python', '-c', 'import mpigpu'], False),
])
def test_runner_detection(argv, runner):
    assert _interpose.runs_as_runner(argv) is runner


def test_pmpi_path_cli():
    out = subprocess.run([sys.executable, '-m', 'mpigpu', '--pmpi-path'], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert os.path.isfile(out.stdout.strip()) and out.stdout.strip() == _interpose.path()


def test_c_program_crashes_without_the_interposer(programs):
    out, _, program = programs
    res = _run([mpiexec(), '-n', '1', str(program)], {'LD_LIBRARY_PATH': str(out)})
    assert res.returncode != 0, 'a device pointer reached MPI and nothing happened: the fake driver is not a test'


@pytest.mark.parametrize('n', (1, 3))
def test_c_program_under_the_interposer(programs, n):
    out, _, program = programs
    res = _run([mpiexec(), '-n', str(n), str(program), '--no-handler'],
               {'LD_LIBRARY_PATH': str(out), 'LD_PRELOAD': _interpose.path()})
    assert res.returncode == 0, f'{res.stdout[-3000:]}\n{res.stderr[-3000:]}'
    assert ', 0 failed on all ranks' in res.stdout, res.stdout


def _first_tool(*names):
    """The first of `names` on PATH (as _tool: CI fails without it)."""
    for name in names:
        if shutil.which(name):
            return shutil.which(name)
    return _tool(names[-1])


@pytest.fixture(scope='module')
def fortran_program(programs):
    """tests/pmpi/fortran_calls.f90 built with Open MPI's mpif90 as a program (with fortran_main.f90) and
    as a shared library with its C host (fortran_host.c), and Open MPI's launcher: the pip wheels' MPICH
    has no Fortran bindings (CI installs gfortran and Open MPI's, .ci/run)."""
    out, _, _ = programs
    fc = _first_tool('mpif90.openmpi', 'mpif90')
    launcher = _first_tool('mpirun.openmpi', 'orterun', 'prterun')
    showme = subprocess.run([fc, '--showme:version'], capture_output=True, text=True)
    if showme.returncode != 0 or 'Open MPI' not in showme.stdout + showme.stderr:
        if os.environ.get('MPIGPU_CI') == '1':
            pytest.fail(f'{fc} is not Open MPI\'s: the Fortran test needs Open MPI\'s bindings')
        pytest.skip(f'{fc} is not Open MPI\'s')
    src = [os.path.join(HERE, 'pmpi', f) for f in ('fortran_driver.f90', 'fortran_calls.f90')]
    # (-J: gfortran's module files there, not in the working directory)
    program, library, host = out / 'fortran_calls', out / 'libfortran_calls.so', out / 'fortran_host'
    f08 = out / 'fortran_f08_calls'
    _build([fc, '-O1', '-J', str(out), '-o', str(program), *src, os.path.join(HERE, 'pmpi', 'fortran_main.f90'),
            f'-L{out}', '-lcuda'])
    _build([fc, '-O1', '-fPIC', '-shared', '-J', str(out), '-o', str(library), *src, f'-L{out}', '-lcuda'])
    _build([fc, '-O1', '-J', str(out), '-o', str(f08), src[0], os.path.join(HERE, 'pmpi', 'fortran_f08_calls.f90'),
            f'-L{out}', '-lcuda'])
    _build([_tool('gcc'), '-O1', '-Wall', '-o', str(host), os.path.join(HERE, 'pmpi', 'fortran_host.c'), '-ldl'])
    # the C program on Open MPI too (8-byte request handles, its MPI_REQUEST_NULL a symbol's address)
    cc = _first_tool('mpicc.openmpi', 'mpicc')
    showme = subprocess.run([cc, '--showme:version'], capture_output=True, text=True)
    assert showme.returncode == 0 and 'Open MPI' in showme.stdout + showme.stderr, f'{cc} is not Open MPI\'s'
    _build([cc, '-O1', '-Wall', '-o', str(out / 'device_calls_open_mpi'),
            os.path.join(HERE, 'pmpi', 'device_calls.c'), f'-L{out}', '-lcuda'])
    return out, program, library, host, launcher, f08


def _run_fortran(launcher, n, argv, env):
    ompi = {'OMPI_ALLOW_RUN_AS_ROOT': '1', 'OMPI_ALLOW_RUN_AS_ROOT_CONFIRM': '1', 'OMPI_MCA_rmaps_base_oversubscribe': '1'}
    exported = [a for k in env for a in ('-x', k)]
    return _run([launcher, '-n', str(n), *exported, *argv], dict(ompi, **env))


@pytest.mark.parametrize('which', ('fortran_calls', 'fortran_f08_calls'))
def test_fortran_program_crashes_without_the_interposer(fortran_program, which):
    out, program, _, _, launcher, f08 = fortran_program
    res = _run_fortran(launcher, 2, [str(program if which == 'fortran_calls' else f08)], {'LD_LIBRARY_PATH': str(out)})
    assert res.returncode != 0, 'a device pointer reached MPI from Fortran and nothing happened: not a test'


@pytest.mark.parametrize('n', (1, 3))
def test_fortran_program_under_the_interposer(fortran_program, n):
    """Fortran's MPI_ALLREDUCE & co. with device memory (the interposer's mpi_allreduce_, pmpi/fortran.c):
    MPI's results, Fortran's MPI_IN_PLACE and MPI_STATUS_IGNORE among them; host arrays through the
    library's own binding."""
    out, program, _, _, launcher, _ = fortran_program
    res = _run_fortran(launcher, n, [str(program)], {'LD_LIBRARY_PATH': str(out), 'LD_PRELOAD': _interpose.path()})
    assert res.returncode == 0, f'{res.stdout[-3000:]}\n{res.stderr[-3000:]}'
    assert f'fortran_calls: {n} ranks,' in res.stdout and ', 0 failed on all ranks' in res.stdout, res.stdout


@pytest.mark.parametrize('n', (1, 3))
def test_fortran_library_loaded_locally(fortran_program, n):
    """The same calls from a Fortran library loaded with RTLD_LOCAL after the interposer (as Python loads
    both): the library's Fortran bindings and its runtime's MPI_IN_PLACE are found in the caller's scope."""
    out, _, library, host, launcher, _ = fortran_program
    res = _run_fortran(launcher, n, [str(host), _interpose.path(), str(library)], {'LD_LIBRARY_PATH': str(out)})
    assert res.returncode == 0, f'{res.stdout[-3000:]}\n{res.stderr[-3000:]}'
    assert f'fortran_calls: {n} ranks,' in res.stdout and ', 0 failed on all ranks' in res.stdout, res.stdout


@pytest.mark.parametrize('n', (1, 3))
def test_c_program_on_open_mpi(fortran_program, n):
    """The C program built and run with Open MPI (the GPU hosts' MPI): its non-blocking device calls held
    through host copies until MPI_Wait & co., with Open MPI's request handles."""
    out, _, _, _, launcher, _ = fortran_program
    res = _run_fortran(launcher, n, [str(out / 'device_calls_open_mpi'), '--no-handler'],
                       {'LD_LIBRARY_PATH': str(out), 'LD_PRELOAD': _interpose.path()})
    assert res.returncode == 0, f'{res.stdout[-3000:]}\n{res.stderr[-3000:]}'
    assert ', 0 failed on all ranks' in res.stdout, res.stdout


@pytest.mark.parametrize('n', (2, 3))
def test_fortran_f08_program_under_the_interposer(fortran_program, n):
    """A `use mpi_f08` program's calls with device memory: Open MPI's mpi_f08 bindings call its
    ompi_<name>_f entries, which the interposer defines too (Fortran's MPI_IN_PLACE there is the
    program's copy of the runtime's variable)."""
    out, _, _, _, launcher, f08 = fortran_program
    res = _run_fortran(launcher, n, [str(f08)], {'LD_LIBRARY_PATH': str(out), 'LD_PRELOAD': _interpose.path()})
    assert res.returncode == 0, f'{res.stdout[-3000:]}\n{res.stderr[-3000:]}'
    assert f'fortran_f08_calls: {n} ranks,' in res.stdout and ', 0 failed on all ranks' in res.stdout, res.stdout


@pytest.mark.parametrize('n', (1, 3))
def test_fortran_extension_in_a_python_process(fortran_program, n):
    """A Fortran extension's MPI calls (tests/pmpi/fortran_python_calls.f90, as f2py builds one, loaded with
    RTLD_LOCAL) in a `python -m mpigpu` process on Open MPI (mpi4py's Open MPI build, MPI4PY_MPIABI):
    host arrays and device memory through the handler; persistent requests behind proxies, started and
    completed by Fortran's MPI_STARTALL and MPI_WAITALL."""
    out, _, _, _, launcher, _ = fortran_program
    import mpi4py
    if not any(f.startswith('MPI.openmpi') for f in os.listdir(os.path.dirname(mpi4py.__file__))):
        if os.environ.get('MPIGPU_CI') == '1':
            pytest.fail('mpi4py has no Open MPI build (MPI.openmpi): the Fortran extension test needs it')
        pytest.skip('mpi4py has no Open MPI build')
    lib, mods = out / 'libfortran_python_calls.so', out / 'fortran_python'
    if not lib.exists():
        mods.mkdir(exist_ok=True)
        _build([_first_tool('mpif90.openmpi', 'mpif90'), '-O1', '-fPIC', '-shared', '-J', str(mods), '-o', str(lib),
                os.path.join(HERE, 'pmpi', 'fortran_python_calls.f90')])
    res = _run_fortran(launcher, n, [sys.executable, '-m', 'mpigpu', os.path.join(HERE, 'mpi', 'pmpi_fortran_python.py')],
                       {'MPI4PY_MPIABI': 'openmpi', 'FAKE_LIBCUDA': str(out / 'libcuda.so.1'),
                        'FORTRAN_PYTHON_LIB': str(lib), 'PYTHONPATH': os.path.join(HERE, 'mpi')})
    assert res.returncode == 0, f'{res.stdout[-3000:]}\n{res.stderr[-3000:]}'
    assert f'pmpi_fortran_python: {n} ranks,' in res.stdout and ', 0 failed on all ranks' in res.stdout, res.stdout


@pytest.fixture(scope='module')
def mpich_fortran_programs(programs):
    """fortran_calls.f90 and fortran_f08_calls.f90 built with MPICH's mpif90 (its `use mpi` and `use
    mpi_f08` bindings: the f08 request calls call its C PMPI_ functions, and its handles have no f2c
    functions), and MPICH's launcher (CI installs them, .ci/run)."""
    out, _, _ = programs
    fc, launcher = shutil.which('mpif90.mpich'), shutil.which('mpirun.mpich')
    if not fc or not launcher:
        if os.environ.get('MPIGPU_CI') == '1':
            pytest.fail('mpif90.mpich or mpirun.mpich missing: the MPICH Fortran test needs them')
        pytest.skip('no MPICH Fortran bindings')
    mods = out / 'mpich'
    mods.mkdir(exist_ok=True)
    driver = os.path.join(HERE, 'pmpi', 'fortran_driver.f90')
    calls, f08 = mods / 'fortran_calls', mods / 'fortran_f08_calls'
    _build([fc, '-O1', '-J', str(mods), '-o', str(calls), driver, os.path.join(HERE, 'pmpi', 'fortran_calls.f90'),
            os.path.join(HERE, 'pmpi', 'fortran_main.f90'), f'-L{out}', '-lcuda'])
    _build([fc, '-O1', '-J', str(mods), '-o', str(f08), driver, os.path.join(HERE, 'pmpi', 'fortran_f08_calls.f90'),
            f'-L{out}', '-lcuda'])
    return out, launcher, {'fortran_calls': calls, 'fortran_f08_calls': f08}


@pytest.mark.parametrize('which', ('fortran_calls', 'fortran_f08_calls'))
def test_mpich_fortran_program_crashes_without_the_interposer(mpich_fortran_programs, which):
    out, launcher, built = mpich_fortran_programs
    res = _run([launcher, '-n', '2', str(built[which])], {'LD_LIBRARY_PATH': str(out)})
    assert res.returncode != 0, 'a device pointer reached MPICH from Fortran and nothing happened: not a test'


@pytest.mark.parametrize('which,n', (('fortran_calls', 1), ('fortran_calls', 3), ('fortran_f08_calls', 2),
                                     ('fortran_f08_calls', 3)))
def test_mpich_fortran_program_under_the_interposer(mpich_fortran_programs, which, n):
    """The Fortran programs on MPICH's bindings: blocking calls reach the interposer's Fortran entries
    (`use mpi`) or its C ones (MPICH's mpi_f08 entries call C's MPI_ functions); non-blocking and
    persistent device calls are held through host copies until MPI_WAIT & co., whose f08 entries
    (mpi_waitall_f08_) the interposer defines, as MPICH's call its C PMPI_Waitall."""
    out, launcher, built = mpich_fortran_programs
    res = _run([launcher, '-n', str(n), str(built[which])], {'LD_LIBRARY_PATH': str(out), 'LD_PRELOAD': _interpose.path()})
    assert res.returncode == 0, f'{res.stdout[-3000:]}\n{res.stderr[-3000:]}'
    assert f'{which}: {n} ranks,' in res.stdout and ', 0 failed on all ranks' in res.stdout, res.stdout


@pytest.mark.parametrize('n', (1, 2, 4))
def test_calls_below_python_run_on_mpigpus_paths(programs, n):
    """ctypes calls and a Cython extension's calls (mpi4py.libmpi) with device pointers."""
    out, driver, _ = programs
    res = _run([mpiexec(), '-n', str(n), sys.executable, '-m', 'mpigpu',
                os.path.join(HERE, 'mpi', 'pmpi_handler_fake_device.py')],
               {'FAKE_LIBCUDA': str(driver), 'PYTHONPATH': os.path.join(HERE, 'mpi'), 'CYTHON_CALLER': str(out)})
    assert res.returncode == 0, f'{res.stdout[-3000:]}\n{res.stderr[-3000:]}'
    assert f'pmpi handler on {n} ranks' in res.stdout, res.stdout


@pytest.mark.parametrize('n', (1, 3))
def test_host_calls_below_python_pass_the_engines_entry(n):
    """Host-buffer calls below Python in a `python -m mpigpu` process (the CUDA layer built, no GPU needed):
    the engine's entry posts the engine collectives, the generated collective methods' calls and the sends
    for their peers and the library makes them; the receives stay the handler's."""
    res = _run([mpiexec(), '-n', str(n), sys.executable, '-m', 'mpigpu', os.path.join(HERE, 'mpi', 'pmpi_host_entry.py')],
               {})
    assert res.returncode == 0, f'{res.stdout[-3000:]}\n{res.stderr[-3000:]}'
    if 'no engine entry in this build' in res.stdout:
        if os.environ.get('MPIGPU_CI') == '1':
            pytest.fail('CI builds the CUDA layer: the engine\'s entry should be there')
        pytest.skip('no CUDA layer built here')
    assert f'pmpi host entry on {n} ranks' in res.stdout, res.stdout


@pytest.mark.parametrize('n', (3,))
def test_large_count_forms_on_a_library_without_them(n):
    """Open MPI 4.1 has no MPI_<name>_c: mpi4py finds the interposer's, which make the int forms (counts
    narrowed; one too large for an int fails with the interposer's error)."""
    res = _run([mpiexec(), '-n', str(n), sys.executable, '-m', 'mpigpu', os.path.join(HERE, 'mpi', 'pmpi_narrowed.py')],
               {})
    assert res.returncode == 0, f'{res.stdout[-3000:]}\n{res.stderr[-3000:]}'
    assert f'pmpi narrowed large-count forms on {n} ranks' in res.stdout, res.stdout


@pytest.mark.parametrize('n', (3,))
def test_large_count_forms_from_c_without_a_handler(n):
    """The same int forms as a C program meets them (preloaded, no handler): counts MPI does not read on a
    rank are not narrowed (garbage there fails nothing); an entry that is read and does not fit fails."""
    res = _run([mpiexec(), '-n', str(n), sys.executable, os.path.join(HERE, 'mpi', 'pmpi_narrowed_c.py')],
               {'LD_PRELOAD': _interpose.path()})
    assert res.returncode == 0, f'{res.stdout[-3000:]}\n{res.stderr[-3000:]}'
    assert f'pmpi narrowed large-count forms from C on {n} ranks' in res.stdout, res.stdout


def test_memory_known_host_without_the_driver():
    """The brk heap is host memory (no driver asked); a mapping of its own is asked about."""
    import mmap
    lib = ctypes.CDLL(_interpose.path())
    lib.mpigpu_pmpi_surely_host.argtypes = (ctypes.c_void_p,)
    libc = ctypes.CDLL(None)
    libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, (ctypes.c_size_t,)
    libc.free.argtypes = (ctypes.c_void_p,)
    small = libc.malloc(16)  # glibc's main arena: the brk heap
    mapped = mmap.mmap(-1, 1 << 20)
    try:
        assert lib.mpigpu_pmpi_surely_host(small) == 1
        assert lib.mpigpu_pmpi_surely_host(ctypes.addressof(ctypes.c_char.from_buffer(mapped))) == 0
    finally:
        libc.free(small)


def test_main_stack_is_its_mapping_under_an_unlimited_stack_limit():
    """With `ulimit -s unlimited` the main thread's stack as pthread reports it spans every mapping; the
    interposer takes the mapped stack, so a mapping of its own is still asked about."""
    probe = ('import ctypes, mmap, sys\n'
             f'lib = ctypes.CDLL({_interpose.path()!r})\n'
             'lib.mpigpu_pmpi_surely_host.argtypes = (ctypes.c_void_p,)\n'
             'm = mmap.mmap(-1, 1 << 20)\n'
             'sys.exit(lib.mpigpu_pmpi_surely_host(ctypes.addressof(ctypes.c_char.from_buffer(m))))\n')
    res = subprocess.run(['bash', '-c', f'ulimit -s unlimited || exit 77; exec {sys.executable} -c "$0"', probe],
                         capture_output=True, text=True, timeout=60)
    if res.returncode == 77:
        pytest.skip('this shell may not raise its stack limit')
    assert res.returncode == 0, f'a mapped buffer was taken for stack memory ({res.returncode}): {res.stderr[-2000:]}'


def test_preloaded_into_a_python_process_is_adopted():
    """A Python program started with the interposer preloaded (not through python -m mpigpu): mpigpu takes
    it as in place, registers its handler, and asks the MPI library below whether it is CUDA-aware (the
    interposer's own MPIX_Query_cuda_support says yes)."""
    code = ('import mpigpu\nfrom mpigpu._base import host_mpi as _host_mpi\n'
            'print(mpigpu.interposer_status()["state"], _host_mpi.cuda_aware())\n')
    res = _run([sys.executable, '-c', code], {'LD_PRELOAD': _interpose.path()})
    assert res.returncode == 0, res.stderr[-3000:]
    assert res.stdout.split() == ['preloaded', 'False'], res.stdout
