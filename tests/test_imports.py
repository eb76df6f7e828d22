"""The package's import graph: no module imports another's private (underscore) names, and no two bertfeat
modules import each other, directly or through others (every import counts, a deferred one inside a function too).

Read from the source with ``ast``, so the tests need nothing imported and name the file and line at fault.
"""

from __future__ import annotations

import ast
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
    assert ("bertfeat.model", "bertfeat.gemm") in edges
    assert ("bertfeat.local_engine", "bertfeat.chunks") in edges
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
