"""mpigpu-perf's command line: the parser and every check of the arguments, done before any
measurement (a bad argument is one line on rank 0 and exit status 2, mpigpu/_face/cli.py)."""
import argparse

from .._face.cli import UsageError, say
from .._base.codes import KINDS, NAMES
from .._base.config import ALGOS
from .sweep import COLLS, parse_size

PROG = 'mpigpu-perf'
HINT = f'usage: {PROG} [collective] [-b MIN] [-e MAX] [-f FACTOR] [options]  (see {PROG} --help)'
OPS = ('sum', 'prod', 'max', 'min')  # the ops whose results the check computes (baselines.Buffers)
# The element types NumPy has (not bfloat16) that every op of OPS takes (not bool, not complex).
TYPES = tuple(name for name, kind in zip(NAMES, KINDS) if kind in 'iuf')
ROOTED = ('bcast', 'reduce', 'gatherv', 'scatterv')  # the collectives -r applies to
_DEFAULT_ENV_NCCL = {'nccl', 'nccl-symm'}  # the NCCL baselines that leave NCCL's environment as it is


class _Parser(argparse.ArgumentParser):
    """argparse, except that an error raises UsageError (the tool says it once) and help and
    messages come from rank 0 only."""

    def error(self, message):
        raise UsageError(message)

    def _print_message(self, message, file=None):
        if message:
            say(message.rstrip('\n'), file)


def _size(text):
    try:
        value = parse_size(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f'{text!r} is not a size (bytes, or with K, M, G: 8, 4K, 32M, 1G)') from None
    if value < 1:
        raise argparse.ArgumentTypeError(f'{text!r}: a size is at least 1 byte')
    return value


def _at_least(lo):
    def parse(text):
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f'{text!r} is not an integer') from None
        if value < lo:
            raise argparse.ArgumentTypeError(f'{value} is below {lo}')
        return value
    return parse


def _positive_float(text):
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f'{text!r} is not a number') from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f'{text!r}: must be above 0')
    return value


def _list(text, choices, what):
    """A comma list of `choices` (or 'all'), checked: the tuple it names."""
    if text == 'all':
        return choices
    items = tuple(x for x in text.split(',') if x)
    bad = [x for x in items if x not in choices]
    if bad or not items:
        raise UsageError(f'unknown {what} {",".join(bad) or repr(text)} (choose from {", ".join(choices)}, or all)')
    return items


def parser(description):
    p = _Parser(prog=PROG, description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument('collective', nargs='?', default='allreduce',
                   help=f'one of {", ".join(COLLS)}, a comma list, or all (default allreduce)')
    p.add_argument('-b', '--minbytes', type=_size, default='8', help='smallest size (K/M/G suffixes), default 8')
    p.add_argument('-e', '--maxbytes', type=_size, default='32M', help='largest size, default 32M')
    p.add_argument('-f', '--stepfactor', type=_at_least(2), default=2, help='size multiplication factor, default 2')
    p.add_argument('-d', '--datatype', default='float32', help=f'{", ".join(TYPES)}, a comma list, or all')
    p.add_argument('-o', '--op', default='sum', help=f'{", ".join(OPS)}, a comma list, or all')
    p.add_argument('-r', '--root', type=_at_least(0), default=0,
                   help='root of bcast, reduce, gatherv, scatterv (a rank), default 0')
    p.add_argument('-n', '--iters', type=_at_least(1), default=20, help='timed iterations per row')
    p.add_argument('-w', '--warmup_iters', type=_at_least(0), default=5, help='warm-up iterations per row')
    p.add_argument('-c', '--check', type=int, choices=(0, 1), default=1, help='check results (1) or not (0)')
    p.add_argument('--mem', choices=('auto', 'host', 'device'), default='auto',
                   help='buffers on the GPU (device) or in host memory; auto: device where GPUs exist')
    p.add_argument('--algo', default=None, choices=ALGOS, help='force an engine algorithm (as MPIGPU_ALGO)')
    p.add_argument('--inplace', type=int, choices=(0, 1), default=1, help='also time in-place calls (1) or not (0)')
    p.add_argument('--compare', default='',
                   help='baselines in the same run: nccl, nccl-symm (NCCL\'s symmetric kernels on windows '
                        'registered with ncclCommWindowRegister, NCCL >= 2.27), staged, hand (staging by hand: '
                        'device buffers copied to host arrays around plain mpi4py\'s call, as on an MPI that '
                        'is not CUDA-aware), cuda-aware-mpi (device buffers); across '
                        '(simulated) nodes also nccl-socket (NCCL on sockets only: NCCL_P2P_DISABLE=1 '
                        'NCCL_SHM_DISABLE=1), nccl-nodes (NCCL with a host id per node: NVLink inside, '
                        'sockets between; one NCCL baseline per run) and net-bound (host MPI\'s own '
                        'collective of the bytes each GPU sends between nodes, NumPy buffers over the '
                        'rails); on host buffers plain mpi4py is always compared')
    p.add_argument('--timing', choices=('blocking', 'stream'), default='blocking',
                   help='blocking: each call returns with its result (MPI); stream: stream= calls launched '
                        'back to back, one synchronization per row (nccl-tests\' way)')
    p.add_argument('--rounds', type=_at_least(1), default=5,
                   help='blocking timing: mpigpu and the baselines (on host buffers, mpi4py) are timed in '
                        'this many alternating rounds of the row\'s iterations each, on the same buffers; '
                        'each shows its best round (default 5)')
    p.add_argument('--budget', type=_positive_float, default=2.0,
                   help='seconds at most per baseline row (fewer iterations)')
    p.add_argument('--calls', action='store_true',
                   help='blocking timing: also time each call alone, in a second pass, and print the median '
                        'and slowest call of every row (a comment line after it; in the JSON too)')
    p.add_argument('--json', default=None, help='write every row, the command line and the host here')
    p.add_argument('--plot', default=None, help='write busbw/time plots (PNG) here; needs matplotlib')
    return p


def parse(argv, description, baselines):
    """The checked arguments: sizes and lists parsed (a.colls, a.types, a.ops, a.names). `baselines`:
    the names --compare accepts. Raises UsageError; exits 0 after --help."""
    a = parser(description).parse_args(argv)
    if a.minbytes > a.maxbytes:
        raise UsageError(f'-b {a.minbytes} is above -e {a.maxbytes}')
    a.colls = _list(a.collective, COLLS, 'collective')
    a.types = _list(a.datatype, TYPES, 'datatype')
    a.ops = _list(a.op, OPS, 'op')
    a.names = _list(a.compare, tuple(baselines), 'baseline') if a.compare else ()
    # nccl and nccl-symm share NCCL's default environment; nccl-socket and nccl-nodes set their own
    ncclish = [x for x in a.names if x.startswith('nccl')]
    if len(ncclish) > 1 and not set(ncclish) <= _DEFAULT_ENV_NCCL:
        raise UsageError(f'--compare {",".join(ncclish)}: NCCL reads its environment once per process; '
                         'compare one NCCL baseline per run (nccl and nccl-symm may go together)')
    if a.plot:
        try:  # the import the plot will need, tried now rather than after the sweep
            import matplotlib  # noqa: F401
        except ImportError:
            raise UsageError('--plot needs matplotlib, which is not installed (pip install "mpigpu[perf]")') from None
    return a


def check_root(a, nranks):
    """-r names a rank of the job (checked once the job's size is known)."""
    if a.root >= nranks and any(c in ROOTED for c in a.colls):
        raise UsageError(f'-r {a.root}: the root must be a rank of the {nranks} (0..{nranks - 1})')
