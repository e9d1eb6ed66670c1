"""mpigpu-perf on host buffers (the README's main job on a machine without GPUs)."""
import json
import os
import subprocess
import sys

import pytest

from conftest import mpiexec


def test_perf_host_table_and_json(tmp_path):
    out_json = tmp_path / 'perf.json'
    cmd = [mpiexec(), '-n', '2', sys.executable, '-m', 'mpigpu.perf', 'allreduce,bcast,allgather',
           '-b', '8', '-e', '4K', '-f', '8', '-n', '3', '-w', '1', '--mem', 'host', '--compare', 'nccl',
           '--json', str(out_json), '--calls']
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=dict(os.environ))
    assert proc.returncode == 0, proc.stderr[-4000:]
    text = proc.stdout
    assert '#wrong' in text and 'Out of bounds values : 0 OK' in text and 'Avg bus bandwidth' in text
    assert '# unavailable: nccl' in text  # a missing baseline is reported, other rows go on
    # host buffers: the header says the engine is not involved, and plain mpi4py is timed beside mpigpu
    assert 'the device engine is not involved' in text and 'xmpi4py' in text
    assert text.count('mpigpu-perf: 2 ranks') == 1  # rank 0 alone prints
    data = json.loads(out_json.read_text())
    assert data['nranks'] == 2 and data['mem'] == 'host'
    assert {r['coll'] for r in data['rows']} == {'allreduce', 'bcast', 'allgather'}
    assert all(r['oop']['wrong'] == 0 for r in data['rows'])
    for r in data['rows']:
        theirs = r['baselines']['mpi4py']
        assert theirs['wrong'] == 0 and theirs['time_us'] > 0 and theirs['rounds'] == r['oop']['rounds'] == 5
        assert theirs['iters'] == r['oop']['iters']  # the same calls per round for both
    # each row: mpi4py's ratio (a number and x), then nccl's cells, unavailable on host buffers
    rows = [line.split() for line in text.splitlines() if line.strip()[:1].isdigit()]
    assert len(rows) == len(data['rows']) and all(r[-1] == 'unavail' and r[-2].endswith('x') for r in rows)
    assert all(float(r[-2][:-1]) > 0 for r in rows)
    # --calls: every row's median and slowest single call, after the row and in the JSON
    assert text.count('#   calls, median / slowest us: mpigpu ') == len(data['rows'])
    assert all(0 < r['oop']['median_us'] <= r['oop']['slowest_us'] for r in data['rows'])
    # Python's garbage collections in each row's timed calls, in the JSON
    assert all(r['oop']['gc_pause_us'] >= 0 and r['oop']['gc_full'] <= r['oop']['gc_collections']
               for r in data['rows'])


class _OneRank:
    def allreduce(self, x, op=None):
        return x


def test_plan_iters_times_a_call_after_the_first(monkeypatch):
    # A fake clock: the first call of the row costs 1 s (setup), every later call 1 ms. With a
    # 0.3 s budget the row keeps all 20 iterations; timing the first call would leave 1.
    from mpigpu.perf import sweep
    now = [0.0]
    calls = []

    def fn():
        now[0] += 1.0 if not calls else 1e-3
        calls.append(1)

    monkeypatch.setattr(sweep.time, 'perf_counter', lambda: now[0])
    assert sweep.plan_iters(_OneRank(), fn, 20, 0.3) == 20
    # a slow call within the budget's reach still cuts the row
    calls.clear()
    now[0] = 0.0
    assert sweep.plan_iters(_OneRank(), lambda: now.__setitem__(0, now[0] + 0.1), 20, 0.3) == 2


def test_blocking_calls_median_and_slowest(monkeypatch):
    # A fake clock: nine calls of 1 ms and one stall of 50 ms; the median is 1 ms, the slowest 50.
    from mpigpu.perf import sweep
    now = [0.0]
    costs = iter([1e-3] * 5 + [50e-3] + [1e-3] * 4)

    class Comm(_OneRank):
        def Barrier(self):
            pass

    monkeypatch.setattr(sweep.time, 'perf_counter', lambda: now[0])
    median, slowest = sweep.time_blocking_calls(Comm(), lambda: now.__setitem__(0, now[0] + next(costs)), 10, 0)
    assert abs(median - 1e-3) < 1e-12 and abs(slowest - 50e-3) < 1e-12


def test_gc_pauses_in_the_timed_calls():
    # A full collection forced in the third timed call is counted, timed and reported; the
    # warm-up's collection is not (it is outside the timed loop).
    import gc
    from mpigpu.perf import report, sweep

    class Comm(_OneRank):
        def Barrier(self):
            pass

    calls = []

    def fn():
        calls.append(1)
        if len(calls) in (1, 4):  # the warm-up call, then the third timed call
            gc.collect()

    pauses = sweep.GcPauses()
    sweep.time_blocking(Comm(), fn, 5, 1, pauses)
    got = pauses.worst(Comm())
    assert got['gc_full'] == 1 and got['gc_collections'] >= 1 and got['gc_pause_us'] > 0
    assert pauses._callback not in gc.callbacks  # removed at the end of the timed loop
    row = {'oop': {'time_us': 10.0, **got}, 'baselines': {'nccl': {'time_us': 20.0, 'gc_collections': 0,
                                                                   'gc_full': 0, 'gc_pause_us': 0.0}}}
    line = report.gc_line(row, ['nccl'])
    assert line.startswith('#   gc in the timed calls: mpigpu ') and ', nccl 0 (0 full) 0 us' in line
    row['oop']['gc_pause_us'] = 99.0
    assert not report.gc_pause_shows(row, ['nccl'])
    row['baselines']['nccl']['gc_pause_us'] = 150.0
    assert report.gc_pause_shows(row, ['nccl'])


