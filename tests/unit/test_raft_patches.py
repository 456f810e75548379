"""What the sequencer changes inside pysyncobj, and the private names it relies on."""

from __future__ import annotations

import fcntl
import pickle
import struct
import time
from pathlib import Path

import pysyncobj.journal
import pysyncobj.pickle
import pysyncobj.syncobj
import pysyncobj.tcp_connection
import pysyncobj.transport
import pytest

from rt_appliance.config import load_config
from rt_appliance.errors import RTError
from rt_appliance.sequencer.machine import SequencerMachine
from rt_appliance.sequencer.raft import RaftNode, patches
from rt_appliance.sequencer.raft.journal import create_journal
from rt_lab.testing.cluster import write_local_config

pytestmark = pytest.mark.unit


class _Evil:
    def __reduce__(self) -> tuple[object, tuple[str]]:
        return (print, ("a global was called",))


def test_install_replaces_the_decoders_and_the_journal_and_is_idempotent() -> None:
    patches.install()
    patches.install()
    assert pysyncobj.syncobj.createJournal is create_journal
    for loads in (pysyncobj.pickle.loads, pysyncobj.journal.loads):
        assert loads(pickle.dumps({"a": [1, b"x"]})) == {"a": [1, b"x"]}
    with pytest.raises(pickle.UnpicklingError, match="refused pickle opcode"):
        pysyncobj.journal.loads(pickle.dumps(_Evil()))


def test_raft_reads_the_clock_the_node_sets_its_deadlines_by() -> None:
    """pysyncobj's own clock was CLOCK_MONOTONIC_RAW, the node's time.monotonic(): NTP
    slews one and not the other, and on a host up for hours they were 0.26 s apart."""
    patches.install()
    for module in (pysyncobj.syncobj, pysyncobj.transport, pysyncobj.tcp_connection):
        assert module.monotonicTime is time.monotonic, module.__name__


def test_every_private_name_relied_on_exists_in_the_installed_pysyncobj(tmp_path: Path) -> None:
    config = load_config(write_local_config(tmp_path, nodes=3))
    machine = SequencerMachine(config.stream, config.sequencer.merged_roll_bytes)
    node = RaftNode(config, "rt-1", tmp_path / "raft", machine)  # checks them all itself
    try:
        journal = node._link.journal()
        assert journal is not None
        owners = {
            "SyncObj": node._obj,
            "Transport": node._transport,
            "FileJournal": journal,
            "ResizableFile": journal._FileJournal__journalFile,
        }
        assert set(owners) == set(patches.PRIVATE_ATTRIBUTES)
        for owner, obj in owners.items():
            for name in patches.PRIVATE_ATTRIBUTES[owner]:
                assert hasattr(obj, name), f"pysyncobj's {owner} no longer has {name}"
    finally:
        node.destroy()


def test_a_missing_private_name_is_a_clear_error() -> None:
    expected = r"lacks _SyncObj__raftCommitIndex,.*install pysyncobj 0\.3\.17"
    with pytest.raises(RTError, match=expected):
        patches.check("SyncObj", object())


def test_term_and_vote_survive_a_restart_through_the_journal(tmp_path: Path) -> None:
    path = str(tmp_path / "raft.journal")
    journal = create_journal(path)
    journal.setCurrentTerm(5, "127.0.0.2:7100")
    reopened = create_journal(path)
    assert (reopened.getCurrentTerm(), reopened.getVotedForNodeId()) == (5, "127.0.0.2:7100")
    assert (tmp_path / "raft.vote").exists()  # synced by VoteStore, not pysyncobj's meta file


def test_a_pysyncobj_older_than_supported_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(patches, "_installed", False)
    monkeypatch.setattr(patches, "_version", lambda: "0.3.14")
    with pytest.raises(RTError, match=r"pysyncobj 0\.3\.14 is too old: .* 0\.3\.17"):
        patches.install()


def test_the_journal_allocates_what_it_maps(tmp_path: Path) -> None:
    """pysyncobj grows its journal with mmap.resize, leaving a sparse file whose first
    store on a full disk is a SIGBUS (found by rt chaos, seed 9); the installed write
    allocates the blocks first, so the file holds real blocks for all it maps."""
    import pysyncobj.journal as pso_journal

    from rt_appliance.sequencer.raft import patches

    patches.install()
    path = tmp_path / "journal.bin"
    f = pso_journal.ResizableFile(str(path), initialSize=1024, defaultContent=b"\0" * 8)
    f.write(0, b"x" * 10)
    f.write(1 << 20, b"y" * 10)  # beyond the mapped size: the file grows
    f.flush()
    st = path.stat()
    assert st.st_size >= (1 << 20) + 10
    assert st.st_blocks * 512 >= st.st_size - 4096  # allocated, not sparse
    assert f.read(1 << 20, 10) == b"y" * 10
    f._destroy()
    # written blocks, not unwritten extents: a sync after a store into an unwritten
    # extent converts it in a journal commit of the file system
    flags = _extent_flags(path)
    if flags is None:
        pytest.skip("the temporary directory's file system does not report extents (FIEMAP)")
    assert flags and not any(f & _FIEMAP_EXTENT_UNWRITTEN for f in flags), flags


