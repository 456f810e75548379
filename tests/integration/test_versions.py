"""Versions on the wire: each side says which protocol and release it runs, a peer whose
protocol this release cannot speak is refused with both releases named, and `rt status`
shows every node's release."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
import struct
from pathlib import Path
from typing import Any

import pytest

from rt_appliance import __version__
from rt_appliance.errors import PeerRejectedError
from rt_appliance.sequencer.raft import RaftNode
from rt_appliance.sequencer.raft.codec import dumps
from rt_appliance.sequencer.raft.transport import HELLO
from rt_appliance.transport import session
from rt_appliance.transport.listen import listen_tls
from rt_appliance.transport.tls import client_context, server_context
from rt_appliance.versions import refusal, speaks
from tests.helpers import raft_cluster

pytestmark = pytest.mark.integration


def test_the_protocols_a_release_speaks() -> None:
    assert speaks("wire", 1) and not speaks("wire", 2) and not speaks("wire", "1")
    assert speaks("raft", 0) and speaks("raft", 1) and not speaks("raft", 2)
    assert not speaks("raft", [1]) and not speaks("raft", True)
    message = refusal("raft", "rt-2", 7, "9.0.0")
    assert "rt-2 speaks raft protocol 7 (release 9.0.0)" in message
    assert f"(release {__version__}) speaks raft protocol 0, 1" in message


def _frame(message: dict[str, Any]) -> bytes:
    body = dumps(message)
    return struct.pack("<I", len(body)) + body


async def _say(node: RaftNode, config: Any, first: dict[str, Any]) -> str:
    """Connect to ``node``'s raft port as rt-2, send ``first`` and a heartbeat-like raft
    message; return how the connection ended within 3 s."""
    host, port = node._link.listen
    reader, writer = await asyncio.open_connection(
        host, port, ssl=client_context(config.tls, "rt-2"), server_hostname=None
    )
    try:
        writer.write(_frame(first))
        writer.write(_frame({"type": "pre_vote_response", "round": 0, "granted": False}))
        await writer.drain()
        try:
            data = await asyncio.wait_for(reader.read(1), 3.0)
        except TimeoutError:
            return "open"
        return "closed" if data == b"" else "answered"
    except (OSError, ssl.SSLError):
        return "closed"
    finally:
        writer.transport.abort()


def test_a_raft_peer_is_known_by_its_hello_and_refused_for_a_protocol_it_cannot_speak(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    config, _machines, rafts = raft_cluster(tmp_path)
    node = rafts["rt-1"]

    async def scenario() -> list[str]:
        task = asyncio.create_task(node.run())
        try:
            await node.wait_listening()
            ends = [await _say(node, config, {"type": HELLO, "protocol": 9, "software": "9.0.0"})]
            assert node._link.refusals["version"] == 1
            assert node.peer_versions() == {}
            ends.append(await _say(node, config, {"type": "pre_vote", "round": 1}))
            old = node.peer_versions()  # a release before the hello: protocol 0
            assert old == {"rt-2": {"raft_protocol": 0, "software": None}}
            ends.append(
                await _say(node, config, {"type": HELLO, "protocol": 1, "software": "0.1.1"})
            )
            assert node.peer_versions() == {"rt-2": {"raft_protocol": 1, "software": "0.1.1"}}
            return ends
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    try:
        with caplog.at_level(logging.INFO, logger="rt_appliance.sequencer.raft"):
            ends = asyncio.run(scenario())
    finally:
        for raft in rafts.values():
            raft.destroy()
    assert ends == ["closed", "open", "open"]
    assert "refused version: rt-2 speaks raft protocol 9 (release 9.0.0)" in caplog.text
    assert "raft: rt-2 runs a release before versions (raft protocol 0)" in caplog.text
    assert node._link.refusals["version"] == 1


def test_a_wire_hello_of_another_protocol_is_refused_naming_both_releases(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config, _machines, rafts = raft_cluster(tmp_path)  # a stream's config and certificates
    for raft in rafts.values():
        raft.destroy()

    async def scenario() -> tuple[str, dict[str, Any]]:
        welcomed: list[dict[str, Any]] = []

        async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            with contextlib.suppress(PeerRejectedError):  # the refusal is the point
                _conn, hello = await session.accept(
                    reader, writer, config, "rt-1", {config.role_of("pub-1")}
                )
                welcomed.append(hello)

        listener = await listen_tls(
            "127.0.0.1", 0, server_context(config.tls, "rt-1"), 5.0, handler, lambda *a: None
        )
        try:
            context = client_context(config.tls, "pub-1")
            port = listener.port
            conn, _ = await session.connect(
                "127.0.0.1", port, context, config, "pub-1", "push", "rt-1"
            )
            await conn.close()
            with monkeypatch.context() as m:  # a client of a later release
                m.setattr(session, "WIRE_PROTOCOL", 2)
                m.setattr(session, "SOFTWARE", "9.0.0")
                with pytest.raises(PeerRejectedError) as refused:
                    await session.connect(
                        "127.0.0.1", port, context, config, "pub-1", "push", "rt-1"
                    )
            return str(refused.value), welcomed[0]
        finally:
            listener.close()

    message, hello = asyncio.run(scenario())
    assert hello["version"] == 1 and hello["software"] == __version__
    assert "pub-1 speaks wire protocol 2 (release 9.0.0)" in message
    assert f"this node (release {__version__}) speaks wire protocol 1" in message