def _perf(n, *args, env=None):
    e = dict(os.environ, PYTHONUNBUFFERED='1', **(env or {}))
    return subprocess.run([mpiexec(), '-n', str(n), sys.executable, '-m', 'mpigpu.perf', *args],
                          capture_output=True, text=True, timeout=120, env=e)


def test_nccl_symm_beside_nccl_unavailable_rows_go_on(tmp_path):
    """nccl-symm (NCCL's symmetric kernels on registered windows) may go with nccl (same environment);
    where it cannot run (host buffers, no CuPy or NCCL here) each row says why and the run goes on."""
    out_json = tmp_path / 'perf.json'
    cmd = [mpiexec(), '-n', '2', sys.executable, '-m', 'mpigpu.perf', 'allreduce', '-b', '8', '-e', '64', '-f', '8',
           '-n', '2', '-w', '1', '--mem', 'host', '--compare', 'nccl,nccl-symm', '--json', str(out_json)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=dict(os.environ))
    assert proc.returncode == 0, proc.stderr[-4000:]
    rows = json.loads(out_json.read_text())['rows']
    assert rows and all('error' in r['baselines']['nccl-symm'] and r['oop']['wrong'] == 0 for r in rows)


@pytest.mark.parametrize('args, message', [
    (['-e', '1X'], "argument -e/--maxbytes: '1X' is not a size"),
    (['-r', '5', 'reduce'], '-r 5: the root must be a rank of the 2 (0..1)'),
    (['alltoall'], 'unknown collective alltoall'),
    (['allreduce,bcst'], 'unknown collective bcst'),
    (['-d', 'float128'], 'unknown datatype float128'),
    (['--compare', 'nccl,gloo'], 'unknown baseline gloo'),
    (['--compare', 'nccl,nccl-socket'], 'one NCCL baseline per run'),
    (['-b', '1M', '-e', '1K'], '-b 1048576 is above -e 1024'),
    (['-n', '0'], 'argument -n/--iters: 0 is below 1'),
    (['--frobnicate'], 'unrecognized arguments: --frobnicate'),
])
def test_bad_arguments_one_line_status_2_nothing_run(args, message):
    proc = _perf(2, *args, '--mem', 'host')
    assert proc.returncode == 2, (proc.stdout, proc.stderr[-3000:])
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 2, proc.stderr  # once for the job, no traceback
    assert lines[0].startswith('mpigpu-perf: error: ') and message in lines[0], lines[0]
    assert lines[1].startswith('usage: mpigpu-perf')
    assert proc.stdout == ''  # no table: nothing was measured


def test_plot_without_matplotlib_fails_first(tmp_path):
    # a matplotlib that cannot be imported, first on the path: as if it were not installed
    (tmp_path / 'matplotlib').mkdir()
    (tmp_path / 'matplotlib' / '__init__.py').write_text('raise ImportError("hidden by the test")\n')
    proc = _perf(2, '--mem', 'host', '--plot', str(tmp_path / 'p.png'), env={'PYTHONPATH': str(tmp_path)})
    assert proc.returncode == 2 and proc.stdout == '', proc.stderr[-3000:]
    assert proc.stderr.startswith('mpigpu-perf: error: --plot needs matplotlib')
    assert not (tmp_path / 'p.png').exists()


def test_interleaved_rounds_alternate_and_take_the_best(monkeypatch):
    # A fake clock: call A costs 1 ms, call B 2 ms, except that B's third round is slowed to 50 ms by
    # "load". Rounds alternate A,B / B,A; each side's best round is its undisturbed cost.
    from mpigpu.perf import sweep
    now, order = [0.0], []

    class Comm(_OneRank):
        def Barrier(self):
            pass

    def a():
        order.append('a')
        now[0] += 1e-3

    def b():
        order.append('b')
        now[0] += 50e-3 if order.count('b') in (9, 10) else 2e-3  # warm-up 1 + rounds of 2 calls

    monkeypatch.setattr(sweep.time, 'perf_counter', lambda: now[0])
    pauses = [sweep.GcPauses(), sweep.GcPauses()]
    ta, tb = sweep.time_interleaved(Comm(), [a, b], [2, 2], [1, 1], 5, pauses)
    assert abs(ta - 1e-3) < 1e-12 and abs(tb - 2e-3) < 1e-12
    rounds = ''.join(order[2:])  # after one warm-up call of each
    assert rounds == 'aabb' 'bbaa' 'aabb' 'bbaa' 'aabb'
