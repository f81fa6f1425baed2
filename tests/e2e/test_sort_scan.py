"""The stable, NaN-ordering sort and what is built on it (median, nanmedian),
cummax/cummin, searchsorted/bucketize/isin and index_reduce: compiled (no fallback) and
equal to eager, indices included, on ties, NaN, infinities, -0.0, empty,
0-dim and non-contiguous inputs (``dialects/sort_decompositions.py``,
``dialects/scan_decompositions.py``, ``dialects/reduce_decompositions.py``)."""
from __future__ import annotations

import pytest
import torch

from e2e_helpers import same_as_eager

NAN, INF = float("nan"), float("inf")


def _gen(seed):
    return torch.Generator().manual_seed(seed)


def _ties(*shape, seed=0, high=3):
    return torch.randint(0, high, shape, generator=_gen(seed))


SPECIAL = torch.tensor([[3., NAN, 1., -INF, NAN, 2., INF, 1., -0.0, 0.0, -0.0, INF],
                        [0.0, -0.0, 1., 1., NAN, -INF, -INF, 2., 2., NAN, 0.5, 0.5]])


def _compiled_as_eager(fn, *inputs):
    """Bit for bit as eager, and nothing fell back."""
    same_as_eager(fn, *inputs, exact=True, no_fallback=True)


# Stable sorts: indices are compared too (eager's stable order is defined).
SORTS = {
    "ties_float": (lambda x: torch.sort(x, dim=1, stable=True), _ties(3, 17).float()),
    "ties_float_desc": (lambda x: torch.sort(x, dim=1, descending=True, stable=True),
                        _ties(3, 17).float()),
    "ties_int_dim0": (lambda x: torch.sort(x, dim=0, stable=True), _ties(9, 4)),
    "ties_int_desc": (lambda x: torch.sort(x, dim=0, descending=True, stable=True), _ties(9, 4)),
    "int32": (lambda x: torch.sort(x, dim=-1, descending=True, stable=True),
              _ties(4, 9).int() - 1),
    "int64_extremes": (lambda x: torch.sort(x, stable=True),
                       torch.tensor([2 ** 63 - 1, -2 ** 63, 0, -2 ** 63, 5])),
    "bool": (lambda x: torch.sort(x, dim=1, stable=True), _ties(3, 10) > 0),
    "bool_desc": (lambda x: torch.sort(x, dim=1, descending=True, stable=True), _ties(3, 10) > 0),
    "nan_inf_zeros": (lambda x: torch.sort(x, dim=1, stable=True), SPECIAL),
    "nan_inf_zeros_desc": (lambda x: torch.sort(x, dim=1, descending=True, stable=True), SPECIAL),
    "argsort_nan": (lambda x: torch.argsort(x, dim=1, stable=True), SPECIAL),
    "msort_nan": (lambda x: torch.msort(x), SPECIAL.t().contiguous()),
    "non_contiguous": (lambda x: torch.sort(x.t(), dim=1, stable=True), _ties(11, 3).float()),
    "zero_dim": (lambda x: torch.sort(x), torch.tensor(2.5)),
    "empty": (lambda x: torch.sort(x, dim=0), torch.zeros(0, 3)),
    "long_row": (lambda x: torch.sort(x, stable=True), _ties(8000, high=50)),
    # The default (not stable) sort: eager's tie order is unspecified, values only.
    "default_values": (lambda x: torch.sort(x, dim=1)[0], SPECIAL),
}

MEDIANS = {
    "median": (lambda x: x.median(), _ties(5, 7).float()),
    "median_nan": (lambda x: x.median(), SPECIAL),
    "median_int": (lambda x: x.median(), _ties(4, 6)),
    "nanmedian_nan": (lambda x: x.nanmedian(), SPECIAL),
    "nanmedian_all_nan": (lambda x: x.nanmedian(), torch.full((3,), NAN)),
    "median_dim_ties": (lambda x: x.median(1), _ties(3, 16).float()),
    "median_dim_nan": (lambda x: x.median(1, keepdim=True), SPECIAL),
    "nanmedian_dim_nan": (lambda x: x.nanmedian(1), SPECIAL),
    "nanmedian_dim_all_nan": (lambda x: x.nanmedian(0),
                              torch.tensor([[NAN, 1.], [NAN, NAN], [NAN, 3.]])),
    "median_dim_int": (lambda x: x.median(0), _ties(6, 5)),
    "median_zero_dim": (lambda x: x.median(0), torch.tensor(4.)),
    "median_non_contiguous": (lambda x: x.t().median(1), _ties(8, 3).float()),
}

