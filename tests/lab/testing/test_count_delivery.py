"""count_delivery: every published message exactly once, in each publisher's order."""

from __future__ import annotations

import pytest

from rt_lab.testing.checkers import count_delivery

pytestmark = pytest.mark.unit

A, B = ("trades", "pub-1"), ("quotes", "pub-2")


def test_every_message_once_in_order_is_clean() -> None:
    expected = {A: [1, 2, 3], B: [1, 2]}
    delivered = [("trades", "pub-1", 1), ("quotes", "pub-2", 1), ("trades", "pub-1", 2)]
    delivered += [("quotes", "pub-2", 2), ("trades", "pub-1", 3)]
    report = count_delivery(delivered, expected)
    assert report.clean and not report.examples
    assert (report.published, report.delivered, report.missing) == (5, 5, 0)
    assert report.as_dict()["sources"] == {
        "trades.pub-1": dict.fromkeys(
            ("published", "delivered", "missing", "duplicated", "out_of_order", "unexpected"), 0
        )
        | {"published": 3, "delivered": 3},
        "quotes.pub-2": dict.fromkeys(
            ("published", "delivered", "missing", "duplicated", "out_of_order", "unexpected"), 0
        )
        | {"published": 2, "delivered": 2},
    }


def test_missing_duplicated_and_out_of_order_are_counted_per_source() -> None:
    expected = {A: [1, 2, 3, 4, 5], B: [1, 2, 3]}
    delivered = [
        ("trades", "pub-1", 1),
        ("trades", "pub-1", 3),  # 2 comes later: out of order
        ("trades", "pub-1", 2),
        ("trades", "pub-1", 3),  # twice
        ("trades", "pub-1", 5),  # 4 never
        ("quotes", "pub-2", 1),
        ("quotes", "pub-2", 2),
        ("quotes", "pub-2", 9),  # never published
        ("other", "pub-9", 1),  # a source nobody expected
    ]
    report = count_delivery(delivered, expected)
    a, b = report.sources["trades.pub-1"], report.sources["quotes.pub-2"]
    assert (a.published, a.delivered, a.missing, a.duplicated, a.out_of_order) == (5, 5, 1, 1, 1)
    assert (b.published, b.delivered, b.missing, b.unexpected) == (3, 3, 1, 1)
    assert report.sources["other.pub-9"].unexpected == 1
    assert not report.clean
    assert (report.missing, report.duplicated, report.out_of_order, report.unexpected) == (
        2,
        1,
        1,
        2,
    )
    text = "\n".join(report.examples)
    assert "trades.pub-1: 3 delivered 2 times" in text
    assert "trades.pub-1: 4 (published #4) is missing" in text
    assert "trades.pub-1: 2 (published #2) after a later message" in text
    assert "other.pub-9" in text
    ignoring = count_delivery(delivered, expected, ignore_other_sources=True)
    assert "other.pub-9" not in ignoring.sources


def test_repeated_payloads_may_be_delivered_as_often_as_published() -> None:
    expected = {A: [b"x", b"y", b"x"]}
    assert count_delivery([("trades", "pub-1", p) for p in (b"x", b"y", b"x")], expected).clean
    twice = count_delivery([("trades", "pub-1", p) for p in (b"x", b"x", b"y")], expected)
    assert twice.sources["trades.pub-1"].out_of_order == 1 and twice.missing == 0
    thrice = count_delivery([("trades", "pub-1", p) for p in (b"x", b"y", b"x", b"x")], expected)
    assert thrice.duplicated == 1 and thrice.out_of_order == 0


def test_nothing_delivered_is_all_missing() -> None:
    report = count_delivery([], {A: list(range(1, 101))})
    assert report.missing == 100 and report.delivered == 0
    assert len(report.examples) == 3  # the first few, not all hundred
