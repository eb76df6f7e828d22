"""The package's import graph: no module imports another's private (underscore) names, no two bertfeat modules
import each other, directly or through others (every import counts, a deferred one inside a function too), and no
layer's folder imports one above it (``LAYERS``: ARCHITECTURE.md's order, bottom first); every module is named in
ARCHITECTURE.md's row for its layer and in its folder's ``__init__.py`` docstring.

Read from the source with ``ast``, so the tests need nothing imported and name the file and line at fault.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

PKG = Path(__file__).resolve().parent.parent / "bertfeat"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PKG.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in sorted(PKG.rglob("*.py"))}


def imports(mod: str, path: Path):
    """(line, imported module, imported name or None) for every bertfeat import in one module."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    is_pkg = path.name == "__init__.py"
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name.split(".")[0] == "bertfeat":
                    yield node.lineno, a.name, None
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = mod.split(".")
                base = base[: len(base) - node.level + (1 if is_pkg else 0)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.split(".")[0] != "bertfeat":
                continue
            for a in node.names:
                if f"{target}.{a.name}" in MODULES:  # `from . import gemm`: the submodule itself
                    yield node.lineno, f"{target}.{a.name}", None
                else:
                    yield node.lineno, target, a.name


def test_the_graph_is_read():
    """The parser sees the imports (a guard against a test that passes by reading nothing)."""
    edges = {(m, t) for m, p in MODULES.items() for _, t, _ in imports(m, p)}
    assert ("bertfeat.model.bert", "bertfeat.ops.gemm") in edges
    assert ("bertfeat.run.local", "bertfeat.run.chunks") in edges
    assert len(MODULES) > 40


def test_no_module_imports_a_private_name_of_another():
    bad = [f"{MODULES[m].relative_to(PKG.parent)}:{line} imports {name} from {target}"
           for m, p in MODULES.items() for line, target, name in imports(m, p)
           if name and name.startswith("_") and not name.startswith("__") and target != m]
    assert not bad, "\n".join(bad)


def test_no_import_cycle():
    graph = {m: {t for _, t, _ in imports(m, p) if t in MODULES and t != m} for m, p in MODULES.items()}
    cycles = []
    state: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(m: str, path: list[str]):
        state[m] = 1
        for t in sorted(graph[m]):
            if state.get(t) == 1:
                cycles.append(" -> ".join(path[path.index(t):] + [t]))
            elif t not in state:
                visit(t, path + [t])
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m, [m])
    assert not cycles, "import cycles:\n" + "\n".join(cycles)


# ARCHITECTURE.md's layers, bottom first: a module imports only its own layer's modules and those listed before it.
LAYERS = [("version", "errors"), ("atomic",), ("checks",), ("console",), ("ops",), ("readers",), ("model",),
          ("cache",), ("features",), ("pca",), ("run",), ("sklearn", "inspection", "verify", "sweep"), ("cli",),
          ("bertfeat", "__main__")]
RANK = {name: i for i, names in enumerate(LAYERS) for name in names}


def layer_of(mod: str) -> str:
    """bertfeat.model.encoder -> model; bertfeat.errors -> errors; bertfeat -> bertfeat."""
    parts = mod.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def test_every_layer_is_ranked_and_the_top_level_stays_small():
    """Each top-level module or folder of the package has its place in LAYERS (a new one must be placed), and at
    most 12 modules sit at the top level (the rest live in a layer's folder)."""
    tops = {layer_of(m) for m in MODULES}
    assert tops == set(RANK), (tops - set(RANK), set(RANK) - tops)
    top_modules = [p.name for p in PKG.glob("*.py")]
    assert len(top_modules) <= 12, sorted(top_modules)


def test_every_layer_folder_says_what_it_owns():
    for folder in sorted(p.parent for p in PKG.glob("*/__init__.py")):
        doc = ast.get_docstring(ast.parse((folder / "__init__.py").read_text(encoding="utf-8")))
        assert doc and len(doc) > 80, f"{folder.name}/__init__.py needs a docstring saying what the folder owns"


def architecture_rows() -> dict[str, str]:
    """ARCHITECTURE.md's table of layers: its second cell (the folder or the top-level modules) -> the whole row."""
    text = (PKG.parent / "ARCHITECTURE.md").read_text(encoding="utf-8")
    return {line.split("|")[2].strip(): line for line in text.splitlines() if re.match(r"\| [a-z]", line)}


def unnamed_modules(folder: Path, text: str) -> list[str]:
    """The modules of ``folder`` (``__init__`` aside) that ``text`` does not name (as ``x.py`` or ````x````)."""
    return [p.name for p in sorted(folder.glob("*.py")) if p.name != "__init__.py"
            and not re.search(rf"(?<![\w/])({re.escape(p.name)}|``{p.stem}``)", text)]


def test_every_module_is_named_where_its_layer_is_described():
    """A newcomer finds each module in ARCHITECTURE.md's row for its layer and in its folder's docstring, and every
    module a row names exists (a module added, renamed or removed shows here)."""
    rows = architecture_rows()
    top = " ".join(cell for cell in rows if not cell.endswith("/`"))
    missing = [p.name for p in sorted(PKG.glob("*.py")) if f"`{p.name}`" not in top]
    gone = [n for n in re.findall(r"`(\w+\.py)`", top) if not (PKG / n).is_file()]
    for folder in sorted(p.parent for p in PKG.glob("*/__init__.py")):
        row = rows.get(f"`{folder.name}/`", "")
        missing += [f"{folder.name}/{n}" for n in unnamed_modules(folder, row)]
        named = re.findall(r"`((?:\w+/)?\w+\.py)`", row.split("|")[3])
        gone += [n for n in named if not (folder / n).is_file() and not (PKG / n).is_file()]
        doc = ast.get_docstring(ast.parse((folder / "__init__.py").read_text(encoding="utf-8"))) or ""
        missing += [f"{folder.name}/{n} (its __init__.py)" for n in unnamed_modules(folder, doc)]
    assert not missing, f"modules ARCHITECTURE.md's layer table (or the folder's docstring) does not name: {missing}"
    assert not gone, f"ARCHITECTURE.md names modules that do not exist: {gone}"


def test_no_layer_imports_one_above_it():
    up = [f"{MODULES[m].relative_to(PKG.parent)}:{line} ({layer_of(m)}) imports {t} ({layer_of(t)})"
          for m, p in MODULES.items() for line, t, _ in imports(m, p)
          if layer_of(m) != layer_of(t) and RANK[layer_of(t)] >= RANK[layer_of(m)]]
    assert not up, "imports pointing up (or sideways between two layers):\n" + "\n".join(up)


def test_the_layer_rule_sees_an_upward_import(tmp_path):
    """The rule above fails on a model module importing the run layer (a guard against a rule that checks nothing)."""
    assert RANK[layer_of("bertfeat.run.plan")] > RANK[layer_of("bertfeat.model.encoder")]
    assert RANK[layer_of("bertfeat.cli.app")] > RANK[layer_of("bertfeat.sweep")] > RANK[layer_of("bertfeat.pca.file")]
