"""``torch.distributions`` on the lazy device, with its argument checks on
(the default): ``Categorical`` checks read ``_is_all_true``, which ran
eagerly at every construction until it became ``all`` (``ops/reductions``)."""
from __future__ import annotations

import torch
from torch.distributions import Categorical, Normal

import lazy_mlir as lm
from e2e_helpers import assert_lazy_close, lazy


def _policy_terms(probs, actions, mu, sigma, x):
    c, n = Categorical(probs), Normal(mu, sigma)
    return c.log_prob(actions), c.entropy(), n.log_prob(x), n.entropy()


def test_log_probs_and_entropies_compile_with_argument_checks(counters):
    torch.manual_seed(0)
    args = (torch.softmax(torch.randn(5, 4), -1), torch.tensor([0, 3, 1, 2, 2]),
            torch.randn(5), torch.rand(5) + 0.1, torch.randn(5))
    counters.snapshot()
    got = _policy_terms(*[lazy(a) for a in args])
    lm.mark_step()
    for g, want in zip(got, _policy_terms(*args)):
        assert_lazy_close(g, want, rtol=1e-5, atol=1e-6)
    assert not counters.fell_back(), counters.fell_back()


def test_is_all_true_and_is_any_true_read_like_eager():
    for values in ([True, True], [True, False], [False, False]):
        t = torch.tensor(values)
        assert torch._is_all_true(lazy(t)).item() == torch._is_all_true(t).item()
        assert torch._is_any_true(lazy(t)).item() == torch._is_any_true(t).item()
