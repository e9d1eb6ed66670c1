"""python -m mpigpu: the forms `python -m mpi4py` takes, its exit codes, and bad arguments (CPU, mpiexec)."""
import os
import subprocess
import sys

import pytest

from conftest import mpiexec

_WHO = ('from mpi4py import MPI; import sys; '
        'print("rank", MPI.COMM_WORLD.Get_rank(), "of", MPI.COMM_WORLD.Get_size(), '
        'type(MPI.COMM_WORLD).__module__, sys.argv[1:])')


def _run(n, *args, runner='mpigpu', stdin=None, cwd=None, env=None):
    # Python's own buffering: each rank's output leaves in one write at exit. Unbuffered, print()
    # writes its text and its newline apart, and two ranks' lines can interleave within a line.
    e = dict(os.environ, **(env or {}))
    e.pop('PYTHONUNBUFFERED', None)
    return subprocess.run([mpiexec(), '-n', str(n), sys.executable, '-m', runner, *args], input=stdin,
                          capture_output=True, text=True, timeout=120, cwd=cwd, env=e)


def _ranks_said(out):
    return sorted(line.split()[1] for line in out.splitlines() if line.startswith('rank '))


def test_dash_c_on_two_ranks():
    proc = _run(2, '-c', 'from mpi4py import MPI; print(MPI.COMM_WORLD.Get_size())')
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ['2', '2']


def test_dash_c_sees_mpigpu_communicators_and_arguments():
    proc = _run(2, '-c', _WHO, 'x', '--y')
    assert proc.returncode == 0, proc.stderr
    assert _ranks_said(proc.stdout) == ['0', '1']
    assert proc.stdout.count("of 2 mpigpu._face.comm ['x', '--y']") == 2


def test_dash_m_module(tmp_path):
    (tmp_path / 'who_mod.py').write_text(_WHO.replace('; ', '\n') + '\n')
    proc = _run(2, '-m', 'who_mod', 'a', env={'PYTHONPATH': str(tmp_path)})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count("of 2 mpigpu._face.comm ['a']") == 2


def test_dash_reads_the_program_from_stdin():
    proc = _run(1, '-', 'b', stdin=_WHO.replace('; ', '\n') + '\n')
    assert proc.returncode == 0, proc.stderr
    assert "rank 0 of 1 mpigpu._face.comm ['b']" in proc.stdout


def test_path_with_its_directory_on_sys_path(tmp_path):
    # the script's own folder comes first on sys.path, as `python script.py` and `python -m mpi4py` do
    (tmp_path / 'helper_mod.py').write_text('WORD = "found"\n')
    (tmp_path / 'prog.py').write_text('import helper_mod\n' + _WHO.replace('; ', '\n') + '\nprint(helper_mod.WORD)\n')
    proc = _run(2, str(tmp_path / 'prog.py'), '7', cwd=os.path.dirname(__file__))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count("of 2 mpigpu._face.comm ['7']") == 2 and proc.stdout.count('found') == 2


@pytest.mark.parametrize('args, message', [
    (['--bogus'], "unknown option '--bogus'"),
    ([], 'no program given'),
    (['-c'], 'argument expected after -c'),
    (['-m'], 'argument expected after -m'),
])
def test_bad_arguments_one_line_status_2(args, message):
    proc = _run(2, *args)
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert lines[0] == f'python -m mpigpu: error: {message}'  # once for the job, not once per rank
    assert len(lines) == 2 and lines[1].startswith('usage: python -m mpigpu')
    assert proc.stdout == ''


def test_help_and_version_once():
    proc = _run(2, '--help')
    assert proc.returncode == 0 and proc.stdout.count('usage: python -m mpigpu') == 1
    assert '-m <mod>' in proc.stdout and '-c <cmd>' in proc.stdout
    proc = _run(2, '--version')
    import mpigpu
    assert proc.returncode == 0 and proc.stdout.strip() == f'mpigpu {mpigpu.__version__}'


# Programs whose ending must give the same status under both runners: a clean exit, sys.exit(N) on
# every rank, sys.exit(N) on one rank while the other waits, an exception on one rank while the other
# waits (the job must end, not hang), and a bad `python -m mpi4py`-style module.
_ENDINGS = {
    'clean': 'pass',
    'exit_3_everywhere': 'import sys; sys.exit(3)',
    'exit_5_on_rank_1': ('from mpi4py import MPI; import sys\n'
                         'if MPI.COMM_WORLD.Get_rank() == 1: sys.exit(5)\nMPI.COMM_WORLD.Barrier()'),
    'raise_on_rank_1': ('from mpi4py import MPI\n'
                        'if MPI.COMM_WORLD.Get_rank() == 1: raise ValueError("on purpose")\n'
                        'MPI.COMM_WORLD.Barrier()'),
    'exit_with_text': 'import sys; sys.exit("bye")',
}


@pytest.mark.parametrize('name', sorted(_ENDINGS))
def test_exit_status_as_python_m_mpi4py(name):
    mine = _run(2, '-c', _ENDINGS[name])
    theirs = _run(2, '-c', _ENDINGS[name], runner='mpi4py')
    assert mine.returncode == theirs.returncode, (mine.stderr[-2000:], theirs.stderr[-2000:])
    if name == 'raise_on_rank_1':
        assert mine.returncode != 0 and 'ValueError: on purpose' in mine.stderr
    if name.startswith('exit_') and name[-1].isdigit():
        assert mine.returncode == int(name.split('_')[1])


def test_missing_module_fails_as_python_m_mpi4py():
    mine = _run(2, '-m', 'no_such_module_here')
    theirs = _run(2, '-m', 'no_such_module_here', runner='mpi4py')
    assert mine.returncode == theirs.returncode != 0
    assert 'no_such_module_here' in mine.stderr


def test_install_replaces_the_predefined_communicators():
    code = ('from mpi4py import MPI; import mpigpu; from mpigpu.__main__ import install; install(); '
            'assert MPI.COMM_WORLD is mpigpu.COMM_WORLD and MPI.COMM_SELF is mpigpu.COMM_SELF; print("ok")')
    proc = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and proc.stdout.strip() == 'ok', proc.stderr
