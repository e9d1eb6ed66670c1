"""The hierarchical path's cost model as tables (docs/scaling.md): predicted time and busbw of each form
across 2-1024 nodes, and for one setup of nodes and network.

    python -m mpigpu.perf.model                       # docs/scaling.md's tables
    python -m mpigpu.perf.model --nodes 2 --gpus 2 --latency-us 30 --gbps 3   # one setup, every size
"""
import argparse

from .._base.codes import Coll
from .._paths.hier import model as hier_model
from .sweep import bus_factor

NODES = (2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)
SIZES = (64 << 10, 1 << 20, 64 << 20, 1 << 30)
COLLS = (Coll.ALLREDUCE, Coll.BCAST, Coll.REDUCE_SCATTER_BLOCK, Coll.ALLGATHER, Coll.REDUCE)


def _size(b):
    for unit, k in (('G', 30), ('M', 20), ('K', 10)):
        if b >= 1 << k:
            return f'{b >> k} {unit}'
    return f'{b} B'


def _flat(coll, nbytes, nodes, per_node, latency_us, gbps):
    """For the tables: one ring over every GPU, each ring step as slow as the network's (seconds)."""
    p = nodes * per_node
    a, b = latency_us * 1e-6, gbps * 1e9
    if coll in (Coll.ALLREDUCE, Coll.REDUCE):  # (a Reduce as a ring reduce-scatter and gather)
        return 2 * (p - 1) * a + 2 * (p - 1) / p * nbytes / b
    if coll == Coll.BCAST:
        return (p - 1) * a + nbytes / b
    return (p - 1) * a + (p - 1) * nbytes / b  # Reduce_scatter_block / Allgather: nbytes per rank


def _tree(coll, nbytes, nodes, per_node, latency_us, gbps):
    """For the tables: a pipelined binomial tree among the leaders (node reduce, reduce up the tree and
    broadcast down it, node bcast), which mpigpu does not implement: 2 log2(nodes) latency terms, the
    whole message through one GPU's network path twice (seconds; Allreduce and Bcast)."""
    a, b = latency_us * 1e-6, gbps * 1e9
    node = 2 * (hier_model.NODE_US * 1e-6 + nbytes / (hier_model.NVLINK_GBPS * 1e9))
    trips = 2 if coll == Coll.ALLREDUCE else 1
    return node + trips * (hier_model.lg(nodes) * a + nbytes / b)


def row(coll, nbytes, nodes, gpus, latency_us, gbps, gbps_both=0.0, agree_us=0.0):
    """{form: (us, busbw GB/s)} and the chosen form; nbytes is the whole buffer as mpigpu-perf counts it
    (Reduce_scatter_block and Allgather: all ranks' blocks); gbps_both: each way of an exchange (0: gbps);
    agree_us: the agreement across nodes per call (mpigpu's forms only: flat and tree stand for another
    library's)."""
    p = nodes * gpus
    per_rank = nbytes // p if coll in (Coll.REDUCE_SCATTER_BLOCK, Coll.ALLGATHER) else nbytes
    shape = hier_model.Shape((gpus,) * nodes, True, ('engine',) * nodes, False, latency_us, gbps,
                             gbps_both=gbps_both, agree_us=agree_us)
    forms = {f: t for f, (t, _c) in hier_model.predict(coll, per_rank, shape).items()}
    forms['flat'] = _flat(coll, per_rank, nodes, gpus, latency_us, gbps)
    if coll in (Coll.ALLREDUCE, Coll.BCAST):
        forms['tree'] = _tree(coll, per_rank, nodes, gpus, latency_us, gbps)
    factor = bus_factor(Coll(coll).name.lower(), p)
    out = {f: (t * 1e6, nbytes / t / 1e9 * factor) for f, t in forms.items()}
    return out, hier_model.choose(coll, per_rank, shape)[0]


def scaling_table(coll, gpus, latency_us, gbps, sizes=SIZES, nodes=NODES):
    """Markdown: rows of node counts, per size the chosen form's time and busbw (and flat's busbw)."""
    head = '| nodes | ' + ' | '.join(f'{_size(s)}: form, us, busbw (flat busbw)' for s in sizes) + ' |'
    lines = [head, '|' + '---|' * (len(sizes) + 1)]
    for n in nodes:
        cells = []
        for s in sizes:
            forms, chosen = row(coll, s, n, gpus, latency_us, gbps)
            t, bw = forms[chosen]
            cells.append(f'{chosen} {t:,.0f} us {bw:.1f} ({forms["flat"][1]:.1f})')
        lines.append(f'| {n} | ' + ' | '.join(cells) + ' |')
    return '\n'.join(lines)


