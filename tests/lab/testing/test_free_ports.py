"""Ports a local stream listens on stay out of the kernel's ephemeral range: a chaos run
once had a push server fail to restart ("address already in use") because, while it was
down, an outgoing connection had been given its port as a local port."""

from __future__ import annotations

import socket
from pathlib import Path

from rt_lab.testing.stream import free_ports, listen_port_range

ADDRESSES = ["127.0.0.1", "127.0.0.2", "127.0.0.3"]


def test_listening_ports_are_never_ones_the_kernel_gives_outgoing_connections() -> None:
    low, high = (int(v) for v in Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
    first, last = listen_port_range()
    assert last < low or first > high
    ports = free_ports(ADDRESSES, 200)
    assert len(set(ports)) == 200
    assert not [p for p in ports if low <= p <= high]
    for port in ports[:10]:  # and they are free on every address
        for address in ADDRESSES:
            with socket.socket() as s:
                s.bind((address, port))
