"""Every environment knob of mpigpu, read once, here. docs/tuning.md documents each one."""
import logging
import os

from .codes import Algo

# MPIGPU_ALGO: the engine's algorithms by knob name, and the paths a call can be sent down instead:
# 'staged' (host MPI for the whole buffer), 'hier' (across nodes: the hierarchical path, the cost model
# choosing its form), 'hier-rail' and 'hier-leader' (that path with its form forced, docs/tuning.md).
HIER_PATHS = ('hier', 'hier-rail', 'hier-leader')
PATHS = ('staged',) + HIER_PATHS
ALGOS = tuple(a.knob for a in Algo) + PATHS


def _int(name, default, lo, hi):
    raw = os.environ.get(name)
    if raw is None or raw.strip() == '':
        return default
    try:
        value = int(raw, 0)
    except ValueError:
        raise ValueError(f'{name}={raw!r}: expected an integer') from None
    if not lo <= value <= hi:
        raise ValueError(f'{name}={value}: expected {lo}..{hi}')
    return value


def _float(name, default, lo, hi):
    raw = os.environ.get(name)
    if raw is None or raw.strip() == '':
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(f'{name}={raw!r}: expected a number') from None
    if not lo <= value <= hi:
        raise ValueError(f'{name}={value}: expected {lo}..{hi}')
    return value


def _choice(name, default, choices):
    raw = os.environ.get(name, default).strip().lower() or default
    for canonical, spellings in choices.items():
        if raw in spellings:
            return canonical
    raise ValueError(f'{name}={raw!r}: expected one of {", ".join(s[0] for s in choices.values())}')


def _flag(name):
    return _choice(name, '0', {'1': ('1', 'yes', 'true', 'on'), '0': ('0', 'no', 'false', 'off')}) == '1'


def _launcher_local():
    for rank, size in (('MPI_LOCALRANKID', 'MPI_LOCALNRANKS'),
                       ('OMPI_COMM_WORLD_LOCAL_RANK', 'OMPI_COMM_WORLD_LOCAL_SIZE')):
        try:
            r, n = int(os.environ[rank]), int(os.environ[size])
        except (KeyError, ValueError):
            continue
        if 0 <= r < n:
            return r, n
    return None


