"""benchmarks/ lists each of its modules once, as harness, study or support (benchmarks/__init__.py),
and each runs as `python -m benchmarks.X`: no module edits sys.path to find qkv or its neighbours."""

from __future__ import annotations

import ast
from pathlib import Path

import benchmarks

ROOT = Path(benchmarks.__file__).parent


def test_every_benchmark_module_is_listed_once_by_its_kind() -> None:
    listed = [*benchmarks.HARNESS, *benchmarks.STUDIES, *benchmarks.SUPPORT]
    modules = sorted(p.stem for p in ROOT.glob("*.py") if p.stem != "__init__")
    assert sorted(listed) == modules  # each once: a new script says what kind it is


def test_no_benchmark_edits_sys_path() -> None:
    for path in [*ROOT.glob("*.py"), *ROOT.glob("investigations/*.py")]:
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and node.attr == "path":
                assert not (isinstance(node.value, ast.Name) and node.value.id == "sys"), path
