"""Integer division by zero raises as in eager (``RuntimeError:
ZeroDivisionError``) instead of giving some value (``lazy/bounds.py``,
``DIVISIONS``): a divisor on the host raises at capture, a computed one at the
next sync point; float division keeps eager's inf/NaN."""
from __future__ import annotations

import pytest
import torch

import lazy_mlir as lm
from e2e_helpers import lazy

OPS = {
    "div_floor": lambda a, b: torch.div(a, b, rounding_mode="floor"),
    "div_trunc": lambda a, b: torch.div(a, b, rounding_mode="trunc"),
    "floor_divide": torch.floor_divide,
    "remainder": torch.remainder,
    "fmod": torch.fmod,
}
A = torch.tensor([7, -7, 5, -9])
GOOD = torch.tensor([2, -3, 1, 4])
ZERO = torch.tensor([2, 0, 1, 4])


def _program(a, bs):
    return [f(a, b) for f, b in zip(OPS.values(), bs)]


def _computed(values):
    """Divisors that are device data with no host copy: checked in the graph."""
    out = [v.to("lazy") * 1 for v in values]
    lm.mark_step()
    return out


def test_nonzero_integer_divisors_match_eager(counters):
    for o, e in zip(_program(lazy(A), _computed([GOOD] * len(OPS))), _program(A, [GOOD] * 5)):
        assert torch.equal(o.cpu(), e)
    assert not [n for n in lm.metrics.counter_names() if n.startswith("aten::") and counters.delta(n)]


@pytest.mark.parametrize("name", list(OPS))
def test_host_zero_divisor_raises_at_capture(name):
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
        OPS[name](A, ZERO)  # eager
    with pytest.raises(RuntimeError, match="ZeroDivisionError") as info:
        OPS[name](lazy(A), lazy(ZERO))
    assert "test_zero_division.py" in str(info.value)
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
        OPS[name](lazy(A), 0)  # a Python 0


def test_computed_zero_divisor_raises_at_sync():
    for k, name in enumerate(OPS):
        divisors = [GOOD] * len(OPS)
        divisors[k] = ZERO
        outs = _program(lazy(A), _computed(divisors))
        lm.mark_step()
        with pytest.raises(RuntimeError, match="ZeroDivisionError") as info:
            outs[k].cpu()
        assert "test_zero_division.py" in str(info.value)
        with pytest.raises(RuntimeError):  # reported once more by the next sync point
            lm.wait_device_ops()


def test_float_division_by_zero_is_not_an_error():
    a, b = torch.tensor([1.0, -1.0, 0.0, 3.0]), torch.tensor([0.0, 0.0, 0.0, 2.0])
    for f in OPS.values():
        torch.testing.assert_close(f(lazy(a), lazy(b) * 1).cpu(), f(a, b), equal_nan=True)
    ints_by_float = torch.div(lazy(A), lazy(torch.zeros(4)) * 1, rounding_mode="floor")
    torch.testing.assert_close(ints_by_float.cpu(), torch.div(A, torch.zeros(4), rounding_mode="floor"))
