"""Prints the conformance report of mpi4py's suite through mpigpu (markdown): counts per module, rank
count and array mode, the failing test methods grouped by cause, and the device pointers that reached
MPI.

    python tests/mpi4py_suite/report.py           # runs every job (minutes), then reports
    python tests/mpi4py_suite/report.py --last    # reports what the last run (pytest or this) left
"""
import argparse
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from mpi4py_suite import compare, plan  # noqa: E402


def collect(ranks, last):
    out = {}
    for n in ranks:
        runs = plan.load(n) if last else None
        if runs is None:
            if last:
                sys.exit(f'no saved results for {n} ranks in {plan.WORK}: run without --last')
            runs = plan.run_rank_count(n, *plan.prerequisites())
            plan.save(n, runs)
        out[n] = runs
    return out


def report(all_runs):
    p = print
    p('## Jobs\n\n| job | ranks | modules | attempts | seconds | crashed after the last test |')
    p('|---|---|---|---|---|---|')
    for n, runs in all_runs.items():
        for name, run in runs.items():
            p(f'| {name} | {n} | {len(run.modules)} | {len(run.attempts)} | {run.seconds:.0f} | '
              f'{"; ".join(run.exit_crashes) or "-"} |')
    p('\n## Counts per module\n\nrun / failed / errored / crashed / hung / skipped test methods; regressed: passes '
      'under plain mpi4py, not here; guard: calls in which a fake device pointer reached MPI.\n')
    p('| module | ranks | mpi4py | host | regressed | fake-gpu | regressed | fake-engine | regressed | guard |')
    p('|---|---|---|---|---|---|---|---|---|---|')
    failures, hits = [], defaultdict(set)
    for module in plan.JUDGED + plan.EXTRA:
        for n, runs in all_runs.items():
            if module not in plan.modules_for('host', n):
                continue
            y = runs['yardstick']
            row = [module, str(n), '/'.join(map(str, compare.counts(y, module)))]
            for mode in plan.MODES:
                if module not in plan.modules_for(mode, n):
                    row += ['-', '-']
                    continue
                lines = compare.regressions(y, runs[mode], module)
                row += ['/'.join(map(str, compare.counts(runs[mode], module))), str(len(lines))]
                mine = {t.id: t for t in runs[mode].tests_of(module)}
                for ln in lines:
                    tid = ln.split(':', 1)[0]
                    t = mine.get(tid)
                    failures.append((f'{mode} n{n}', tid, t.outcome if t else 'not run',
                                     t.reason if t else ln.split(': ', 1)[-1]))
            guarded = module in plan.modules_for('fake-gpu', n)
            g = compare.guard_hits(runs['fake-gpu'], module) if guarded else {}
            for (test, call), k in g.items():
                hits[call.split('(')[0].removesuffix('_c') + '(' + call.split('(')[1]].add(f'{test} (n{n})')
            row.append(str(sum(g.values())) if guarded else '-')
            p('| ' + ' | '.join(row) + ' |')
    p('\n## Failing test methods by cause\n')
    for cause, items in compare.grouped(failures).items():
        methods = {tid for _, tid, _ in items}
        p(f'### {cause}\n\n{len(methods)} methods, {len(items)} failures\n')
        for line in compare.compact(items):
            p(f'- {line}')
        p()
    p('## Device pointers that reached MPI (fake-gpu, under the guard)\n')
    for call, tests in sorted(hits.items(), key=lambda kv: -len(kv[1])):
        p(f'- {call}: {len(tests)} tests: ' + ', '.join(sorted(tests)))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument('--last', action='store_true', help='report the saved results instead of running')
    ap.add_argument('-n', type=int, nargs='*', default=list(plan.RANKS), help='rank counts')
    a = ap.parse_args()
    report(collect(a.n, a.last))


if __name__ == '__main__':
    main()
