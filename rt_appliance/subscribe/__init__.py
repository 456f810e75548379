"""Subscribing: reading a stream file directory (a publisher log or the merged log)."""

from rt_appliance.subscribe.messages import Message, MessageBatch
from rt_appliance.subscribe.subscriber import Subscriber

__all__ = ["Message", "MessageBatch", "Subscriber"]
