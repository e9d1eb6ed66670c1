"""Collective setup of a communicator's device team: whether its ranks can form one (one node, GPUs
with peer access), the workspaces and their peer mappings, and the agreement of every rank on the
outcome. Called by the first device call on a communicator (mpigpu/_state/comm_state.py)."""
import logging

from .. import _cuda
from .._base import deadline as _deadline
from .._base.config import config
from .topology import node_comm

log = logging.getLogger('mpigpu')


def agree(comm, reason):
    """The first non-empty reason of any rank, on every rank."""
    reasons = _deadline.allgather(comm, reason)
    return next((r for r in reasons if r), '')


# The knobs every rank's workspace layout and protocols read alike: a rank addresses its peers' workspaces
# with its own layout, and both ends of an exchange pair count its channels (docs/tuning.md).
_SHARED_KNOBS = ('chunk_bytes', 'nslots', 'max_channels', 'll128_bytes', 'exchange_channel_bytes',
                 'exchange_ll_bytes', 'exchange_slots', 'exchange_rounds')


def _knobs():
    return tuple(getattr(config, k) for k in _SHARED_KNOBS)


def _why_not(comm, rank, n, dev, bus, buses, shared, knobs):
    """'' when these ranks can form a team, else why not (this rank's view)."""
    dm = _cuda.device
    for peer, theirs in enumerate(knobs):
        if theirs != knobs[0]:
            diff = ', '.join(f'{k}: {a} on rank 0, {b} on rank {peer}'
                             for k, a, b in zip(_SHARED_KNOBS, knobs[0], theirs) if a != b)
            return f'the ranks set the team knobs differently ({diff})'

    node = node_comm(comm)  # a simulated node under MPIGPU_SIMULATE_NODES
    try:
        local = node.Get_size() == n
    finally:
        node.Free()
    if config.algo == 'staged':
        return 'MPIGPU_ALGO=staged'
    if not local:
        return 'the ranks span several nodes (the engine is intra-node; the hierarchical path joins them)'
    if n > dm.MAX_RANKS:
        return f'{n} ranks; the engine holds at most {dm.MAX_RANKS} per team'
    if shared and not config.shared_gpu:
        return 'several ranks use one GPU (' + ', '.join(f'rank {i}: {b}' for i, b in enumerate(buses)) + ')'
    for peer, pbus in enumerate(buses):
        if peer == rank or pbus == bus:  # a rank sharing this GPU (MPIGPU_SHARED_GPU): no peer access
            continue
        ordinal = dm.device_by_pci_bus_id(pbus)
        if ordinal < 0:
            return f'GPU {pbus} of rank {peer} is not visible to rank {rank} (CUDA_VISIBLE_DEVICES)'
        if not dm.can_access_peer(dev, ordinal):
            return f'no peer access from GPU {bus} (rank {rank}) to GPU {pbus} (rank {peer})'
    return ''


def setup(comm, rank, n, dev):
    """Collective: every rank of `comm` takes part, and all agree on the outcome. It runs at a call
    whose ranks all brought device buffers and accepted their own arguments (mpigpu/_state/agree.py); a peer
    that never arrives ends it in _deadline.GaveUp after MPIGPU_TIMEOUT_S.
    Returns (team or None, reason ('' with a team), the team's control communicator or None)."""
    dm = _cuda.device
    bus = dm.pci_bus_id(dev)
    buses, knobs = zip(*_deadline.allgather(comm, (bus, _knobs())))
    shared = len(set(buses)) != n
    reason = agree(comm, _why_not(comm, rank, n, dev, bus, buses, shared, knobs))
    team = handle = None
    try:
        if not reason:
            try:
                team = _cuda.with_device(dev, dm.Team, rank, n, dev, config)
                handle = team.export_handle()
            except dm.DeviceError as exc:
                reason = f'rank {rank}: workspace setup failed: {exc}'
            reason = agree(comm, reason)
        if not reason:
            handles = _deadline.allgather(comm, handle)
            try:
                for peer, h in enumerate(handles):
                    team.open_peer(peer, h)
            except dm.DeviceError as exc:
                reason = f'rank {rank}: mapping a peer workspace failed: {exc}'
            reason = agree(comm, reason)
    except _deadline.GaveUp:
        if team is not None:
            team.close()
        raise
    if reason:
        if team is not None:
            team.close()
        log.debug('rank %d: device engine off on this communicator: %s', rank, reason)
        return None, reason, None
    log.debug('rank %d: device engine on (GPU %s, %d ranks%s, workspace %d MiB, resident kernel %s)',
              rank, bus, n, ', sharing GPUs: testing only' if shared else '', team.workspace_bytes >> 20,
              f'lingering {config.resident_us:g} us' if config.resident_us > 0 else 'off')
    return team, '', comm.Dup()  # collective, like the setup: every rank is here
