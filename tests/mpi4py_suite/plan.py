"""What of mpi4py's suite runs, how, and what it is compared with (issue 27 items 6 and 7).

Per rank count, three jobs over the same modules:
- yardstick: plain mpi4py (`python -m mpi4py`), host array backends: array, NumPy, their DLPack
  exports, and the suite's fake GPU arrays (host memory behind the CUDA array interface);
- host: the same through mpigpu's runner, no fake CUDA layer: on a CPU build (or a machine without a
  driver) no pointer is device memory, so every buffer, fake GPU arrays included, must go to MPI as
  host memory, as plain mpi4py passes it;
- fake-gpu: through mpigpu's runner with the fake CUDA layer, the backends reduced to the fake GPU
  arrays and their memory registered as device memory, under the device-pointer guard. Only the
  modules that make such buffers run here (the others have nothing the layer would change).
- fake-engine (three ranks, the collective modules): as fake-gpu, on the fake engine's device teams,
  every size on the exchange transport (the all-to-all family read from mpi4py's buffer forms).
A test method that passes in the yardstick must pass in host, fake-gpu and fake-engine (the fake GPU arrays are
among the yardstick's backends, so it has passed the very same method with them); no job may crash
or hang; the guard must see no registered pointer reach MPI.

One rank runs every module with every backend and type code. Three ranks run what depends on the
rank count: issue 27's modules, one host and one fake GPU backend and a few type codes (backends
and type codes change the buffer intake, not the communication), and no classes on COMM_SELF or on
duplicates of COMM_WORLD (the same code as one rank runs).
"""
import concurrent.futures
import dataclasses
import json
import os
from pathlib import Path

from . import fetch, guard_build, jobs

# issue 27's list
JUDGED = [
    'test_cco_buf', 'test_cco_buf_inter', 'test_cco_nb_buf', 'test_cco_nb_vec', 'test_cco_ngh_buf',
    'test_cco_ngh_obj', 'test_cco_obj', 'test_cco_obj_inter', 'test_cco_pr_buf', 'test_cco_pr_ngh_buf',
    'test_cco_pr_vec', 'test_cco_vec', 'test_cco_vec_inter',
    'test_p2p_buf', 'test_p2p_buf_matched', 'test_p2p_buf_part', 'test_p2p_obj', 'test_p2p_obj_matched',
    'test_msgspec', 'test_msgzero', 'test_comm', 'test_comm_inter', 'test_comm_topo', 'test_rma',
    'test_file', 'test_datatype', 'test_pack', 'test_op',
]
# cheap modules that exercise communicators, requests and buffers too; test_objmodel last: it frees
# predefined objects, so a failure there could break the modules after it
EXTRA = [
    'test_rma_nb', 'test_address', 'test_attributes', 'test_buffer', 'test_errhandler', 'test_exceptions',
    'test_grequest', 'test_pickle', 'test_request', 'test_status', 'test_subclass', 'test_threads',
    'test_util_pkl5', 'test_util_sync', 'test_win', 'test_objmodel',
]
# the modules that make the suite's fake GPU buffers (arrayimpl's FakeGPUArray*, test_msgspec's own)
FAKE_GPU_MODULES = [
    'test_cco_buf', 'test_cco_buf_inter', 'test_cco_nb_buf', 'test_cco_nb_vec', 'test_cco_ngh_buf',
    'test_cco_pr_buf', 'test_cco_pr_ngh_buf', 'test_cco_pr_vec', 'test_cco_vec', 'test_cco_vec_inter',
    'test_p2p_buf', 'test_p2p_buf_matched', 'test_p2p_buf_part', 'test_msgspec', 'test_rma', 'test_rma_nb',
    'test_pack', 'test_address',
]
FAKE_GPU_BACKENDS = ('FakeGPUArrayBasic', 'FakeGPUArrayNumPy')
RANKS = (1, 3)
SETUP = {  # per rank count: modules, classes left out, backends per mode (None: all), type codes
    1: dict(modules=JUDGED + EXTRA, skip_classes=None, typecodes=None,
            backends={'host': None, 'fake-gpu': FAKE_GPU_BACKENDS}),
    3: dict(modules=JUDGED + ['test_rma_nb', 'test_util_pkl5'], skip_classes=r'Self|WorldDup$|^TestDatatypePickle$',
            typecodes='bidF',
            backends={'host': ('ArrayNumPy', 'FakeGPUArrayNumPy'), 'fake-gpu': ('FakeGPUArrayNumPy',)}),
}
# fake-engine: the fake GPU arrays on the fake engine's device teams (tests/mpi/fake_engine.py), every size on
# the exchange transport: the all-to-all family's reading of mpi4py's buffer forms meets the suite's checks
ENGINE_MODULES = {3: ['test_cco_buf', 'test_cco_vec', 'test_cco_ngh_buf', 'test_cco_nb_buf', 'test_cco_nb_vec',
                     'test_cco_pr_buf']}
