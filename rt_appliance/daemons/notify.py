"""systemd's notify protocol: the one module that speaks it (through ``sdnotify``).

A unit with ``Type=notify`` learns from its daemon:

* ``READY=1`` once the daemon serves (each daemon says when: see ``Served``);
* ``STATUS=<one line>`` whenever that line changes (``systemctl status`` shows it);
* ``WATCHDOG=1`` every half ``WatchdogSec``, sent by a task on the daemon's own event
  loop, so a loop that hangs stops the pings and systemd restarts the daemon;
* ``STOPPING=1`` when SIGTERM or SIGINT starts a clean stop.

Outside systemd (no ``NOTIFY_SOCKET``) every call does nothing. The variables systemd
sets are read once and removed from the environment, so child processes do not
inherit them.

Test-only hook: with ``RT_TEST_HOOKS=1`` in the environment, SIGUSR2 blocks the event
loop for ``RT_TEST_FREEZE_S`` seconds (default 5), as a wedged loop would. Without that
variable nothing is installed.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import time
from collections.abc import Callable
from typing import Protocol

import sdnotify

from rt_appliance.limits import STATUS_LINE_EVERY_S, WATCHDOG_PING_MIN_S

__all__ = ["Notifier", "Served", "install_test_hooks", "keep_alive"]

log = logging.getLogger(__name__)


class Served(Protocol):
    """What a daemon tells the runner: when it serves, and how it is doing in one line.
    One that has something to do on a clean stop before it is cancelled also has an
    ``async leave()`` (a node hands its leadership over)."""

    ready: asyncio.Event

    def status_line(self) -> str: ...


class Notifier:
    """Messages to systemd's notify socket, if there is one."""

    def __init__(self, environ: dict[str, str] | None = None) -> None:
        env = os.environ if environ is None else environ
        socket_path = env.get("NOTIFY_SOCKET")
        self.watchdog_s = _watchdog_interval(env)
        self._notifier = sdnotify.SystemdNotifier() if socket_path else None
        self._status: str | None = None
        for name in ("NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID"):
            env.pop(name, None)
        if socket_path:
            log.info(
                "systemd notify socket %s; watchdog %s",
                socket_path,
                f"every {self.watchdog_s:.1f}s" if self.watchdog_s else "off",
            )

    @property
    def enabled(self) -> bool:
        return self._notifier is not None

    def _send(self, message: str) -> None:
        if self._notifier is not None:
            self._notifier.notify(message)

    def ready(self, status: str) -> None:
        self._status = status
        self._send(f"READY=1\nSTATUS={status}")
        log.info("ready: %s", status)

    def status(self, status: str) -> None:
        if status != self._status:
            self._status = status
            self._send(f"STATUS={status}")

    def watchdog(self) -> None:
        self._send("WATCHDOG=1")

    def stopping(self) -> None:
        self._send("STOPPING=1\nSTATUS=stopping")


def _watchdog_interval(env: dict[str, str] | os._Environ[str]) -> float | None:
    """Half of ``WatchdogSec`` if systemd set one for this very process, else None."""
    usec, pid = env.get("WATCHDOG_USEC"), env.get("WATCHDOG_PID")
    if not usec or (pid and pid != str(os.getpid())):
        return None
    try:
        return max(int(usec) / 2_000_000, WATCHDOG_PING_MIN_S)
    except ValueError:
        return None


async def keep_alive(notifier: Notifier, status: Callable[[], str]) -> None:
    """On the daemon's loop: watchdog pings and status updates until cancelled (with
    no systemd to tell, nothing: an idle daemon does not wake for it)."""
    if not notifier.enabled:
        return
    every = notifier.watchdog_s or STATUS_LINE_EVERY_S
    while True:
        if notifier.watchdog_s:
            notifier.watchdog()
        try:
            notifier.status(status())
        except Exception:  # a status line must never stop the pings
            log.exception("cannot make the status line")
        await asyncio.sleep(every)


def install_test_hooks(loop: asyncio.AbstractEventLoop) -> None:
    """SIGUSR2 blocks ``loop`` (tests prove the pings stop); only with RT_TEST_HOOKS=1."""
    if os.environ.get("RT_TEST_HOOKS") != "1":
        return
    freeze_s = float(os.environ.get("RT_TEST_FREEZE_S", "5"))

    def freeze() -> None:
        log.warning("test hook: blocking the event loop for %.1fs", freeze_s)
        time.sleep(freeze_s)

    loop.add_signal_handler(signal.SIGUSR2, freeze)
