"""rt-appliance: a reliable streaming transport.

Publishers append to local stream files; replicators move them to an RT cluster;
a raft sequencer merges them into one totally ordered log; subscribers read it.

The library calls applications use::

    from rt_appliance import Publisher, Subscriber

    with Publisher("/var/lib/rt/pub", "trades") as pub:
        pub.publish(b"...")

    for message in Subscriber("/var/lib/rt/sub/mystream").read(position, follow=True):
        ...
"""

from typing import TYPE_CHECKING, Any

from rt_appliance.errors import (
    CorruptLogError,
    DedupIdError,
    InvalidPositionError,
    LogError,
    LogFullError,
    LogLockedError,
    PositionError,
    PositionPrunedError,
    RecordTooLargeError,
    RTError,
    SenderLockedError,
    UsageError,
)
from rt_appliance.position import Position

if TYPE_CHECKING:
    from rt_appliance.publish import Durability, OnFull, Publisher
    from rt_appliance.subscribe import Message, MessageBatch, Subscriber

__version__ = "0.1.0"

# The application library is imported when first named, so that the daemons (which
# import this package too) do not pay for it at every start.
_LAZY = {
    "Durability": "rt_appliance.publish",
    "OnFull": "rt_appliance.publish",
    "Publisher": "rt_appliance.publish",
    "Message": "rt_appliance.subscribe",
    "MessageBatch": "rt_appliance.subscribe",
    "Subscriber": "rt_appliance.subscribe",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'rt_appliance' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


__all__ = [
    "CorruptLogError",
    "DedupIdError",
    "Durability",
    "InvalidPositionError",
    "LogError",
    "LogFullError",
    "LogLockedError",
    "Message",
    "MessageBatch",
    "OnFull",
    "Position",
    "PositionError",
    "PositionPrunedError",
    "Publisher",
    "RTError",
    "RecordTooLargeError",
    "SenderLockedError",
    "Subscriber",
    "UsageError",
    "__version__",
]
