"""The hierarchical path across (simulated) nodes on CPUs: the composition under mpiexec with the fake CUDA
layer (tests/mpi/hier_fake_device.py), the cut into simulated nodes, the cost model's choices and the
knobs."""
import subprocess
import sys

import pytest

from conftest import mpiexec, run_ranks
from mpigpu._base import config as _config
from mpigpu._base.codes import ENGINE_COLLS, Coll
from mpigpu._paths.hier import model as hier_model
from mpigpu._state.topology import simulated_node


@pytest.mark.parametrize('n,k,sizes', [(2, 2, '1+1'), (3, 2, '2+1'), (4, 2, '2+2'), (5, 2, '3+2'), (4, 3, '2+1+1'),
                                       (6, 3, '2+2+2')])
def test_simulated_nodes(n, k, sizes):
    out = run_ranks(n, 'hier_fake_device.py', env={'MPIGPU_SIMULATE_NODES': str(k)})
    assert f'as {k} simulated nodes ({sizes}), network: nccl: ' in out and 'checks ok' in out


@pytest.mark.parametrize('n,k,sizes', [(4, 2, '2+2'), (5, 2, '3+2'), (6, 3, '2+2+2')])
def test_simulated_nodes_over_host_mpi(n, k, sizes):
    """The fallback where a rank has no NCCL: the network phases through host MPI and pinned memory."""
    out = run_ranks(n, 'hier_fake_device.py', env={'MPIGPU_SIMULATE_NODES': str(k), 'MPIGPU_NET': 'mpi',
                                                    'HIER_SWEEP': 'short'})
    assert f'as {k} simulated nodes ({sizes}), network: mpi: ' in out and 'checks ok' in out


def test_without_thread_multiple_calls_complete_before_returning():
    out = run_ranks(4, 'hier_fake_device.py', env={'MPIGPU_SIMULATE_NODES': '2', 'MPI4PY_RC_THREAD_LEVEL': 'single',
                                                   'HIER_SWEEP': 'short'})
    assert 'as 2 simulated nodes (2+2), network: nccl: ' in out and 'checks ok' in out


@pytest.mark.parametrize('size,k,nodes', [(5, 2, [0, 0, 0, 1, 1]), (6, 3, [0, 0, 1, 1, 2, 2]),
                                          (4, 3, [0, 0, 1, 2]), (7, 3, [0, 0, 0, 1, 1, 2, 2]), (3, 5, [0, 1, 2]),
                                          (4, 1, [0, 0, 0, 0])])
def test_simulated_node_cut(size, k, nodes):
    assert [simulated_node(r, size, k) for r in range(size)] == nodes


def _shape(sizes, kinds='engine', gbps=25.0, latency=5.0, consecutive=True):
    return hier_model.Shape(tuple(sizes), consecutive, (kinds,) * len(sizes), False, latency, gbps)


def test_model_prefers_rails_for_large_messages_and_leaders_for_small():
    s = _shape([4, 4])
    for coll in (Coll.ALLREDUCE, Coll.BCAST, Coll.REDUCE):
        assert hier_model.choose(coll, 1 << 30, s)[0] == 'rail', coll
        assert hier_model.choose(coll, 8, s)[0] == 'leader', coll


def test_model_uneven_nodes_take_the_leader_form_and_forcing_cannot_change_that():
    s = _shape([3, 2])
    for coll in ENGINE_COLLS:
        assert hier_model.choose(coll, 1 << 26, s, forced='rail')[0] == 'leader', coll


def test_model_pipelines_large_messages_and_honours_the_chunk_knob():
    s = _shape([4, 4])
    form, chunks = hier_model.choose(Coll.ALLREDUCE, 1 << 30, s)
    assert chunks > 1
    assert hier_model.choose(Coll.ALLREDUCE, 1 << 20, s, forced='rail', chunk_bytes=1 << 16) == ('rail', 4)


def test_model_predictions_grow_with_nodes_and_bytes():
    for coll in ENGINE_COLLS:
        small = hier_model.predict(coll, 1 << 20, _shape([8] * 2))
        large = hier_model.predict(coll, 1 << 20, _shape([8] * 64))
        more = hier_model.predict(coll, 1 << 24, _shape([8] * 2))
        for form in small:
            assert large[form][0] > small[form][0] and more[form][0] > small[form][0], (coll, form)


def test_knobs(monkeypatch):
    for k in ('MPIGPU_SIMULATE_NODES', 'MPIGPU_NET_LATENCY_US', 'MPIGPU_NET_GBPS', 'MPIGPU_HIER_CHUNK_BYTES'):
        monkeypatch.delenv(k, raising=False)
    c = _config.Config()
    assert c.simulate_nodes == 0 and c.net_latency_us == 0 and c.net_gbps == 0 and c.hier_chunk_bytes == 0
    monkeypatch.setenv('MPIGPU_SIMULATE_NODES', '3')
    monkeypatch.setenv('MPIGPU_NET_GBPS', '25')
    monkeypatch.setenv('MPIGPU_ALGO', 'hier-leader')
    c = _config.Config()
    assert c.simulate_nodes == 3 and c.net_gbps == 25.0 and c.algo == 'hier-leader'
    monkeypatch.setenv('MPIGPU_SIMULATE_NODES', 'two')
    with pytest.raises(ValueError, match='MPIGPU_SIMULATE_NODES'):
        _config.Config()


