"""Fuzz the decoders of outside bytes with atheris: ``python -m fuzz.run TARGET|all``.

Each target runs in a child process (:mod:`fuzz.engine`) for ``--seconds``, with its
corpus in ``WORKDIR/TARGET/corpus`` (seeded with valid inputs built by the encoders, so
coverage starts deep, and kept between runs) and whatever it finds (``crash-*``,
``timeout-*``, ``oom-*``) in ``WORKDIR/TARGET/``. The compiled record walk is fuzzed in
its ASan build (:mod:`fuzz.asan`, built into ``WORKDIR/build``). The exit status is 1 if
any target found something; each finding is listed with the command that reproduces it::

    python -m fuzz.run walk --reproduce /tmp/rt-fuzz/walk/crash-...
    python -m fuzz.run walk --minimize /tmp/rt-fuzz/walk/crash-...
"""

from __future__ import annotations

import argparse
import hashlib
import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from fuzz import asan
from fuzz.targets import NAMES, Target, load

__all__ = ["Result", "main"]

REPO = Path(__file__).resolve().parents[1]
DEFAULT_WORKDIR = Path("/tmp/rt-fuzz")
_ARTIFACTS = ("crash-", "timeout-", "oom-", "leak-", "slow-unit-")
# libFuzzer's status lines: "#1234  pulse  cov: 56 ft: 78 corp: 9/1234b ... exec/s: 512 ..."
_STATUS = re.compile(r"^#(\d+)\s+(\w+)\s+cov: (\d+) ft: (\d+) corp: (\d+)/\S+.*?exec/s: (\d+)")
_ECHOED = ("INITED", "pulse", "DONE", "RELOAD")


@dataclass
class Result:
    """What one fuzz run of a target did."""

    target: str
    runs: int = 0
    seconds: float = 0.0
    exec_per_s: int = 0
    cov: int = 0
    ft: int = 0
    corpus: int = 0
    exit_code: int = 0
    findings: list[Path] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not self.findings

    def line(self) -> str:
        verdict = "no crash" if self.ok else f"FAILED (exit {self.exit_code})"
        return (
            f"{self.target:12} {self.runs:>9} runs in {self.seconds:5.0f} s "
            f"({self.exec_per_s:>6} exec/s)  cov {self.cov:>5}  ft {self.ft:>6}  "
            f"corpus {self.corpus:>5}  {verdict}"
        )


def _seed(corpus: Path, target: Target) -> None:
    """Write the target's seeds into its corpus (named by content: rewriting is a no-op)."""
    corpus.mkdir(parents=True, exist_ok=True)
    for data in target.seeds():
        path = corpus / f"seed-{hashlib.sha1(data).hexdigest()[:16]}"
        if not path.exists():
            path.write_bytes(data)


def _engine_command(name: str, walk_so: Path | None, mode: str, *rest: str) -> list[str]:
    so = ["--walk-so", str(walk_so)] if walk_so is not None else []
    return [sys.executable, "-m", "fuzz.engine", name, *so, mode, *rest]


