"""A raft peer that stops reading: messages are dropped, then the connection is cut."""

from __future__ import annotations

from types import SimpleNamespace

from rt_appliance.limits import RAFT_SEND_BUFFER_BYTES
from rt_appliance.sequencer.raft.peer import Peer


class _Transport:
    """The writing side of a connection whose peer has stopped reading."""

    def __init__(self, buffered: int) -> None:
        self.buffered, self.aborted = buffered, False

    def is_closing(self) -> bool:
        return self.aborted

    def get_write_buffer_size(self) -> int:
        return self.buffered

    def abort(self) -> None:
        self.aborted = True


class _Writer:
    def __init__(self, transport: _Transport) -> None:
        self.transport = transport
        self.frames: list[bytes] = []

    def write(self, frame: bytes) -> None:
        self.frames.append(frame)
        self.transport.buffered += len(frame)


def test_a_peer_that_stops_reading_is_cut_off_after_the_timeout() -> None:
    transport = _Transport(buffered=0)
    writer = _Writer(transport)
    peer = Peer(SimpleNamespace(timeout_s=3.0), None, "rt-2", ("127.0.0.2", 1))  # type: ignore[arg-type]
    peer.writer = writer  # type: ignore[assignment]
    assert peer.send(b"frame 1") and writer.frames == [b"frame 1"]

    transport.buffered = RAFT_SEND_BUFFER_BYTES  # the peer has read nothing for a while
    assert not peer.send(b"frame 2")  # dropped: raft sends it again later
    assert peer.full_since is not None and not transport.aborted
    assert not peer.send(b"frame 3")  # still within the timeout: dropped, connection kept
    assert not transport.aborted

    peer.full_since -= 3.5  # the buffer has been full for longer than the timeout
    assert not peer.send(b"frame 4")
    assert transport.aborted  # cut off; the next connection starts afresh
    assert not peer.send(b"frame 5")  # a closing connection takes nothing
    assert writer.frames == [b"frame 1"]


def test_a_peer_that_reads_again_is_kept() -> None:
    transport = _Transport(buffered=RAFT_SEND_BUFFER_BYTES)
    writer = _Writer(transport)
    peer = Peer(SimpleNamespace(timeout_s=3.0), None, "rt-2", ("127.0.0.2", 1))  # type: ignore[arg-type]
    peer.writer = writer  # type: ignore[assignment]
    assert not peer.send(b"dropped")
    transport.buffered = 0  # it read everything
    assert peer.send(b"sent") and peer.full_since is None
    assert writer.frames == [b"sent"] and not transport.aborted
