"""NumPy references of the GPU checks, shared by the pytest modules (through gpucheck.py) and the
scripts run under mpirun (check_hier.py): no pytest, no MPI, no GPU here."""
import numpy as np

FLOATS = ('float16', 'float32', 'float64')


def reduce_ref(rows, dtype, op):
    """The reduction of `rows` (float64 / complex128 for floating types)."""
    if dtype in FLOATS or dtype.startswith('complex'):
        acc = rows[0].astype(np.complex128 if dtype.startswith('complex') else np.float64)
        for r in rows[1:]:
            r = r.astype(acc.dtype)
            acc = acc + r if op == 'SUM' else acc * r if op == 'PROD' else np.maximum(acc, r) if op == 'MAX' else np.minimum(acc, r)
        return acc
    acc = rows[0].copy()
    with np.errstate(over='ignore'):
        for r in rows[1:]:
            if op == 'SUM':
                acc = acc + r
            elif op == 'PROD':
                acc = acc * r
            elif op == 'MAX':
                acc = np.maximum(acc, r)
            elif op == 'MIN':
                acc = np.minimum(acc, r)
            elif op in ('LAND', 'LOR', 'LXOR'):
                a, b = acc != 0, r != 0
                acc = (a & b if op == 'LAND' else a | b if op == 'LOR' else a ^ b).astype(rows[0].dtype)
            elif op == 'BAND':
                acc = acc & r
            elif op == 'BOR':
                acc = acc | r
            else:
                acc = acc ^ r
    return acc
