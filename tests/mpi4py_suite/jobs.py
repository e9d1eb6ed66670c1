"""Runs a list of the suite's modules as one mpiexec job per attempt and collects every test method's
outcome on every rank, surviving crashes and hangs.

A job that dies (a segfault, an MPI_Abort) or stops making progress (no test started or ended for
`stall_s` seconds: a hang, ended by killing the job) leaves the tests that were running open in the
ranks' event files: those are marked crashed or hung, and a new job runs the rest (the remaining
modules, minus every test already finished on all ranks or left open). Each attempt must start a
test the others did not, so the loop ends.
"""
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from .guard_build import EXIT_CODE

LAUNCHER = Path(__file__).resolve().parent / 'launcher.py'
_ORDER = {'pass': 0, 'skip': 1, 'fail': 2, 'error': 3, 'hang': 4, 'crash': 5}
_GUARD_LINE = re.compile(r'mpigpu-guard: device pointer reached MPI: (?P<call>\w+\(\w+=0x[0-9a-f]+\))'
                         r'.* test \[(?P<test>[^\]]*)\]')


@dataclass
class Test:
    """One test method's outcome over all ranks: the worst rank's outcome and its reason."""
    id: str
    outcome: str = 'pass'
    reason: str = ''
    subs: list = field(default_factory=list)
    nsubs: int = 0
    ranks: dict = field(default_factory=dict)  # rank -> outcome
    reasons: dict = field(default_factory=dict)  # rank -> reason, where the rank did not pass

    def merge(self, rank, outcome, reason='', subs=(), nsubs=0):
        self.ranks[rank] = outcome
        if reason and outcome != 'pass':
            self.reasons[rank] = reason
        if _ORDER[outcome] > _ORDER[self.outcome] or (outcome == self.outcome and not self.reason and reason):
            self.outcome, self.reason, self.subs, self.nsubs = outcome, reason, list(subs), nsubs


@dataclass
class Run:
    """Everything one configuration's jobs produced."""
    config: str
    modules: list
    tests: dict = field(default_factory=dict)       # test id -> Test, in the order they ran
    attempts: list = field(default_factory=list)    # one dict per mpiexec job
    guard_hits: list = field(default_factory=list)  # (test id, 'MPI_Func(arg=0x...)')
    guard_stats: list = field(default_factory=list)  # per rank and attempt: calls, hits, registered
    not_run: list = field(default_factory=list)     # (module, why) for modules no attempt reached
    exit_crashes: list = field(default_factory=list)  # jobs that crashed after their last test
    seconds: float = 0.0

    def tests_of(self, module):
        return [t for t in self.tests.values() if module_of(t.id) == module]


def module_of(test_id):
    """The suite module of a test id: 'test_x.Class.method', 'setUpClass (test_x.Class)',
    'unittest.loader._FailedTest.test_x' (a module that failed to import)."""
    m = re.search(r'\b(test_\w+?)(?:\.|\)|$)', test_id)
    return m.group(1) if m else test_id


def mpiexec():
    exe = shutil.which('mpiexec') or shutil.which('mpirun')
    if exe is None:
        raise RuntimeError('no mpiexec on PATH (pip install mpich)')
    return exe


def _read_events(events_dir, nranks):
    per_rank = {}
    for r in range(nranks):
        path = Path(events_dir) / f'rank{r}.jsonl'
        rows = []
        if path.is_file():
            for line in path.read_text().splitlines():
                try:
                    rows.append(json.loads(line))
                except ValueError:
                    pass  # a line the crash cut short
        per_rank[r] = rows
    return per_rank


def _progress(events_dir):
    return sum(p.stat().st_size for p in Path(events_dir).glob('rank*.jsonl'))