_FS_IOC_FIEMAP = 0xC020660B
_FIEMAP_FLAG_SYNC = 0x1
_FIEMAP_EXTENT_UNWRITTEN = 0x800
_FIEMAP_HEAD = struct.Struct("=QQIIII")
_FIEMAP_EXTENT = struct.Struct("=QQQQQI12x")


def _extent_flags(path: Path, most: int = 64) -> list[int] | None:
    """The flags of each extent of ``path`` (FS_IOC_FIEMAP), None where unsupported."""
    request = bytearray(_FIEMAP_HEAD.size + most * _FIEMAP_EXTENT.size)
    _FIEMAP_HEAD.pack_into(request, 0, 0, 2**64 - 1, _FIEMAP_FLAG_SYNC, 0, most, 0)
    with path.open("rb") as f:
        try:
            fcntl.ioctl(f.fileno(), _FS_IOC_FIEMAP, request)
        except OSError:
            return None
    mapped = _FIEMAP_HEAD.unpack_from(request, 0)[3]
    return [
        _FIEMAP_EXTENT.unpack_from(request, _FIEMAP_HEAD.size + i * _FIEMAP_EXTENT.size)[5]
        for i in range(mapped)
    ]


def _follower(tmp_path: Path) -> tuple[RaftNode, object, object]:
    config = load_config(write_local_config(tmp_path, nodes=3))
    machine = SequencerMachine(config.stream, config.sequencer.merged_roll_bytes)
    node = RaftNode(config, "rt-1", tmp_path / "raft", machine)
    leader = sorted(node._obj._SyncObj__otherNodes, key=str)[0]
    return node, leader, node._obj._SyncObj__onMessageReceived


def _append(prev: int, prev_term: int, entries: list[tuple[int, int]], commit: int) -> dict:
    return {
        "type": "append_entries",
        "term": max([prev_term] + [term for _, term in entries]),
        "commit_index": commit,
        "prevLogIdx": prev,
        "prevLogTerm": prev_term,
        "entries": [(f"cmd-{idx}-{term}".encode(), idx, term) for idx, term in entries],
    }


def test_a_stale_append_entries_does_not_shorten_a_followers_log(tmp_path: Path) -> None:
    """A late copy of an earlier message (say the leader's second answer to one old
    reset) matches at index 1 and carries 2..5: raft keeps 6..10, which the follower
    acknowledged; pysyncobj alone cut them and re-added only 2..5."""
    node, leader, receive = _follower(tmp_path)
    try:
        journal = node._link.journal()
        receive(leader, _append(1, 0, [(i, 1) for i in range(2, 11)], commit=8))
        before = [tuple(journal[i]) for i in range(len(journal))]
        assert [entry[1] for entry in before] == list(range(1, 11))
        cuts = journal.cuts

        receive(leader, _append(1, 0, [(i, 1) for i in range(2, 6)], commit=8))

        assert [tuple(journal[i]) for i in range(len(journal))] == before
        assert journal.cuts == cuts
        assert node._obj._SyncObj__raftCommitIndex == 8
    finally:
        node.destroy()


def test_a_conflicting_entry_removes_the_tail_from_there(tmp_path: Path) -> None:
    node, leader, receive = _follower(tmp_path)
    try:
        journal = node._link.journal()
        receive(leader, _append(1, 0, [(i, 1) for i in range(2, 11)], commit=3))
        # a new leader (term 2) holds 2..5 of term 1, then its own 6 and 7
        receive(leader, _append(1, 0, [(2, 1), (3, 1), (4, 1), (5, 1), (6, 2), (7, 2)], 3))
        entries = [tuple(journal[i]) for i in range(len(journal))]
        assert [(idx, term) for _, idx, term in entries] == [
            (1, 0),
            (2, 1),
            (3, 1),
            (4, 1),
            (5, 1),
            (6, 2),
            (7, 2),
        ]
        assert entries[5][0] == b"cmd-6-2"
        # and the leader's own next entry after a kept tail is appended, not matched
        journal.add(b"own", 8, 2)
        assert tuple(journal[-1]) == (b"own", 8, 2)
        reopened = create_journal(str(journal.path))
        assert [tuple(reopened[i])[1:] for i in range(len(reopened))] == [
            (i, t) for i, t in [(1, 0), (2, 1), (3, 1), (4, 1), (5, 1), (6, 2), (7, 2), (8, 2)]
        ]
    finally:
        node.destroy()


