DTYPES: tuple[tuple[str, int, int, str], ...]
OPS: tuple[str, ...]
COLLS: tuple[str, ...]
ALGOS: tuple[str, ...]