def forms_table(coll, gpus, latency_us, gbps, nbytes, nodes=NODES):
    """Markdown: every form's time at one size, by node count."""
    lines = ['| nodes | rail us | leader us | flat us | tree us (not implemented) | chosen |',
             '|---|---|---|---|---|---|']
    for n in nodes:
        forms, chosen = row(coll, nbytes, n, gpus, latency_us, gbps)
        cell = lambda f: f'{forms[f][0]:,.0f}' if f in forms else '-'  # noqa: E731
        lines.append(f'| {n} | {cell("rail")} | {cell("leader")} | {cell("flat")} | {cell("tree")} | {chosen} |')
    return '\n'.join(lines)


def setup_table(nodes, gpus, latency_us, gbps, sizes, gbps_both=0.0, agree_us=0.0):
    lines = ['| collective | bytes | rail us | leader us | chosen | predicted busbw GB/s |', '|---|---|---|---|---|---|']
    for coll in COLLS:
        for s in sizes:
            forms, chosen = row(coll, s, nodes, gpus, latency_us, gbps, gbps_both, agree_us)
            cell = lambda f: f'{forms[f][0]:,.0f}' if f in forms else '-'  # noqa: E731
            lines.append(f'| {Coll(coll).mpi_name} | {_size(s)} | {cell("rail")} | {cell("leader")} | {chosen} | '
                         f'{forms[chosen][1]:.2f} |')
    return '\n'.join(lines)


def main(argv=None):
    p = argparse.ArgumentParser(prog='python -m mpigpu.perf.model', description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument('--nodes', type=int, help='one setup: this many nodes (with --gpus)')
    p.add_argument('--gpus', type=int, default=4, help='GPUs per node')
    p.add_argument('--latency-us', type=float, default=5.0, help='network latency, us')
    p.add_argument('--gbps', type=float, default=25.0, help='network bandwidth per GPU, GB/s')
    p.add_argument('--gbps-both', type=float, default=0.0,
                   help='each way while a GPU sends and receives at once, GB/s (0: --gbps; engine_status() '
                        'reports what the setup measured)')
    p.add_argument('--agree-us', type=float, default=0.0,
                   help="the agreement across nodes per call, us (one setup; engine_status() reports the setup's)")
    a = p.parse_args(argv)
    if a.nodes:
        sizes = [1 << k for k in range(10, 31, 2)]
        print(setup_table(a.nodes, a.gpus, a.latency_us, a.gbps, sizes, a.gbps_both, a.agree_us))
        return 0
    for gbps in (25.0, 50.0):
        for gpus in (4, 8):
            for coll in (Coll.ALLREDUCE, Coll.BCAST):
                print(f'\n### {Coll(coll).mpi_name}, {gpus} GPUs per node, {gbps:g} GB/s per GPU, '
                      f'{a.latency_us:g} us\n')
                print(scaling_table(coll, gpus, a.latency_us, gbps))
    for coll, nbytes in ((Coll.ALLREDUCE, 64 << 10), (Coll.ALLREDUCE, 1 << 30), (Coll.BCAST, 1 << 20)):
        print(f'\n### Every form: {Coll(coll).mpi_name} of {_size(nbytes)}, 8 GPUs per node, 25 GB/s, '
              f'{a.latency_us:g} us\n')
        print(forms_table(coll, 8, a.latency_us, 25.0, nbytes))
    for coll in (Coll.REDUCE_SCATTER_BLOCK, Coll.ALLGATHER, Coll.REDUCE):
        print(f'\n### {Coll(coll).mpi_name}, 8 GPUs per node, 25 GB/s per GPU, {a.latency_us:g} us\n')
        print(scaling_table(coll, 8, a.latency_us, 25.0, sizes=(1 << 20, 1 << 30), nodes=(2, 16, 128, 1024)))
    return 0


if __name__ == '__main__':
    raise SystemExit(main())
