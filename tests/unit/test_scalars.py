"""Which scalars become graph inputs (so changing them does not recompile)."""
import torch

import lazy_mlir as lm  # noqa: F401
from lazy_mlir.lazy.capture import value_of
from lazy_mlir.lazy.graph import Graph


def _inputs(t):
    return [d.spec.signature() for d in Graph.build([value_of(t)]).inputs]


def test_float_scalar_in_tensor_slot_is_lifted_with_promoted_dtype():
    x = torch.ones(3).to("lazy")
    assert _inputs(x * 2.5) == ["float32[3]", "float32[]"]
    i = torch.ones(3, dtype=torch.int64).to("lazy")
    assert _inputs(i * 2.5) == ["int64[3]", "float32[]"]
    assert (i * 2.5).dtype == torch.float32


def test_zero_and_one_stay_constants():
    x = torch.ones(3).to("lazy")
    assert _inputs(x * 1) == ["float32[3]"]
    assert _inputs(x + 0) == ["float32[3]"]


def test_alpha_and_value_are_lifted():
    x, y = torch.ones(3).to("lazy"), torch.ones(3).to("lazy")
    assert len(_inputs(torch.add(x, y, alpha=0.1))) == 3
    assert len(_inputs(torch.addcdiv(x, x, y, value=0.3))) == 3


def test_clamp_with_a_zero_or_one_bound_next_to_a_lifted_one():
    # clamp.Tensor takes no numbers: the 0 bound is lifted with the 5.
    x = torch.arange(-3.0, 9.0).to("lazy")
    assert _inputs(torch.clamp(x, 0, 5)) == ["float32[12]", "float32[]", "float32[]"]
    assert _inputs(torch.clamp(x, min=1, max=2.5)) == ["float32[12]", "float32[]", "float32[]"]
    assert _inputs(torch.clamp(x, 0, 1)) == ["float32[12]"]  # nothing lifted: clamp.default
