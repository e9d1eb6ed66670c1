"""Multi-rank tests under mpiexec -n 1..4 (the pip mpich wheel in CI)."""
import pytest

from conftest import run_ranks


@pytest.mark.parametrize('n', [1, 2, 3, 4])
def test_host_collectives_match_mpi4py(n):
    out = run_ranks(n, 'host_collectives.py')
    assert 'identical to mpi4py' in out


@pytest.mark.parametrize('n', [1, 2, 3, 4])
def test_staged_path(n):
    out = run_ranks(n, 'staged_fake_device.py')
    assert 'staged path on' in out and ': ok' in out


def test_failing_rank_aborts_the_job():
    with pytest.raises(AssertionError, match='exited'):
        run_ranks(3, 'fail_on_rank1.py', timeout=120)


@pytest.mark.parametrize('n', [1, 2, 3, 4])
def test_mirrored_buffer_api(n):
    out = run_ranks(n, 'mirror_fake_device.py')
    assert 'identical to mpi4py' in out


@pytest.mark.parametrize('n', [1, 2, 3, 4])
def test_nonblocking_and_persistent(n):
    out = run_ranks(n, 'nonblocking_fake_device.py')
    assert 'non-blocking checks identical to mpi4py' in out


@pytest.mark.parametrize('n', [1, 2, 3, 4])
def test_team_setup_decisions(n):
    out = run_ranks(n, 'team_setup_fake_device.py')
    assert 'team setup decisions on' in out and ': ok' in out


@pytest.mark.parametrize('n', [1, 2, 3])
def test_derived_datatypes_packed_on_the_device(n):
    out = run_ranks(n, 'packed_fake_device.py')
    assert 'checks identical to mpi4py' in out


def test_peer_that_never_arrives_and_abort():
    out = run_ranks(3, 'fault_fake_device.py', env={'MPIGPU_TIMEOUT_S': '2'}, timeout=120)
    assert 'ended in errors; ok' in out


@pytest.mark.parametrize('n', [1, 2, 3])
def test_derived_datatypes_in_collectives_packed_on_the_device(n):
    out = run_ranks(n, 'packed_collectives_fake_device.py')
    assert 'checks identical to mpi4py' in out


@pytest.mark.parametrize('n', [1, 2, 3])
def test_strided_device_arrays_read_through_their_strides(n):
    out = run_ranks(n, 'strided_fake_device.py')
    assert 'checks identical to mpi4py' in out


@pytest.mark.parametrize('n,engine', [(1, True), (2, True), (3, True), (4, True), (2, False), (3, False)])
def test_mixed_placement_across_ranks(n, engine):
    # any subset of ranks on the device, the others on the host, every collective and form: MPI's result
    env = {'MIXED_ENGINE': '1' if engine else '0', 'MPIGPU_TIMEOUT_S': '60'}
    out = run_ranks(n, 'mixed_placement.py', env=env, timeout=600)
    assert 'checks identical to mpi4py' in out and ('one rank' if n == 1 else 'placement board') in out


def test_mixed_placement_without_a_shared_board():
    # one node whose ranks cannot map one board file (separate /dev/shm): the exchange through MPI
    env = {'MIXED_ENGINE': '1', 'MIXED_NO_BOARD': '1', 'MPIGPU_TIMEOUT_S': '60'}
    out = run_ranks(3, 'mixed_placement.py', '--quick', env=env, timeout=600)
    assert 'checks identical to mpi4py' in out and 'exchange between 1 node ' in out


@pytest.mark.parametrize('n,engine,board', [(4, True, True), (3, False, True), (4, True, False)])
def test_mixed_placement_on_simulated_nodes(n, engine, board):
    # a board per node and the leaders' exchange (3 ranks: nodes of 2 and 1); where no node's ranks can
    # share a board, the exchange among all ranks
    env = {'MIXED_ENGINE': '1' if engine else '0', 'MPIGPU_TIMEOUT_S': '60', 'MPIGPU_SIMULATE_NODES': '2'}
    if not board:
        env['MIXED_NO_BOARD'] = '1'
    out = run_ranks(n, 'mixed_placement.py', *(() if board else ('--quick',)), env=env, timeout=600)
    mode = "each node's placement board and an exchange between 2 nodes' leaders" if board else \
        'an exchange between 2 nodes (host MPI)'
    assert 'checks identical to mpi4py' in out and mode in out, out[-2000:]


