"""One rank of a run of mpi4py's test suite: records every test's outcome as JSON lines, optionally
makes the suite's fake GPU arrays device memory (the fake CUDA layer plus a range registry), then runs
the suite's main.py through plain mpi4py (`python -m mpi4py launcher.py --runner mpi4py ...`) or through
mpigpu's runner (`python launcher.py --runner mpigpu ...`, which calls mpigpu.__main__.main).

Events (one JSON object a line, in <events>/rank<R>.jsonl, flushed as written, so a crash or a hang
leaves the test that was running open): hello, start, end (outcome and reason), done (after the last
test). A fatal signal writes the rank's Python stack to <events>/rank<R>.fault.
"""
import argparse
import ctypes
import faulthandler
import json
import os
import re
import sys
import time
import traceback
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), 'mpi'))  # fake_device

# The suite's buffers that stand for GPU memory but live in host memory, by module: their memory is
# device memory under the fake CUDA layer. attribute: where the object keeps its memory.
FAKE_GPU_CLASSES = {
    'arrayimpl': (('FakeGPUArrayBasic', 'FakeGPUArrayNumPy'), 'array'),
    'test_msgspec': (('CAIBuf', 'DLPackGPUBuf', 'DLPackGPUBufV0'), '_buf'),
}


def parse(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument('--suite', required=True, help="the suite's test/ directory")
    p.add_argument('--events', required=True, help='directory for rank<R>.jsonl')
    p.add_argument('--runner', choices=('mpi4py', 'mpigpu'), required=True)
    p.add_argument('--backends', default=None, metavar='NAMES',
                   help="arrayimpl's array classes to keep (comma-separated; default: all)")
    p.add_argument('--typecodes', default=None, metavar='CODES',
                   help="the type codes arrayimpl.loop() goes through (default: every one of each backend)")
    p.add_argument('--fake-device', action='store_true',
                   help='install the fake CUDA layer; the fake GPU arrays become device memory')
    p.add_argument('--skip-classes', default=None, metavar='REGEX',
                   help='leave out the test classes whose name this matches (re.search)')
    p.add_argument('main_args', nargs=argparse.REMAINDER, help="arguments of the suite's main.py")
    a = p.parse_args(argv)
    if a.main_args[:1] == ['--']:
        a.main_args = a.main_args[1:]
    return a


class Recorder:
    """Writes the events of this rank; tells the device-pointer guard (if loaded) which test runs."""

    def __init__(self, path):
        self.f = open(path, 'a', buffering=1)
        self.failures = {}  # test id -> [outcome, reason, failed subtests]
        try:
            self.guard = ctypes.CDLL(None)
            self.guard.mpigpu_guard_set_context.argtypes = (ctypes.c_char_p,)
            for name in ('calls', 'hits', 'registered'):
                getattr(self.guard, 'mpigpu_guard_' + name).restype = ctypes.c_ulonglong
        except AttributeError:
            self.guard = None

    def write(self, **event):
        event['t'] = round(time.time(), 3)
        self.f.write(json.dumps(event) + '\n')

    def context(self, text):
        if self.guard is not None:
            self.guard.mpigpu_guard_set_context(text.encode())

    def guard_stats(self):
        if self.guard is None:
            return None
        return {k: getattr(self.guard, 'mpigpu_guard_' + k)() for k in ('calls', 'hits', 'registered')}


def reason_of(err):
    """'ExcType: first line of the message (innermost frame)' for an exc_info tuple."""
    etype, value, tb = err
    msg = str(value).strip().splitlines()
    text = f'{etype.__name__}: {msg[0] if msg else ""}'.strip()
    frames = traceback.extract_tb(tb)
    # where in mpigpu it went wrong, else the test's own line (not unittest's assert helpers)
    mine = [f for f in frames if '/mpigpu/' in f.filename] or [f for f in frames if '/unittest/' not in f.filename]
    if mine:
        f = mine[-1]
        text += f' ({os.path.basename(f.filename)}:{f.lineno} in {f.name})'
    return text[:400]


def record_results(rec):
    """Wraps unittest's TestResult (the base of every runner's result) to write events."""
    R = unittest.result.TestResult
    orig = {name: getattr(R, name) for name in ('startTest', 'stopTest', 'addError', 'addFailure', 'addSkip',
                                                'addSubTest', 'addUnexpectedSuccess')}
    running = {}

    def startTest(self, test):
        loop = getattr(sys.modules.get('arrayimpl'), 'loop', None)
        for attr in ('array', 'typecode'):  # left behind by a loop an exception ended
            if loop is not None and hasattr(loop, attr):
                delattr(loop, attr)
        running[test.id()] = ['pass', '', []]
        rec.context(test.id())
        rec.write(e='start', id=test.id())
        return orig['startTest'](self, test)

    def note(test, outcome, err=None, reason=None):
        tid = test.id()
        entry = running.get(tid)
        if entry is None:  # setUpClass / setUpModule errors: no startTest
            rec.write(e='end', id=tid, outcome=outcome, reason=reason or (reason_of(err) if err else ''), subs=[])
            return
        rank = {'pass': 0, 'skip': 1, 'fail': 2, 'error': 3}
        if rank[outcome] > rank[entry[0]]:
            entry[0] = outcome
            entry[1] = reason or (reason_of(err) if err else '')
            loop = getattr(sys.modules.get('arrayimpl'), 'loop', None)
            if err and hasattr(loop, 'array'):  # the array backend and type the test was at
                entry[1] += f' [{loop.array.__name__} {getattr(loop, "typecode", "?")!r}]'

    def addError(self, test, err):
        note(test, 'error', err)
        return orig['addError'](self, test, err)

    def addFailure(self, test, err):
        note(test, 'fail', err)
        return orig['addFailure'](self, test, err)

    def addSkip(self, test, reason):
        note(test, 'skip', reason=str(reason))
        return orig['addSkip'](self, test, reason)

    def addUnexpectedSuccess(self, test):
        note(test, 'fail', reason='unexpected success')
        return orig['addUnexpectedSuccess'](self, test)

    def addSubTest(self, test, subtest, err):
        if err is not None:
            outcome = 'fail' if issubclass(err[0], test.failureException) else 'error'
            entry = running.get(test.id())
            if entry is not None:
                entry[2].append(f'{subtest._subDescription()}: {reason_of(err)}'[:400])
            note(test, outcome, err)
        return orig['addSubTest'](self, test, subtest, err)

    def stopTest(self, test):
        entry = running.pop(test.id(), ['pass', '', []])
        rec.write(e='end', id=test.id(), outcome=entry[0], reason=entry[1], subs=entry[2][:20],
                  nsubs=len(entry[2]))
        rec.context(f'between tests, after {test.id()}')
        return orig['stopTest'](self, test)

    for fn in (startTest, stopTest, addError, addFailure, addSkip, addSubTest, addUnexpectedSuccess):
        setattr(R, fn.__name__, fn)

    run = unittest.TextTestRunner.run

    def run_and_finish(self, test):
        result = run(self, test)
        rec.write(e='done', run=result.testsRun, guard=rec.guard_stats())
        from mpi4py import MPI
        # every rank has finished its tests before any exits: a failing run ends in MPI_Abort
        MPI.Comm.Barrier(MPI.COMM_WORLD)
        return result

    unittest.TextTestRunner.run = run_and_finish


def only_typecodes(arrayimpl, codes):
    """arrayimpl.loop() yields only these type codes. The original generator keeps its current backend
    and type code as attributes of the module-level name `loop`, which is then this wrapper."""
    every = arrayimpl.loop

    def loop(*args):
        for item in every(*args):
            if loop.typecode in codes:
                yield item

    arrayimpl.loop = loop


def skip_classes(pattern):
    names = unittest.TestLoader.getTestCaseNames

    def getTestCaseNames(self, testCaseClass):
        return [] if pattern.search(testCaseClass.__name__) else names(self, testCaseClass)

    unittest.TestLoader.getTestCaseNames = getTestCaseNames


def fake_gpu_memory(modules, fake_device):
    """Registers the memory of every fake GPU buffer as device memory while the buffer lives."""
    import numpy as np

    for modname in modules:
        mod = sys.modules[modname]
        classes, attr = FAKE_GPU_CLASSES[modname]
        for name in classes:
            cls = getattr(mod, name, None)
            if cls is None:
                continue

            def init(self, *args, _init=cls.__init__, _attr=attr, **kwargs):
                _init(self, *args, **kwargs)
                mem = np.frombuffer(getattr(self, _attr), np.uint8)
                fake_device.device_memory(self, mem.ctypes.data, mem.nbytes)

            cls.__init__ = init


def main(argv=None):
    a = parse(sys.argv[1:] if argv is None else argv)
    sys.dont_write_bytecode = True
    sys.path.insert(0, a.suite)
    for lib in ('cupy', 'numba'):  # as the suite's main.py does without --cupy / --numba
        if f'--{lib}' not in a.main_args:
            sys.modules.setdefault(lib, None)
    from mpi4py import MPI
    os.makedirs(a.events, exist_ok=True)
    rec = Recorder(os.path.join(a.events, f'rank{MPI.COMM_WORLD.Get_rank()}.jsonl'))
    rec.write(e='hello', pid=os.getpid())
    # a segfault leaves this rank's Python stack here: which rank crashed, and where
    faulthandler.enable(open(os.path.join(a.events, f'rank{MPI.COMM_WORLD.Get_rank()}.fault'), 'w'))
    record_results(rec)
    if a.skip_classes:
        skip_classes(re.compile(a.skip_classes))
    if a.fake_device:
        import fake_device
        if os.environ.get('MPIGPU_SUITE_FAKE_ENGINE') == '1':
            # the fake engine (tests/mpi/fake_engine.py): device teams whose ranks meet in shared memory,
            # so the engine's and the exchange's paths run and their results meet the suite's checks
            from fake_engine import install_engine
            install_engine()
        else:
            fake_device.install()
    if a.runner == 'mpigpu':
        # python -m mpigpu puts mpigpu under mpi4py before the program imports anything: arrayimpl's
        # datatype table (MPI.INT ...) then holds mpigpu's datatypes, as it does under the real runner
        from mpigpu.__main__ import install
        install()
    import arrayimpl
    if a.backends:
        keep = a.backends.split(',')
        arrayimpl.ArrayBackends[:] = [c for c in arrayimpl.ArrayBackends if c.__name__ in keep]
        missing = set(keep) - {c.__name__ for c in arrayimpl.ArrayBackends}
        if missing:
            raise SystemExit(f'launcher: arrayimpl has no backend {sorted(missing)}')
    if a.typecodes:
        only_typecodes(arrayimpl, set(a.typecodes))
    if a.fake_device:
        wanted = ['arrayimpl'] + [m for m in FAKE_GPU_CLASSES if m != 'arrayimpl' and m in a.main_args]
        for m in wanted:
            __import__(m)
        fake_gpu_memory(wanted, fake_device)
    main_py = os.path.join(a.suite, 'main.py')
    if a.runner == 'mpigpu':
        from mpigpu.__main__ import main as mpigpu_main
        return mpigpu_main([main_py, *a.main_args])
    import runpy
    sys.argv = [main_py, *a.main_args]
    runpy.run_path(main_py, run_name='__main__')
    return 0


if __name__ == '__main__':
    sys.exit(main())
