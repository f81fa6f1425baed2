"""``lazy-mlir export`` and ``lazy-mlir run``: ahead-of-time artifacts.

::

    lazy-mlir export lazy_mlir.models.seed:LeNet5 --example 'float32[1,1,28,28]' \\
        --target cpu -o lenet/
    lazy-mlir run lenet/ --input x.npy --output y.npy

``export`` calls the factory (``module:callable`` or ``path/to/file.py:callable``)
with no arguments after ``torch.manual_seed(0)``, so randomly initialised
weights are the same on every run (a factory that loads weights is not
affected); a module is put in eval mode. Each ``--example`` is one input:
``dtype[d0,d1,...]`` (random normal for floating dtypes, zeros otherwise) or
a ``.npy`` file. ``run`` needs only the artifact (it uses ``runner.py``,
which imports no torch).

Mistakes (a bad spec, a missing file, a factory that fails) are reported in
one line with a non-zero exit status: 2 for usage, 1 for the rest.
"""
from __future__ import annotations

import importlib
import importlib.util
import re
import sys
import time
from pathlib import Path

from .errors import UsageError

_SPEC = re.compile(r"\s*([A-Za-z0-9_]+)\s*\[\s*([0-9,\s]*)\]\s*")


def _strip(e: Exception) -> str:
    """The message on one line, without the prefix the tool adds itself."""
    return " ".join(str(e).split()).removeprefix("lazy-mlir: ")


def parse_example(spec: str):
    """``float32[1,1,28,28]`` or ``x.npy`` -> an example tensor."""
    import torch
    if spec.endswith(".npy"):
        import numpy as np
        try:
            return torch.from_numpy(np.load(spec, allow_pickle=False))
        except FileNotFoundError:
            raise UsageError(f"--example {spec}: no such file") from None
        except (OSError, ValueError) as e:
            raise UsageError(f"--example {spec}: not a .npy file ({e})") from None
    m = _SPEC.fullmatch(spec)
    if not m:
        raise UsageError(f"--example {spec!r}: expected dtype[d0,d1,...] such as "
                         "'float32[1,1,28,28]', or a .npy file")
    dtype = getattr(torch, m.group(1), None)
    if not isinstance(dtype, torch.dtype):
        raise UsageError(f"--example {spec!r}: unknown dtype {m.group(1)!r} (e.g. float32, "
                         "float64, int64, bool)")
    dims = [d.strip() for d in m.group(2).split(",") if d.strip()]
    shape = [int(d) for d in dims]
    if dtype.is_floating_point:
        return torch.randn(shape, dtype=dtype)
    return torch.zeros(shape, dtype=dtype)


def parse_dynamic(specs: list[str]) -> dict:
    """``x:0:batch`` / ``x:2:h:4:64`` (input, axis, symbol, min, max) ->
    ``{"x": {0: "batch"}}`` / ``{"x": {2: ("h", 4, 64)}}``."""
    out: dict = {}
    for spec in specs or ():
        parts = spec.split(":")
        numbers = parts[1:2] + parts[3:]
        if not 2 <= len(parts) <= 5 or not all(p.lstrip("-").isdigit() for p in numbers):
            raise UsageError(f"--dynamic {spec!r}: expected INPUT:AXIS[:SYMBOL[:MIN[:MAX]]] "
                             "such as x:0:batch")
        name, axis = parts[0], int(parts[1])
        sym = parts[2] if len(parts) > 2 else f"{name}_{axis}"
        out.setdefault(name, {})[axis] = (sym, *map(int, parts[3:])) if len(parts) > 3 else sym
    return out


def load_factory(ref: str):
    """``pkg.module:attr`` or ``file.py:attr`` -> the callable."""
    mod_name, sep, attr = ref.rpartition(":")
    if not sep or not mod_name or not attr:
        raise UsageError(f"{ref!r}: expected MODULE:FACTORY such as "
                         "lazy_mlir.models.seed:LeNet5")
    try:
        if mod_name.endswith(".py"):
            path = Path(mod_name)
            if not path.is_file():
                raise UsageError(f"{ref!r}: no such file {path}")
            spec = importlib.util.spec_from_file_location(path.stem, path)
            module = importlib.util.module_from_spec(spec)
            sys.modules.setdefault(path.stem, module)
            spec.loader.exec_module(module)
        else:
            module = importlib.import_module(mod_name)
    except UsageError:
        raise
    except Exception as e:
        raise UsageError(f"{ref!r}: cannot import {mod_name}: {type(e).__name__}: "
                         f"{_strip(e)}") from None
    obj = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise UsageError(f"{ref!r}: {mod_name} has no attribute {attr!r}")
        obj = getattr(obj, part)
    if not callable(obj):
        raise UsageError(f"{ref!r}: {attr} is not callable")
    return obj


