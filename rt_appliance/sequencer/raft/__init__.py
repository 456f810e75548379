"""Raft for the sequencer: pysyncobj, over mutual TLS, with a synced journal.

This package is the only one that imports pysyncobj. One module per job:

* :mod:`.codec`: the decoder of raft's bytes, which refuses every global;
* :mod:`.patches`: what is replaced inside pysyncobj (:func:`.patches.install`, called
  by :class:`RaftNode`), and the private names it relies on;
* :mod:`.journal`: pysyncobj's journal, counting its changes so that nothing leaves the
  node before a sync covered it, and keeping the term and vote on disk (:mod:`.vote`);
* :mod:`.link` and :mod:`.peer`: names and addresses, one outgoing TLS connection;
* :mod:`.transport`: pysyncobj's transport over those connections;
* :mod:`.node`: :class:`RaftNode`, pysyncobj ticked by the sequencer's event loop.

``docs/SEQUENCER.md`` explains each change to pysyncobj's defaults and why.
"""

from rt_appliance.sequencer.raft.codec import restricted_loads
from rt_appliance.sequencer.raft.node import RaftNode, RaftStatus, StateMachine

__all__ = ["RaftNode", "RaftStatus", "StateMachine", "restricted_loads"]