def _environment(
    target: Target, workdir: Path, use_asan: bool
) -> tuple[dict[str, str], Path | None]:
    """The child's environment, and the sanitized walk it loads (if the target runs it)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    env["PYTHONUNBUFFERED"] = "1"
    if not (target.native and use_asan):
        return env, None
    walk_so = asan.build_walk(workdir / "build")
    return asan.sanitizer_env(env), walk_so


def _fuzz(name: str, seconds: int, workdir: Path, corpus: Path | None, use_asan: bool) -> Result:
    target = load(name)
    home = workdir / name
    home.mkdir(parents=True, exist_ok=True)
    corpus = corpus or home / "corpus"
    _seed(corpus, target)
    env, walk_so = _environment(target, workdir, use_asan)
    flags = [
        f"-max_total_time={seconds}",
        f"-max_len={target.max_len}",
        f"-timeout={target.timeout_s}",
        f"-artifact_prefix={home}/",
        "-print_final_stats=1",
        str(corpus),
    ]
    result = Result(name)
    before = set(home.iterdir())
    log_path = home / "fuzz.log"
    print(f"== {name}: {seconds} s, corpus {corpus}, log {log_path}", flush=True)
    started = time.monotonic()
    with open(log_path, "w") as log:
        child = subprocess.Popen(
            _engine_command(name, walk_so, "fuzz", "--", *flags),
            cwd=REPO,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            errors="replace",
            start_new_session=True,
        )
        assert child.stdout is not None
        try:
            for line in child.stdout:
                log.write(line)
                _take(result, line)
                if _echoed(line):
                    print(f"  {line}", end="", flush=True)
            result.exit_code = child.wait()
        except BaseException:
            os.killpg(child.pid, signal.SIGKILL)  # the child's group: libFuzzer may fork
            child.wait()
            raise
    result.seconds = time.monotonic() - started
    result.findings = sorted(
        p for p in set(home.iterdir()) - before if p.name.startswith(_ARTIFACTS)
    )
    return result


def _echoed(line: str) -> bool:
    """Whether a line of the child's output is shown (all of it is in the log): not
    libFuzzer's line per new input, nor atheris's per module it instruments."""
    if line.startswith("#"):
        return any(word in line for word in _ECHOED)
    return not line.startswith("INFO: Instrumenting")


def _take(result: Result, line: str) -> None:
    """Keep the figures of libFuzzer's status and final-statistics lines."""
    if match := _STATUS.match(line):
        runs, _, cov, ft, corpus, speed = match.groups()
        result.runs, result.cov, result.ft = int(runs), int(cov), int(ft)
        result.corpus, result.exec_per_s = int(corpus), int(speed)
    elif line.startswith("stat::number_of_executed_units:"):
        result.runs = int(line.split(":")[-1])
    elif line.startswith("stat::average_exec_per_sec:"):
        result.exec_per_s = int(line.split(":")[-1])


def _report(result: Result) -> None:
    for path in result.findings:
        print(f"  found {path}")
        print(f"    reproduce: python -m fuzz.run {result.target} --reproduce {path}")
        print(f"    minimise:  python -m fuzz.run {result.target} --minimize {path}")
    if not result.ok and not result.findings:
        print(f"  {result.target}: the fuzzer exited {result.exit_code}; see its fuzz.log")


def _replay(mode: str, name: str, path: Path, workdir: Path, use_asan: bool) -> int:
    """Run one input through the target (``once``) or shrink it (``minimize``) in a child
    set up as for fuzzing (the ASan walk when it can be built), so it fails as it did."""
    target = load(name)
    try:
        env, walk_so = _environment(target, workdir, use_asan)
    except (RuntimeError, ImportError) as exc:  # no clang or no atheris: the plain build
        print(f"fuzz: reproducing without ASan ({exc})", file=sys.stderr)
        env, walk_so = _environment(target, workdir, use_asan=False)
    return subprocess.run(
        _engine_command(name, walk_so, mode, str(path.resolve())), cwd=REPO, env=env
    ).returncode


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m fuzz.run", description=__doc__.split("\n")[0])
    parser.add_argument("targets", nargs="+", metavar="TARGET", help=f"all, or of {NAMES}")
    parser.add_argument("--seconds", type=int, default=600, help="per target (default 600)")
    parser.add_argument("--workdir", type=Path, default=DEFAULT_WORKDIR)
    parser.add_argument("--corpus", type=Path, help="corpus directory (one target only)")
    parser.add_argument("--no-asan", action="store_true", help="fuzz the walk's plain build")
    parser.add_argument("--reproduce", type=Path, metavar="FILE", help="run one input once")
    parser.add_argument("--minimize", type=Path, metavar="FILE", help="shrink a failing input")
    args = parser.parse_args(argv)
    names = list(NAMES) if args.targets == ["all"] else args.targets
    unknown = [n for n in names if n not in NAMES]
    if unknown:
        parser.error(f"unknown targets {unknown}; choose from all, {', '.join(NAMES)}")
    if (args.reproduce or args.minimize or args.corpus) and len(names) != 1:
        parser.error("--reproduce, --minimize and --corpus take one target")
    if args.reproduce or args.minimize:
        mode, path = ("once", args.reproduce) if args.reproduce else ("minimize", args.minimize)
        return _replay(mode, names[0], path, args.workdir, not args.no_asan)
    results = []
    for name in names:
        results.append(_fuzz(name, args.seconds, args.workdir, args.corpus, not args.no_asan))
        _report(results[-1])
    print("\n".join(["== summary", *(r.line() for r in results)]))
    return 0 if all(r.ok for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
