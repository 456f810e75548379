"""A copy of the compiled record walk built for fuzzing, used only by fuzz runs.

``_walk.c`` is compiled again with clang, AddressSanitizer and libFuzzer's coverage
(``-fsanitize=address,fuzzer-no-link``) into a build directory outside the tree, so the
extension the package uses is never touched. A fuzz run puts that directory first for
the one module ``rt_appliance.log._walk`` (:class:`BuildFirst`, on ``sys.meta_path``)
and preloads atheris's ASan runtime that has libFuzzer linked in: the sanitized
extension leaves every ``__asan_*`` and ``__sanitizer_cov_*`` symbol to it, and importing
it without the preload fails, so a run cannot fall back to the plain build unnoticed.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import os
import shutil
import subprocess
import sys
import sysconfig
from collections.abc import Sequence
from pathlib import Path

__all__ = [
    "BUILD_FLAGS",
    "MODULE",
    "SOURCE",
    "BuildFirst",
    "build_walk",
    "install",
    "sanitizer_env",
    "undefined_symbols",
]

MODULE = "rt_appliance.log._walk"
SOURCE = Path(__file__).resolve().parents[1] / "rt_appliance" / "log" / "_walk.c"
BUILD_FLAGS = (
    "-fsanitize=address,fuzzer-no-link",
    "-g",
    "-O1",
    "-fno-omit-frame-pointer",
    "-std=c11",
    "-shared",
    "-fPIC",
)


def build_walk(build_dir: Path, compiler: str = "clang") -> Path:
    """Compile ``_walk.c`` into ``build_dir`` unless an up-to-date build is there.

    The result sits at the module's own relative path (``rt_appliance/log/``), with the
    flags it was built with beside it: a change of source or flags rebuilds it.
    """
    cc = shutil.which(compiler)
    if cc is None:
        raise RuntimeError(f"{compiler} not found: apt-get install -y clang (make fuzz does)")
    suffix = importlib.machinery.EXTENSION_SUFFIXES[0]
    target = build_dir / "rt_appliance" / "log" / f"_walk{suffix}"
    stamp = target.with_name("_walk.flags")
    command = [
        cc,
        *BUILD_FLAGS,
        f"-I{sysconfig.get_paths()['include']}",
        str(SOURCE),
        "-lz",
        "-o",
        str(target),
    ]
    fresh = (
        target.exists()
        and target.stat().st_mtime >= SOURCE.stat().st_mtime
        and stamp.exists()
        and stamp.read_text() == " ".join(command)
    )
    if not fresh:
        target.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run(command, check=True)
        stamp.write_text(" ".join(command))
    missing = [s for s in ("__asan_report_load", "__sanitizer_cov") if not _has(target, s)]
    if missing:
        raise RuntimeError(f"{target} lacks {missing}: not built with ASan and coverage")
    return target


def undefined_symbols(path: Path) -> list[str]:
    """The dynamic symbols ``path`` expects from elsewhere (``nm -D --undefined-only``)."""
    out = subprocess.run(
        ["nm", "-D", "--undefined-only", str(path)], check=True, capture_output=True, text=True
    ).stdout
    return [line.split()[-1] for line in out.splitlines() if line.strip()]


def _has(path: Path, prefix: str) -> bool:
    return any(s.startswith(prefix) for s in undefined_symbols(path))


def preload_library() -> Path:
    """atheris's ASan runtime with libFuzzer linked in (see its native extension notes)."""
    import atheris  # type: ignore[import-untyped]  # the fuzz extra; no type information

    library = Path(atheris.path()) / "asan_with_fuzzer.so"
    if not library.exists():
        raise RuntimeError(f"{library} is missing: atheris was installed without it")
    return library


def sanitizer_env(base: dict[str, str]) -> dict[str, str]:
    """The environment of a process that loads the sanitized walk.

    ``PYTHONMALLOC=malloc`` gives every Python allocation its own ``malloc`` block, so
    ASan puts a redzone right after a buffer instead of the rest of a pymalloc arena.
    CPython leaks by design at exit, hence ``detect_leaks=0``. The reader's 4 MiB read
    buffers churn ASan's default 256 MiB quarantine of freed blocks and slow a run
    several times; the walk frees nothing, so a small quarantine hides nothing it does.
    """
    env = dict(base)
    env["LD_PRELOAD"] = str(preload_library())
    env["PYTHONMALLOC"] = "malloc"
    options = ["detect_leaks=0", "quarantine_size_mb=16", "allocator_may_return_null=1"]
    env["ASAN_OPTIONS"] = ":".join([*options, base.get("ASAN_OPTIONS", "")]).rstrip(":")
    symbolizer = shutil.which("llvm-symbolizer")
    if symbolizer is not None:
        env.setdefault("ASAN_SYMBOLIZER_PATH", symbolizer)
    return env


class BuildFirst(importlib.abc.MetaPathFinder):
    """Finds ``module`` at ``path`` ahead of every other finder; leaves the rest alone."""

    def __init__(self, module: str, path: Path) -> None:
        self.module, self.path = module, path

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: object = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname != self.module:
            return None
        return importlib.util.spec_from_file_location(fullname, self.path)


def install(path: Path) -> None:
    """Make ``import rt_appliance.log._walk`` load ``path``; call before ``rt_appliance``
    is first imported (the package imports the walk as it starts)."""
    if MODULE in sys.modules:
        raise RuntimeError(f"{MODULE} was imported before the fuzz build could replace it")
    if "LD_PRELOAD" not in os.environ:
        raise RuntimeError("the sanitized walk needs LD_PRELOAD of atheris's ASan runtime")
    sys.meta_path.insert(0, BuildFirst(MODULE, path))
