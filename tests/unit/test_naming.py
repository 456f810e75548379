"""Names on disk: stream file names and publisher directory names round trip."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rt_appliance.errors import UsageError
from rt_appliance.limits import MAX_HOST_BYTES, MAX_ROLL, MAX_SESSION, MAX_TOPIC_BYTES
from rt_appliance.log.naming import (
    file_name,
    is_dedup_topic,
    parse_file_name,
    parse_publisher_dir,
    publisher_dir_name,
    validate_host,
    validate_topic,
)

pytestmark = pytest.mark.unit

WORD = "abcXYZ0189_-"
label = st.text(WORD, min_size=1, max_size=12)
plain_topic = st.text(WORD, min_size=1, max_size=MAX_TOPIC_BYTES - len(".dedup"))
topic = st.one_of(plain_topic, plain_topic.map(lambda t: t + ".dedup"))
host = (
    st.lists(label | st.just("dedup"), min_size=1, max_size=8)
    .map(".".join)
    .filter(lambda h: len(h) <= MAX_HOST_BYTES and not h.startswith("dedup."))
)


@given(st.integers(1, MAX_SESSION), st.integers(0, MAX_ROLL))
def test_file_name_round_trips(session: int, roll: int) -> None:
    name = file_name(session, roll)
    assert name == f"log.{session}.{roll}"
    assert parse_file_name(name) == (session, roll)


@pytest.mark.parametrize(
    "name",
    [
        "log.0.0",  # sessions start at 1
        "log.01.0",
        "log.1.00",
        "log.1",
        "log.1.0.tmp",
        ".log.1.0.new",
        "log.-1.0",
        f"log.{MAX_SESSION + 1}.0",
        f"log.1.{MAX_ROLL + 1}",
        "LOG.1.0",
        "log.1.0\n",
        "log.\u0661.0",  # a non-ASCII digit
    ],
)
def test_other_names_are_not_stream_files(name: str) -> None:
    assert parse_file_name(name) is None


@given(topic, host)
def test_publisher_dir_round_trips(t: str, h: str) -> None:
    name = publisher_dir_name(t, h)
    assert name == f"{t}.{h}"
    assert parse_publisher_dir(name) == (t, h)
    assert is_dedup_topic(t) == t.endswith(".dedup")


def test_publisher_dir_examples() -> None:
    assert parse_publisher_dir("quotes.dedup.pub-1") == ("quotes.dedup", "pub-1")
    assert parse_publisher_dir("quotes.pub-1.example.com") == ("quotes", "pub-1.example.com")
    assert parse_publisher_dir("quotes.dedup") == ("quotes", "dedup")
    assert parse_publisher_dir("a.dedup.dedup") == ("a.dedup", "dedup")
    for bad in ["quotes", "quotes.", ".pub", "quotes..pub", "quo tes.pub", "quotes.dedup."]:
        assert parse_publisher_dir(bad) is None, bad


@given(topic, host)
def test_no_two_pairs_share_a_directory(t: str, h: str) -> None:
    # the dir name must be parsed back to the same pair, so any other split is invalid
    name = publisher_dir_name(t, h)
    for i, ch in enumerate(name):
        if ch != ".":
            continue
        other_t, other_h = name[:i], name[i + 1 :]
        if (other_t, other_h) == (t, h):
            continue
        try:
            validate_topic(other_t)
            validate_host(other_h)
        except UsageError:
            continue
        pytest.fail(f"{name!r} also splits as ({other_t!r}, {other_h!r})")


@pytest.mark.parametrize(
    "bad", ["", "a.b", "a b", "a/b", "t" * (MAX_TOPIC_BYTES + 1), ".dedup", "a.dedup.dedup", "é"]
)
def test_invalid_topics_are_usage_errors(bad: str) -> None:
    with pytest.raises(UsageError):
        validate_topic(bad)


@pytest.mark.parametrize(
    "bad", ["", "a..b", ".a", "a.", "a b", "dedup.a", "h" * (MAX_HOST_BYTES + 1), "a/b"]
)
def test_invalid_hosts_are_usage_errors(bad: str) -> None:
    with pytest.raises(UsageError):
        validate_host(bad)
