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
from rt_appliance.publish import Durability, OnFull, Publisher
from rt_appliance.subscribe import Message, MessageBatch, Subscriber

__version__ = "0.1.0"

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
