"""Output of mpigpu-perf: nccl-tests' table (plus baseline and ratio columns), JSON and a plot."""
import json
import platform
import subprocess
import sys

# nccl-tests' names of the types it names otherwise; every other type shows as mpigpu names it.
_NAMES = {'float32': 'float', 'float64': 'double', 'float16': 'half'}


def header(baselines):
    extra_top = ''.join(f'{name:>28}' for name in baselines)
    extra = ''.join(f'{"time":>11}{"busbw":>8}{"x" + name[:7]:>9}' for name in baselines)
    extra_u = ''.join(f'{"(us)":>11}{"(GB/s)":>8}{"":>9}' for _ in baselines)
    return '\n'.join([
        f'#{"":>54}{"out-of-place":>33}{"in-place":>33}{extra_top}',
        f'#{"size":>11}{"count":>14}{"type":>10}{"redop":>8}{"root":>8}'
        f'{"time":>11}{"algbw":>8}{"busbw":>8}{"#wrong":>7}{"time":>11}{"algbw":>8}{"busbw":>8}{"#wrong":>7}{extra}',
        f'#{"(B)":>11}{"(elements)":>14}{"":>26}{"(us)":>11}{"(GB/s)":>8}{"(GB/s)":>8}{"":>7}'
        f'{"(us)":>11}{"(GB/s)":>8}{"(GB/s)":>8}{"":>7}{extra_u}',
    ])


def _cell(res):
    if res is None:
        return f'{"n/a":>11}{"":>8}{"":>8}{"":>7}'
    if 'error' in res:
        return f'{"err":>11}{"":>8}{"":>8}{"":>7}'
    wrong = res.get('wrong')
    return f' {res["time_us"]:>10.2f}{res["algbw"]:>8.2f}{res["busbw"]:>8.2f}{"N/A" if wrong is None else wrong:>7}'


def line(row, baselines):
    out = (f' {row["bytes"]:>11}{row["count"]:>14}{_NAMES.get(row["type"], row["type"]):>10}'
           f'{row["redop"]:>8}{row["root"]:>8}' + _cell(row['oop']) + _cell(row['ip']))
    mine = row['oop']
    for name in baselines:
        b = row['baselines'].get(name)
        if b is None or 'error' in b:
            out += f'{"unavail":>11}{"":>8}{"":>9}'
            continue
        ratio = b['time_us'] / mine['time_us'] if mine and 'time_us' in mine and mine['time_us'] > 0 else float('nan')
        out += f' {b["time_us"]:>10.2f}{b["busbw"]:>8.2f}{ratio:>8.2f}x'
    if row.get('form'):
        predicted = row.get('predicted_us')
        out += f'  [{row["form"]}' + (f', model {predicted:,.0f} us]' if predicted is not None else ']')
    return out


def calls_line(row, baselines):
    """The median and slowest single call of a row (--calls), out-of-place and each baseline."""
    cells = []
    for name, res in _timed(row, baselines):
        if res and 'slowest_us' in res:
            cells.append(f'{name} {res["median_us"]:.2f} / {res["slowest_us"]:.2f}')
    return '#   calls, median / slowest us: ' + ', '.join(cells)


# A garbage-collection pause this long in a row's timed calls moves a 20-call average by 5 us or more.
_GC_PAUSE_SHOWN_US = 100.0


def _timed(row, baselines):
    return [('mpigpu', row['oop'])] + [(b, row['baselines'].get(b)) for b in baselines]


def gc_pause_shows(row, baselines):
    """Whether a row's timed calls (any implementation, any rank) paused for a collection long enough
    to show in its average."""
    return any(res and res.get('gc_pause_us', 0.0) >= _GC_PAUSE_SHOWN_US for _, res in _timed(row, baselines))


def gc_line(row, baselines):
    """Python's garbage collections during each implementation's timed calls of a row (the slowest rank)."""
    cells = [f'{name} {res["gc_collections"]} ({res["gc_full"]} full) {res["gc_pause_us"]:.0f} us'
             for name, res in _timed(row, baselines) if res and 'gc_pause_us' in res]
    return '#   gc in the timed calls: ' + ', '.join(cells)


