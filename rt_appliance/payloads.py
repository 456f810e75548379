"""Arrow tables as message payloads: one message carries a whole batch of rows.

A payload is an Arrow IPC stream (schema, then record batches). The Publisher's
:meth:`~rt_appliance.publish.Publisher.publish_arrow` writes one, the subscriber side
reads it back with :func:`decode_arrow` (or :meth:`Message.arrow`), and the Spark
source's ``arrow`` codec turns it into typed columns. pyarrow is imported only here,
and only when used: hosts that never carry Arrow payloads need not install it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rt_appliance.errors import UsageError

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["decode_arrow", "encode_arrow"]


def _pyarrow() -> Any:
    try:
        import pyarrow
    except ImportError:  # pragma: no cover - depends on the installation
        raise UsageError(
            "Arrow payloads need pyarrow: pip install 'rt-appliance[spark]' (or pyarrow)"
        ) from None
    return pyarrow


def encode_arrow(data: Any) -> bytes:
    """An Arrow IPC stream of ``data``: a pyarrow Table or RecordBatch, or a pandas DataFrame."""
    pa = _pyarrow()
    if isinstance(data, pa.RecordBatch):
        table = pa.Table.from_batches([data])
    elif isinstance(data, pa.Table):
        table = data
    elif type(data).__name__ == "DataFrame" and hasattr(data, "to_records"):
        table = pa.Table.from_pandas(data, preserve_index=False)
    else:
        raise UsageError(
            f"publish_arrow takes a pyarrow Table or RecordBatch or a pandas DataFrame, "
            f"not {type(data).__name__}"
        )
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return bytes(sink.getvalue())


def decode_arrow(payload: bytes) -> pa.Table:
    """The table an Arrow payload carries; a clear error if it is not one."""
    pa = _pyarrow()
    try:
        with pa.ipc.open_stream(pa.py_buffer(payload)) as reader:
            table = reader.read_all()
    except (pa.ArrowInvalid, OSError) as exc:
        raise UsageError(f"payload is not an Arrow IPC stream: {exc}") from None
    return table
