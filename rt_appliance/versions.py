"""Which release this is, and which protocol versions it speaks and accepts.

Two protocols cross the network between hosts of a stream:

* the **wire** protocol of push, pull, fetch and the control channel, whose HELLO and
  WELCOME frames carry both sides' protocol version and release;
* the **raft** protocol between nodes, whose connections open with a hello frame
  carrying the same two. A node of a release from before that frame sends none; it
  speaks raft protocol 0, which this release still accepts (the frames are the same,
  only pre-vote is new: docs/SEQUENCER.md).

A side that cannot speak its peer's version refuses it with an error that names both
releases; docs/OPERATIONS.md ("Versions") says which releases can run together.
"""

from __future__ import annotations

from rt_appliance import __version__

__all__ = [
    "CARRIED_INPUT",
    "RAFT_ACCEPTED",
    "RAFT_FEATURES",
    "RAFT_PROTOCOL",
    "SOFTWARE",
    "WIRE_ACCEPTED",
    "WIRE_PROTOCOL",
    "refusal",
    "speaks",
]

SOFTWARE = __version__  # this release, as `rt --version` prints it
WIRE_PROTOCOL = 1  # what this release sends in HELLO and WELCOME
WIRE_ACCEPTED = frozenset({1})  # what it accepts from a peer
RAFT_PROTOCOL = 1  # 1: raft with pre-vote and the hello frame
RAFT_ACCEPTED = frozenset({0, 1})  # 0: a release before the hello frame
# what this release's raft hello also says it does, beside its protocol; a peer that
# does not say so (an older release) is not sent what needs it. "leases": it applies
# lease instructions (rt_appliance.sequencer.leases); "carried-input": it applies merges
# whose raft entry carries the input bytes (the planner's carried ranges)
CARRIED_INPUT = "carried-input"
RAFT_FEATURES = ("leases", CARRIED_INPUT)


def speaks(what: str, protocol: object) -> bool:
    """Whether this release speaks ``what`` (``wire`` or ``raft``) protocol ``protocol``."""
    accepted = WIRE_ACCEPTED if what == "wire" else RAFT_ACCEPTED
    return type(protocol) is int and protocol in accepted


def refusal(what: str, peer: str, protocol: object, software: object) -> str:
    """Why a peer speaking ``protocol`` (of release ``software``) is refused."""
    release = f"release {software}" if software else "an unknown release"
    accepted = WIRE_ACCEPTED if what == "wire" else RAFT_ACCEPTED
    ours = ", ".join(str(v) for v in sorted(accepted))
    return (
        f"{peer} speaks {what} protocol {protocol!r} ({release}); this node "
        f"(release {SOFTWARE}) speaks {what} protocol {ours}: run releases that can "
        "work together (docs/OPERATIONS.md, Versions)"
    )
