"""IR dumps of every compiled graph: ``{graph:04d}-{stage}.mlir`` and a manifest.

Enabled by ``LAZY_MLIR_DUMP_DIR=DIR`` (or ``lazy-mlir dump --out DIR``). For
each graph compiled in the process: the fx graph (``NNNN-fx.txt``), each MLIR
stage (``NNNN-torch.mlir``, ``NNNN-torch-backend.mlir``, ``NNNN-linalg.mlir``,
IREE phases on request), the module (``NNNN.vmfb``) and one entry in
``manifest.json`` with stage timings, sizes and cache keys.
"""
from __future__ import annotations

import json
import os
import threading
from pathlib import Path

DEFAULT_STAGES = ("fx", "torch", "torch-backend", "linalg", "vmfb")


class Dumper:
    def __init__(self, root: str | os.PathLike, stages=DEFAULT_STAGES, target=None):
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self.stages = tuple(stages)
        self.graphs: list[dict] = []
        self._lock = threading.Lock()

    def dump(self, graph, compiled, config, cache_key: str) -> dict:
        """Write the stages of one compiled graph; returns its manifest entry."""
        from .stages import IREE_PHASES, iree_phase
        with self._lock:
            index = len(self.graphs)
            entry = {"index": index, "graph_key": graph.key, "cache_key": cache_key,
                     "target": compiled.target.name, "flags": list(compiled.flags),
                     "ops": len(graph.nodes),
                     "inputs": [d.spec.signature() for d in graph.inputs],
                     "outputs": [v.spec.signature() for v in graph.outputs],
                     "locations": sorted({n.location for n in graph.nodes if n.location}),
                     "stages": []}
            self.graphs.append(entry)
        stages = list(compiled.stages)
        for phase in IREE_PHASES:
            if "iree-" + phase in self.stages:
                stages.insert(-1, iree_phase(compiled.stages[:-1], phase, compiled.target,
                                             config))
        for stage in stages:
            if stage.name not in self.stages and not (stage.name == "vmfb"
                                                      and "vmfb" in self.stages):
                continue
            if stage.name == "vmfb":
                name, data = f"{index:04d}.vmfb", compiled.vmfb
                (self.root / name).write_bytes(data)
                size = len(data)
            else:
                ext = "txt" if stage.name == "fx" else "mlir"
                name = f"{index:04d}-{stage.name}.{ext}"
                (self.root / name).write_text(stage.text)
                size = len(stage.text)
            entry["stages"].append({"name": stage.name, "file": name, "bytes": size,
                                    "seconds": round(stage.provenance.seconds, 6),
                                    "built_by": stage.provenance.built_by})
        self.write_manifest()
        return entry

    def write_manifest(self) -> None:
        with self._lock:
            (self.root / "manifest.json").write_text(
                json.dumps({"graphs": self.graphs}, indent=2))


_active: list[Dumper | None] = []


def active_dumper() -> Dumper | None:
    """The dumper of this process (from ``LAZY_MLIR_DUMP_DIR``), if any."""
    if not _active:
        root = os.environ.get("LAZY_MLIR_DUMP_DIR")
        stages = os.environ.get("LAZY_MLIR_DUMP_STAGES")
        _active.append(Dumper(root, tuple(stages.split(",")) if stages else DEFAULT_STAGES)
                       if root else None)
    return _active[0]


def set_dumper(dumper: Dumper | None) -> None:
    _active[:] = [dumper]


_PAGE = """<!doctype html>
<html><head><meta charset="utf-8"><title>lazy-mlir dump</title>
<style>
body {{ font-family: sans-serif; margin: 1em; }}
.graph {{ margin-bottom: 2em; }}
.stages {{ display: flex; gap: 0.5em; overflow-x: auto; }}
.stage {{ flex: 0 0 32em; border: 1px solid #ccc; border-radius: 4px; }}
.stage h3 {{ margin: 0; padding: 0.3em; background: #eee; font-size: 0.9em; }}
.stage pre {{ margin: 0; padding: 0.3em; max-height: 40em; overflow: auto; font-size: 0.75em; }}
</style></head>
<body>
<h1>lazy-mlir dump</h1>
{graphs}
<script>
// Count the stages actually laid out, so a headless browser can report them.
const shown = [...document.querySelectorAll('.stage')].filter(e => e.offsetWidth > 0);
document.body.dataset.stagesShown = shown.map(e => e.dataset.graph + ':' + e.dataset.stage).join(' ');
</script>
</body></html>
"""


def write_html(dumper: Dumper) -> Path:
    """``index.html`` showing the stages of each graph side by side."""
    import html
    parts = []
    for g in dumper.graphs:
        cols = []
        for st in g["stages"]:
            if st["name"] == "vmfb":
                body = f"{st['bytes']} bytes, {st['file']}"
            else:
                body = (dumper.root / st["file"]).read_text()
            cols.append(f'<section class="stage" data-graph="{g["index"]}" '
                        f'data-stage="{st["name"]}"><h3>{st["name"]} '
                        f'({st["seconds"] * 1e3:.1f} ms)</h3><pre>{html.escape(body)}</pre>'
                        f"</section>")
        parts.append(f'<div class="graph"><h2>graph {g["index"]}: {g["ops"]} ops, '
                     f'inputs {html.escape(", ".join(g["inputs"]))}</h2>'
                     f'<div class="stages">{"".join(cols)}</div></div>')
    path = dumper.root / "index.html"
    path.write_text(_PAGE.format(graphs="\n".join(parts)))
    return path