def _stop(proc):
    """Ends the whole job (mpiexec, its proxies and the ranks share the session it leads)."""
    for sig, wait in ((signal.SIGTERM, 5), (signal.SIGKILL, 5)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(wait)
            return
        except subprocess.TimeoutExpired:
            continue


def run_modules(config, modules, *, nranks, runner, suite, workdir, backends=None, typecodes=None,
                fake_device=False, guard=None, skip_classes=None, stall_s=90, max_attempts=40, give_up_s=1800,
                env=None):
    """Runs `modules` of the suite at `suite` (its test/ directory) on `nranks` ranks and returns a Run.

    runner: 'mpi4py' (python -m mpi4py) or 'mpigpu' (mpigpu's runner); backends, typecodes,
    fake_device: see launcher.py; skip_classes: a regex of test classes to leave out; guard: path of the device-pointer
    guard to preload (in report mode: the run goes on and every hit is listed). No new job starts after
    max_attempts jobs or give_up_s seconds (many hangs); what is left is reported as not run."""
    workdir = Path(workdir)
    if workdir.exists():
        shutil.rmtree(workdir)
    workdir.mkdir(parents=True)
    run = Run(config=config, modules=list(modules))
    started_at = time.monotonic()
    remaining, exclude = list(modules), set()
    for attempt in range(max_attempts):
        if not remaining:
            break
        if time.monotonic() - started_at > give_up_s:
            run.not_run += [(m, f'gave up: jobs ran for more than {give_up_s} s') for m in remaining]
            break
        adir = workdir / f'attempt{attempt}'
        events, log_path, guard_log = adir / 'events', adir / 'output.log', adir / 'guard.log'
        events.mkdir(parents=True)
        xfile = adir / 'exclude.txt'
        xfile.write_text(''.join(f'*{t}\n' for t in sorted(exclude)))
        e = dict(os.environ)
        e.update(env or {})
        e['PYTHONUNBUFFERED'] = '1'
        cmd = [mpiexec(), '-n', str(nranks)]
        if guard:
            e.update(MPIGPU_GUARD_MODE='report', MPIGPU_GUARD_LOG=str(guard_log))
            cmd += ['env', f'LD_PRELOAD={guard}']
        cmd += [sys.executable] + (['-m', 'mpi4py'] if runner == 'mpi4py' else [])
        cmd += [str(LAUNCHER), '--suite', str(suite), '--events', str(events), '--runner', runner]
        cmd += ['--fake-device'] if fake_device else []
        for opt, value in (('--backends', backends), ('--typecodes', typecodes), ('--skip-classes', skip_classes)):
            cmd += [opt, value] if value else []
        cmd += ['--', *remaining, '--xfile', str(xfile)]
        with open(log_path, 'w') as log:
            proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=e, start_new_session=True,
                                    cwd=str(adir))
            last, last_change, hung = -1, time.monotonic(), False
            while proc.poll() is None:
                time.sleep(0.25)
                size = _progress(events)
                if size != last:
                    last, last_change = size, time.monotonic()
                elif time.monotonic() - last_change > stall_s:
                    hung = True
                    _stop(proc)
                    break
        rc = proc.returncode
        output = log_path.read_text(errors='replace')
        per_rank = _read_events(events, nranks)
        started_now, open_tests, done_ranks, last_started = set(), {}, [], {}
        finished_on = {}  # test id -> ranks that ended it
        for r, rows in per_rank.items():
            current = None
            for ev in rows:
                if ev['e'] == 'start':
                    tid = ev['id']
                    if tid not in started_now and tid in run.tests:
                        del run.tests[tid]  # run again after an earlier attempt left it partial
                    started_now.add(tid)
                    current = last_started[r] = tid
                    run.tests.setdefault(tid, Test(tid))
                elif ev['e'] == 'end':
                    tid = ev['id']
                    run.tests.setdefault(tid, Test(tid)).merge(r, ev['outcome'], ev.get('reason', ''),
                                                               ev.get('subs', ()), ev.get('nsubs', 0))
                    finished_on.setdefault(tid, set()).add(r)
                    current = None if current == tid else current
                elif ev['e'] == 'done':
                    done_ranks.append(r)
                    if ev.get('guard'):
                        run.guard_stats.append(dict(ev['guard'], rank=r, attempt=attempt))
            if current is not None:
                open_tests.setdefault(current, []).append(r)
        finished = len(done_ranks) == nranks and not hung
        why = _why(rc, output, hung, stall_s)
        culprit, where = (None, '') if hung else _fault(events, nranks)
        why += where
        for tid, ranks in list(open_tests.items()):
            if culprit is not None and culprit not in ranks:
                del open_tests[tid]  # ended because another rank crashed: runs again in the next job
                continue
            for r in ranks if culprit is None else [culprit]:
                run.tests[tid].merge(r, 'hang' if hung else 'crash', why)
        if guard_log.is_file():
            for m in _GUARD_LINE.finditer(guard_log.read_text(errors='replace')):
                run.guard_hits.append((m.group('test'), m.group('call')))
        if finished and re.search(r'KILLED BY SIGNAL|\(signal \d+\)', output):
            run.exit_crashes.append(why)
        run.attempts.append({'cmd': cmd, 'rc': rc, 'hung': hung, 'finished': finished, 'open': dict(open_tests),
                             'log': str(log_path), 'tail': output[-3000:]})
        if finished:
            remaining = []
            break
        new = started_now - exclude
        if not new:
            run.not_run += [(m, f'the job ends before any test runs: {why}') for m in remaining]
            break
        exclude |= set(open_tests)
        exclude |= {t for t, ranks in finished_on.items() if len(ranks) == nranks}
        # resume at the earliest module a rank had not finished
        behind = [remaining.index(module_of(last_started[r])) if module_of(last_started.get(r, '')) in remaining
                  else 0 for r in range(nranks) if r not in done_ranks]
        remaining = remaining[min(behind, default=0):]
    else:
        run.not_run += [(m, f'gave up after {max_attempts} jobs') for m in remaining]
    run.seconds = time.monotonic() - started_at
    return run


