"""Servers start TLS on the accepted socket: a handshake that fails is refused (counted),
the next client is served, on asyncio's loop and on uvloop's, at any address a node's
``host`` may name (an IPv4 or IPv6 address, a DNS name)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket

import pytest
import uvloop

from rt_appliance.config import StreamConfig, load_config
from rt_appliance.errors import PeerRejectedError, TransportError
from rt_appliance.transport.listen import listen_tls
from rt_appliance.transport.tls import client_context, common_name, peer_name, server_context
from rt_lab.testing.cluster import write_local_config

LOOPS = {"asyncio": asyncio.new_event_loop, "uvloop": uvloop.new_event_loop}


@pytest.fixture(scope="module")
def config(tmp_path_factory: pytest.TempPathFactory) -> StreamConfig:
    return load_config(write_local_config(tmp_path_factory.mktemp("listen"), nodes=1))


def _ipv6() -> bool:
    try:
        with socket.create_server(("::1", 0), family=socket.AF_INET6):
            return True
    except OSError:
        return False


async def _serve_one_refused_then_one(config: StreamConfig, host: str) -> list[str]:
    """A plaintext client (refused in the handshake), then a TLS client that is served;
    what the server saw, in order."""
    seen: list[str] = []
    served = asyncio.Event()

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        seen.append(f"served {peer_name(writer.get_extra_info('ssl_object'))}")
        writer.write(await reader.readexactly(5))
        await writer.drain()
        served.set()
        writer.close()

    def refused(address: str, exc: Exception) -> None:
        seen.append("refused")

    listener = await listen_tls(host, 0, server_context(config.tls, "rt-1"), 5.0, handler, refused)
    try:
        port = listener.port
        _, plain = await asyncio.open_connection(host, port)
        plain.write(b"GET / HTTP/1.0\r\n\r\n")  # not a ClientHello
        await plain.drain()
        while "refused" not in seen:
            await asyncio.sleep(0.01)
        plain.close()
        reader, writer = await asyncio.open_connection(
            host, port, ssl=client_context(config.tls, "pub-1"), server_hostname=None
        )
        writer.write(b"hello")
        assert await asyncio.wait_for(reader.readexactly(5), 5) == b"hello"
        await asyncio.wait_for(served.wait(), 5)
        writer.close()
    finally:
        listener.close()
    return seen


@pytest.mark.parametrize("loop", sorted(LOOPS))
def test_a_refused_handshake_leaves_the_next_client_served(config: StreamConfig, loop: str) -> None:
    with asyncio.Runner(loop_factory=LOOPS[loop]) as runner:
        seen = runner.run(_serve_one_refused_then_one(config, "127.0.0.1"))
    assert seen == ["refused", "served pub-1"]


def test_a_dns_name_is_bound(config: StreamConfig) -> None:
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        assert runner.run(_serve_one_refused_then_one(config, "localhost"))[-1] == "served pub-1"


@pytest.mark.skipif(not _ipv6(), reason="this machine has no IPv6 loopback")
def test_an_ipv6_address_is_bound(config: StreamConfig) -> None:
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        assert runner.run(_serve_one_refused_then_one(config, "::1"))[-1] == "served pub-1"


def test_an_address_that_cannot_be_bound_is_a_clear_error() -> None:
    async def bind() -> None:
        await listen_tls("192.0.2.1", 0, None, 1.0, None, None)  # type: ignore[arg-type]

    with pytest.raises(TransportError, match=r"cannot listen on 192\.0\.2\.1:0"):
        asyncio.run(bind())


@pytest.mark.parametrize(
    ("subject", "outcome"),
    [
        (((("organizationName", "rt"),), (("commonName", "rt-2"),)), "rt-2"),
        (((("organizationName", "rt"),),), "0 common names"),
        (((("commonName", "rt-1"),), (("commonName", "rt-2"),)), "2 common names"),
    ],
)
def test_a_peer_is_named_by_the_one_common_name_of_its_verified_certificate(
    subject: tuple[tuple[tuple[str, str], ...], ...], outcome: str
) -> None:
    """What ``ssl`` decoded of the peer's certificate (``getpeercert()``) names it."""
    cert = {"subject": subject, "issuer": ((("commonName", "rt CA"),),)}
    if outcome.startswith("rt-"):
        assert common_name(cert) == outcome
    else:
        with pytest.raises(PeerRejectedError, match=outcome):
            common_name(cert)


