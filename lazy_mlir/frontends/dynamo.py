"""``torch.compile(model, backend="lazy_mlir")``: a Dynamo backend.

Dynamo hands over a graph of torch-level ops; ``aot_autograd`` turns it into
functional aten graphs (a forward, and a backward when gradients are needed;
writes into inputs, such as the optimizer's updates or batch norm's running
statistics, come back as extra results that ``aot_writes`` copies into the
inputs after the call). Each of those graphs goes through the compile
service as the lazy device's graphs do (``aot_graph.compile_aot_graph`` ->
``compile_service.lookup.executable_for``: the same caches, compile
workers, background compiles, loading and eager fallback), and runs on the
target's IREE session with the boxed calling convention (the argument list
is cleared as it is read, so aot_autograd's inputs die as early as they
can). While a graph's module compiles in the
background it runs eagerly.

Options: ``torch.compile(m, backend="lazy_mlir", options={"target": "cpu" |
"vulkan" | "cuda", "config": PipelineConfig | dict})``; without them, the
lazy device's target (``LAZY_MLIR_TARGET``) and configuration
(``LAZY_MLIR_PIPELINE`` / ``lm.set_config``). ``LAZY_MLIR_DUMP_DIR`` dumps
every compiled graph's stages as the lazy device does.

Shapes are static: a graph Dynamo traces with symbolic sizes (``dynamic=True``,
or its automatic dynamic shapes after a second batch size) is specialized to
the sizes of each call, one compile per distinct signature, cached.

Registered under the ``torch_dynamo_backends`` entry point (pyproject.toml);
``register()`` registers it in a process whose installed metadata lacks the
entry point (a source checkout not reinstalled).
"""
from __future__ import annotations

import functools
import logging

import torch

from .. import metrics
from ..config import PipelineConfig, current_config
from ..targets import Target, get_target

log = logging.getLogger("lazy_mlir")

BACKEND_NAME = "lazy_mlir"
_OPTIONS = ("target", "config")


def _options(options: dict | None) -> tuple[Target, PipelineConfig]:
    """The target and config named by ``torch.compile``'s ``options``."""
    options = dict(options or {})
    unknown = sorted(set(options) - set(_OPTIONS))
    if unknown:
        raise ValueError(f"lazy_mlir backend: unknown option(s) {', '.join(unknown)}; "
                         f"valid: {', '.join(_OPTIONS)}")
    target = options.get("target")
    if isinstance(target, str) or target is None:
        from ..lazy.sync import current_target
        target = get_target(target) if target else current_target()
    elif not isinstance(target, Target):
        raise TypeError(f"lazy_mlir backend: options['target'] must be a target name "
                        f"('cpu', 'vulkan', 'cuda') or a Target, not {type(target).__name__}")
    config = options.get("config")
    if config is None:
        config = current_config()
    elif isinstance(config, dict):
        config = PipelineConfig.from_dict(config, source="options['config']")
    elif not isinstance(config, PipelineConfig):
        raise TypeError("lazy_mlir backend: options['config'] must be a PipelineConfig or "
                        f"a dict of its fields, not {type(config).__name__}")
    return target, config


def lazy_mlir_backend(gm: torch.fx.GraphModule, example_inputs, options: dict | None = None,
                      mode: str | None = None):
    """The Dynamo backend: ``gm`` (Dynamo's graph) -> a callable running the
    forward and backward graphs aot_autograd makes from it, compiled by
    lazy-mlir for ``options["target"]``."""
    from torch._dynamo.backends.common import aot_autograd
    from .aot_graph import compile_aot_graph
    if mode not in (None, "default"):
        log.info("lazy_mlir backend: mode=%r has no meaning here; ignored", mode)
    target, config = _options(options)
    metrics.counter_inc("DynamoGraph")  # one per graph Dynamo hands over (a compile or recompile)
    compiler = functools.partial(compile_aot_graph, target=target, config=config)
    # No decompositions here: lower() applies the lazy device's table.
    # keep_inference_input_mutations=True: data-only writes into inputs (the
    # optimizer's parameters and states, buffers) stay in the graphs as
    # copy_ nodes; compile_aot_graph returns their values from the module and
    # writes them with one _foreach_copy_ (aot_writes), not aot_autograd's
    # epilogue of one copy_ per input.
    aot = aot_autograd(fw_compiler=compiler, bw_compiler=compiler,
                       keep_inference_input_mutations=True)
    # Attention as its math (matmuls, softmax), forward and backward, as on
    # the lazy device: CPU tracing would pick the flash kernel, whose
    # backward torch-mlir cannot lower. aot_autograd traces both graphs here.
    from torch.nn.attention import SDPBackend, sdpa_kernel
    with sdpa_kernel([SDPBackend.MATH]):
        return aot(gm, example_inputs)


lazy_mlir_backend.__name__ = BACKEND_NAME


def register() -> None:
    """Make ``backend="lazy_mlir"`` resolve in this process. Nothing to do
    when the installed package declares the entry point (torch loads it on
    first use); registers directly otherwise. Idempotent."""
    from torch._dynamo.backends import registry
    registry._discover_entrypoint_backends()
    if BACKEND_NAME in registry._COMPILER_FNS or registry._BACKENDS.get(BACKEND_NAME):
        return
    registry.register_backend(lazy_mlir_backend, name=BACKEND_NAME)