def _fault(events, nranks):
    """(rank, ' at <innermost frame>') of the rank whose Python stack a fatal signal wrote, else (None, '')."""
    for r in range(nranks):
        path = Path(events) / f'rank{r}.fault'
        text = path.read_text(errors='replace') if path.is_file() else ''
        if 'Fatal Python error' not in text:
            continue
        crashed = text.split('Current thread', 1)[-1].split('\n\n', 1)[0]  # not the other threads' stacks
        frames = re.findall(r'File "([^"]+)", line (\d+) in (\w+)', crashed)  # innermost first
        mine = [f for f in frames if '/mpigpu/' in f[0]] or frames
        if mine:
            f = mine[0]
            return r, f' at {os.path.basename(f[0])}:{f[1]} in {f[2]} (rank {r})'
        return r, f' (rank {r})'
    return None, ''


def _why(rc, output, hung, stall_s):
    """What ended a job early, from its status and what mpiexec printed."""
    if hung:
        return f'hung: no test started or ended for {stall_s} s (job killed)'
    sig = re.search(r'KILLED BY SIGNAL: (\d+) \(([^)]*)\)|EXIT STRING: ([^(\n]*)\(signal (\d+)\)', output)
    if sig:
        num, name = (sig.group(1), sig.group(2)) if sig.group(1) else (sig.group(4), sig.group(3).strip())
        return f'crashed: signal {num} ({name})'
    code = re.search(r'EXIT CODE: (\d+)', output)
    status = int(code.group(1)) if code else rc
    if status == EXIT_CODE:
        line = next((ln for ln in output.splitlines() if 'mpigpu-guard:' in ln), '')
        return f'ended by the device-pointer guard: {line.strip()[:300]}'
    if 'MPI_Abort' in output:
        line = next((ln for ln in output.splitlines() if 'MPI_Abort' in ln), '')
        return f'crashed: MPI_Abort ({line.strip()[:200]})'
    return f'crashed: job exited with status {status}'
