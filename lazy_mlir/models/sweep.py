"""The sweep's entries, by name: ``torch.nn`` blocks, then every
``transformers`` architecture (``hf_tiny``)."""
from __future__ import annotations

from .entry import Entry


def all_entries(hf: bool = True) -> list[Entry]:
    from . import nn_blocks
    out = nn_blocks.entries()
    if hf:
        try:
            from . import hf_tiny
        except ImportError:  # (transformers not installed: the nn blocks only)
            return out
        out += hf_tiny.entries()
    return out


def by_name(name: str) -> Entry:
    hf = name.startswith("hf/")
    for entry in all_entries(hf=hf):
        if entry.name == name:
            return entry
    raise KeyError(f"lazy-mlir: no sweep entry {name!r} (python -m lazy_mlir.tools.sweep --list)")


# A sample for CI: one entry per root cause fixed (the comment says which);
# each has its own small regression test too. More in ``SLOW_SAMPLE``.
CI_SAMPLE = (
    "hf/causal-lm/llama",                     # SiLU backward's in-place ops (ops/subgraph.py)
)
# Known to fail, with why: the slow test expects the failure (strict xfail)
# until it is fixed. (Mixtral was here until in_place.unshare_sort_operands.)
KNOWN_FAILURES: dict[str, str] = {
    "hf/audio-classification/hubert": "compile_train_step replays no step: 'two recordings "
    "differ' (its time masks drawn on the host, unconfirmed; sweep record of 2026-12-03)",
}
SLOW_SAMPLE = CI_SAMPLE + (
    "hf/image-classification/convnext",       # a view of a restrided layer_norm (ops/restride.py;
                                              # CI: tests/e2e/test_restride.py)
    "nn/lstm",                                # recurrent layers with dropout between
    "hf/causal-lm/mixtral",                   # integer histc, _grouped_mm, the router's sorts
    "nn/conv2d",                              # convolutions, depthwise
    "hf/image-classification/mobilenet_v2",   # backward refused by compiled autograd; negative pads
    "hf/image-classification/swin",           # restrided views (windows)
    "hf/audio-classification/hubert",         # the backward of a masked write (masked_backward)
    "hf/seq2seq-lm/mbart",                    # a slice shifted into its own tensor (self_inserts)
    "hf/causal-lm/gpt2",                      # host reads of constants and of the batch (host_eval)
    "hf/image-classification/beit",           # drop path's torch.rand, drawn again per replay
)
