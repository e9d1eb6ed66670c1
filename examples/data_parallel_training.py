"""Data-parallel training: gradient buckets all-reduced while the backward pass runs.

Every rank holds a replica of a small MLP and trains on its shard of each batch. As soon as the
backward pass has produced a layer's gradients, that bucket is all-reduced with a non-blocking
`Iallreduce` (in place), and the backward pass goes on with the layers below while it moves; the
optimizer step waits for all buckets (`Waitall`) and averages. At the end every rank's parameters are
compared with single-process training on the full batches (same initialization, same data).

    mpiexec -n 4 python examples/data_parallel_training.py           # PyTorch on the GPUs
    mpiexec -n 2 python examples/data_parallel_training.py --host    # NumPy on CPUs (any machine)

GPU form: PyTorch's `register_post_accumulate_grad_hook` starts each bucket's Iallreduce the moment
the gradient is final (each parameter's gradient is a bucket of its own). Host form: a hand-written
backward pass does the same, one bucket per layer. Rank 0 prints one line: steps, and the largest
difference from single-process training.
"""
import argparse

import numpy as np

import mpigpu
from mpigpu import MPI

cli = argparse.ArgumentParser(description='Data-parallel training of a small MLP (20 steps), gradients '
                              'all-reduced during the backward pass, checked against single-process training.')
cli.add_argument('--host', action='store_true', help='NumPy on CPUs even where GPUs and PyTorch exist')
args = cli.parse_args()

comm = mpigpu.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
SIZES = [64, 256, 256, 10]   # layer widths
BATCH, STEPS, LR = 32 * size, 20, 0.05


def batches(seed=1):
    """The same full batches on every rank (each takes its shard)."""
    rng = np.random.default_rng(seed)
    for _ in range(STEPS):
        x = rng.standard_normal((BATCH, SIZES[0])).astype(np.float32)
        y = rng.integers(0, SIZES[-1], BATCH)
        yield x, y


def init_params(seed=0):
    rng = np.random.default_rng(seed)
    return [[(rng.standard_normal((i, o)) / np.sqrt(i)).astype(np.float32), np.zeros(o, np.float32)]
            for i, o in zip(SIZES[:-1], SIZES[1:])]


# ---- host form: NumPy, hand-written backward ----------------------------------------------------
def numpy_step(params, x, y, on_bucket):
    acts = [x]
    for k, (w, b) in enumerate(params):
        z = acts[-1] @ w + b
        acts.append(np.maximum(z, 0) if k < len(params) - 1 else z)
    logits = acts[-1]
    p = np.exp(logits - logits.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    g = p
    g[np.arange(len(y)), y] -= 1
    g /= len(y)                                   # d(mean cross-entropy)/d(logits)
    grads = [None] * len(params)
    for k in range(len(params) - 1, -1, -1):      # backward, last layer first
        w, _ = params[k]
        bucket = np.concatenate([(acts[k].T @ g).ravel(), g.sum(0)])  # this layer's gradient bucket
        grads[k] = bucket
        on_bucket(bucket)                         # its all-reduce starts here ...
        if k:
            g = (g @ w.T) * (acts[k] > 0)         # ... while the layers below are differentiated
    return grads


def numpy_update(params, grads, scale):
    for (w, b), bucket in zip(params, grads):
        w -= LR * scale * bucket[:w.size].reshape(w.shape)
        b -= LR * scale * bucket[w.size:]


def train_numpy():
    params = init_params()
    lo, hi = rank * BATCH // size, (rank + 1) * BATCH // size
    for x, y in batches():
        reqs = []
        grads = numpy_step(params, x[lo:hi], y[lo:hi],
                           lambda bucket: reqs.append(comm.Iallreduce(MPI.IN_PLACE, bucket, MPI.SUM)))
        MPI.Request.Waitall(reqs)
        numpy_update(params, grads, 1.0 / size)
    ref = init_params()
    for x, y in batches():
        numpy_update(ref, numpy_step(ref, x, y, lambda bucket: None), 1.0)
    return max(float(np.abs(a - b).max()) for pa, pb in zip(params, ref) for a, b in zip(pa, pb))


# ---- GPU form: PyTorch autograd, a hook per parameter ---------------------------------------------
def train_torch(torch):
    dev = torch.device('cuda', rank % torch.cuda.device_count())
    torch.cuda.set_device(dev)

    def model():
        layers = []
        for k, (w, b) in enumerate(init_params()):
            lin = torch.nn.Linear(w.shape[0], w.shape[1])
            with torch.no_grad():
                lin.weight.copy_(torch.from_numpy(w.T.copy()))
                lin.bias.copy_(torch.from_numpy(b))
            layers += [lin] + ([torch.nn.ReLU()] if k < len(SIZES) - 2 else [])
        return torch.nn.Sequential(*layers).to(dev)

    net, ref = model(), model()
    reqs = []
    for p in net.parameters():  # the gradient of p is final here: start its all-reduce at once
        p.register_post_accumulate_grad_hook(
            lambda p: reqs.append(comm.Iallreduce(MPI.IN_PLACE, p.grad, MPI.SUM)))
    opt = torch.optim.SGD(net.parameters(), lr=LR)
    opt_ref = torch.optim.SGD(ref.parameters(), lr=LR)
    lo, hi = rank * BATCH // size, (rank + 1) * BATCH // size
    loss_fn = torch.nn.CrossEntropyLoss()
    for x, y in batches():
        x, y = torch.from_numpy(x).to(dev), torch.from_numpy(y).to(dev)
        opt.zero_grad(set_to_none=False)
        loss_fn(net(x[lo:hi]), y[lo:hi]).backward()
        MPI.Request.Waitall(reqs)
        reqs.clear()
        with torch.no_grad():
            for p in net.parameters():
                p.grad /= size
        opt.step()
        opt_ref.zero_grad()
        loss_fn(ref(x), y).backward()
        opt_ref.step()
    return max(float((a - b).detach().abs().max()) for a, b in zip(net.parameters(), ref.parameters()))


torch = None
if not args.host and mpigpu.gpu_available()[0]:
    try:
        import torch
    except ImportError:
        torch = None
diff = train_torch(torch) if torch is not None else train_numpy()
worst = comm.allreduce(diff, op=MPI.MAX)
assert worst < 1e-4, f'rank {rank}: parameters differ from single-process training by {worst}'
if rank == 0:
    where = 'PyTorch on GPUs' if torch is not None else 'NumPy on CPUs'
    print(f'data_parallel_training: {size} ranks, {where}, {STEPS} steps with gradients all-reduced during '
          f'backward: parameters match single-process training (max difference {worst:.1e})')