async def _dials(config: StreamConfig) -> dict[str, object]:
    """dial_tls against a listener that answers no SYN, one that never answers TLS, and
    a node; then many dials cancelled at every step. What each one came to."""
    from rt_appliance.transport.listen import dial_tls, set_keepalive

    ctx = client_context(config.tls, "pub-1")
    loop = asyncio.get_running_loop()
    seen: dict[str, object] = {}
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(0)
        port = busy.getsockname()[1]
        held = []
        try:
            for _ in range(4):  # fill the accept queue (length 0 holds one or two)
                s = socket.socket()
                s.setblocking(False)
                s.connect_ex(("127.0.0.1", port))
                held.append(s)
            began = loop.time()
            with pytest.raises(TimeoutError):
                await dial_tls("127.0.0.1", port, ctx, 0.3, 5.0)
            seen["no SYN answered, s"] = loop.time() - began
        finally:
            for s in held:
                s.close()

    ended = asyncio.Event()

    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read()  # until the dialler gives up and closes
        ended.set()
        writer.close()

    mute = await asyncio.start_server(silent, "127.0.0.1", 0)
    async with mute:
        began = loop.time()
        with pytest.raises(TimeoutError):
            await dial_tls("127.0.0.1", mute.sockets[0].getsockname()[1], ctx, 5.0, 0.3)
        seen["no TLS answered, s"] = loop.time() - began
        await asyncio.wait_for(ended.wait(), 5)  # the dialler closed its socket
        seen["closed after the handshake timed out"] = True

    async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(OSError):  # the cancelled dials below hang up at once
            writer.write(await reader.read(5))
            await writer.drain()
        writer.close()

    listener = await listen_tls(
        "127.0.0.1", 0, server_context(config.tls, "rt-1"), 5.0, echo, lambda a, e: None
    )
    try:
        reader, writer = await dial_tls("127.0.0.1", listener.port, ctx, 1.0, 5.0)
        seen["peer"] = peer_name(writer.get_extra_info("ssl_object"))
        set_keepalive(writer, 1.5)
        sock = writer.get_extra_info("socket")
        seen["unacked limit, ms"] = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT)
        writer.write(b"hello")
        seen["echo"] = await asyncio.wait_for(reader.readexactly(5), 5)
        writer.close()

        # dials cut short at every step (TCP, handshake, done) leave no descriptor open
        fds = len(os.listdir("/proc/self/fd"))
        for i in range(60):
            task = asyncio.ensure_future(dial_tls("127.0.0.1", listener.port, ctx, 1.0, 5.0))
            for _ in range(i % 6):
                await asyncio.sleep(0)
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):  # or it connected first
                _, writer = await task
                writer.transport.abort()
        for _ in range(100):  # closes finish on the loop's next turns
            if len(os.listdir("/proc/self/fd")) <= fds:
                break
            await asyncio.sleep(0.02)
        seen["descriptors left over"] = len(os.listdir("/proc/self/fd")) - fds
    finally:
        listener.close()
    return seen


@pytest.mark.parametrize("loop", sorted(LOOPS))
def test_a_dial_ends_within_its_limits_owns_nothing_it_leaves_and_sets_the_unacked_limit(
    config: StreamConfig, loop: str
) -> None:
    """A dial fails within its TCP limit where no SYN is answered and within its
    handshake limit where no TLS is, closing its socket; one that connects names its
    peer and carries the unacknowledged-bytes limit asked for; dials cancelled at any
    step leave no descriptor behind."""
    with asyncio.Runner(loop_factory=LOOPS[loop]) as runner:
        seen = runner.run(_dials(config))
    assert 0.25 < float(seen.pop("no SYN answered, s")) < 0.9, seen  # type: ignore[arg-type]
    assert 0.25 < float(seen.pop("no TLS answered, s")) < 0.9, seen  # type: ignore[arg-type]
    assert seen == {
        "closed after the handshake timed out": True,
        "peer": "rt-1",
        "unacked limit, ms": 1500,
        "echo": b"hello",
        "descriptors left over": 0,
    }
