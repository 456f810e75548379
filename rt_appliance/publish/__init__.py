"""Publishing: the library call applications use to append messages to a stream."""

from rt_appliance.publish.publisher import Durability, OnFull, Publisher

__all__ = ["Durability", "OnFull", "Publisher"]
