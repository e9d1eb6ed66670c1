"""Environment knobs: read once, validated with a message that names the variable."""
import pytest

from mpigpu._base import config as _config


def test_defaults(monkeypatch):
    for k in ('MPIGPU_ALGO', 'MPIGPU_CHUNK_BYTES', 'MPIGPU_TIMEOUT_S', 'MPIGPU_MPI_CUDA_AWARE', 'MPIGPU_P2P_IPC_BYTES',
              'MPIGPU_SPLIT_STEPS', 'MPIGPU_LL128_BYTES', 'MPIGPU_RESIDENT_US', 'MPIGPU_RESIDENT_BLOCKS',
              'MPIGPU_RESIDENT_MAX_BYTES', 'MPIGPU_SHARED_GPU'):
        monkeypatch.delenv(k, raising=False)
    c = _config.Config()
    assert c.algo == 'auto' and c.chunk_bytes == 32768 and c.nslots == 8 and c.max_channels == 128 and c.timeout_s == 600.0 and c.mpi_cuda_aware == 'auto'
    assert c.p2p_ipc_bytes == 65536 and c.split_steps == 4 and c.ll128_bytes == 2 << 20
    assert c.resident_us == 25.0 and c.resident_blocks == 64 and c.resident_max_bytes == 2 << 20
    assert c.shared_gpu is False


@pytest.mark.parametrize('name,value,match', [
    ('MPIGPU_ALGO', 'fastest', 'MPIGPU_ALGO'), ('MPIGPU_CHUNK_BYTES', '12x', 'MPIGPU_CHUNK_BYTES'),
    ('MPIGPU_NSLOTS', '1', 'MPIGPU_NSLOTS'), ('MPIGPU_TIMEOUT_S', '-1', 'MPIGPU_TIMEOUT_S'),
    ('MPIGPU_MPI_CUDA_AWARE', 'maybe', 'MPIGPU_MPI_CUDA_AWARE'), ('MPIGPU_NCHANNELS', '500', 'MPIGPU_NCHANNELS'),
    ('MPIGPU_P2P_IPC_BYTES', '64', 'MPIGPU_P2P_IPC_BYTES'), ('MPIGPU_SPLIT_STEPS', '-1', 'MPIGPU_SPLIT_STEPS'),
    ('MPIGPU_LL128_BYTES', str((1 << 30) + 1), 'MPIGPU_LL128_BYTES'),
    ('MPIGPU_RESIDENT_US', '-5', 'MPIGPU_RESIDENT_US'), ('MPIGPU_RESIDENT_US', 'soon', 'MPIGPU_RESIDENT_US'),
    ('MPIGPU_RESIDENT_BLOCKS', '0', 'MPIGPU_RESIDENT_BLOCKS'), ('MPIGPU_RESIDENT_BLOCKS', '129', 'MPIGPU_RESIDENT_BLOCKS'),
    ('MPIGPU_RESIDENT_MAX_BYTES', str((1 << 31) + 1), 'MPIGPU_RESIDENT_MAX_BYTES'),
    ('MPIGPU_SHARED_GPU', 'sometimes', 'MPIGPU_SHARED_GPU'),
    ('MPIGPU_EXCHANGE_DRAIN', 'fifo', 'MPIGPU_EXCHANGE_DRAIN'), ('MPIGPU_EXCHANGE_SLOTS', 'both', 'MPIGPU_EXCHANGE_SLOTS'),
    ('MPIGPU_EXCHANGE_ROUNDS', 'random', 'MPIGPU_EXCHANGE_ROUNDS'),
])
def test_bad_values_name_the_variable(monkeypatch, name, value, match):
    monkeypatch.setenv(name, value)
    with pytest.raises(ValueError, match=match):
        _config.Config()


def test_exchange_protocol_knobs(monkeypatch):
    # the exchange's team knobs (every rank's the same: mpigpu/_state/team.py compares them) and the
    # drain, a rank's own; the defaults pick by the call (docs/tuning.md)
    for k in ('MPIGPU_EXCHANGE_DRAIN', 'MPIGPU_EXCHANGE_SLOTS', 'MPIGPU_EXCHANGE_ROUNDS'):
        monkeypatch.delenv(k, raising=False)
    c = _config.Config()
    assert (c.exchange_drain, c.exchange_slots, c.exchange_rounds) == ('auto', 'auto', 'staggered')
    monkeypatch.setenv('MPIGPU_EXCHANGE_ROUNDS', 'aligned')
    monkeypatch.setenv('MPIGPU_EXCHANGE_SLOTS', 'sender')
    c = _config.Config()
    assert (c.exchange_slots, c.exchange_rounds) == ('sender', 'aligned')
    from mpigpu._state import team
    assert {'exchange_slots', 'exchange_rounds'} <= set(team._SHARED_KNOBS)
    assert 'exchange_drain' not in team._SHARED_KNOBS


def test_spellings(monkeypatch):
    monkeypatch.setenv('MPIGPU_MPI_CUDA_AWARE', 'on')
    monkeypatch.setenv('MPIGPU_DEBUG', 'yes')
    monkeypatch.setenv('MPIGPU_SHARED_GPU', 'on')
    c = _config.Config()
    assert c.mpi_cuda_aware == '1' and c.debug and c.shared_gpu


@pytest.mark.parametrize('algo', ['ll128', 'll128-twoshot', 'LL128', 'ring', 'Ring'])
def test_engine_algorithms(monkeypatch, algo):
    monkeypatch.setenv('MPIGPU_ALGO', algo)
    assert _config.Config().algo == algo.lower()


def test_algorithm_names_come_from_the_engine():
    """MPIGPU_ALGO takes the engine's algorithms (enum mg_algo, by name) and the paths."""
    from mpigpu._base.codes import Algo
    assert _config.ALGOS == tuple(a.knob for a in Algo) + ('staged', 'hier', 'hier-rail', 'hier-leader')
    assert Algo.LL128_TWOSHOT.knob == 'll128-twoshot' and Algo.AUTO.knob == 'auto'


def test_ll128_bytes(monkeypatch):
    monkeypatch.setenv('MPIGPU_LL128_BYTES', '0')
    assert _config.Config().ll128_bytes == 0
    monkeypatch.setenv('MPIGPU_LL128_BYTES', str(8 << 20))
    assert _config.Config().ll128_bytes == 8 << 20


def test_resident_us(monkeypatch):
    monkeypatch.setenv('MPIGPU_RESIDENT_US', '0')
    assert _config.Config().resident_us == 0.0
    monkeypatch.setenv('MPIGPU_RESIDENT_US', '2500.5')
    assert _config.Config().resident_us == 2500.5


def test_resident_blocks_and_bytes(monkeypatch):
    monkeypatch.setenv('MPIGPU_RESIDENT_BLOCKS', '64')
    monkeypatch.setenv('MPIGPU_RESIDENT_MAX_BYTES', '0')
    c = _config.Config()
    assert c.resident_blocks == 64 and c.resident_max_bytes == 0
