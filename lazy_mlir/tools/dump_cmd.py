"""``lazy-mlir dump`` and ``lazy-mlir compile``: the IR of every stage."""
from __future__ import annotations

import os
import runpy
import sys
from pathlib import Path

from .errors import UsageError


def _stages(value: str | None):
    from ..pipeline.dump import DEFAULT_STAGES
    from ..pipeline.stages import IREE_PHASES
    if not value:
        return DEFAULT_STAGES
    valid = ("fx", "torch", "torch-backend", "linalg", "vmfb") + tuple("iree-" + p
                                                                       for p in IREE_PHASES)
    names = tuple(s.strip() for s in value.split(",") if s.strip())
    bad = [n for n in names if n not in valid]
    if bad:
        raise UsageError(f"unknown stage(s) {', '.join(bad)}; valid stages: {', '.join(valid)}")
    return names


def _config(path):
    from ..passes.pipelines import validate_config
    from ..config import ConfigError, PipelineConfig, current_config
    try:
        config = PipelineConfig.from_toml(path) if path else current_config()
        validate_config(config)
    except ConfigError as e:
        raise UsageError(str(e)) from None
    return config


def run_dump(args) -> int:
    import lazy_mlir as lm
    from rich.console import Console
    from rich.table import Table

    from ..pipeline.dump import Dumper, set_dumper, write_html
    script = Path(args.script)
    if not script.is_file():
        raise UsageError(f"no such script: {script}")
    stages = _stages(args.stages)
    lm.set_config(_config(args.pipeline_config))
    if args.target:
        lm.set_target(args.target)
    out = Path(args.out or "lazy-mlir-dump")
    dumper = Dumper(out, stages)
    set_dumper(dumper)
    os.environ["LAZY_MLIR_DUMP_DIR"] = str(out)  # repros of failed compiles land here too
    argv = sys.argv
    sys.argv = [str(script), *args.script_args]
    try:
        runpy.run_path(str(script), run_name="__main__")
        lm.wait_device_ops()
    except SystemExit as e:
        if e.code not in (None, 0):
            raise UsageError(f"{script} exited with status {e.code}") from None
    except Exception as e:
        raise UsageError(f"{script} raised {type(e).__name__}: {e} (run it directly for the "
                         "traceback)") from None
    finally:
        sys.argv = argv
    console = Console()
    table = Table(title=f"lazy-mlir dump: {len(dumper.graphs)} graph(s) in {out}")
    for col in ("graph", "ops", "inputs", "outputs", *stages):
        table.add_column(col, justify="right" if col != "graph" else "left")
    for g in dumper.graphs:
        times = {s["name"]: f"{s['seconds'] * 1e3:.0f} ms" for s in g["stages"]}
        table.add_row(f"{g['index']:04d}", str(g["ops"]), str(len(g["inputs"])),
                      str(len(g["outputs"])), *[times.get(s, "-") for s in stages])
    console.print(table)
    if args.html:
        console.print(f"html: {write_html(dumper)}")
    console.print(f"manifest: {out / 'manifest.json'}")
    return 0


def run_compile(args) -> int:
    """An MLIR file through the stages of ``pipeline.compile`` for a target:
    ``lower_torch`` (the target's rewrites) from torch, ``compile_module``
    (flags, in-place hazards) to a vmfb."""
    from ..dialects.torch_import import parse
    from ..dialects.runner import PipelineError
    from ..pipeline.compile import compile_module
    from ..pipeline.stages import IREE_PHASES, Provenance, Stage, iree_phase, lower_torch
    from ..targets import get_target
    path = Path(args.file)
    if not path.is_file():
        raise UsageError(f"no such file: {path}")
    config = _config(args.pipeline_config)
    try:
        target = get_target(args.target)
    except ValueError as e:
        raise UsageError(str(e)) from None
    if args.to not in ["torch-backend", "linalg", "vmfb"] + ["iree-" + p for p in IREE_PHASES]:
        raise UsageError(f"unknown --to {args.to!r}; choose torch-backend, linalg, vmfb or "
                         f"one of {', '.join('iree-' + p for p in IREE_PHASES)}")
    text = path.read_text()
    try:
        if args.from_ == "torch":
            parse(text)  # a clear error for a file that is not MLIR
            stages = lower_torch(Stage("torch", text, Provenance(str(path), 0.0)), config,
                                 target.name, "torch-backend" if args.to == "torch-backend"
                                 else "linalg")[1:]
        elif args.to == "torch-backend":
            raise UsageError("--from linalg cannot go back to torch-backend")
        else:
            stages = (Stage("linalg", text, Provenance(str(path), 0.0)),)
        if args.to in ("torch-backend", "linalg"):
            result: bytes | str = stages[-1].text
        elif args.to == "vmfb":
            result = compile_module(stages, target, config).vmfb
        else:
            result = iree_phase(stages, args.to[5:], target, config).text
    except UsageError:
        raise
    except PipelineError as e:
        raise UsageError(str(e).replace("\n", " ")) from None
    except Exception as e:  # MLIR parse errors and the like
        raise UsageError(f"{path}: {str(e).strip().splitlines()[0]}") from None
    if isinstance(result, bytes):
        if not args.output:
            raise UsageError("--to vmfb writes bytes: give -o FILE")
        Path(args.output).write_bytes(result)
    elif args.output:
        Path(args.output).write_text(result)
    else:
        sys.stdout.write(result)
    return 0


def add_parsers(sub) -> None:
    d = sub.add_parser("dump", help="run a script on the lazy device and write the IR of "
                                    "every stage of every graph it compiles",
                       usage="lazy-mlir dump SCRIPT.py [options] [-- script args]")
    d.add_argument("script", help="the Python script to run")
    d.add_argument("--out", help="directory for the dumps (default ./lazy-mlir-dump)")
    d.add_argument("--target", help="cpu (default), vulkan or cuda")
    d.add_argument("--stages", help="comma-separated stages to write (default "
                                    "fx,torch,torch-backend,linalg,vmfb; iree-<phase> too)")
    d.add_argument("--pipeline-config", help="a TOML pipeline configuration")
    d.add_argument("--html", action="store_true", help="also write index.html")
    d.set_defaults(func=run_dump)
    c = sub.add_parser("compile", help="compile an MLIR file to a later stage or a vmfb")
    c.add_argument("file", help="an .mlir file")
    c.add_argument("--from", dest="from_", choices=["torch", "linalg"], default="torch")
    c.add_argument("--to", default="vmfb", help="torch-backend, linalg, iree-<phase> or vmfb")
    c.add_argument("--target", help="cpu (default), vulkan or cuda")
    c.add_argument("--pipeline-config", help="a TOML pipeline configuration")
    c.add_argument("-o", "--output", help="output file (default: stdout for text)")
    c.set_defaults(func=run_compile)
