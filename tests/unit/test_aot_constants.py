"""``frontends/aot_constants``: which divisions of a torch.compile graph
ATen computes when it compiles (those of constants only)."""
import torch
from torch.fx.experimental.proxy_tensor import make_fx

from lazy_mlir.frontends.aot_constants import fold_constant_divisions

aten = torch.ops.aten


def _graph(fn, *args):
    return make_fx(fn)(*args)


def _targets(gm):
    return [n.target for n in gm.graph.nodes if n.op == "call_function"]


def test_a_division_of_constants_becomes_its_value():
    gm = _graph(lambda x: torch.div(torch.full((3,), 7), torch.full((3,), -2),
                                    rounding_mode="trunc") + x, torch.zeros(3, dtype=torch.int64))
    assert fold_constant_divisions(gm) == 1
    assert aten.div.Tensor_mode not in _targets(gm)
    assert torch.equal(gm(torch.zeros(3, dtype=torch.int64)), torch.full((3,), -3))


def test_differing_elements_become_a_constant_of_the_module():
    gm = _graph(lambda x: torch.arange(-6, 6) // torch.full((12,), -5) + x,
                torch.zeros(12, dtype=torch.int64))
    assert fold_constant_divisions(gm) == 1
    assert any(n.op == "get_attr" for n in gm.graph.nodes)
    assert torch.equal(gm(torch.zeros(12, dtype=torch.int64)), torch.arange(-6, 6) // -5)


def test_divisions_of_inputs_and_of_random_values_are_left_to_the_compiler():
    gm = _graph(lambda x: (torch.div(x, torch.full((3,), -2), rounding_mode="floor"),
                           torch.randint(0, 9, (3,)) % 4), torch.ones(3, dtype=torch.int64))
    before = _targets(gm)
    assert fold_constant_divisions(gm) == 0 and _targets(gm) == before
