"""Judges a run against the yardstick, per module: regressions, crashes, hangs, guard hits; and the
words of the report (counts and failures grouped by cause)."""
import os
import re
from collections import Counter, defaultdict

from .jobs import module_of

BAD = ('fail', 'error', 'crash', 'hang')


def regressions(yard, run, module):
    """Lines naming each test method of `module` that passes in the yardstick but not in `run`, and
    every crash or hang of `run` in the module."""
    mine = {t.id: t for t in run.tests_of(module)}
    lines = []
    for t in yard.tests_of(module):
        got = mine.get(t.id)
        if t.outcome == 'pass' and (got is None or got.outcome != 'pass'):
            lines.append(describe(t.id, got, run, module))
    for t in mine.values():
        if t.outcome in ('crash', 'hang') and not any(t.id in ln for ln in lines):
            lines.append(describe(t.id, t, run, module))
    for m, why in run.not_run:
        if m == module:
            lines.append(f'{module}: not run: {why}')
    return lines


def describe(test_id, got, run, module):
    if got is None:
        why = next((w for m, w in run.not_run if m == module), 'the job ended before it (see crashes above)')
        return f'{test_id}: not run: {why}'
    subs = f' ({got.nsubs} subtests failed, first {got.subs[0]})' if got.subs else ''
    ranks = ''
    if len(set(got.ranks.values())) > 1:  # ranks that differ: e.g. one raised, the others hung waiting
        ranks = ' [' + '; '.join(f'rank {r}: {o}' + (f' ({got.reasons[r]})' if r in got.reasons and
                                                     got.reasons[r] != got.reason else '')
                                 for r, o in sorted(got.ranks.items(), key=lambda kv: int(kv[0]))) + ']'
    return f'{test_id}: {got.outcome}: {got.reason}{subs}{ranks}'


def yardstick_problems(yard, module):
    """The yardstick must run the module and pass or skip everything: otherwise nothing is judged."""
    tests = yard.tests_of(module)
    out = [f'{t.id}: {t.outcome} under plain mpi4py: {t.reason}' for t in tests if t.outcome in BAD]
    out += [f'{module}: not run under plain mpi4py: {why}' for m, why in yard.not_run if m == module]
    if not tests and not out:
        out.append(f'{module}: plain mpi4py ran no test of it')
    return out


def guard_hits(run, module):
    """{(test, 'MPI_Func(arg)'): count} for the hits attributed to the module's tests (a hit between
    tests counts for the test before it)."""
    hits = Counter()
    for test, call in run.guard_hits:
        owner = test.rsplit('after ', 1)[-1]
        if module_of(owner) == module:
            hits[(test, re.sub(r'=0x[0-9a-f]+', '', call))] += 1
    return hits


def counts(run, module):
    """(run, failed, errored, crashed, hung, skipped) test methods of the module."""
    c = Counter(t.outcome for t in run.tests_of(module))
    return len(run.tests_of(module)), c['fail'], c['error'], c['crash'], c['hang'], c['skip']


_CALL = re.compile(r'^(\w*Error|Exception): (\w+): ')


def cause(reason):
    """A failure's reason with what varies between instances of one cause taken out."""
    r = re.sub(r'0x[0-9a-f]+', '0x…', reason)
    r = re.sub(r' \(rank \d+\)', '', r)
    r = re.sub(r" \[\w+ '.*?'\]$", '', r)
    r = re.sub(r' \(test_\w+\.py:\d+ in \w+\)', '', r)  # where in the suite's own test: differs per method
    return _CALL.sub(r'\1: <call>: ', r)


def grouped(failures):
    """failures: [(config, test id, outcome, reason)] -> {cause: [(config, test id, outcome)]}, largest
    group first."""
    groups = defaultdict(list)
    for config, tid, outcome, reason in failures:
        groups[cause(reason)].append((config, tid, outcome))
    return dict(sorted(groups.items(), key=lambda kv: -len(kv[1])))


def compact(items):
    """[(config, test id, outcome)] -> lines 'module.{ClassA,ClassB}.method [configs]': one line per
    module, method and set of configurations."""
    by_method = defaultdict(lambda: defaultdict(set))
    for config, tid, outcome in items:
        parts = tid.split('.')
        if len(parts) == 3:
            key, cls = (parts[0], parts[2]), parts[1]
        else:
            key, cls = (tid, ''), ''
        tag = config if outcome in ('fail', 'error') else f'{config} {outcome}'
        by_method[key][cls].add(tag)
    lines = []
    for (module, method), classes in by_method.items():
        by_tags = defaultdict(list)
        for cls, tags in classes.items():
            by_tags[tuple(sorted(tags))].append(cls)
        for tags, cls in by_tags.items():
            cls = sorted(cls)
            stem = os.path.commonprefix(cls)
            name = (module if not method else f'{module}.{cls[0]}.{method}' if len(cls) == 1 else
                    f'{module}.{stem}{{{",".join(c[len(stem):] for c in cls)}}}.{method}')
            lines.append(f'{name} [{", ".join(tags)}]')
    return lines
