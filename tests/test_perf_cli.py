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
    (['alltoallw'], 'unknown collective alltoallw'),
    (['-r', '2', 'scatterv'], '-r 2: the root must be a rank of the 2 (0..1)'),
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


# ---- the exchange rows: alltoall, alltoallv, allgatherv, gatherv, scatterv, neighbor_alltoall, redistribute
EXCHANGE = ('alltoall', 'alltoallv', 'allgatherv', 'gatherv', 'scatterv', 'neighbor_alltoall', 'redistribute')


def test_rows_are_spelled_out():
    # the rows do not follow mpigpu._base.codes.Coll, which grows with the library's collectives
    from mpigpu.perf import sweep
    assert sweep.COLLS == ('allreduce', 'bcast', 'reduce_scatter_block', 'reduce', 'allgather') + EXCHANGE + (
        'sendrecv', 'pingpong', 'halo')
    assert all(sweep.bus_factor(c, 4) == (1.0 if c == 'neighbor_alltoall' else 0.75) for c in EXCHANGE)


def test_redistribute_side_is_the_largest_that_fits():
    from mpigpu.perf import redistribute, sweep
    for n in (1, 2, 3, 4, 8):
        for itemsize in (1, 2, 4, 8):
            for nbytes in (1, 8, 100, 1000, 4096, 65536, 1 << 20, 3 << 20):
                b = redistribute.side(nbytes, itemsize, n)
                assert b >= 1
                assert b == 1 or n * b * b * itemsize <= nbytes
                assert n * (b + 1) * (b + 1) * itemsize > nbytes
                assert sweep.counts('redistribute', nbytes, itemsize, n) == (b, n * b * b * itemsize)


def test_v_counts_are_uneven_and_reported_bytes():
    from mpigpu.perf import sweep, vrows
    c, n = 40, 3  # spread 10
    assert [vrows.rank_count(c, r) for r in range(n)] == [30, 40, 50]
    assert sorted({vrows.pair_count(c, s, d) for s in range(n) for d in range(n)}) == [30, 40, 50]
    # the gathered buffer, the same on every rank; alltoallv: the largest send buffer of the ranks
    assert sweep.counts('allgatherv', 4 * n * c, 4, n) == (c, 4 * 120)
    sends = [sum(vrows.pair_count(c, s, d) for d in range(n)) for s in range(n)]
    assert sweep.counts('alltoallv', 4 * n * c, 4, n) == (c, 4 * max(sends))
    assert sweep.counts('alltoall', 4 * n * c + 5, 4, n) == (c, 4 * n * c)
    assert vrows.rank_count(1, 0) == 0 and vrows.rank_count(1, 2) == 2  # a few elements: uneven too


class _Mem:
    """A NumPy array standing in for a device array: CuPy's .data.ptr, .get(out=), .set(), views
    (reshape, transpose) and assignment from another."""

    def __init__(self, arr):
        import types
        self.arr = arr
        self.data = types.SimpleNamespace(ptr=arr.ctypes.data)
        self.dtype, self.size, self.shape = arr.dtype, arr.size, arr.shape

    def get(self, out):
        out[...] = self.arr

    def set(self, arr):
        self.arr[...] = arr

    def reshape(self, *shape):
        return _Mem(self.arr.reshape(*shape))

    def transpose(self, *axes):
        return _Mem(self.arr.transpose(*axes))

    def __setitem__(self, key, value):
        self.arr[key] = value.arr if isinstance(value, _Mem) else value


def _fake_xp():
    import ctypes
    import types
    import numpy as np
    runtime = types.SimpleNamespace(memcpyDeviceToDevice=3,
                                    memcpyAsync=lambda dst, src, nbytes, kind, stream: ctypes.memmove(dst, src, nbytes))
    stream = types.SimpleNamespace(ptr=0, synchronize=lambda: None)
    cuda = types.SimpleNamespace(runtime=runtime, get_current_stream=lambda: stream)
    return types.SimpleNamespace(asarray=lambda a: _Mem(np.array(a)), asnumpy=lambda m: m.arr.copy(),
                                 zeros=lambda k, dtype: _Mem(np.zeros(k, dtype)),
                                 empty=lambda k, dtype: _Mem(np.empty(k, dtype)), cuda=cuda), stream


