"""The implementations `--compare` names, by name: baselines.py's, the nccl-symm baseline's and hand's."""
from .baselines import IMPLS as _BASE
from .hand import HandImpl
from .nccl_symm import NcclSymmImpl

IMPLS = {**_BASE, NcclSymmImpl.name: NcclSymmImpl, HandImpl.name: HandImpl}
