"""The sweep's entries build a new model on each call (lazy_mlir/models)."""
import torch

from lazy_mlir.models import nn_blocks


def test_each_nn_entry_builds_new_modules_with_the_same_weights():
    """An entry's eager and lazy runs each build the model: modules built
    once and shared between them (nn/activations' list) made the lazy run
    start from the weights the eager run had trained (0.1 off from the first
    step), and the run without dropout feed CPU batches to modules the lazy
    run had moved to the device (a crash)."""
    for entry in nn_blocks.entries():
        a, b = entry.make(), entry.make()
        pa, pb = list(a.parameters()), list(b.parameters())
        assert not {id(p) for p in pa} & {id(p) for p in pb}, entry.name
        assert all(torch.equal(p, q) for p, q in zip(pa, pb)), entry.name


def test_without_dropout_the_attention_dropout_is_off_too(monkeypatch):
    """nn.MultiheadAttention's dropout is a float, not a Dropout module: the
    run without dropout left it on, and nn/transformer_decoder's eager and
    lazy losses differed by 1% through the two dropout streams alone."""
    monkeypatch.setenv("LAZY_MLIR_SWEEP_NO_DROPOUT", "1")
    entry = next(e for e in nn_blocks.entries() if e.name == "nn/transformer_decoder")
    model = entry.make()
    attention = [m for m in model.modules() if isinstance(m, torch.nn.MultiheadAttention)]
    assert attention and all(m.dropout == 0.0 for m in attention)
    assert all(m.p == 0.0 for m in model.modules()
               if isinstance(m, torch.nn.modules.dropout._DropoutNd))
