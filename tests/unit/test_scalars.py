"""Which scalars become graph inputs (so changing them does not recompile)."""
import torch

import lazy_mlir as lm  # noqa: F401
from lazy_mlir.lazy.capture import value_of
from lazy_mlir.graph.program import Graph


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


def _ops(t):
    return [n.op.__name__ for n in Graph.build([value_of(t)]).nodes]


def test_an_update_with_a_lifted_factor_is_one_addcmul_in_float32_and_float64():
    """SGD's p.add_(g, alpha=-lr), Adam's addcdiv_(..., value=-step): one node
    (two) instead of two (three), with the values of the mul and add."""
    torch.manual_seed(0)
    for dtype in (torch.float32, torch.float64):
        a, b, c = (torch.randn(5, 3, dtype=dtype) for _ in range(3))
        x, y, z = (t.to("lazy") for t in (a, b, c))
        assert _ops(torch.add(x, y, alpha=-0.37)) == ["addcmul.default"]
        assert _ops(torch.addcdiv(x, y, z, value=0.3)) == ["div.Tensor", "addcmul.default"]
        assert _ops(torch.addcmul(x, y, z, value=0.3)) == ["mul.Tensor", "addcmul.default"]
        # the same bits as the two-op form compiled the same way
        s, v = (torch.tensor(f, dtype=dtype).to("lazy") for f in (-0.37, 0.3))
        # (read outside the assert: pytest's rewriting keeps ``y * s`` alive, and
        # a live product is an output of the read's graph, unfused, as in eager)
        got, want = torch.add(x, y, alpha=-0.37).cpu(), (x + y * s).cpu()
        assert torch.equal(got, want)
        got, want = torch.addcdiv(x, y, z, value=0.3).cpu(), (x + (y / z) * v).cpu()
        assert torch.equal(got, want)
    # float16: addcmul's decomposition would compute in float32; two ops as before
    h = torch.randn(4).half().to("lazy")
    assert _ops(torch.add(h, h, alpha=0.3)) == ["mul.Tensor", "add.Tensor"]


def test_clamp_with_a_zero_or_one_bound_next_to_a_lifted_one():
    # clamp.Tensor takes no numbers: the 0 bound is lifted with the 5.
    x = torch.arange(-3.0, 9.0).to("lazy")
    assert _inputs(torch.clamp(x, 0, 5)) == ["float32[12]", "float32[]", "float32[]"]
    assert _inputs(torch.clamp(x, min=1, max=2.5)) == ["float32[12]", "float32[]", "float32[]"]
    assert _inputs(torch.clamp(x, 0, 1)) == ["float32[12]"]  # nothing lifted: clamp.default


def test_the_general_rule_lifts_only_where_a_tensor_can_stand_for_the_number():
    x = torch.arange(-3.0, 9.0).to("lazy")
    mask = (torch.arange(12) % 2 == 0).to("lazy")
    # a .Scalar overload becomes its .Tensor sibling, the number an input
    assert _ops(x.gt(2.5)) == ["gt.Tensor"] and len(_inputs(x.gt(2.5))) == 2
    assert _ops(x.masked_fill(mask, 2.5)) == ["masked_fill.Tensor"]
    assert (x.masked_fill(mask, 2.5).cpu() == x.cpu().masked_fill(mask.cpu(), 2.5)).all()
    # no sibling (pow: an exponent is structure), or not a tensor slot (a dim): a constant
    assert _ops(x.pow(2.5)) == ["pow.Tensor_Scalar"] and len(_inputs(x.pow(2.5))) == 1
    assert len(_inputs(x.reshape(3, 4).sum(1) * 3.5)) == 2
    # add without alpha: the general rule; a 0-dim int reference promotes like eager
    assert _ops(x + 2.5) == ["add.Tensor"] and len(_inputs(x + 2.5)) == 2
    i0 = torch.tensor(3).to("lazy")
    assert (i0 * 2.5).dtype == (torch.tensor(3) * 2.5).dtype
    assert _inputs(i0 * 2.5) == ["int64[]", "float32[]"]
    assert (i0 * 7).dtype == torch.int64 and _inputs(i0 * 7) == ["int64[]", "int64[]"]



def test_rsub_with_alpha_is_recorded():
    """``rsub.Scalar`` takes ``alpha`` positionally, its ``.Tensor`` sibling
    as a keyword: the lifted call passes it by keyword (capture raised
    "rsub() takes 2 positional arguments but 3 were given"; values:
    tests/e2e/test_scalar_overloads.py)."""
    x = torch.ones(3).to("lazy")
    assert _ops(torch.rsub(x, 2.5, alpha=2))[-1] == "rsub.Tensor"
    assert _inputs(torch.rsub(x, 2.5, alpha=2)) == ["float32[3]", "float32[]"]


def test_fill_values_of_new_tensors_and_rsubs_number_are_lifted():
    # a sampling loop's x.new_full((B,), t) / full_like(x, t) / t - x: each
    # step's t was a constant of the graph, a new compile per step
    x = torch.ones(3).to("lazy")
    # (x stays an input, as new_full's was: new_empty/empty_like read no data)
    assert _inputs(x.new_full((2,), 7.5)) == ["float32[3]", "float32[]"]
    assert _inputs(x.new_full((2,), 7, dtype=torch.int64)) == ["float32[3]", "int64[]"]
    assert _inputs(torch.full_like(x, 0.25)) == ["float32[3]", "float32[]"]
    assert _inputs(0.25 - x) == ["float32[3]", "float32[]"]
    assert _inputs(x.new_full((2,), 1.0)) == ["float32[3]"]  # 0 and 1 stay constants
