"""The atheris harnesses of ``fuzz/``, run as plain functions, without atheris.

``make fuzz`` runs each harness under atheris for minutes (the compiled walk built with
AddressSanitizer); here each one takes its seeds and a few hundred random and mutated
inputs, so a harness that breaks, or a decoder change that breaks a harness's contract,
shows up in ``make test``. The last tests check that the harnesses do catch what they
are there to catch.
"""

from __future__ import annotations

import pickle
import random
from pathlib import Path

import pytest

from fuzz import run
from fuzz.minimize import shrink
from fuzz.targets import NAMES, Target, load
from fuzz.targets import raft as raft_target
from fuzz.targets import walk as walk_target
from rt_appliance.log import scan as scan_module

pytestmark = pytest.mark.unit


def _mutated(seed: bytes, rnd: random.Random) -> bytes:
    """``seed`` with a few bytes changed, inserted, removed or repeated."""
    data = bytearray(seed)
    for _ in range(rnd.randint(1, 4)):
        roll = rnd.random()
        if roll < 0.4 and data:
            data[rnd.randrange(len(data))] = rnd.randrange(256)
        elif roll < 0.6:
            data.insert(rnd.randrange(len(data) + 1), rnd.randrange(256))
        elif roll < 0.8 and data:
            at = rnd.randrange(len(data))
            del data[at : at + rnd.randint(1, 8)]
        else:
            at = rnd.randrange(len(data) + 1)
            data[at:at] = data[at : at + rnd.randint(1, 32)]
    return bytes(data)


@pytest.mark.parametrize("name", NAMES)
def test_each_target_passes_its_seeds(name: str) -> None:
    target = load(name)
    seeds = target.seeds()
    assert seeds and all(len(s) <= target.max_len for s in seeds)
    for seed in seeds:
        target.check(seed)


@pytest.mark.parametrize("name", NAMES)
def test_each_target_passes_random_and_mutated_inputs(name: str) -> None:
    target = load(name)
    rnd = random.Random(name)
    seeds = target.seeds()
    for _ in range(300):
        target.check(rnd.randbytes(rnd.randrange(300)))
    for _ in range(200):
        target.check(_mutated(rnd.choice(seeds), rnd))


@pytest.mark.skipif(walk_target.native() is None, reason="built without the compiled walk")
def test_the_walk_harness_catches_a_compiled_walk_that_disagrees(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    real = walk_target.native()
    assert real is not None
    real_walk, real_columns = real.walk, real.columns

    class OneRecordShort:
        columns = real_columns

        @staticmethod
        def walk(*args: object) -> object:
            offsets, stamps, ids, end, failed = real_walk(*args)
            return offsets[:-1], stamps, ids, end, failed

    monkeypatch.setattr(scan_module, "_native", OneRecordShort)
    with pytest.raises(AssertionError, match="compiled"):
        walk_target.check(walk_target.seeds()[0])


def test_the_raft_harness_catches_a_decoder_that_builds_a_global(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    evil = raft_target.input_for(pickle.dumps({"type": "x", "f": pickle.loads}, protocol=4))
    raft_target.check(evil)  # the real decoder refuses it
    monkeypatch.setattr(raft_target, "restricted_loads", pickle.loads)
    with pytest.raises(AssertionError, match="built"):
        raft_target.check(evil)


def test_a_saved_input_replays_without_atheris(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    saved = tmp_path / "input"
    saved.write_bytes(load("frames").seeds()[1])
    assert run.main(["frames", "--reproduce", str(saved), "--workdir", str(tmp_path)]) == 0
    assert f"{saved} passes frames" in capfd.readouterr().out


def test_shrinking_keeps_only_the_bytes_that_fail() -> None:
    def check(data: bytes) -> None:
        assert b"!" not in data[1:], "a ! after the first byte"

    target = Target("toy", check, lambda: [])
    assert shrink(target, b"abc!def!ghi") == b"\0!"
