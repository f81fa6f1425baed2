"""Which host calls a module compiled for THIS process may make.

Three kinds of call from an IREE module into PyTorch's own kernels exist,
each with its rewrite and import module: large matmuls (``host_blas``),
LSTM layers (``host_rnn``) and flash attention (``host_attention``). They
share one rule: only a module that runs in this process on the cpu driver
(host memory) may call PyTorch, so only in-process sessions ask
(mark_step, ``compile_train_step``); export and ``lm.jit`` compile with the
config as given, and their modules never import PyTorch. Each kind has its
own switch (``LAZY_MLIR_BLAS``, ``LAZY_MLIR_RNN``,
``LAZY_MLIR_HOST_ATTENTION``; the RNN calls also need oneDNN).
"""
from __future__ import annotations

import functools

from ...config import PipelineConfig
from . import blas as host_blas
from .blas import in_process_cpu


def session_config(target, config: PipelineConfig) -> PipelineConfig:
    """``config`` for compiling a module that THIS process runs on
    ``target``: each host call on where it may run and its switch allows."""
    if not in_process_cpu(target):
        return config
    from ..ops.attention import enabled as attention_on
    from ..ops.rnn import enabled as rnn_on
    return _with_host_calls(config, host_blas.enabled(), rnn_on(), attention_on())


@functools.lru_cache(maxsize=16)
def _with_host_calls(config: PipelineConfig, blas: bool, rnn: bool,
                     attention: bool) -> PipelineConfig:
    """One config object per (config, switches): every launch asks, and a
    fresh copy would validate its fields and digest its ``key`` again
    (~18 us)."""
    want = {"host_blas": blas, "host_rnn": rnn, "host_attention": attention}
    if all(getattr(config, k) == v for k, v in want.items()):
        return config
    return config.replace(**want)