class Config:
    """Snapshot of the knobs; `mpigpu.config` is the one the library uses."""

    def __init__(self):
        algo = os.environ.get('MPIGPU_ALGO', 'auto').strip().lower() or 'auto'
        if algo not in ALGOS:
            raise ValueError(f'MPIGPU_ALGO={algo!r}: expected one of {", ".join(ALGOS)}')
        self.algo = algo
        # FIFO slot size = pipeline chunk of the device engine, and FIFO depth.
        self.chunk_bytes = _int('MPIGPU_CHUNK_BYTES', 32 * 1024, 4096, 64 << 20) // 16 * 16
        self.nslots = _int('MPIGPU_NSLOTS', 8, 2, 64)
        # Channels per collective (0: cost model) and the most the workspace is laid out for.
        self.nchannels = _int('MPIGPU_NCHANNELS', 0, 0, 128)
        self.max_channels = max(_int('MPIGPU_MAX_CHANNELS', 128, 1, 128), self.nchannels)
        self.timeout_s = _float('MPIGPU_TIMEOUT_S', 600.0, 0.001, 1e7)
        # A wait on host MPI (the per-call agreement across nodes, setups): after 1 ms of polling, the
        # longest sleep between polls, us (the request advances only while polled).
        self.poll_sleep_us = _float('MPIGPU_POLL_SLEEP_US', 50.0, 0.0, 1e6)
        # Direct kernel: from this many pipeline steps per channel, its stages run on separate warps.
        self.split_steps = _int('MPIGPU_SPLIT_STEPS', 4, 0, 1 << 30)
        # Largest per-peer piece of the 128-byte-line protocol; sizes its areas in the workspace.
        self.ll128_bytes = _int('MPIGPU_LL128_BYTES', 2 << 20, 0, 1 << 30)
        # Blocking LL and LL128 calls: the longest gap between calls that keeps the resident kernel
        # running for the next one (0: launch each).
        self.resident_us = _float('MPIGPU_RESIDENT_US', 25.0, 0.0, 1e6)
        # Its blocks, and the largest LL128 message it runs (LL calls run there at any size; 0: LL only).
        self.resident_blocks = _int('MPIGPU_RESIDENT_BLOCKS', 64, 1, 128)
        self.resident_max_bytes = _int('MPIGPU_RESIDENT_MAX_BYTES', 2 << 20, 0, 1 << 31)
        # A one-rank team's largest copy that runs in its resident kernel (larger ones are launched).
        self.resident_copy_max_bytes = _int('MPIGPU_RESIDENT_COPY_MAX_BYTES', 64 << 20, 0, 1 << 31)
        # Staged path: chunk of the host pipeline.
        self.stage_chunk_bytes = _int('MPIGPU_STAGE_CHUNK_BYTES', 4 << 20, 4096, 1 << 30)
        # Point-to-point: messages from this size up go GPU to GPU over the peer mappings.
        self.p2p_ipc_bytes = _int('MPIGPU_P2P_IPC_BYTES', 64 * 1024, 128, 1 << 62)
        # The all-to-all family (Alltoall(v/w), Allgatherv, Gather(v), Scatter(v), the neighbourhood
        # collectives) GPU to GPU over the device team's exchange transport (1, the default), or on
        # host mirrors (0). Set alike on every rank: it decides whether their calls are agreed on the
        # placement board.
        self.exchange = _choice('MPIGPU_EXCHANGE', '1', {
            '1': ('1', 'yes', 'true', 'on'), '0': ('0', 'no', 'false', 'off')}) == '1'
        # The exchange: a rank whose call moves fewer bytes (sent and received) votes for the host MPI
        # call instead. 0: since the fast path (mpigpu/_ext/_exchange.pxi) the transport is the faster
        # at every size (1 KB: 21 us against 136 on the mirrors, 2 H100s; docs/benchmarks.md).
        self.exchange_min_bytes = _int('MPIGPU_EXCHANGE_MIN_BYTES', 0, 0, 1 << 62)
        # The exchange: a pair's bytes per channel before it takes another (at most 128 channels); the same
        # on every rank, fixed when a communicator's team is set up.
        self.exchange_channel_bytes = _int('MPIGPU_EXCHANGE_CHANNEL_BYTES', 16 * 1024, 4096, 1 << 40)
        # The exchange: pairs of at most this many bytes move in the low-latency format (flags in the data,
        # no counter round trip), up to MG_EXCHANGE_LL_MAX_BYTES (16 KiB, the areas' size); 0: every pair
        # through the FIFO. The same on every rank, fixed when a communicator's team is set up.
        self.exchange_ll_bytes = _int('MPIGPU_EXCHANGE_LL_BYTES', 16 * 1024, 0, 16 * 1024)
        # The exchange's receivers in a launched kernel (mg_exchange_drain): one peer's share after another
        # ('rounds'), in arrival order, or 'auto' (arrival order where a rank only receives, shares of 2+
        # steps). A rank's own choice: no sender waits on the order.
        self.exchange_drain = _choice('MPIGPU_EXCHANGE_DRAIN', 'auto', {
            'auto': ('auto',), 'arrival': ('arrival',), 'rounds': ('rounds',)})
        # Which end of an exchange connection holds its FIFO slots (mg_exchange_slots): the receiver, the
        # sender, or 'auto' (by the call: the sender for Scatter(v) and the neighbourhood collectives). The
        # same on every rank (a team knob).
        self.exchange_slots = _choice('MPIGPU_EXCHANGE_SLOTS', 'auto', {
            'auto': ('auto',), 'receiver': ('receiver',), 'sender': ('sender',)})
        # The exchange channels' round order (mg_exchange_rounds): 'staggered' (each channel starts at
        # another peer, so a rank sends to all its peers at once) or 'aligned' (every channel in the same
        # order). The same on every rank (a team knob).
        self.exchange_rounds = _choice('MPIGPU_EXCHANGE_ROUNDS', 'staggered', {
            'staggered': ('staggered',), 'aligned': ('aligned',)})
        # CUDA-aware MPI: 'auto' asks the library (MPIX_Query_cuda_support), '1'/'0' force it.
        self.mpi_cuda_aware = _choice('MPIGPU_MPI_CUDA_AWARE', 'auto', {
            'auto': ('auto',), '1': ('1', 'yes', 'true', 'on'), '0': ('0', 'no', 'false', 'off')})
        # The MPI interposer (mpigpu/_interpose): loaded for the whole process at `import mpigpu`, before
        # mpi4py loads the MPI library: 'auto' when running as `python -m mpigpu`, '1' always, '0' never.
        self.pmpi = _choice('MPIGPU_PMPI', 'auto', {
            'auto': ('auto',), '1': ('1', 'yes', 'true', 'on'), '0': ('0', 'no', 'false', 'off')})
        # Testing: ranks that share a GPU still form a device team (time-sliced; docs/tuning.md).
        self.shared_gpu = _flag('MPIGPU_SHARED_GPU')
        # Testing: each host's ranks of a communicator cut into this many simulated nodes of consecutive
        # ranks (0 or 1: off); no device team spans two of them, and their traffic goes through host MPI.
        self.simulate_nodes = _int('MPIGPU_SIMULATE_NODES', 0, 0, 1 << 20)
        # This process's place among its host's processes of the job, as the launcher says (MPICH's
        # Hydra, Open MPI): the simulated nodes are then cut from the job's processes, so that every
        # communicator sees the same nodes; None: each communicator's ranks on a host are cut.
        self.launcher_local = _launcher_local()
        # Hierarchical path: the network's latency (us) and bandwidth per GPU (GB/s) for its cost model;
        # 0: measured once per communicator at setup, on the leaders' communicator.
        self.net_latency_us = _float('MPIGPU_NET_LATENCY_US', 0.0, 0.0, 1e7)
        self.net_gbps = _float('MPIGPU_NET_GBPS', 0.0, 0.0, 1e6)
        # Hierarchical path: the transport of its network phases. 'auto': NCCL where every rank of the
        # communicator loads it (device memory to device memory), else host MPI ('mpi': host MPI always,
        # through pinned memory or, where it is CUDA-aware, from device memory; 'nccl': NCCL or an error).
        self.net = _choice('MPIGPU_NET', 'auto', {'auto': ('auto',), 'nccl': ('nccl',), 'mpi': ('mpi',)})
        # The NCCL library to load for it (a path or a name for the loader); empty: the nvidia-nccl
        # wheel's copy, else the loader's search (mpigpu/_transports/nccl.py).
        self.nccl_lib = os.environ.get('MPIGPU_NCCL_LIB', '').strip()
        # Hierarchical path: bytes of one pipeline chunk per rank (0: the cost model chooses).
        self.hier_chunk_bytes = _int('MPIGPU_HIER_CHUNK_BYTES', 0, 0, 1 << 34)
        # Hierarchical path over a transport of device memory: a call that repeats (same shape, same
        # buffers) recorded once as a CUDA graph and replayed (1, the default), or always issued (0).
        self.hier_graphs = _choice('MPIGPU_HIER_GRAPHS', '1', {'1': ('1', 'yes', 'true', 'on'),
                                                               '0': ('0', 'no', 'false', 'off')}) == '1'
        # Device arrays that are not contiguous, passed as a bare buffer: read through their strides
        # (1), or refused with BufferError as mpi4py refuses them (0, the default: MPI's semantics).
        self.strided_arrays = _flag('MPIGPU_STRIDED_ARRAYS')
        # Debug log of engine decisions (why a call is staged) on the 'mpigpu' logger.
        self.debug = _flag('MPIGPU_DEBUG')


config = Config()

# MPIGPU_DEBUG: the 'mpigpu' logger says why calls are staged, on stderr.
if config.debug:
    _log = logging.getLogger('mpigpu')
    if not _log.handlers:
        _handler = logging.StreamHandler()
        _handler.setFormatter(logging.Formatter('mpigpu: %(message)s'))
        _log.addHandler(_handler)
        _log.setLevel(logging.DEBUG)
