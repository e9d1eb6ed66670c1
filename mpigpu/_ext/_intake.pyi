"""Type stub of mpigpu._ext._intake (buffer intake)."""

GEOMETRY_ERRORS: dict[int, str]

class DeviceBuffer:
    owner: object
    ptr: int
    nbytes: int
    dtype: int
    itemsize: int
    readonly: bool
    device: int
    stream: int
    stream_synced: bool
    typestr: str
    @property
    def count(self) -> int: ...
    def view(self, offset: int, nbytes: int, dtype: int) -> DeviceBuffer: ...

def set_pointer_query(fn: object) -> None: ...
def is_device(obj: object) -> bool: ...
def any_device(sendbuf: object, recvbuf: object) -> bool: ...
def device_buffer(obj: object, stream: int | None = ...) -> DeviceBuffer: ...
def call_geometry(coll: int, n: int, rank: int, has_send: bool, scount: int, has_recv: bool, rcount: int,
                  inplace: bool) -> tuple[str | None, int, int]: ...
