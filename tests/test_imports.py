"""The package's import graph, read statically with ``ast``: no cycle among module-level imports, and
none hidden behind function-level imports.

An edge ``a -> b`` is an import in module ``a`` of package module ``b`` (``from . import x`` names
the submodule ``x``; ``from .pkg import name`` names ``pkg``, the package, unless ``name`` is a
submodule). Imports are sorted into three kinds: module-level (run when ``a`` is imported), inside a
function (run when it is called) and under ``if TYPE_CHECKING:`` (never run: annotations only, which
may name a type of a module that imports this one, e.g. ``Executor.device: Device``).
"""

from __future__ import annotations

import ast
import importlib.machinery
import pathlib

ROOT = pathlib.Path(__file__).resolve().parent.parent
PKG = "xinfer_async"


def _modules() -> dict[str, tuple[pathlib.Path | None, bool]]:
    """module name -> (source path, or None for an extension module; is a package)."""
    mods: dict[str, tuple[pathlib.Path | None, bool]] = {f"{PKG}._native": (None, False)}  # built by native/
    for path in (ROOT / PKG).rglob("*"):
        rel = path.relative_to(ROOT)
        if path.suffix == ".py":
            parts = rel.with_suffix("").parts
            is_pkg = parts[-1] == "__init__"
            mods[".".join(parts[:-1] if is_pkg else parts)] = (path, is_pkg)
        elif any(path.name.endswith(s) for s in importlib.machinery.EXTENSION_SUFFIXES):
            mods[".".join(rel.parts[:-1] + (path.name.split(".")[0],))] = (None, False)
    return mods


def _is_type_checking(node: ast.If) -> bool:
    t = node.test
    return (isinstance(t, ast.Name) and t.id == "TYPE_CHECKING") or (
        isinstance(t, ast.Attribute) and t.attr == "TYPE_CHECKING")


def import_graph() -> dict[str, dict[str, set[tuple[str, int]]]]:
    """kind ("module", "function", "type_checking") -> module -> {(imported module, line)}."""
    mods = _modules()
    graph: dict[str, dict[str, set[tuple[str, int]]]] = {k: {m: set() for m in mods}
                                                         for k in ("module", "function", "type_checking")}

    def targets(mod: str, is_pkg: bool, node: ast.Import | ast.ImportFrom) -> list[str]:
        if isinstance(node, ast.Import):
            return [a.name for a in node.names]
        base = mod if is_pkg else mod.rpartition(".")[0]
        for _ in range(node.level - 1):
            base = base.rpartition(".")[0]
        src = (base + ("." + node.module if node.module else "")) if node.level else node.module
        return [f"{src}.{a.name}" if f"{src}.{a.name}" in mods else src for a in node.names]

    for mod, (path, is_pkg) in mods.items():
        if path is None:
            continue

        def visit(node: ast.AST, kind: str) -> None:
            for child in ast.iter_child_nodes(node):
                k = kind
                if isinstance(child, ast.If) and _is_type_checking(child):
                    k = "type_checking"
                elif isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)) and k == "module":
                    k = "function"
                if isinstance(child, (ast.Import, ast.ImportFrom)):
                    for t in targets(mod, is_pkg, child):
                        if t in mods and t != mod:
                            graph[k][mod].add((t, child.lineno))
                visit(child, k)

        visit(ast.parse(path.read_text(), str(path)), "module")
    return graph


def cycles(edges: dict[str, set[tuple[str, int]]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def connect(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w, _ in edges.get(v, ()):
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(edges):
        if v not in index:
            connect(v)
    return out


def test_the_graph_sees_each_kind_of_import():
    """The walk finds known edges of each kind (a walk that found nothing would pass the tests below)."""
    g = import_graph()
    assert any(t == f"{PKG}.runtime._executor" for t, _ in g["module"][f"{PKG}.runtime._device"])
    assert any(t == f"{PKG}._native" for t, _ in g["module"][f"{PKG}.backends.cpu._backend"])
    assert any(t == f"{PKG}.backends.cpu" for t, _ in g["function"][f"{PKG}._open"])
    assert any(t == f"{PKG}.runtime._queue" for t, _ in g["type_checking"][f"{PKG}.runtime._completion"])
    assert cycles({"a": {("b", 1)}, "b": {("c", 1)}, "c": {("a", 1)}, "d": {("a", 1)}}) == [["a", "b", "c"]]
    assert sum(len(v) for v in g["module"].values()) > 100


def test_no_cycle_among_module_level_imports():
    g = import_graph()
    found = cycles(g["module"])
    assert found == [], "module-level import cycles: " + "; ".join(" <-> ".join(c) for c in found)


def test_function_level_imports_hide_no_cycle():
    """Counting imports inside functions too, there is no cycle: a function-level import must not
    be the way round a cycle."""
    g = import_graph()
    every = {m: g["module"][m] | g["function"][m] for m in g["module"]}
    found = cycles(every)
    assert found == [], "import cycles through function-level imports: " + "; ".join(" <-> ".join(c) for c in found)
