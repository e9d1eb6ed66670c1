"""mpigpu-perf on host buffers (the README's main job on a machine without GPUs)."""
import json
import os
import subprocess
import sys

from conftest import mpiexec


def test_perf_host_table_and_json(tmp_path):
    out_json = tmp_path / 'perf.json'
    cmd = [mpiexec(), '-n', '2', sys.executable, '-m', 'mpigpu.perf', 'allreduce,bcast,allgather',
           '-b', '8', '-e', '4K', '-f', '8', '-n', '3', '-w', '1', '--mem', 'host', '--compare', 'nccl',
           '--json', str(out_json)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=dict(os.environ))
    assert proc.returncode == 0, proc.stderr[-4000:]
    text = proc.stdout
    assert '#wrong' in text and 'Out of bounds values : 0 OK' in text and 'Avg bus bandwidth' in text
    assert '# unavailable: nccl' in text  # a missing baseline is reported, other rows go on
    data = json.loads(out_json.read_text())
    assert data['nranks'] == 2 and data['mem'] == 'host'
    assert {r['coll'] for r in data['rows']} == {'allreduce', 'bcast', 'allgather'}
    assert all(r['oop']['wrong'] == 0 for r in data['rows'])