def test_nccl_unique_id_keeps_its_zero_bytes():
    """The id NCCL's ranks meet by travels whole (a ctypes char array would stop at its first zero byte)."""
    from mpigpu._transports.nccl import _UNIQUE_ID_BYTES, _UniqueId
    raw = bytes([7, 0, 0, 9] + [0] * 60 + [255] * (_UNIQUE_ID_BYTES - 64))
    uid = _UniqueId.from_buffer_copy(raw)
    assert bytes(uid) == raw and len(bytes(uid)) == _UNIQUE_ID_BYTES


def test_nccl_setup_watch_stops_waiting():
    """A NCCL setup that never returns does not hold the rank: the watch gives up after its time, and
    returns at once for a setup that finished."""
    import threading

    from mpi4py import MPI

    from mpigpu._transports.nccl import Library
    stop = threading.Event()
    slow = threading.Thread(target=stop.wait, daemon=True)
    slow.start()
    try:
        assert 'not done within' in Library._watch(slow, MPI.COMM_SELF, 0.05, set())
    finally:
        stop.set()
    slow.join()
    assert Library._watch(slow, MPI.COMM_SELF, 0.05, set()) == ''


def test_model_of_a_device_transport_has_no_staging_copies():
    """Over a transport of device memory (NCCL) the model counts no copy through pinned memory, so a
    large rail Allreduce is predicted faster than the same network staged through the host."""
    staged, device = _shape([2, 2]), hier_model.Shape((2, 2), True, ('engine',) * 2, False, 5.0, 25.0, True)
    for coll in (Coll.ALLREDUCE, Coll.BCAST, Coll.REDUCE):
        assert hier_model.predict(coll, 1 << 28, device)['rail'][0] < hier_model.predict(coll, 1 << 28, staged)['rail'][0]


def test_network_figures_come_from_the_transport_given():
    """measure_network takes the round trips and exchanges of the transport the phases use (here a
    stand-in: 10 us for 8 bytes, 10 us + 1 MiB at 1 GB/s for 1 MiB one way; an exchange of 1 MiB each way
    at once at half that rate) and derives latency and both bandwidths; the two-way figure prices the
    phases that send and receive at once, not a broadcast's."""
    from mpi4py import MPI

    from mpigpu._state.topology import measure_network

    def trips(peer, nbytes, rounds, first):
        return 2 * (10e-6 + (nbytes / 1e9 if nbytes > 8 else 0.0))

    def swaps(peer, nbytes, rounds):
        return 10e-6 + nbytes / 0.5e9
    lat, gbps, both = measure_network(MPI.COMM_SELF, MPI.COMM_SELF, 0, trips, swaps)
    assert abs(lat - 10.0) < 1e-6 and abs(gbps - 1.0) < 1e-6 and abs(both - 0.5) < 1e-6
    one_way = _shape([2, 2], latency=lat, gbps=gbps)
    two_way = hier_model.Shape(one_way.sizes, True, one_way.kinds, False, lat, gbps, gbps_both=both)
    for coll in (Coll.ALLREDUCE, Coll.ALLGATHER, Coll.REDUCE_SCATTER_BLOCK):
        assert hier_model.predict(coll, 1 << 26, two_way)['rail'][0] > hier_model.predict(coll, 1 << 26, one_way)['rail'][0]
    assert hier_model.predict(Coll.BCAST, 1 << 26, two_way) == hier_model.predict(Coll.BCAST, 1 << 26, one_way)


def test_model_counts_the_agreement_of_every_call_and_chooses_without_it():
    """The agreement across nodes (measured at setup) costs every form of a call the same: each
    prediction grows by it, and the choice of form is the one made without it."""
    plain = _shape([4, 4])
    agreed = hier_model.Shape(plain.sizes, True, plain.kinds, False, plain.latency_us, plain.gbps, agree_us=40.0)
    for coll in ENGINE_COLLS:
        for nbytes in (8, 1 << 16, 1 << 24, 1 << 30):
            without, with_ = hier_model.predict(coll, nbytes, plain), hier_model.predict(coll, nbytes, agreed)
            assert without.keys() == with_.keys()
            for form in without:
                assert abs(with_[form][0] - without[form][0] - 40e-6) < 1e-12 and with_[form][1] == without[form][1]
            assert hier_model.choose(coll, nbytes, agreed) == hier_model.choose(coll, nbytes, plain)


def test_the_agreement_is_measured_on_the_leaders():
    """measure_agreement: 0 on one node (no leaders' exchange), else a positive time (here COMM_WORLD's
    ranks stand for the leaders of as many nodes), the same on every rank."""
    from mpi4py import MPI
    from mpigpu._state.topology import measure_agreement
    assert measure_agreement(MPI.COMM_SELF, None) == 0.0
    assert measure_agreement(MPI.COMM_SELF, MPI.COMM_SELF) == 0.0  # one leader: one node
    code = ("from mpi4py import MPI\nfrom mpigpu._state.topology import measure_agreement\n"
            "w = MPI.COMM_WORLD\nus = measure_agreement(w, w)\n"
            "assert us > 0 and w.allgather(us) == [us] * 2, us\nprint('agreement', us)")
    proc = subprocess.run([mpiexec(), '-n', '2', sys.executable, '-m', 'mpi4py', '-c', code], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0 and proc.stdout.count('agreement') == 2, proc.stdout + proc.stderr
