"""Wide steps (select.cu, kMaxFusedSlots): call shapes whose channel spans take a chosen number of
FIFO slots, the span as the engine cuts it, and a burst of such calls on one stream. Shared by the
GPU checks (test_protocols.py) and the compute-sanitizer run (sanitize_kernels.py)."""
import cupy as cp

import mpigpu

# (collective, form) pairs that run a channel's whole span as one step over 2 .. MAX_SLOTS slots.
CASES = (('Allreduce', 'twoshot'), ('Allreduce', 'oneshot'), ('Reduce_scatter_block', 'oneshot'))
MAX_SLOTS = 4  # select.cu, kMaxFusedSlots


def step_bytes(slots):
    """The step mg_select asks for when a channel's span takes `slots` slots: one step over them
    from 2 to MAX_SLOTS (and at most half the FIFO), else one slot."""
    slot = mpigpu.config.chunk_bytes
    return slots * slot if 2 <= slots <= min(MAX_SLOTS, mpigpu.config.nslots // 2) else slot


def _ceil_div(a, b):
    return -(-a // b)


def span_bytes(n, coll, algo, itemsize, count, nchannels=2):
    """Bytes of one channel's span as collectives.cu cuts it: the two-shot Allreduce's shard of whole
    16-byte vectors (cut_into_shards), the others' whole count per owner, divided among the channels
    in whole vectors (cut_into_steps)."""
    v = 16 // itemsize
    shard = count
    if coll == 'Allreduce' and algo == 'twoshot':
        shard = _ceil_div(_ceil_div(count, n), v) * v
    return _ceil_div(_ceil_div(shard, nchannels), v) * v * itemsize


def fused_counts(n, coll, algo, itemsize, slots, nchannels=2):
    """An odd count whose span per channel takes `slots` FIFO slots, just under that many slot bytes:
    the two-shot Allreduce divides the message among n owners, the one-shot Allreduce and
    Reduce_scatter_block (count per owner) do not."""
    per_owner = nchannels * (slots * mpigpu.config.chunk_bytes - 48)
    count = per_owner * (n if (coll == 'Allreduce' and algo == 'twoshot') else 1) // itemsize
    return count - 1 if count % 2 == 0 else count


def burst(comm, stream, slot_counts):
    """Runs CASES in turn on `stream` with no host synchronization between the calls, the i-th
    float32 call with spans of slot_counts[i] slots (2 channels must be configured), so that steps
    of different widths follow each other on the same FIFOs (a call whose wide step would wrap past
    the FIFO's end starts at its next turn). Returns (name, count, output, expected) for each call,
    to read after the stream is synchronized."""
    n, r = comm.Get_size(), comm.Get_rank()
    total = n * (n + 1) // 2
    pending = []
    with stream:
        for i, slots in enumerate(slot_counts):
            coll, algo = CASES[i % len(CASES)]
            mpigpu.config.algo = algo
            c = fused_counts(n, coll, algo, 4, slots)
            rs = coll == 'Reduce_scatter_block'  # input: n blocks of c, output: block r of the sum
            src = cp.arange(c * n if rs else c, dtype=cp.float32) % 89
            y = cp.full(c, -1, cp.float32)
            getattr(comm, coll)(src * (r + 1), y, stream=stream)
            pending.append((f'{coll} {algo}', c, y, (src[r * c:(r + 1) * c] if rs else src) * total))
    mpigpu.config.algo = 'auto'
    return pending