ENGINE_ENV = {'MPIGPU_SUITE_FAKE_ENGINE': '1', 'MPIGPU_EXCHANGE_MIN_BYTES': '0', 'MPIGPU_TIMEOUT_S': '60'}
MODES = ('host', 'fake-gpu', 'fake-engine')
NO_YIELD = {'MPIR_CVAR_ENABLE_HEAVY_YIELD': '0', 'OMPI_MCA_mpi_yield_when_idle': '0'}
STALL_S = 60  # a job in which no test starts or ends for this long is hung (a test takes seconds here)

WORK = Path(fetch.CACHE) / 'runs'


def modules_for(mode, n):
    if mode == 'fake-engine':
        return ENGINE_MODULES.get(n, [])
    mods = SETUP[n]['modules']
    return [m for m in mods if m in FAKE_GPU_MODULES] if mode == 'fake-gpu' else mods


def run_rank_count(n, suite, guard, work=WORK):
    """The jobs on n ranks: {'yardstick': Run, 'host': Run, 'fake-gpu': Run, and 'fake-engine': Run where it
    has modules}."""
    setup = SETUP[n]
    common = dict(nranks=n, suite=suite, skip_classes=setup['skip_classes'], typecodes=setup['typecodes'],
                  stall_s=STALL_S)
    host = ','.join(setup['backends']['host'] or ()) or None
    # one rank waits for no peer: MPI's yield while waiting (tests/conftest.py) would only add system calls
    alone = NO_YIELD if n == 1 else {}
    jobs_of = {
        'yardstick': dict(modules=modules_for('host', n), runner='mpi4py', backends=host, env=alone),
        'host': dict(modules=modules_for('host', n), runner='mpigpu', backends=host, env=alone),
        'fake-gpu': dict(modules=modules_for('fake-gpu', n), runner='mpigpu', fake_device=True, guard=guard,
                         backends=','.join(setup['backends']['fake-gpu']), env=alone),
    }
    if modules_for('fake-engine', n):
        jobs_of['fake-engine'] = dict(modules=modules_for('fake-engine', n), runner='mpigpu', fake_device=True,
                                      guard=guard, backends=','.join(setup['backends']['fake-gpu']),
                                      env={**ENGINE_ENV, **alone})

    def one(name):
        kw = dict(jobs_of[name])
        return jobs.run_modules(f'{name} on {n} rank{"s" if n > 1 else ""}', kw.pop('modules'),
                                workdir=Path(work) / f'{name}-n{n}', **kw, **common)

    # two jobs at a time at least: one-rank jobs on CI's two cores, and the 3-rank jobs too, which wait on
    # their peers more than they compute (60% of two cores busy; the four 3-rank jobs 47.7 -> 41.2 s
    # two at a time, 51.3 s four at a time)
    width = max(2, min(3, (os.cpu_count() or 1) // n))
    with concurrent.futures.ThreadPoolExecutor(width) as pool:
        return dict(zip(jobs_of, pool.map(one, list(jobs_of))))


def prerequisites():
    """(suite test/ folder, guard library) or raises fetch.Unavailable / guard_build.GuardUnavailable."""
    return fetch.suite_dir(), guard_build.build(fetch.CACHE)[0]


def save(n, runs, work=WORK):
    """Keeps the results of the jobs on n ranks (for report.py --last)."""
    Path(work).mkdir(parents=True, exist_ok=True)
    data = {name: dataclasses.asdict(run) for name, run in runs.items()}
    (Path(work) / f'results-n{n}.json').write_text(json.dumps(data, indent=1))


def load(n, work=WORK):
    """The saved results on n ranks, or None."""
    path = Path(work) / f'results-n{n}.json'
    if not path.is_file():
        return None
    out = {}
    for name, d in json.loads(path.read_text()).items():
        d['tests'] = {k: jobs.Test(**t) for k, t in d['tests'].items()}
        d['guard_hits'] = [tuple(h) for h in d['guard_hits']]
        d['not_run'] = [tuple(x) for x in d['not_run']]
        out[name] = jobs.Run(**d)
    return out