def footer(rows):
    wrong = sum((r['oop'] or {}).get('wrong') or 0 for r in rows) + sum((r['ip'] or {}).get('wrong') or 0 for r in rows)
    bws = [r['oop']['busbw'] for r in rows if r['oop'] and 'busbw' in r['oop']]
    avg = sum(bws) / len(bws) if bws else 0.0
    lines = [f'# Out of bounds values : {wrong} {"OK" if wrong == 0 else "FAILED"}',
             f'# Avg bus bandwidth    : {avg:.4g}', '#']
    notes = {f'{name}: {b["error"]}' for r in rows for name, b in r['baselines'].items() if b and 'error' in b}
    notes |= {f'mpigpu: {res["error"]}' for r in rows for res in (r['oop'], r['ip']) if res and 'error' in res}
    lines += [f'# unavailable: {n}' for n in sorted(notes)]
    return '\n'.join(lines), wrong


def host_info():
    info = {'python': sys.version.split()[0], 'platform': platform.platform()}
    try:
        import mpi4py
        from mpi4py import MPI
        info['mpi4py'] = mpi4py.__version__
        info['mpi'] = MPI.Get_library_version().splitlines()[0]
    except Exception:
        pass
    try:
        import cupy
        info['cupy'] = cupy.__version__
        n = cupy.cuda.runtime.getDeviceCount()
        info['gpus'] = [cupy.cuda.runtime.getDeviceProperties(i)['name'].decode() for i in range(n)]
        try:
            info['nccl'] = cupy.cuda.nccl.get_version()
        except Exception:
            pass
    except Exception:
        info['gpus'] = []
    try:
        info['link_matrix'] = subprocess.run(['nvidia-smi', 'topo', '-m'], capture_output=True, text=True,
                                             timeout=20).stdout
        info['driver'] = subprocess.run(['nvidia-smi', '--query-gpu=driver_version', '--format=csv,noheader'],
                                        capture_output=True, text=True, timeout=20).stdout.split('\n')[0]
    except Exception:
        pass
    return info


def write_json(path, argv, rows, nranks, mem):
    with open(path, 'w') as f:
        json.dump({'command': argv, 'nranks': nranks, 'mem': mem, 'host': host_info(), 'rows': rows}, f, indent=1)


def plot(path, rows, title):
    try:
        import matplotlib
        matplotlib.use('Agg')
        import matplotlib.pyplot as plt
    except ImportError:
        return 'matplotlib is not installed (pip install mpigpu[perf]); no plot written'
    colls = sorted({r['coll'] for r in rows})
    fig, axes = plt.subplots(2, len(colls), figsize=(5 * len(colls), 8), squeeze=False)
    for j, coll in enumerate(colls):
        sel = [r for r in rows if r['coll'] == coll]
        impls = {'mpigpu': [(r['bytes'], r['oop']) for r in sel]}
        for r in sel:
            for name, b in r['baselines'].items():
                impls.setdefault(name, []).append((r['bytes'], b))
        for name, pts in impls.items():
            pts = [(x, y) for x, y in pts if y and 'time_us' in y]
            if not pts:
                continue
            xs = [p[0] for p in pts]
            axes[0][j].plot(xs, [p[1]['busbw'] for p in pts], marker='o', label=name)
            axes[1][j].plot(xs, [p[1]['time_us'] for p in pts], marker='o', label=name)
        for i, ylabel in enumerate(('busbw (GB/s)', 'time (us)')):
            ax = axes[i][j]
            ax.set_xscale('log', base=2)
            ax.set_yscale('log')
            ax.set_xlabel('bytes')
            ax.set_ylabel(ylabel)
            ax.set_title(coll)
            ax.grid(True, which='both', alpha=0.3)
            ax.legend()
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return None
