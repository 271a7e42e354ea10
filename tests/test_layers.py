"""The package's layers import only downward: hal <- runtime <- ops <- backends (<- model, llm, ...).

A static walk of every import statement (function-local ones too), so an upward dependency shows
even where it is hidden in a function body."""

import ast
import os

import xinfer_async

PKG = os.path.dirname(xinfer_async.__file__)
#: layer -> the layers it must not import
FORBIDDEN = {
    "hal": {"runtime", "ops", "backends", "model", "llm", "bench", "cli"},
    "runtime": {"ops", "backends", "model", "llm", "bench", "cli"},
    "ops": {"backends", "model", "llm", "bench", "cli"},
    "backends": {"model", "llm", "bench", "cli"},
}


def _imports(path: str, layer_parts: list[str]):
    """The first package component below ``xinfer_async`` of each module ``path`` imports."""
    tree = ast.parse(open(path).read())
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:  # level 1: this module's package, each level more one package up
                parts = layer_parts[:len(layer_parts) + 1 - node.level] + (node.module.split(".") if node.module else [])
            elif node.module and node.module.startswith("xinfer_async."):
                parts = node.module.split(".")[1:]
            else:
                continue
            names = [a.name for a in node.names]
            yield (parts[0] if parts else names[0]), node.lineno
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name.startswith("xinfer_async."):
                    yield a.name.split(".")[1], node.lineno


def _edges() -> dict[str, set[str]]:
    """module path (below the package) -> the top-level components it imports"""
    out = {}
    for root, _, files in os.walk(PKG):
        for f in files:
            if f.endswith(".py"):
                parts = os.path.relpath(root, PKG).split(os.sep)
                parts = [] if parts == ["."] else parts
                path = os.path.join(root, f)
                out[os.path.relpath(path, PKG)] = {top for top, _ in _imports(path, parts)}
    return out


def test_the_walk_sees_imports():
    edges = _edges()
    assert "hal" in edges[os.path.join("runtime", "_device.py")]
    assert {"ops", "runtime"} <= edges[os.path.join("backends", "cpu", "__init__.py")]
    assert "ops" in edges[os.path.join("backends", "cuda", "_kernel.py")]


def test_layers_import_only_downward():
    bad = []
    for layer, forbidden in FORBIDDEN.items():
        for root, _, files in os.walk(os.path.join(PKG, layer)):
            for f in files:
                if not f.endswith(".py"):
                    continue
                path = os.path.join(root, f)
                # the module's package, as components below xinfer_async (for relative imports)
                pkg_parts = os.path.relpath(root, PKG).split(os.sep)
                for top, line in _imports(path, pkg_parts):
                    if top.removesuffix(".py") in forbidden:
                        bad.append(f"{os.path.relpath(path, PKG)}:{line} imports {top}")
    assert bad == []
