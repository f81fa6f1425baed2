"""Out-of-range indices raise as in eager, never read or write outside a tensor
(``lazy_mlir/lazy/bounds.py``).

Two routes: an index whose values are on the host is checked at capture and
raises at once; a computed index is checked in its graph and raises at the
next sync point. Every family of indexing ops sits in one program, so all the
computed-index cases share one compiled graph (the index values are data)."""
from __future__ import annotations

import pytest
import torch

import lazy_mlir as lm
from e2e_helpers import lazy

# family -> (op on (x [6], w [3, 4], index), in-range index, too large, too negative)
# The in-range index holds a negative where eager accepts one.
FAMILIES = {
    "index": (lambda x, w, i: x[i], [0, -1], [0, 6], [-7, 0]),
    "index_put": (lambda x, w, i: x.clone().index_put_((i,), x[:2], accumulate=True),
                  [1, -1], [0, 6], [-7, 0]),
    "index_select": (lambda x, w, i: torch.index_select(x, 0, i), [5, 0], [0, 6], [-1, 0]),
    "index_select_int32": (lambda x, w, i: torch.index_select(x, 0, i.int()), [5, 0], [0, 6],
                           [-1, 0]),
    "gather": (lambda x, w, i: torch.gather(x, 0, i), [5, 2], [0, 6], [-1, 0]),
    "scatter": (lambda x, w, i: x.clone().scatter_(0, i, x[:2] * 10), [4, 1], [6, 0], [0, -1]),
    "scatter_add": (lambda x, w, i: x.clone().scatter_add_(0, i, x[:2]), [3, 3], [0, 6], [-1, 0]),
    "scatter_reduce": (lambda x, w, i: x.clone().scatter_reduce_(0, i, x[:2], "amax"),
                       [3, 2], [0, 6], [-1, 0]),
    "embedding": (lambda x, w, i: torch.nn.functional.embedding(i, w), [2, 0], [0, 3], [-1, 0]),
    "take": (lambda x, w, i: torch.take(w, i), [11, -12], [0, 12], [-13, 0]),
    "put": (lambda x, w, i: x.clone().put_(i, x[:2]), [0, -6], [0, 6], [-7, 0]),
    "index_add": (lambda x, w, i: x.clone().index_add_(0, i, x[:2]), [1, 5], [0, 6], [-1, 0]),
    "index_copy": (lambda x, w, i: x.clone().index_copy_(0, i, w[1, :2]), [1, 5], [6, 0], [-1, 0]),
    "index_fill": (lambda x, w, i: x.clone().index_fill_(0, i, -1.0), [1, -2], [0, 6], [-7, 0]),
    "take_along_dim": (lambda x, w, i: torch.take_along_dim(w, i), [11, 0], [0, 12], [-1, 0]),
    "nll_loss": (lambda x, w, i: torch.nn.functional.nll_loss(w[:2], i, ignore_index=-100),
                 [3, -100], [0, 4], [-1, 0]),
}
NAMES = list(FAMILIES)
X = torch.arange(6.0)
W = torch.arange(12.0).reshape(3, 4)


def _program(x, w, indices):
    return [FAMILIES[n][0](x, w, i) for n, i in zip(NAMES, indices)]


def _eager_error(name, bad):
    try:
        FAMILIES[name][0](X.clone(), W.clone(), torch.tensor(bad))
    except (IndexError, RuntimeError) as e:
        return type(e)
    raise AssertionError(f"eager accepted {name} {bad}")


def _device_indices(values):
    """Lazy indices that are device data with no host copy: checked in the graph."""
    out = [torch.tensor(v).to("lazy") * 1 for v in values]
    lm.mark_step()
    return out


def _run(indices):
    outs = _program(lazy(X), lazy(W), indices)
    lm.mark_step()
    return outs


