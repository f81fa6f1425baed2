"""The package layers: a module imports only its own package and the layers
below it, no modules import each other in a cycle, and only ``dialects``
touches torch-mlir's MLIR bindings.

Every import statement counts, those inside functions too: a function-level
import of a layer above is the same dependency, paid later. ``from P import m``
of a submodule ``m`` counts as an import of ``P.m`` (Python runs ``P``'s
``__init__`` already, as the parent of any module below it).
"""
from __future__ import annotations

import ast
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2] / "lazy_mlir"

# Bottom to top. Packages in one row are independent of each other.
LAYERS = [
    ("lazy_mlir.metrics", "lazy_mlir.config", "lazy_mlir.targets",
     "lazy_mlir.host_calls", "lazy_mlir.host_calls.gemm",
     "lazy_mlir.models"),  # facts (this machine's too), counters; model zoos
    ("lazy_mlir.graph",),      # the captured program: Values, nodes, keys
    ("lazy_mlir.dialects",),   # MLIR bindings: contexts, import, pass-manager runs
    # Host calls (one folder, lazy_mlir/host_calls/), each part below its layer:
    ("lazy_mlir.host_calls.ops",),      # when an op's kernel is PyTorch's
    ("lazy_mlir.ops",),        # how an aten op reaches the torch dialect
    ("lazy_mlir.host_calls.passes",),   # the rewrites into calls
    ("lazy_mlir.passes",),     # pipelines and project passes
    ("lazy_mlir.host_calls.runtime",),  # the modules serving the calls, their OpenMP team
    ("lazy_mlir.runtime",),    # IREE sessions, devices, buffers, host memory (no compiling)
    ("lazy_mlir.pipeline",),   # stages and the one compile path
    ("lazy_mlir.compile_service",),  # lookup-or-compile: caches, workers, loading, fallback
    ("lazy_mlir.lazy",),       # capture and sync
    ("lazy_mlir.frontends", "lazy_mlir.distributed"),  # jit, compile_train_step, lm.debug; DDP
    ("lazy_mlir.export",),     # ahead-of-time artifacts
    ("lazy_mlir",),            # the package's own __init__: the user API
    ("lazy_mlir.tools",),      # the command line
]

MLIR_BINDINGS = ("torch_mlir",)  # only lazy_mlir.dialects imports these


def _modules() -> dict[str, pathlib.Path]:
    found = {}
    for path in ROOT.rglob("*.py"):
        parts = ("lazy_mlir",) + path.relative_to(ROOT).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


MODULES = _modules()


def _imports(module: str, path: pathlib.Path) -> list[tuple[str, int]]:
    """(imported module, line) for every import in ``path``; project modules
    are resolved to the longest module that exists, others kept as written."""
    out = []
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out += [(a.name, node.lineno) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[:len(package.split(".")) - (node.level - 1)]
                base = ".".join(base + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            subs = [f"{base}.{a.name}" for a in node.names if f"{base}.{a.name}" in MODULES]
            out += [(s, node.lineno) for s in subs]
            if len(subs) < len(node.names):
                out.append((base, node.lineno))
    resolved = []
    for name, line in out:
        if name.startswith("lazy_mlir"):
            while name not in MODULES and "." in name:
                name = name.rpartition(".")[0]
        resolved.append((name, line))
    return resolved


def _layer_of(module: str) -> tuple[int, str]:
    best = None
    for i, row in enumerate(LAYERS):
        for package in row:
            if module == package or module.startswith(package + "."):
                if best is None or len(package) > len(best[1]):
                    best = (i, package)
    assert best is not None, f"{module} is in no layer: add it to LAYERS"
    return best


def _edges() -> dict[str, set[str]]:
    edges = {}
    for module, path in MODULES.items():
        edges[module] = {m for m, _ in _imports(module, path)
                         if m in MODULES and m != module}
    return edges


def test_every_module_imports_only_its_package_and_layers_below():
    wrong = []
    for module, path in sorted(MODULES.items()):
        layer, package = _layer_of(module)
        for imported, line in _imports(module, path):
            if imported not in MODULES or imported == module:
                continue
            other_layer, other_package = _layer_of(imported)
            if other_package == package or other_layer < layer:
                continue
            wrong.append(f"{path.relative_to(ROOT.parent)}:{line}: {module} ({package}) "
                         f"imports {imported} ({other_package}), "
                         f"{'the same layer' if other_layer == layer else 'a layer above'}")
    assert not wrong, "imports against the layers:\n" + "\n".join(wrong)


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def test_no_import_cycles():
    edges = _edges()
    # A package's __init__ importing its own modules is no cycle: Python runs
    # it first whichever of them is imported.
    for module in list(edges):
        if MODULES[module].name == "__init__.py":
            edges[module] = {m for m in edges[module] if not m.startswith(module + ".")}
    cycles = _cycles(edges)
    assert not cycles, "import cycles:\n" + "\n".join(" <-> ".join(c) for c in cycles)


def test_only_dialects_imports_mlir_bindings():
    wrong = []
    for module, path in sorted(MODULES.items()):
        if _layer_of(module)[1] == "lazy_mlir.dialects":
            continue
        for imported, line in _imports(module, path):
            if imported.split(".")[0] in MLIR_BINDINGS:
                wrong.append(f"{path.relative_to(ROOT.parent)}:{line}: {module} imports {imported}")
    assert not wrong, "MLIR bindings outside lazy_mlir.dialects:\n" + "\n".join(wrong)


@pytest.mark.parametrize("module,imported,expected", [
    ("lazy_mlir.passes.pipelines", "lazy_mlir.pipeline.stages", "a layer above"),
    ("lazy_mlir.lazy.capture", "lazy_mlir.runtime.session", None),
])
def test_the_check_sees_function_level_imports(tmp_path, module, imported, expected):
    """The checker reads an import inside a function as a dependency."""
    path = tmp_path / "m.py"
    path.write_text(f"def f():\n    import {imported}\n")
    found = [m for m, _ in _imports(module, path)]
    assert imported in found
    above = _layer_of(imported)[0] > _layer_of(module)[0]
    assert above == (expected == "a layer above")


def test_the_cycle_finder_finds_a_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