def test_a_follower_commits_no_further_than_what_the_leader_sent(tmp_path: Path) -> None:
    """Raft's rule: a follower commits up to the last entry the message carried, never
    into the rest of its log. Its tail may be an old leader's entries that the new
    leader replaced; pysyncobj alone committed up to the end of the log."""
    node, leader, _ = _follower(tmp_path)
    try:
        journal = node._link.journal()

        def deliver(message: dict) -> None:
            node._transport.deliver(leader, message)

        def commit() -> int:
            return int(node._obj._SyncObj__raftCommitIndex)

        deliver(_append(1, 0, [(i, 1) for i in range(2, 11)], commit=3))  # an old leader
        assert commit() == 3
        # the new leader (term 2) holds 2..5 of term 1 and its own 6..9, committed; its
        # first batch to this follower carries 2..5
        deliver(_append(1, 0, [(i, 1) for i in range(2, 6)], commit=9))
        assert commit() == 5  # 6..9 here are the old leader's, not the committed ones
        deliver(_append(5, 1, [(i, 2) for i in range(6, 10)], commit=9))
        assert commit() == 9
        assert [tuple(journal[i])[1:] for i in range(len(journal))][5:] == [
            (6, 2),
            (7, 2),
            (8, 2),
            (9, 2),
        ]
        deliver(_append(9, 2, [], commit=9))  # a heartbeat matching the end: unchanged
        assert commit() == 9
    finally:
        node.destroy()


def test_a_piece_of_a_snapshot_commits_nothing_of_the_followers_own_log(tmp_path: Path) -> None:
    """A follower far behind gets the leader's snapshot in pieces. pysyncobj took the
    leader's commit index from every piece and committed its own log up to its end, an
    old leader's uncommitted tail among it, and applied it before the last piece came
    (``rt chaos``, seed 149131534: a node's merged log diverged)."""
    node, leader, _ = _follower(tmp_path)
    try:

        def commit() -> int:
            return int(node._obj._SyncObj__raftCommitIndex)

        node._transport.deliver(leader, _append(1, 0, [(i, 1) for i in range(2, 11)], commit=3))
        assert commit() == 3  # 4..10: an old leader's tail, never committed
        piece = {
            "type": "append_entries",
            "term": 2,
            "commit_index": 500,
            "serialized": (b"part of a snapshot", True, False),
        }
        node._transport.deliver(leader, piece)
        assert commit() == 3
        assert int(node._obj._SyncObj__raftLog.getRaftCommitIndex()) == 3
    finally:
        node.destroy()


def test_a_snapshot_is_put_in_place_synced_before_and_after(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """pysyncobj renames a snapshot (its own, or one received from the leader) over the
    old one without a sync, then empties its journal; a power loss could then leave an
    empty snapshot behind an empty journal. The rename it uses is replaced."""
    import os

    import pysyncobj.serializer

    from rt_appliance.sequencer.raft import journal as journal_module

    patches.install()
    assert pysyncobj.serializer.atomicReplace is journal_module.durable_replace
    synced: list[str] = []
    real_fsync = os.fsync

    def recording_fsync(fd: int) -> None:
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        real_fsync(fd)

    monkeypatch.setattr(journal_module.os, "fsync", recording_fsync)
    (tmp_path / "raft.snapshot").write_text("old")
    (tmp_path / "raft.snapshot.1.tmp").write_text("new")
    journal_module.durable_replace(
        str(tmp_path / "raft.snapshot.1.tmp"), str(tmp_path / "raft.snapshot")
    )
    assert (tmp_path / "raft.snapshot").read_text() == "new"
    assert synced == [str(tmp_path / "raft.snapshot.1.tmp"), str(tmp_path)]


def test_a_term_the_journal_cannot_record_is_not_taken(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The disk is full when a higher term arrives: the vote file cannot be written. The
    node stays in its recorded term (as if the message had never come), and a leader
    steps down all the same. pysyncobj alone kept the new term in memory and went on
    leading in it, beside the node elected in it (``rt chaos``, seed 149131534)."""
    node, leader, receive = _follower(tmp_path)
    obj = node._obj
    try:
        receive(leader, _append(1, 0, [(2, 1)], commit=1))
        assert obj._SyncObj__raftCurrentTerm == 1

        def full(vote: object) -> None:
            raise OSError(28, "No space left on device")

        monkeypatch.setattr(node._link.journal().votes, "save", full)
        with pytest.raises(OSError):
            receive(leader, {"type": "request_vote", "term": 5, "last_log_index": 9,
                             "last_log_term": 4})  # fmt: skip
        assert (obj._SyncObj__raftCurrentTerm, obj._SyncObj__votedForNodeId) == (1, None)

        obj._SyncObj__raftState = pysyncobj.syncobj._RAFT_STATE.LEADER  # as if it led term 1
        with pytest.raises(OSError):
            receive(leader, _append(2, 1, [(3, 6)], commit=2))  # a leader of term 6
        assert obj._SyncObj__raftCurrentTerm == 1
        assert obj._SyncObj__raftState == pysyncobj.syncobj._RAFT_STATE.FOLLOWER
        assert [tuple(e)[1:] for e in node._link.journal()][-1] == (2, 1)  # nothing taken
    finally:
        node.destroy()
