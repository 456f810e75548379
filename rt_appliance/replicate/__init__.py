"""Replication: a "streaming rsync" of stream file directories between hosts.

Push (publisher host -> every RT node) and pull (an RT node -> a subscriber host)
share one protocol (:mod:`rt_appliance.transport.messages`), one way to read whole records from a
directory (:mod:`.source`) and one way to append them to a copy (:mod:`.sink`).
The receiving side always says where to resume, so a restart of either side
neither loses nor duplicates bytes.
"""
