"""The fault API of the CUDA layer as the Python layer sees it, on a build with CUDA and no GPU: the
fault codes and their messages, DeviceError's code, Team's abort/fault/missing_peers, and a stub
(_device.pyi) that declares every public name of the module and of Team."""
import ast
import os
import shutil

import pytest

pytestmark = pytest.mark.skipif(shutil.which('nvcc') is None, reason='no nvcc: a CPU-only build has no _device')
STUB = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), 'mpigpu', '_ext', '_device.pyi')


@pytest.fixture(scope='module')
def dm():
    from mpigpu._ext import _device
    return _device


def test_fault_codes_are_distinct_errors_with_their_own_messages(dm):
    codes = [dm.ERR_TIMEOUT, dm.ERR_ABORTED, dm.ERR_BROKEN]
    assert len(set(codes)) == 3 and all(c < 0 for c in codes) and dm.FAULT_CODES == frozenset(codes)
    texts = set()
    for code in codes:
        exc = dm.DeviceError(code, 'Allreduce')
        assert exc.code == code and exc.fault and isinstance(exc, RuntimeError)
        assert str(exc).startswith('Allreduce: ') and 'unknown' not in str(exc) and f'code {code}' in str(exc)
        texts.add(str(exc).split(': ', 1)[1])
    assert len(texts) == 3
    assert 'MPIGPU_TIMEOUT_S' in str(dm.DeviceError(dm.ERR_TIMEOUT, 'x'))
    assert not dm.DeviceError(2, 'cudaMalloc').fault  # a CUDA error is not a fault of a team


def test_team_has_the_fault_api(dm):
    for name in ('abort', 'fault', 'fault_origin', 'missing_peers', 'run', 'run_request', 'close'):
        assert hasattr(dm.Team, name), name


def test_stub_declares_every_public_name(dm):
    tree = ast.parse(open(STUB).read())
    top, team = set(), set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            top.add(node.name)
        elif isinstance(node, ast.AnnAssign):
            top.add(node.target.id)
        if isinstance(node, ast.ClassDef) and node.name == 'Team':
            for item in node.body:
                if isinstance(item, ast.FunctionDef):
                    team.add(item.name)
                elif isinstance(item, ast.AnnAssign):
                    team.add(item.target.id)
    from mpigpu._ext import _codes, _intake
    imported = set(vars(_intake)) | set(vars(_codes))  # the tables _device imports
    public = {k for k in vars(dm) if not k.startswith('_')} - {'sys'} - imported
    assert public - top == set()
    assert {k for k in vars(dm.Team) if not k.startswith('_')} - team == set()
