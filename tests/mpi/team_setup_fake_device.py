"""The device team's setup decisions on CPUs: a fake CUDA layer reports GPUs by PCI bus id and peer
access as each case needs, and a fake Team records what setup did with it. Checks that ranks on
one GPU stay off the engine unless MPIGPU_SHARED_GPU asks otherwise (then a rank needs peer access
only to the GPUs it does not share), and that all ranks agree. Run under mpiexec -n 1..4
(tests/test_mpi.py)."""
import types

from mpi4py import MPI

from fake_device import fake, install

install()
from mpigpu._state import team as _team  # noqa: E402
from mpigpu._base.config import config  # noqa: E402

comm = MPI.COMM_WORLD
rank, n = comm.Get_rank(), comm.Get_size()


class FakeTeam:
    """Records the ranks whose workspace handle setup gave it (every rank's, its own included: the C
    layer skips its own)."""

    def __init__(self, rank, nranks, device, config):
        self.rank, self.opened, self.workspace_bytes = rank, [], 1 << 20

    def export_handle(self):
        return b'%d' % self.rank

    def open_peer(self, peer, handle):
        assert handle == b'%d' % peer, (peer, handle)
        self.opened.append(peer)

    def close(self):
        pass


def setup(gpu_of_rank, peer_ok):
    """Sets up a team where rank r sits on GPU gpu_of_rank(r) (device ordinal = bus number) and
    peer_ok(a, b) says whether GPU a reaches GPU b; returns (team, reason) of this rank."""
    bus = lambda d: f'0000:{d:02x}:00.0'  # noqa: E731
    dev = types.SimpleNamespace(**vars(fake))
    dev.pci_bus_id = bus
    dev.device_by_pci_bus_id = lambda b: int(b.split(':')[1], 16)
    dev.can_access_peer = peer_ok
    dev.MAX_RANKS = 32
    dev.Team = FakeTeam
    install(dev)
    team, reason, control = _team.setup(comm, rank, n, gpu_of_rank(rank))
    if control is not None:
        control.Free()
    return team, reason


def check(label, ok, detail=''):
    assert ok, f'rank {rank}: {label}: {detail}'


everyone = lambda a, b: True  # noqa: E731

# Distinct GPUs with peer access: the engine, every peer's workspace opened.
team, reason = setup(lambda r: r, everyone)
check('distinct GPUs', team is not None and reason == '' and sorted(team.opened) == list(range(n)),
      reason)

# One rank lacks peer access to another GPU: every rank is off the engine, with that rank's reason.
if n >= 2:
    team, reason = setup(lambda r: r, lambda a, b: not (a == 1 and b == 0))
    check('no peer access', team is None and 'no peer access' in reason and '(rank 1)' in reason, reason)

# All ranks on GPU 0: off by default, with the bus ids in the reason...
config.shared_gpu = False
team, reason = setup(lambda r: 0, everyone)
if n >= 2:
    check('shared GPU off', team is None and 'several ranks use one GPU' in reason, reason)
else:
    check('one rank', team is not None and reason == '', reason)

# ...and a team with MPIGPU_SHARED_GPU, even where GPUs lack peer access to themselves (as CUDA says).
config.shared_gpu = True
team, reason = setup(lambda r: 0, lambda a, b: a != b)
check('shared GPU on', team is not None and reason == '' and sorted(team.opened) == list(range(n)), reason)

# Two GPUs, ranks alternating: shared GPUs need no peer access, distinct ones still do.
if n >= 3:
    team, reason = setup(lambda r: r % 2, lambda a, b: a != b)
    check('two GPUs shared', team is not None and reason == '', reason)
    team, reason = setup(lambda r: r % 2, lambda a, b: False)
    check('two GPUs without peer access', team is None and 'no peer access' in reason, reason)
config.shared_gpu = False

# A knob the workspace layout or the exchange reads set differently on one rank: no team on any rank,
# with the knob named (each rank would address its peers' workspaces with its own layout).
if n >= 2:
    saved = config.exchange_channel_bytes
    if rank == n - 1:
        config.exchange_channel_bytes = saved * 2
    team, reason = setup(lambda r: r, everyone)
    check('knobs differ', team is None and 'exchange_channel_bytes' in reason and f'rank {n - 1}' in reason, reason)
    config.exchange_channel_bytes = saved
    team, reason = setup(lambda r: r, everyone)
    check('knobs alike again', team is not None and reason == '', reason)

comm.Barrier()
if rank == 0:
    print(f'team setup decisions on {n} ranks: ok')
