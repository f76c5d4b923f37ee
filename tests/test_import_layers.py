"""The import layers: every import in src/qkv (top-level, inside functions, under TYPE_CHECKING)
is one that the layer table of docs/architecture.md allows, and no modules import each other in
a cycle. The table is read from the doc, so the doc and this test cannot disagree; run with -s to
see the graph of packages."""

from __future__ import annotations

import ast
import re
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src"
DOC = ROOT / "docs" / "architecture.md"
HEADER = "| layer | what it holds | may import |"
EVERYTHING_BELOW = "everything below"


def layer_table(text: str) -> dict[str, set[str] | None]:
    """The doc's table, its rows in order (bottom layer first): layer -> the layers its row names
    (None: "everything below"; words in parentheses are notes). A layer is a package or module of qkv as the first column names
    it: `model/` -> "model", `config.py` -> "config", `__init__.py` -> "__init__"."""
    lines = text.splitlines()
    start = lines.index(HEADER) + 2  # past the header and its |---| line
    table: dict[str, set[str] | None] = {}
    for line in lines[start:]:
        if not line.startswith("|"):
            break
        first, _, allowed = (cell.strip() for cell in line.strip("|").split("|"))
        name = re.match(r"\[`([^`]+)`\]", first)
        assert name, f"docs/architecture.md: a layer row names no layer: {line[:60]}"
        layer = name[1].removesuffix("/").removesuffix(".py")
        named = re.sub(r"\([^)]*\)", "", allowed)  # a note in parentheses names no layer
        may = None if allowed == EVERYTHING_BELOW else set(re.findall(r"`([^`]+)`", named))
        table[layer] = may
    return table


def module_names() -> dict[str, Path]:
    """Every module of src/qkv by its dotted name (a package by its own: qkv.model)."""
    out = {}
    for path in sorted((SRC / "qkv").rglob("*.py")):
        parts = path.relative_to(SRC).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def imported(module: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The modules of qkv that `module` imports anywhere in its file, each the deepest module an
    import names (`from ..model.cache import X` -> qkv.model.cache; `from . import x` ->
    qkv.PACKAGE.x where x is a module)."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    named = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            named += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1])
                base = f"{anchor}.{base}" if base else anchor
            named += [f"{base}.{alias.name}" for alias in node.names]
    found = set()
    for name in named:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        if name and name != module:
            found.add(name)
    return found


def layer_of(module: str) -> str:
    """qkv.model.cache -> "model"; qkv.config -> "config"; qkv -> "__init__"."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def import_graph() -> dict[str, set[str]]:
    modules = module_names()
    return {m: imported(m, path, modules) for m, path in modules.items()}


def package_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    out: dict[str, set[str]] = defaultdict(set)
    for module, targets in graph.items():
        out[layer_of(module)] |= {layer_of(t) for t in targets} - {layer_of(module)}
    return dict(out)


def describe(packages: dict[str, set[str]]) -> str:
    return "\n".join(f"  {p} -> {', '.join(sorted(t)) or '-'}" for p, t in sorted(packages.items()))


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while not component or component[-1] != v:
                component.append(stack.pop())
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def allowed_layers(table: dict[str, set[str] | None]) -> dict[str, set[str]]:
    """Each layer's row, "everything below" read as every row above it in the table."""
    order = list(table)
    return {
        layer: set(order[: order.index(layer)]) if may is None else may
        for layer, may in table.items()
    }


def test_the_layer_table_lists_every_layer_once_each_above_what_it_imports() -> None:
    table = layer_table(DOC.read_text())
    layers = {layer_of(m) for m in module_names()}
    assert set(table) == layers, (
        f"docs/architecture.md's layer table: missing {sorted(layers - set(table))}, "
        f"naming no code {sorted(set(table) - layers)}"
    )
    order = list(table)
    for layer, may in allowed_layers(table).items():
        above = may - set(order[: order.index(layer)])
        assert not above, f"docs/architecture.md: {layer} may import {sorted(above)}, listed later"


def test_every_import_goes_down_the_layers_and_no_modules_import_in_a_cycle() -> None:
    graph = import_graph()
    packages = package_graph(graph)
    print(f"\nimports between packages (docs/architecture.md):\n{describe(packages)}")
    table = layer_table(DOC.read_text())
    allowed = allowed_layers(table)
    upward = [
        f"  {m} ({layer_of(m)}) imports {t} ({layer_of(t)}): {layer_of(m)} may import "
        f"{', '.join(sorted(allowed[layer_of(m)])) or 'nothing of qkv'}"
        for m, targets in sorted(graph.items())
        for t in sorted(targets)
        if layer_of(t) != layer_of(m) and layer_of(t) not in allowed[layer_of(m)]
    ]
    unused = [
        f"  {layer} may import {sorted(may - packages.get(layer, set()))}, and none of it does"
        for layer, may in table.items()
        if may is not None and may - packages.get(layer, set())
    ]
    found = cycles(graph)
    assert not (upward or unused or found), (
        "imports against docs/architecture.md's layer table:\n"
        + "\n".join(upward + unused + [f"  a cycle: {' <-> '.join(c)}" for c in found])
        + f"\nthe imports between packages:\n{describe(packages)}"
    )


def test_no_two_modules_share_a_name() -> None:
    """A module's file name says what it holds and names one module: two files with one name
    (`__init__.py` aside) would be told apart only by their folders."""
    folders: dict[str, list[str]] = defaultdict(list)
    for path in sorted((SRC / "qkv").rglob("*.py")):
        if path.name != "__init__.py":
            folders[path.name].append(str(path.parent.relative_to(SRC)))
    repeated = {name: where for name, where in folders.items() if len(where) > 1}
    assert not repeated, f"module names used more than once in src/qkv: {repeated}"
