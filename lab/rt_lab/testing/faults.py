"""Network faults for tests: a TCP relay that can round-robin, flip a byte, or be cut."""

from __future__ import annotations

import contextlib
import itertools
import socket
import threading

__all__ = ["TcpRelay"]


class TcpRelay:
    """Relays TCP connections from ``listen`` to ``targets`` (round robin), in threads.

    ``flip_at``: flip one byte of the client-to-target stream at that offset of the
    first connection only, as a faulty network would. :meth:`cut` drops every
    open connection and refuses new ones until :meth:`heal`.
    """

    def __init__(
        self, listen: tuple[str, int], targets: list[tuple[str, int]], flip_at: int | None = None
    ) -> None:
        self._targets = itertools.cycle(targets)
        self._flip_at = flip_at
        self._flipped = threading.Event()
        self._cut = threading.Event()
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        self.connections = 0
        self._server = socket.create_server(listen, reuse_port=False)
        self._server.settimeout(0.2)
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._accept_loop, daemon=True)
        self._thread.start()

    def _accept_loop(self) -> None:
        while not self._stopped.is_set():
            try:
                client, _ = self._server.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            if self._cut.is_set():
                client.close()
                continue
            target = next(self._targets)
            try:
                upstream = socket.create_connection(target, timeout=5)
            except OSError:
                client.close()
                continue
            with self._lock:
                self.connections += 1
                self._sockets += [client, upstream]
            flip = self._flip_at if not self._flipped.is_set() else None
            if flip is not None:
                self._flipped.set()
            threading.Thread(target=self._pipe, args=(client, upstream, flip), daemon=True).start()
            threading.Thread(target=self._pipe, args=(upstream, client, None), daemon=True).start()

    def _pipe(self, src: socket.socket, dst: socket.socket, flip_at: int | None) -> None:
        seen = 0
        try:
            while data := src.recv(65536):
                if flip_at is not None and seen <= flip_at < seen + len(data):
                    buf = bytearray(data)
                    buf[flip_at - seen] ^= 0x01
                    data = bytes(buf)
                seen += len(data)
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)

    @property
    def flipped(self) -> bool:
        return self._flipped.is_set()

    def cut(self) -> None:
        self._cut.set()
        with self._lock:
            for s in self._sockets:
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)
            self._sockets.clear()

    def heal(self) -> None:
        self._cut.clear()

    def close(self) -> None:
        self._stopped.set()
        self.cut()
        self._server.close()
        self._thread.join(timeout=5)
