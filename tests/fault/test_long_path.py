"""A stream directory deep under long path components, close to PATH_MAX, works end to end."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from rt_appliance import Publisher, Subscriber
from rt_appliance.log.recovery import verify_directory
from tests.helpers import check_whole_log, payloads

pytestmark = pytest.mark.fault

PATH_MAX = os.pathconf("/", "PC_PATH_MAX")


def test_very_long_directory_path(tmp_path: Path) -> None:
    topic, host = "t" * 100, "h" * 60 + "." + "example" * 8
    component = "d" * 200
    # the longest name the writer makes is the directory's ".log.X.Y.new" while rolling
    longest_leaf = len(f"/{topic}.{host}/.log.1.99.new")
    depth = (PATH_MAX - 1 - len(str(tmp_path)) - longest_leaf) // (len(component) + 1)
    root = tmp_path.joinpath(*[component] * depth)
    with Publisher(root, topic, host, roll_bytes=1024) as pub:
        sent = [b"m%03d" % i * 20 for i in range(40)]
        for body in sent:
            pub.publish(body)
        directory = pub.directory
    assert len(str(directory / ".log.1.99.new")) > PATH_MAX - 200
    assert len(str(directory / ".log.1.99.new")) < PATH_MAX
    messages = list(Subscriber(directory).read())
    assert payloads(messages) == sent
    assert {(m.topic, m.host) for m in messages} == {(topic, host)}
    assert len(verify_directory(directory)) > 3
    with Publisher(root, topic, host, roll_bytes=1024) as pub:  # a second session, recovery scan
        pub.publish(b"again")
    check_whole_log(directory, [*sent, b"again"])
