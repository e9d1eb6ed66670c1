"""mpi4py's own test suite through mpigpu (issue 27 items 6 and 7, issue 35 on CPUs): every test method
that passes under plain mpi4py passes through mpigpu's runner on 1 and 3 ranks, with host arrays and
with the suite's fake GPU arrays as device memory; no job crashes or hangs; no fake device pointer
reaches MPI. tests/mpi4py_suite/plan.py says what runs and how.

The suite is the test/ folder of mpi4py's sdist of the installed version (tests/mpi4py_suite/fetch.py,
cached in tests/mpi4py_suite/.cache). Where it cannot be had (offline) or the guard cannot be built (no
gcc) these tests skip and say why; with MPIGPU_CI=1 in the environment (.ci/run sets it) they fail
instead. `python tests/mpi4py_suite/report.py --last` prints the full table of the last run.
"""
import os

import pytest
from mpi4py_suite import compare, fetch, guard_build, plan

_runs = {}


@pytest.fixture(scope='module')
def prereq():
    try:
        return plan.prerequisites()
    except (fetch.Unavailable, guard_build.GuardUnavailable) as exc:
        if os.environ.get('MPIGPU_CI') == '1':
            pytest.fail(f'the mpi4py suite harness cannot run here: {exc}')
        pytest.skip(f'the mpi4py suite harness cannot run here: {exc}')


def runs(n, prereq):
    """The three jobs on n ranks (run once per session, at the first test that needs them)."""
    if n not in _runs:
        _runs[n] = plan.run_rank_count(n, *prereq)
        plan.save(n, _runs[n])
    return _runs[n]


CASES = [(n, mode, m) for n in plan.RANKS for mode in plan.MODES for m in plan.modules_for(mode, n)]
GUARDED = [(n, m) for n in plan.RANKS for m in plan.modules_for('fake-gpu', n)]


@pytest.mark.parametrize('n,mode,module', CASES, ids=[f'{mode}-{m}-n{n}' for n, mode, m in CASES])
def test_passes_what_mpi4py_passes(n, mode, module, prereq):
    r = runs(n, prereq)
    broken = compare.yardstick_problems(r['yardstick'], module)
    assert not broken, 'plain mpi4py does not pass the module, so nothing can be judged:\n' + '\n'.join(broken)
    lines = compare.regressions(r['yardstick'], r[mode], module)
    assert not lines, (f'{len(lines)} test methods of {module} pass under plain mpi4py but not through mpigpu '
                       f'({mode} arrays, {n} ranks), or crash or hang:\n' + '\n'.join(lines))


@pytest.mark.parametrize('n,module', GUARDED, ids=[f'{m}-n{n}' for n, m in GUARDED])
def test_no_device_pointer_reaches_mpi(n, module, prereq):
    hits = compare.guard_hits(runs(n, prereq)['fake-gpu'], module)
    assert not hits, (f'device pointers reached MPI in {sum(hits.values())} calls ({module}, {n} ranks):\n'
                      + '\n'.join(f'{test}: {call} x{k}' for (test, call), k in sorted(hits.items())))


@pytest.mark.parametrize('n', plan.RANKS)
def test_fake_gpu_arrays_are_device_memory_under_the_guard(n, prereq):
    """The fake-gpu job really had the guard loaded and device ranges registered (else the guard
    tests above would pass without looking)."""
    stats = runs(n, prereq)['fake-gpu'].guard_stats
    assert stats, 'no rank of the fake-gpu job reported guard counters: the guard was not loaded or no job finished'
    assert sum(s['registered'] for s in stats) > 0, f'no fake GPU array was registered as device memory: {stats}'
    assert sum(s['calls'] for s in stats) > 0, f'the guard saw no MPI call with a buffer: {stats}'


@pytest.mark.parametrize('n', plan.RANKS)
@pytest.mark.parametrize('job', ('yardstick', 'host', 'fake-gpu'))
def test_jobs_end_cleanly(n, job, prereq):
    run = runs(n, prereq)[job]
    assert not run.exit_crashes, f'{run.config}: the job crashed after its last test: {run.exit_crashes}'
