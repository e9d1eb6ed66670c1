"""The implementations `--compare` names, by name: baselines.py's and the nccl-symm baseline's."""
from .baselines import IMPLS as _BASE
from .nccl_symm import NcclSymmImpl

IMPLS = {**_BASE, NcclSymmImpl.name: NcclSymmImpl}
