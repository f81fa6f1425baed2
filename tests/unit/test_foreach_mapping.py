"""The foreach -> per-tensor op mapping (``lazy/foreach.py``), checked on CPU.

``foreach.dispatch`` only calls per-tensor aten ops, so on CPU tensors it runs
eagerly: for every foreach overload PyTorch has, its result (and, for the
in-place ones, the lists it wrote) must equal PyTorch's own foreach kernel.
No compiler involved; a new foreach op in PyTorch shows up here.
"""
from __future__ import annotations

import pytest
import torch

from lazy_mlir.lazy import foreach

SHAPES = [(3, 3), (2, 2)]  # square: _foreach_mm takes them too


def _schemas():
    out = []
    for s in torch._C._jit_get_all_schemas():
        if s.name.startswith("aten::_foreach_"):
            out.append((s.name.split("::")[1], s.overload_name or "default"))
    return sorted(set(out))


def _sample(arg, n_list, seed):
    g = torch.Generator().manual_seed(seed)
    t = str(arg.type)
    if t == "List[Tensor]":
        xs = [torch.rand(s, generator=g) + 0.5 for s in SHAPES]
        xs[1][0, 0] = float("nan")  # NaN propagation of maximum/minimum/clamp/norm
        return xs
    if t == "Tensor":
        if arg.name == "scalars":
            return torch.tensor([0.5, -1.5])
        return torch.tensor(1.25)
    if t in ("List[number]", "List[Scalar]"):
        return [0.5, 1.5]
    if t in ("number", "Scalar"):
        return 2.0 if arg.name == "self" else 0.75
    if t == "bool":
        return False
    if arg.has_default_value():
        return arg.default_value
    raise NotImplementedError(t)


def _op(name, overload):
    return getattr(getattr(torch.ops.aten, name), overload)


@pytest.mark.parametrize("name,overload", _schemas())
def test_foreach_matches_pytorch_kernel(name, overload):
    func = _op(name, overload)
    how = foreach.plan(func)
    if isinstance(how, str):  # falls back (counted) on lazy tensors
        assert name == "_foreach_powsum" or "out" in overload, (name, overload, how)
        return
    schema = func._schema.arguments
    args = [_sample(a, len(SHAPES), i) for i, a in enumerate(schema) if not a.kwarg_only]
    kwargs = {a.name: _sample(a, len(SHAPES), i) for i, a in enumerate(schema) if a.kwarg_only}
    clone = lambda v: ([x.clone() for x in v] if isinstance(v, list) and v
                       and isinstance(v[0], torch.Tensor) else
                       v.clone() if isinstance(v, torch.Tensor) else v)
    mine = [clone(a) for a in args]
    expected = func(*args, **kwargs)
    got = foreach.dispatch(func, mine, dict(kwargs))
    if how.inplace:
        assert got is None and expected is None
        for a, b in zip(args, mine):
            if isinstance(a, list) and a and isinstance(a[0], torch.Tensor):
                for x, y in zip(a, b):
                    torch.testing.assert_close(y, x, equal_nan=True, rtol=0, atol=0)
    else:
        assert len(got) == len(expected)
        for x, y in zip(expected, got):
            torch.testing.assert_close(y, x, equal_nan=True, rtol=0, atol=0)


def test_list_lengths_must_agree():
    with pytest.raises(RuntimeError, match="same number"):
        foreach.dispatch(torch.ops.aten._foreach_add.List,
                         [[torch.ones(2)], [torch.ones(2), torch.ones(2)]], {})


def test_in_place_elements_see_earlier_writes():
    """Sequential per-element semantics: the second element's operand is the
    first element, already updated (PyTorch's CPU kernel does the same)."""
    a, b = torch.ones(2), torch.full((2,), 3.0)
    ea, eb = a.clone(), b.clone()
    torch._foreach_add_([ea, eb], [eb, ea])
    foreach.dispatch(torch.ops.aten._foreach_add_.List, [[a, b], [b, a]], {})
    assert torch.equal(a, ea) and torch.equal(b, eb)