SCANS = {
    "cummax_nan": (lambda x: torch.cummax(x, 1), SPECIAL),
    "cummin_nan": (lambda x: torch.cummin(x, 1), SPECIAL),
    "cummax_ties": (lambda x: torch.cummax(x, 0), _ties(13, 3)),
    "cummin_ties": (lambda x: torch.cummin(x, 1), _ties(3, 13).float()),
    "cummax_bool": (lambda x: torch.cummax(x, 1), _ties(2, 9) > 1),
    "cummin_int64_extremes": (lambda x: torch.cummin(x, 0),
                              torch.tensor([2 ** 63 - 1, -2 ** 63, 5, -2 ** 63])),
    "cummax_zero_dim": (lambda x: torch.cummax(x, 0), torch.tensor(1.5)),
    "cummin_empty": (lambda x: torch.cummin(x, 0), torch.zeros(0, 2)),
    "cummax_non_contiguous": (lambda x: torch.cummax(x.t(), 1), _ties(9, 4).float()),
}

_SEQ = torch.tensor([1., 2., 2., 2., 3., 5., NAN])
_VALUES = torch.tensor([[0., 1., 2., 2.5, 3., 5., 6., NAN, -0.0, INF]])
SEARCHES = {
    "left_nan": (lambda s, v: torch.searchsorted(s, v), _SEQ, _VALUES),
    "right_nan": (lambda s, v: torch.searchsorted(s, v, right=True), _SEQ, _VALUES),
    # Not sorted: eager's bisection still gives a definite answer.
    "unsorted": (lambda s, v: torch.searchsorted(s, v, side="right"),
                 torch.tensor([3., 1., NAN, 2., 0.]), _VALUES),
    "batched_int32": (lambda s, v: torch.searchsorted(s, v, out_int32=True),
                      torch.sort(_ties(3, 9, high=5), 1)[0], _ties(3, 4, seed=2, high=6) - 1),
    "sorter": (lambda s, v: torch.searchsorted(s, v, sorter=torch.argsort(s)),
               _ties(17, high=5), _ties(2, 5, seed=3, high=6)),
    "promoted": (lambda s, v: torch.searchsorted(s, v),
                 torch.tensor([1, 2, 2, 3]), torch.tensor([1.5, 2.0, -1.])),
    "scalar": (lambda s: torch.searchsorted(s, 2, right=True), torch.tensor([1, 2, 2, 3])),
    "zero_dim_value": (lambda s, v: torch.searchsorted(s, v), _SEQ, torch.tensor(2.)),
    "bucketize_nan": (lambda s, v: torch.bucketize(v, s), _SEQ, _VALUES),
    "isin": (lambda a, b: torch.isin(a, b), _ties(5, 7, high=9), _ties(30, seed=4, high=9)),
    "isin_nan_invert": (lambda a, b: torch.isin(a, b, invert=True), _VALUES, _SEQ),
}


def _cases(table: dict, fast: int = 3) -> list:
    """The first ``fast`` cases of a family run in CI; the others (one
    compile each, 7-10 s) are marked slow (``--runslow``)."""
    return [name if k < fast else pytest.param(name, marks=pytest.mark.slow)
            for k, name in enumerate(table)]


@pytest.mark.parametrize("name", _cases(SORTS, 4))
def test_sort(name):
    fn, x = SORTS[name]
    _compiled_as_eager(fn, x)


@pytest.mark.parametrize("name", _cases(MEDIANS))
def test_median(name):
    fn, x = MEDIANS[name]
    _compiled_as_eager(fn, x)


@pytest.mark.parametrize("name", _cases(SCANS))
def test_cummax_cummin(name):
    fn, x = SCANS[name]
    _compiled_as_eager(fn, x)


@pytest.mark.parametrize("name", _cases(SEARCHES))
def test_searchsorted(name):
    fn, *inputs = SEARCHES[name]
    _compiled_as_eager(fn, *inputs)


_IDX = torch.tensor([0, 2, 0, 1, 2, 2])
_SRC = torch.tensor([[1., NAN, 3., -0.0, 2., INF], [5., 5., -1., 2., NAN, 7.]])
INDEX_REDUCES = {
    f"{reduce}_{'self' if include_self else 'no_self'}": (
        lambda x, s, r=reduce, i=include_self: x.index_reduce(1, _IDX.to(x.device), s, r,
                                                              include_self=i))
    for reduce in ("amax", "amin", "mean", "prod") for include_self in (True, False)
}


@pytest.mark.parametrize("name", list(INDEX_REDUCES))
def test_index_reduce_nan(name):
    x = torch.tensor([[0.5, NAN, -2., 4.], [1., 2., 3., 4.]])
    _compiled_as_eager(INDEX_REDUCES[name], x, _SRC)


@pytest.mark.parametrize("reduce", ["amax", "mean", "prod"])
def test_index_reduce_int_zero_dim(reduce):
    _compiled_as_eager(lambda x, s: x.index_reduce(1, _IDX.to(x.device), s, reduce),
                       _ties(3, 4, high=7) - 3, _ties(3, 6, seed=5, high=7) - 3)
    _compiled_as_eager(lambda x, s: x.index_reduce(0, torch.zeros(1, dtype=torch.int64,
                                                                  device=x.device), s, reduce,
                                                   include_self=False),
                       torch.tensor(3.), torch.tensor(-2.))