@pytest.mark.parametrize('n,engine,env', [(1, True, {}), (2, True, {}), (3, True, {}), (4, True, {}),
                                          (3, False, {}), (4, True, {'MPIGPU_SIMULATE_NODES': '2'}),
                                          (3, True, {'MPIGPU_EXCHANGE': '0'}),
                                          (3, True, {'MPIGPU_EXCHANGE_MIN_BYTES': '1000000'})])
def test_exchange_collectives(n, engine, env):
    # Alltoall(v), Allgatherv, Gather(v), Scatter(v) on device buffers: the exchange transport where
    # every rank brought device buffers, the host MPI call elsewhere; mpi4py's result either way
    env = {'EXCHANGE_ENGINE': '1' if engine else '0', 'MPIGPU_TIMEOUT_S': '60', **env}
    out = run_ranks(n, 'exchange_collectives.py', env=env)
    assert 'checks identical to mpi4py' in out


@pytest.mark.parametrize('n,engine,env', [(1, True, {}), (2, True, {}), (3, True, {}), (3, False, {}),
                                          (4, True, {'MPIGPU_SIMULATE_NODES': '2'})])
def test_exchange_datatypes(n, engine, env):
    # derived datatypes (resized vectors, nested vectors per peer, subarrays, negative strides, byte
    # units) on the exchange transport's block shapes; a block table through the mirrors
    env = {'EXCHANGE_ENGINE': '1' if engine else '0', 'MPIGPU_TIMEOUT_S': '60', **env}
    out = run_ranks(n, 'exchange_datatypes.py', env=env)
    assert 'checks identical to mpi4py' in out


@pytest.mark.parametrize('n,engine,env', [(1, True, {}), (2, True, {}), (3, True, {}), (3, False, {}),
                                          (4, True, {'MPIGPU_SIMULATE_NODES': '2'})])
def test_exchange_reductions(n, engine, env):
    # Reduce_scatter, Scan and Exscan: rows over the exchange transport, reduced on the (fake) GPU in
    # rank order; what the device does not reduce through the mirrors
    env = {'EXCHANGE_ENGINE': '1' if engine else '0', 'MPIGPU_TIMEOUT_S': '60', **env}
    out = run_ranks(n, 'exchange_reductions.py', env=env)
    assert 'checks identical to mpi4py' in out


@pytest.mark.parametrize('n,engine,env', [(2, True, {}), (3, True, {}), (3, False, {}),
                                            (3, True, {'DEFERRED_NO_BOARD': '1'}),
                                            (4, True, {'MPIGPU_SIMULATE_NODES': '2'})])
def test_nonblocking_calls_never_wait_for_peers(n, engine, env):
    # rank 0 starts a device Ibcast, then sends the message its peers wait for before they start it;
    # undecided calls before another collective, Waitall, Test: MPI's result, no wait for a peer's post
    env = {'DEFERRED_ENGINE': '1' if engine else '0', 'MPIGPU_TIMEOUT_S': '60', **env}
    out = run_ranks(n, 'deferred_agreement.py', env=env)
    assert f'{34 * n} checks passed' in out
    if 'MPIGPU_SIMULATE_NODES' in env:  # rank 0 leads its node: its later calls' exchanges wait their turn
        assert "each node's placement board" in out, out[-2000:]


@pytest.mark.parametrize('n,engine', [(1, False), (2, False), (3, False), (2, True)])
def test_no_reference_kept_to_buffers(n, engine):
    # blocking calls returned, requests completed or freed: no reference to the caller's exporters
    out = run_ranks(n, 'references_fake_device.py', env={'MIXED_ENGINE': '1' if engine else '0'})
    assert 'none kept' in out


@pytest.mark.parametrize('n', [2, 3])
def test_bad_input_gives_mpi_result_or_error_never_a_hang(n):
    out = run_ranks(n, 'bad_input_fake_device.py', env={'MPIGPU_TIMEOUT_S': '60'}, timeout=300)
    assert 'no hang' in out
