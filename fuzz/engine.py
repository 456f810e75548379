"""The process that runs one target: fuzzing it under atheris, or one input once.

Started by :mod:`fuzz.run`, which sets its environment (the ASan preload for the
compiled walk) and reads its output::

    python -m fuzz.engine TARGET [--walk-so SO] fuzz -- LIBFUZZER_FLAGS... CORPUS
    python -m fuzz.engine TARGET [--walk-so SO] once FILE
    python -m fuzz.engine TARGET [--walk-so SO] minimize FILE

An input is replayed (``once``, ``minimize``) with the decoders set up as they were
fuzzed: the same walk build, the same JSON implementation. atheris is imported only to
fuzz, so replaying also works without the fuzz extra.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from fuzz import asan
from fuzz.minimize import minimize
from fuzz.targets import TRACED, Target, load

__all__ = ["main"]


def _banner(target: Target, walk_so: Path | None) -> None:
    """Say which walk this process runs, and refuse to go on with the wrong one."""
    line = f"fuzz: target {target.name}"
    if target.native:
        from fuzz.targets.walk import native

        module = native()
        where = "none (the Python walk only)" if module is None else module.__file__
        line += f"; {asan.MODULE} from {where}"
        if walk_so is not None and (module is None or Path(str(module.__file__)) != walk_so):
            raise RuntimeError(f"{asan.MODULE} is not the sanitized build {walk_so}")
    print(line, flush=True)


def _pure_python_json() -> None:
    """Make the next ``import json`` the pure-Python implementation (``_json``, the C
    accelerator, made unimportable), so that tracing it shows the fuzzer JSON's branches."""
    for name in [m for m in sys.modules if m == "json" or m.startswith("json.")]:
        del sys.modules[name]
    sys.modules["_json"] = None  # type: ignore[assignment]  # None: "cannot be imported"


def _fuzz(name: str, walk_so: Path | None, flags: list[str]) -> None:
    import atheris  # type: ignore[import-untyped]  # the fuzz extra; no type information

    with atheris.instrument_imports(include=list(TRACED[name])):
        target = load(name)
    _banner(target, walk_so)
    atheris.Setup([sys.argv[0], *flags], target.check)
    atheris.Fuzz()  # exits the process: 0 when the time is up, non-zero on a crash


def _once(target: Target, path: Path) -> int:
    target.check(path.read_bytes())  # a failure raises: Python prints it, the exit is 1
    print(f"fuzz: {path} passes {target.name}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m fuzz.engine")
    parser.add_argument("target")
    parser.add_argument("--walk-so", type=Path, help="the sanitized build of the record walk")
    parser.add_argument("mode", choices=("fuzz", "once", "minimize"))
    parser.add_argument("rest", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    if args.walk_so is not None:
        asan.install(args.walk_so)
    if "json" in TRACED[args.target]:
        _pure_python_json()
    if args.mode != "fuzz":
        target = load(args.target)
        _banner(target, args.walk_so)
        path = Path(args.rest[0])
        return _once(target, path) if args.mode == "once" else minimize(target, path)
    flags = args.rest[1:] if args.rest[:1] == ["--"] else args.rest
    _fuzz(args.target, args.walk_so, flags)
    return 0


if __name__ == "__main__":
    sys.exit(main())