def run_export(args) -> int:
    import torch

    from ..export.artifact import signature_text
    from ..export.writer import export
    factory = load_factory(args.factory)
    if not args.example:
        raise UsageError("give at least one --example (e.g. --example 'float32[1,1,28,28]')")
    torch.manual_seed(0)
    examples = tuple(parse_example(s) for s in args.example)
    dynamic = parse_dynamic(args.dynamic)
    torch.manual_seed(0)
    try:
        made = factory()
    except Exception as e:
        raise UsageError(f"{args.factory}() raised {type(e).__name__}: {_strip(e)}") from None
    if isinstance(made, torch.nn.Module):
        made.eval()
    elif not callable(made):
        raise UsageError(f"{args.factory}() returned {type(made).__name__}, not an nn.Module "
                         "or a function")
    t0 = time.perf_counter()
    try:
        path = export(made, examples, target=args.target, path=args.output,
                      params=args.params, dynamic_dims=dynamic or None)
    except ValueError as e:  # ExportError, an unknown target, ...: one line, exit 1
        raise ValueError(_strip(e)) from None
    from ..export.artifact import read_manifest
    manifest = read_manifest(path)
    print(f"exported {signature_text(manifest['entry'])}")
    print(f"  target {manifest['target']['name']} ({manifest['target']['device']}), "
          f"params {manifest['params']['mode']}, {time.perf_counter() - t0:.1f} s")
    for name, info in manifest["files"].items():
        print(f"  {Path(path) / name}  {info['size']:,} bytes")
    return 0


def run_run(args) -> int:
    from ..export.artifact import ArtifactError, run_cli
    try:
        return run_cli(args.artifact, args.input, args.output, args.driver)
    except ArtifactError as e:
        raise ValueError(_strip(e)) from None


def add_parsers(sub) -> None:
    """Add ``export`` and ``run`` to ``sub`` (from ``add_subparsers``)."""
    e = sub.add_parser("export", help="compile a model ahead of time into an artifact that "
                                      "runs with iree-base-runtime and numpy",
                       usage="lazy-mlir export MODULE:FACTORY --example SPEC [...] -o DIR")
    e.add_argument("factory", help="MODULE:FACTORY or file.py:FACTORY returning an nn.Module "
                                   "or a function")
    e.add_argument("--example", action="append", default=[], metavar="SPEC",
                   help="one input: dtype[d0,d1,...] (e.g. float32[1,1,28,28]) or a .npy "
                        "file; repeat for more inputs")
    e.add_argument("--target", default="cpu", help="cpu (default), vulkan or cuda (also "
                                                   "cuda:sm_86, vulkan:rdna3)")
    e.add_argument("-o", "--output", required=True, help="the artifact directory to write")
    e.add_argument("--params", choices=["embed", "external"], default="embed",
                   help="embed weights in module.vmfb (default) or keep them in params.irpa")
    e.add_argument("--dynamic", action="append", default=[],
                   metavar="INPUT:AXIS[:SYMBOL[:MIN[:MAX]]]",
                   help="a size chosen at run time, e.g. x:0:batch; repeat for more")
    e.set_defaults(func=run_export)
    r = sub.add_parser("run", help="run an exported artifact on .npy inputs",
                       usage="lazy-mlir run DIR --input X.npy [...] [--output Y.npy]")
    r.add_argument("artifact", help="the artifact directory")
    r.add_argument("--input", "-i", action="append", default=[], metavar="X.npy",
                   help="one input per argument, in order")
    r.add_argument("--output", "-o", action="append", default=None, metavar="Y.npy",
                   help="write each output to a .npy file (default: print them)")
    r.add_argument("--driver", help="IREE driver (default: the one the artifact names)")
    r.set_defaults(func=run_run)
