"""What rt-appliance changes inside pysyncobj, applied by one explicit call.

pysyncobj is the raft library; :func:`install` replaces, module-wide and once:

* its decoders of log entries and of the journal's meta file (``pysyncobj.pickle`` and
  ``pysyncobj.journal``) with :mod:`.codec`'s, which refuse every global;
* its journal factory (``pysyncobj.syncobj.createJournal``) with :mod:`.journal`'s
  synced journal, which also removes a follower's entries only where the leader's
  conflict with them (raft's rule; pysyncobj removes the whole tail after every match);
* the journal file's ``write``, which allocates before it maps (no SIGBUS on a full disk);
* the rename that puts a snapshot in place (``pysyncobj.serializer.atomicReplace``), its
  own or one received from the leader, with :func:`.journal.durable_replace`: synced
  before and after, so a power loss never leaves an empty snapshot behind a journal
  pysyncobj has already emptied;
* ``SyncObj.__setCurrentTerm``, with :func:`_term_recorded_or_unchanged`: pysyncobj sets
  the term and vote in memory before the journal records them, so when recording fails
  (a full disk) the node went on in a term it never recorded, in the role it had;
* its clock (``monotonicTime`` in ``pysyncobj.syncobj``, ``.transport`` and
  ``.tcp_connection``, CLOCK_MONOTONIC_RAW) with ``time.monotonic``, the clock of every
  timer the node sets on raft's behalf, so that both read the same deadlines.

:data:`PRIVATE_ATTRIBUTES` lists every private name of pysyncobj this package reads or
sets; :func:`check` fails with a clear error when a pysyncobj release lacks one, so an
upgrade that breaks a private contract stops the node at start, not in the middle of
an election.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable
from typing import Any

import pysyncobj
import pysyncobj.journal as _journal
import pysyncobj.pickle as _pso_pickle
import pysyncobj.serializer as _serializer
import pysyncobj.syncobj as _syncobj
import pysyncobj.tcp_connection as _tcp_connection
import pysyncobj.transport as _transport

from rt_appliance.errors import RTError
from rt_appliance.sequencer.raft import codec
from rt_appliance.sequencer.raft.journal import allocated_write, create_journal, durable_replace

__all__ = ["PRIVATE_ATTRIBUTES", "SUPPORTED", "check", "install"]

SUPPORTED = "0.3.17"  # the pysyncobj release these patches are made and tested for

# owner -> private attributes of it this package relies on
PRIVATE_ATTRIBUTES: dict[str, tuple[str, ...]] = {
    "SyncObj": (
        "_SyncObj__raftCommitIndex",
        "_SyncObj__raftLastApplied",
        "_SyncObj__raftLog",
        "_SyncObj__raftElectionDeadline",
        "_SyncObj__newAppendEntriesTime",
        "_SyncObj__sendAppendEntries",
        "_SyncObj__raftState",
        "_SyncObj__raftLeader",
        "_SyncObj__raftMatchIndex",
        "_SyncObj__needLoadDumpFile",
        "_SyncObj__otherNodes",
        "_SyncObj__connectedNodes",
        "_SyncObj__transferInProgress",
        "_SyncObj__transport",
        "_SyncObj__setCurrentTerm",
        "_SyncObj__setState",
        "_SyncObj__raftCurrentTerm",
        "_SyncObj__votedForNodeId",
        "_SyncObj__getCurrentLogIndex",
        "_SyncObj__getCurrentLogTerm",
        "forceLogCompaction",
        "transferLeadership",
        "_methodToID",
        "_getFuncName",
        "_getLeader",
        "_isLeader",
    ),
    "Transport": ("_onMessageReceived", "_onNodeConnected", "_onNodeDisconnected"),
    "FileJournal": ("_FileJournal__journalFile",),
    "ResizableFile": (
        "_ResizableFile__f",
        "_ResizableFile__mm",
        "_ResizableFile__resizeFactor",
        "_ResizableFile__fileName",
        "_ResizableFile__extand",
    ),
}

_installed = False


def install() -> None:
    """Replace pysyncobj's decoders and journal factory (idempotent).

    Refuses a pysyncobj older than :data:`SUPPORTED`: before 0.3.17 pysyncobj never hands
    the term and vote to its journal, so they would not be kept across a restart."""
    global _installed
    if _installed:
        return
    if _release(_version()) < _release(SUPPORTED):
        raise RTError(
            f"pysyncobj {_version()} is too old: the sequencer needs {SUPPORTED} or later "
            "(it must hand raft's term and vote to the journal, which keeps them on disk)"
        )
    _journal.loads = codec.restricted_loads  # the journal's meta file (imported by name)
    _journal.dumps = codec.dumps
    _pso_pickle.loads = codec.command_loads
    _pso_pickle.load = codec.restricted_load
    _pso_pickle.dumps = codec.dumps
    _pso_pickle.dump = codec.dump
    _syncobj.createJournal = create_journal
    # One clock for raft's timers: pysyncobj reads CLOCK_MONOTONIC_RAW, the node (its tick
    # timer, pre-vote, the election deadlines it sets) time.monotonic(), CLOCK_MONOTONIC.
    # NTP slews the one and not the other: on this host they were 0.26 s apart after 2.2
    # hours up, so a follower saw its election deadline pass 0.2 s early, stood though its
    # leader was alive, and unseated it (tests/integration/test_raft_rejoin.py, 1 run in
    # 10); the gap grows with the time up (about 32 ppm on that host).
    for module in (_syncobj, _transport, _tcp_connection):
        module.monotonicTime = time.monotonic
    _journal.ResizableFile.write = allocated_write  # no SIGBUS when the disk is full
    _serializer.atomicReplace = durable_replace  # snapshots, ours and the leader's
    sync_obj = _syncobj.SyncObj
    sync_obj._SyncObj__setCurrentTerm = _term_recorded_or_unchanged(
        sync_obj._SyncObj__setCurrentTerm
    )
    # The journal cuts only a conflicting tail (SyncedJournal.deleteEntriesFrom) and says
    # so itself; pysyncobj's alarm before every cut it asks for would be false.
    logging.getLogger(_syncobj.__name__).addFilter(_no_false_truncation_alarm)
    _installed = True


def _term_recorded_or_unchanged(set_current_term: Callable[..., None]) -> Callable[..., None]:
    """pysyncobj's ``__setCurrentTerm``, undone when the journal cannot record the term.

    pysyncobj sets the term and vote in memory, then hands them to the journal. When the
    journal raises (a full disk), the message or tick that asked ends with the error,
    but the new term stayed in memory, and the step that should follow (a leader that
    learns of a higher term becomes a follower) never ran: a leader went on leading in
    a term another node was elected in, and its appends replaced committed entries on
    a follower (``rt chaos``, seed 149131534, a leader whose disk filled). Now the term
    and vote are put back, as if the message had never come, and a leader that learned
    of a higher term steps down all the same (a leader may always stop leading): it
    stays a follower in its recorded term until its disk has room.
    """

    @functools.wraps(set_current_term)
    def set_or_undo(obj: Any, term: int, voted_for: str | None) -> None:
        before = (obj._SyncObj__raftCurrentTerm, obj._SyncObj__votedForNodeId)
        try:
            set_current_term(obj, term, voted_for)
        except BaseException:
            obj._SyncObj__raftCurrentTerm, obj._SyncObj__votedForNodeId = before
            if term > before[0] and obj._SyncObj__raftState == _syncobj._RAFT_STATE.LEADER:
                obj._SyncObj__raftLeader = None
                obj._SyncObj__setState(_syncobj._RAFT_STATE.FOLLOWER)
            raise

    return set_or_undo


def _no_false_truncation_alarm(record: logging.LogRecord) -> bool:
    return not str(record.msg).startswith("truncating already-applied log entries")


def check(owner: str, obj: Any) -> None:
    """Raise if ``obj`` (a live instance of ``owner``) lacks a private attribute we use."""
    missing = [name for name in PRIVATE_ATTRIBUTES[owner] if not hasattr(obj, name)]
    if missing:
        version = getattr(pysyncobj, "__version__", None) or _version()
        raise RTError(
            f"pysyncobj {version} lacks {', '.join(missing)} of its {owner}, which the "
            f"sequencer relies on; install pysyncobj {SUPPORTED}"
        )


def _release(version: str) -> tuple[int, ...]:
    try:
        return tuple(int(part) for part in version.split(".")[:3])
    except ValueError:
        return (0,)


def _version() -> str:
    try:
        from pysyncobj.version import VERSION

        return str(VERSION)
    except ImportError:
        return "(unknown version)"