def test_in_range_unchanged(counters):
    counters.snapshot()
    expected = _program(X, W, [torch.tensor(FAMILIES[n][1]) for n in NAMES])
    # Indices computed on the device (the checked, clamped graph; host indices
    # are checked at capture and leave the graph as it was).
    for o, e in zip(_run(_device_indices([FAMILIES[n][1] for n in NAMES])), expected):
        torch.testing.assert_close(o.cpu(), e)
    assert not [n for n in lm.metrics.counter_names()
                if n.startswith("aten::") and counters.delta(n)]


@pytest.mark.parametrize("which", [2, 3], ids=["too_large", "too_negative"])
def test_host_index_raises_at_capture(which):
    for name in NAMES:
        bad = FAMILIES[name][which]
        with pytest.raises(_eager_error(name, bad)) as info:
            FAMILIES[name][0](lazy(X), lazy(W), lazy(torch.tensor(bad)))
        assert "lazy-mlir" in str(info.value) and "test_index_bounds.py" in str(info.value)


@pytest.mark.parametrize("which", [2, 3], ids=["too_large", "too_negative"])
def test_computed_index_raises_at_sync(which, counters):
    counters.snapshot()
    good = [FAMILIES[n][1] for n in NAMES]
    for k, name in enumerate(NAMES):
        values = list(good)
        values[k] = FAMILIES[name][which]
        outs = _run(_device_indices(values))
        with pytest.raises(_eager_error(name, values[k])) as info:
            outs[k].cpu()
        message = str(info.value)
        assert "index out of range in aten." in message and "test_index_bounds.py" in message
        with pytest.raises(type(info.value)):  # every output of that graph is poisoned
            outs[0].cpu()
        with pytest.raises(type(info.value)):  # and once by the next sync point
            lm.mark_step()
    # The whole sweep compiled the program once, and nothing ran eagerly.
    assert counters.delta("UncachedCompile") <= 2
    assert not [n for n in lm.metrics.counter_names()
                if n.startswith("aten::") and counters.delta(n)]


def test_no_write_outside_the_tensor():
    """An out-of-range scatter and an index_put through a view are clamped
    into their targets: tensors made before keep their values; the graph's
    own results (the view's base too) raise when read."""
    neighbours = [lazy(torch.full((64,), float(k))) + 0 for k in range(4)]
    base = lazy(torch.zeros(10)) + 0
    lm.mark_step()
    big = _device_indices([[0, 1 << 20, -(1 << 20), 7]])[0]
    target = lazy(torch.zeros(6)) + 0
    target.scatter_(0, big[:2].abs(), lazy(torch.ones(2)))
    view = base[2:8]
    view.index_put_((big[2:],), lazy(torch.ones(2)))  # -2**20 and 7 for size 6
    lm.mark_step()
    with pytest.raises(RuntimeError) as info:  # the first flag (scatter's) names the type
        base.cpu()
    assert "aten.scatter.src" in str(info.value) and "also index out of range in aten.index_put" in str(info.value)
    with pytest.raises(RuntimeError):
        target.cpu()  # read again: still raises
    with pytest.raises(RuntimeError):  # and the next sync point reports it once
        lm.wait_device_ops()
    for k, n in enumerate(neighbours):
        assert torch.equal(n.cpu(), torch.full((64,), float(k)))
    fresh = lazy(torch.arange(4.0)) * 2
    assert torch.equal(fresh.cpu(), torch.arange(4.0) * 2)  # the next graph runs normally


def test_error_surfaces_at_next_mark_step():
    x = lazy(X) + 0
    i = _device_indices([[0, 9]])[0]
    y = x[i]  # noqa: F841 - never read: the next sync point reports it
    lm.mark_step()
    with pytest.raises(IndexError, match=r"aten.index.Tensor.*\[-6, 6\)"):
        lm.mark_step()
        lm.wait_device_ops()
    lm.mark_step()


def test_empty_and_mask_indices():
    x = lazy(X) + 0
    empty = torch.index_select(x, 0, _device_indices([[]])[0].long())
    assert empty.shape == (0,)
    mask = lazy(X > 2)
    y = lazy(X) + 0
    y[mask] = -1.0  # a bool mask selects: not range-checked
    assert torch.equal(y.cpu(), torch.where(X > 2, -1.0, X))
