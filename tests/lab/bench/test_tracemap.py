"""The latency trace's bookkeeping: trace lines in, per-step times of a message out."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from rt_lab.bench.tracemap import STEPS, Message, Trace, step_times, summarize

NODES = ["rt-1", "rt-2", "rt-3"]
INPUT = "trades.pub-1"
MS = 1_000_000


def _lines(*events: tuple[int, str, str, object]) -> list[str]:
    out = []
    for t, point, key, values in events:
        vals = values if isinstance(values, tuple) else (values,)
        out.append(f"{t * MS} {point} {key} {' '.join(map(str, vals))}\n")
    return out


def _events() -> list[tuple[str, list[str]]]:
    """A message ending at input position 500 (published at 0 ms) through every step,
    with a batch before it (ending at 300) to show marks are matched by position."""
    t = _Collect()
    t.add_lines(
        "push-client-pub-1",
        _lines(
            (1, "send", f"rt-1/{INPUT}", 300),
            (2, "send", f"rt-1/{INPUT}", 500),
            (3, "send", f"rt-2/{INPUT}", 500),
            (9, "send", f"rt-3/{INPUT}", 500),
        ),
    )
    for node, at in (("rt-1", 4), ("rt-2", 5), ("rt-3", 20)):
        t.add_lines(
            f"push-server-{node}",
            _lines((at, "in", f"{node}/{INPUT}", 500), (at + 1, "synced", f"{node}/{INPUT}", 500)),
        )
    t.add_lines(
        "sequencer-rt-1",
        _lines(
            (7, "reported", f"rt-2/{INPUT}", 500),
            (8, "planned", INPUT, 500),
            (9, "proposed", INPUT, 500),
            (10, "jsynced", "rt-1", 41),
            (12, "answer", "rt-2", 41),
            (31, "answer", "rt-3", 41),
            (12, "commit", "rt-1", 41),
            (13, "apply", "rt-1", 40),  # the batch before: index 40, seq 7
            (13, "applied", INPUT, (300, 7)),
            (13, "apply", "rt-1", 41),
            (13, "applied", INPUT, (500, 8)),
            (14, "merged", "-", (7, 1000)),
            (15, "merged", "-", (8, 2000)),
        ),
    )
    t.add_lines("sequencer-rt-2", _lines((10, "entries", "rt-2", 41), (11, "jsynced", "rt-2", 41)))
    t.add_lines("sequencer-rt-3", _lines((25, "entries", "rt-3", 41), (30, "jsynced", "rt-3", 41)))
    t.add_lines(
        "pull-server-rt-2",
        _lines((16, "pulled", "rt-2/sub-1", 1000), (17, "pulled", "rt-2/sub-1", 2000)),
    )
    t.add_lines("pull-client-sub-1", _lines((18, "copy", "sub-1", 2000)))
    t.add_lines("subscriber-app", _lines((19, "delivered", "pub-1/trades", 0)))
    return t.events


def _trace() -> Trace:
    t = Trace()
    for process, lines in _events():
        t.add_lines(process, lines)
    return t


class _Collect:
    """Takes ``add_lines`` calls as :class:`Trace` does, keeping them as they came."""

    def __init__(self) -> None:
        self.events: list[tuple[str, list[str]]] = []

    def add_lines(self, process: str, lines: list[str]) -> None:
        self.events.append((process, lines))


def test_every_step_of_a_message_is_found_by_its_position() -> None:
    msg = Message(INPUT, 500, 0, "pub-1", "trades")
    times = step_times(_trace(), msg, "rt-1", NODES, "sub-1")
    got = {k: (v // MS if v is not None else None) for k, v in times.items()}
    assert list(got) == [name for name, _ in STEPS]
    assert got == {
        "published": 0,
        "sent": 3,  # the second node to be sent to: a majority of 3
        "in": 5,
        "synced": 6,
        "reported": 7,  # the leader's own (5) and rt-2's report (7): a majority
        "planned": 8,
        "proposed": 9,
        "journal leader": 10,
        "entries follower": 10,  # the first follower: with the leader, a majority
        "journal follower": 11,
        "answered": 12,  # rt-2's answer, not rt-3's
        "committed": 12,
        "applied": 13,
        "merged": 15,  # seq 8, not the batch before
        "pulled": 17,  # merged position 2000, where seq 8 ends
        "copied": 18,
        "delivered": 19,
    }


def test_a_message_not_yet_merged_has_no_later_steps() -> None:
    msg = Message(INPUT, 900, 1, "pub-1", "trades")
    got = step_times(_trace(), msg, "rt-1", NODES, "sub-1")
    assert got["sent"] is None and got["planned"] is None
    assert got["merged"] is None and got["delivered"] is None


def test_summary_gives_time_since_publish_and_since_the_step_before() -> None:
    msg = Message(INPUT, 500, 0, "pub-1", "trades")
    rows = summarize([step_times(_trace(), msg, "rt-1", NODES, "sub-1")])
    by_name = {name: (since, step) for name, since, step in rows}
    assert by_name["merged"] == ([15.0], [2.0])
    assert by_name["delivered"] == ([19.0], [1.0])
    assert len(rows) == len(STEPS) - 1


def test_a_line_cut_short_is_skipped() -> None:
    t = Trace()
    t.add_lines("push-server-rt-1", ["5000000 in rt-1/x 10\n", "6000000 in rt-1/x\n"])
    assert t.reached("push-server-rt-1", "in", "rt-1/x", 10) == 5_000_000
    assert t.reached("push-server-rt-1", "in", "rt-1/x", 11) is None


def test_daemons_write_trace_files_only_when_asked(tmp_path: Path) -> None:
    code = (
        "from rt_appliance import trace\n"
        "print(trace.start('push-server-rt-1'))\n"
        "trace.event('in', 'rt-1/x', 7)\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "RT_TRACE_DIR"}
    off = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert off.stdout.strip() == "False"
    on = subprocess.run(
        [sys.executable, "-c", code],
        env=env | {"RT_TRACE_DIR": str(tmp_path)},
        capture_output=True,
        text=True,
        check=True,
    )
    assert on.stdout.strip() == "True"
    trace = Trace.load(tmp_path)
    assert trace.reached("push-server-rt-1", "in", "rt-1/x", 7) is not None


def test_the_node_layout_is_traced_by_one_process_per_node(tmp_path: Path) -> None:
    """With ``rt node`` every role of a node writes to one file (``node-<name>``) and the
    subscribing application's own pull client marks the copy in the application's file:
    every step is found as with a daemon per role."""
    files: dict[str, list[str]] = {}
    for process, lines in _events():
        role, _, host = process.rpartition("-rt-")
        if role in ("push-server", "sequencer", "pull-server"):
            process = f"node-rt-{host}"
        elif process == "pull-client-sub-1":
            process = "subscriber-app"
        files.setdefault(process, []).extend(lines)
    for n, (process, lines) in enumerate(files.items()):
        (tmp_path / f"{process}-{100 + n}.trace").write_text("".join(lines))
    msg = Message(INPUT, 500, 0, "pub-1", "trades")
    expected = step_times(_trace(), msg, "rt-1", NODES, "sub-1")
    got = step_times(Trace.load(tmp_path), msg, "rt-1", NODES, "sub-1")
    assert got == expected
    assert got["copied"] == 18 * MS and got["pulled"] == 17 * MS
