"""Imports run one way: the lab (``rt_lab``) imports the product, never the reverse."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

import rt_appliance

pytestmark = pytest.mark.unit

PRODUCT = Path(rt_appliance.__file__).parent


def _lab_references(path: Path, root: Path = PRODUCT.parent) -> list[str]:
    """Every import of rt_lab in a module, and every string naming one of its modules
    (what ``importlib.import_module`` would be handed), as ``file:line: name``."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            names = [node.value]
        found += [
            f"{path.relative_to(root)}:{node.lineno}: {name}"
            for name in names
            if name == "rt_lab" or name.startswith("rt_lab.")
        ]
    return found


def test_the_product_never_imports_the_lab() -> None:
    modules = sorted(PRODUCT.rglob("*.py"))
    assert len(modules) > 50, "the walk must see the whole product"
    references = [ref for module in modules for ref in _lab_references(module)]
    assert references == []


def test_the_walk_sees_an_import_of_the_lab(tmp_path: Path) -> None:
    module = tmp_path / "probe.py"
    module.write_text(
        "import importlib\nfrom rt_lab.demo import cluster\n"
        "importlib.import_module('rt_lab.bench')\nimport rt_laboratory\n"
    )
    assert _lab_references(module, tmp_path) == [
        "probe.py:2: rt_lab.demo",
        "probe.py:3: rt_lab.bench",
    ]


def test_every_product_command_loads_with_the_lab_missing() -> None:
    """`rt` and every product command import with rt_lab unimportable."""
    probe = (
        "import sys\n"
        "sys.modules['rt_lab'] = None\n"
        "import pkgutil, importlib, rt_appliance\n"
        "for info in pkgutil.walk_packages(rt_appliance.__path__, 'rt_appliance.'):\n"
        "    if not info.name.endswith(('.__main__', '_walk')):\n"
        "        importlib.import_module(info.name)\n"
        "print('ok')\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"
