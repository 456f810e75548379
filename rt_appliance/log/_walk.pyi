"""Type stub of the compiled record walk (source: ``_walk.c``)."""

def walk(
    buf: bytes | bytearray | memoryview,
    start: int,
    limit: int,
    verify: bool,
    decode: bool,
    max_payload: int,
    /,
) -> tuple[list[int], list[int] | None, list[int] | None, int, bool]: ...
