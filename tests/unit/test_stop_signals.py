"""SIGTERM sets the stop event even when it lands while the main thread holds the
event's lock (inside ``Event.wait()``): a handler calling ``set()`` itself hangs there."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

SCRIPT = textwrap.dedent(
    """
    import os, signal, sys
    from rt_appliance.daemons.stop_signals import stop_event_on

    stop = stop_event_on([signal.SIGTERM])
    with stop._cond:  # what Event.wait() holds around its wait, on this main thread
        os.kill(os.getpid(), signal.SIGTERM)
        for _ in range(10000):  # the handler runs between these bytecodes
            pass
        print("handled while the lock was held", flush=True)
    print("stopped" if stop.wait(5) else "not stopped", flush=True)
    """
)

NAIVE = SCRIPT.replace(
    "stop = stop_event_on([signal.SIGTERM])",
    "import threading\n"
    "stop = threading.Event()\n"
    "signal.signal(signal.SIGTERM, lambda *_: stop.set())",
)


def _run(script: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=30
    )


def test_a_signal_while_the_event_lock_is_held_still_stops() -> None:
    done = _run(SCRIPT)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[:2] == ["handled while the lock was held", "stopped"]


def test_the_naive_handler_would_hang_there() -> None:
    """The hazard is real: the same script with ``stop.set()`` in the handler never ends."""
    with pytest.raises(subprocess.TimeoutExpired):
        subprocess.run([sys.executable, "-c", NAIVE], capture_output=True, timeout=3)
