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