class _FakeNccl:
    """cupy.cuda.nccl for n ranks in one process: each rank's sends and receives are logged, then
    matched pair by pair in order (as NCCL matches them) and copied."""
    NCCL_UINT8 = 7

    def __init__(self):
        self.log = []

    def groupStart(self):
        pass

    def groupEnd(self):
        pass

    def comm(self, rank):
        import types
        return types.SimpleNamespace(
            send=lambda ptr, k, dt, peer, st: self.log.append(('send', rank, peer, ptr, k, dt)),
            recv=lambda ptr, k, dt, peer, st: self.log.append(('recv', peer, rank, ptr, k, dt)))

    def deliver(self):
        import ctypes
        pairs = {}
        for kind, src, dst, ptr, k, dt in self.log:
            assert dt == self.NCCL_UINT8 and k > 0 and src != dst
            pairs.setdefault((src, dst), {'send': [], 'recv': []})[kind].append((ptr, k))
        for (src, dst), ops in pairs.items():
            assert [k for _, k in ops['send']] == [k for _, k in ops['recv']], (src, dst, ops)
            for (sp, k), (rp, _) in zip(ops['send'], ops['recv']):
                ctypes.memmove(rp, sp, k)


@pytest.mark.parametrize('coll', EXCHANGE)
@pytest.mark.parametrize('n', [1, 2, 3, 5])
def test_nccl_point_to_point_moves_each_block(coll, n):
    # The nccl baseline's grouped sends and receives and local copy, on host memory for every rank
    # of a job in one process: each rank's receive buffer is then what the check expects.
    from mpigpu.perf import vrows
    from mpigpu.perf.baselines import make_buffers
    xp, stream = _fake_xp()
    for c, dtype, root in ((0, 'float32', 0), (1, 'int16', n - 1), (7, 'float64', n // 2), (40, 'uint8', 0)):
        nccl = _FakeNccl()
        bufs = [make_buffers(xp, coll, c, dtype, n, r, False, root) for r in range(n)]
        calls = [vrows.nccl_call(nccl, nccl.comm(r), b, stream) for r, b in enumerate(bufs)]
        for call in calls:  # kept until delivered: a call's staging array (redistribute) lives with it
            call()
        nccl.deliver()
        for b in bufs:
            assert (b.result() == b.expected('sum')).all(), (coll, n, c, b.rank)


def test_the_check_sees_a_misplaced_block():
    # alltoallv's blocks swapped between two senders: the expected result tells them apart
    import numpy as np
    from mpigpu.perf import vrows
    xp, stream = _fake_xp()
    n, c = 3, 8
    bufs = [vrows.VBuffers(xp, 'alltoallv', c, 'float32', n, r, 0) for r in range(n)]
    nccl = _FakeNccl()
    for r, b in enumerate(bufs):
        vrows.nccl_call(nccl, nccl.comm(r), b, stream)()
    nccl.deliver()
    got = bufs[0].result()
    (_, o1, k1), (_, o2, k2) = bufs[0].recvs[1:3]
    swapped = np.concatenate([got[:o1], got[o2:o2 + k2], got[o1:o1 + k1]])
    assert np.count_nonzero(swapped != bufs[0].expected('sum')) > 0


@pytest.mark.parametrize('coll', EXCHANGE + ('allreduce', 'bcast', 'halo', 'pingpong'))
def test_hand_stages_through_host_arrays(coll):
    # one rank (COMM_SELF): the device buffers are copied out, plain mpi4py runs on host arrays, and
    # the result is copied back; staged leaves the exchange rows to it
    import numpy as np
    from mpi4py import MPI
    from mpigpu.perf.baselines import StagedImpl, Unavailable, make_buffers
    from mpigpu.perf.hand import HandImpl
    xp, _stream = _fake_xp()
    b = make_buffers(np, coll, 6, 'int32', 1, 0, False, 0)
    expected = b.expected('sum')
    b.xp, b.send, b.recv = xp, _Mem(b.send), _Mem(b.recv)  # the same arrays, as "device" memory
    HandImpl(MPI.COMM_SELF).make(b, 'sum')()
    got = b.send.arr if coll == 'bcast' else b.recv.arr
    assert (got == expected).all()
    if coll in EXCHANGE + ('halo', 'pingpong'):
        with pytest.raises(Unavailable, match='compare hand'):
            StagedImpl(MPI.COMM_SELF).make(b, 'sum')


def _exchange_run(n, *args):
    cmd = [mpiexec(), '-n', str(n), sys.executable, '-m', 'mpi4py', '-m', 'mpigpu.perf', *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, PYTHONUNBUFFERED='1'))
    assert proc.returncode == 0, proc.stderr[-4000:]
    return proc.stdout


@pytest.mark.parametrize('n', [2, 3])
def test_exchange_rows_on_host_buffers(tmp_path, n):
    # every exchange row, checked (-c 1), beside plain mpi4py; gatherv and scatterv rooted at -r
    from mpigpu.perf import sweep
    out_json = tmp_path / 'perf.json'
    text = _exchange_run(n, ','.join(EXCHANGE), '-b', '8', '-e', '64K', '-f', '8', '-d', 'float32,int16',
                         '-r', str(n - 1), '-n', '3', '-w', '1', '--rounds', '2', '-c', '1', '--mem', 'host',
                         '--compare', 'hand,staged,nccl-symm', '--json', str(out_json))
    assert '#wrong' in text and 'Out of bounds values : 0 OK' in text
    assert '# unavailable: hand: host buffers: nothing to stage' in text
    rows = json.loads(out_json.read_text())['rows']
    # the rows in the tool's order, each with the count and bytes sweep.counts gives its size
    want = [(c, t, *sweep.counts(c, s, 4 if t == 'float32' else 2, n))
            for c in EXCHANGE for t in ('float32', 'int16') for s in sweep.sizes(8, 64 << 10, 8)]
    assert [(r['coll'], r['type'], r['count'], r['bytes']) for r in rows] == want
    for r in rows:
        theirs = r['baselines']['mpi4py']
        assert r['oop']['wrong'] == 0 and theirs['wrong'] == 0 and theirs['time_us'] > 0
        assert r['ip'] is None  # out of place only
        assert r['root'] == (n - 1 if r['coll'] in ('gatherv', 'scatterv') else -1)
        if r['oop']['time_us'] > 0:
            assert abs(r['oop']['busbw'] - r['oop']['algbw'] * sweep.bus_factor(r['coll'], n)) < 1e-9
    # the table: a row per size, none wrong, n/a in place
    table = [line.split() for line in text.splitlines() if line.strip()[:1].isdigit()]
    assert len(table) == len(rows) and all(t[8] == '0' and t[9] == 'n/a' for t in table)  # #wrong, in place


@pytest.mark.parametrize('n', [1, 3])
def test_point_to_point_rows_on_host_buffers(n):
    # the pingpong row (ranks 0 and 1, perf/pingpong.py), the halo row (a vector datatype's column,
    # perf/halo.py) and the contiguous sendrecv row of the same bytes, checked (-c 1) beside plain mpi4py
    text = _exchange_run(n, 'halo,sendrecv,pingpong', '-b', '8', '-e', '64K', '-f', '8', '-d', 'float32,int8', '-n',
                         '3', '-w', '1', '--rounds', '2', '-c', '1', '--mem', 'host')
    assert all(f'Collective test: {c}' in text for c in ('halo', 'sendrecv', 'pingpong'))
    table = [line.split() for line in text.splitlines() if line.strip()[:1].isdigit()]
    from mpigpu.perf import sweep
    sizes = len(sweep.sizes(8, 64 << 10, 8))
    assert len(table) == 3 * 2 * sizes and all(t[8] == '0' and t[9] == 'n/a' for t in table)  # #wrong, in place


def test_halo_expected_is_the_left_neighbours_last_column():
    import numpy as np
    from mpigpu.perf import halo
    b = halo.HBuffers(np, 'halo', 5, 'int32', 3, 0, 0)
    left = halo.HBuffers(np, 'halo', 5, 'int32', 3, 2, 0)
    want = np.zeros((5, halo.WIDTH), np.int32)
    want[:, 0] = left.send[:, -1]
    assert (b.expected('sum') == want).all() and (want[:, 0] != 0).all()
    assert not (left.send[:, -1] == b.send[:, -1]).all()  # a column from the wrong rank shows


def test_pingpong_pairs_ranks_0_and_1():
    import numpy as np
    from mpigpu.perf import pingpong
    got = [pingpong.PBuffers(np, 'pingpong', 4, 'int16', 3, r, 0) for r in range(3)]
    assert [b.peer for b in got] == [1, 0, None]
    assert (got[0].expected('sum') == got[1].send).all() and (got[1].expected('sum') == got[0].send).all()
    assert (got[2].expected('sum') == 0).all() and pingpong.mpi_call(None, got[2]) is pingpong._nothing
    assert pingpong.PBuffers(np, 'pingpong', 4, 'int16', 1, 0, 0).peer == 0  # one rank: itself


def test_row_shows_the_hierarchical_form_and_the_models_time():
    """Across nodes a row names the form the path ran and the cost model's time for it, so one run sets
    the model against measurement (issue 47)."""
    from mpigpu.perf import report
    row = {'bytes': 1024, 'count': 256, 'type': 'float32', 'redop': 'sum', 'root': -1,
           'oop': {'time_us': 108.0, 'algbw': 0.01, 'busbw': 0.01, 'wrong': 0}, 'ip': None, 'baselines': {},
           'form': 'leader', 'predicted_us': 99.4}
    assert report.line(row, []).endswith('  [leader, model 99 us]')
    row['predicted_us'] = None
    assert report.line(row, []).endswith('  [leader]')
