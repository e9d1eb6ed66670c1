"""The mpi4py suite harness on a small synthetic suite (no download): outcomes per test method and
rank, a crash and a hang attributed to the test that caused them, the job restarted after each so the
tests behind them still run, subtest failures with their parameters, and a crashed rank (with where
it crashed) told apart from the ranks mpiexec ended because of it."""
import textwrap

from mpi4py_suite import jobs

MAIN = '''
import sys, unittest
args = sys.argv[1:]
xfile = args[args.index('--xfile') + 1]
names = args[:args.index('--xfile')]
skip = [p.strip().lstrip('*') for p in open(xfile) if p.strip()]
def flat(s):
    for t in s:
        yield from (flat(t) if isinstance(t, unittest.TestSuite) else [t])
suite = unittest.TestSuite(t for t in flat(unittest.TestLoader().loadTestsFromNames(names)) if t.id() not in skip)
result = unittest.TextTestRunner().run(suite)
sys.exit(not result.wasSuccessful())
'''
ARRAYIMPL = 'ArrayBackends = []\ndef loop(*args):\n    yield from ()\n'
TESTS = {
    'test_one': '''
        import unittest
        from mpi4py import MPI
        class T(unittest.TestCase):
            def test_a_pass(self):
                MPI.COMM_WORLD.Barrier()
            def test_b_fail_on_last(self):
                self.assertNotEqual(MPI.COMM_WORLD.Get_rank(), MPI.COMM_WORLD.Get_size() - 1, 'last rank')
            def test_c_sub(self):
                for k in range(4):
                    with self.subTest(k=k):
                        self.assertLess(k, 2)
            def test_d_crash_on_1(self):
                if MPI.COMM_WORLD.Get_rank() == 1:
                    import ctypes
                    ctypes.string_at(0)
                MPI.COMM_WORLD.Barrier()
            def test_e_after_crash(self):
                MPI.COMM_WORLD.Barrier()
            def test_f_skip(self):
                self.skipTest('not here')
        ''',
    'test_two': '''
        import time, unittest
        from mpi4py import MPI
        class U(unittest.TestCase):
            def test_a_hang_on_0(self):
                if MPI.COMM_WORLD.Get_rank() == 0:
                    time.sleep(3600)
                MPI.COMM_WORLD.Barrier()
            def test_b_after_hang(self):
                MPI.COMM_WORLD.Barrier()
        ''',
}


def test_outcomes_crash_and_hang_are_attributed_and_the_rest_runs(tmp_path):
    suite = tmp_path / 'suite'
    suite.mkdir()
    (suite / 'main.py').write_text(MAIN)
    (suite / 'arrayimpl.py').write_text(ARRAYIMPL)
    for name, src in TESTS.items():
        (suite / f'{name}.py').write_text(textwrap.dedent(src))
    run = jobs.run_modules('synthetic', list(TESTS), nranks=2, runner='mpi4py', suite=suite,
                           workdir=tmp_path / 'work', stall_s=5)
    got = {tid.rsplit('.', 1)[-1]: t for tid, t in run.tests.items()}
    assert {k: t.outcome for k, t in got.items()} == {
        'test_a_pass': 'pass', 'test_b_fail_on_last': 'fail', 'test_c_sub': 'fail', 'test_d_crash_on_1': 'crash',
        'test_e_after_crash': 'pass', 'test_f_skip': 'skip', 'test_a_hang_on_0': 'hang', 'test_b_after_hang': 'pass',
    }, {k: (t.outcome, t.reason) for k, t in got.items()}
    last = got['test_b_fail_on_last']
    assert last.ranks == {0: 'pass', 1: 'fail'} and 'last rank' in last.reason
    assert got['test_c_sub'].nsubs == 2 and got['test_c_sub'].subs[0].startswith('(k=2): AssertionError: 2 not less')
    assert got['test_d_crash_on_1'].ranks == {1: 'crash'}, got['test_d_crash_on_1']  # rank 0 was only ended
    assert 'signal 11' in got['test_d_crash_on_1'].reason and 'in string_at (rank 1)' in got['test_d_crash_on_1'].reason
    assert 'no test started or ended for 5 s' in got['test_a_hang_on_0'].reason
    assert len(run.attempts) == 3 and run.attempts[-1]['finished'] and not run.not_run
