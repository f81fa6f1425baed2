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


def _actor_critic_episodes(device, episodes=2, steps=30):
    """PyTorch's actor-critic example, its environment replaced by fixed
    states: a forward and a host read (the action) per time step, then one
    backward through every step and an Adam update per episode."""
    torch.manual_seed(0)
    body, actor, critic = (torch.nn.Linear(4, 16), torch.nn.Linear(16, 2),
                           torch.nn.Linear(16, 1))
    params = [p for m in (body, actor, critic) for p in m.to(device).parameters()]
    opt = torch.optim.Adam(params, lr=3e-2)
    states = torch.randn(episodes, steps, 4)
    for episode in range(episodes):
        saved = []
        for t in range(steps):
            h = torch.relu(body(states[episode, t].to(device)))
            probs, value = torch.softmax(actor(h), -1), critic(h)
            action = probs.argmax()
            saved.append((Categorical(probs).log_prob(action), value, action.item()))
        losses = [-lp * (1.0 - v.item()) + torch.nn.functional.smooth_l1_loss(
            v, torch.tensor([float(a)], device=device)) for lp, v, a in saved]
        opt.zero_grad()
        torch.stack(losses).sum().backward()
        opt.step()
        if device == "lazy":
            lm.mark_step()
    return [p.detach().cpu() for p in params]


def test_an_episode_of_thirty_steps_trains_like_eager(counters):
    """Each weight's gradient sums 30 terms (a use per time step). IREE fused
    the chain with Adam's update into one dispatch of 33 buffers, and its CPU
    runtime refuses more than 32: the second episode died with "binding
    count 33 > 32" (``passes/wide_sums``, now on every target)."""
    want = _actor_critic_episodes("cpu")
    counters.snapshot()
    got = _actor_critic_episodes("lazy")
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-6)
    assert not counters.fell_back(), counters.fell_back()


def test_a_module_the_runtime_refuses_runs_eagerly(counters, monkeypatch):
    """Without the long-sum rewrite, IREE's CPU runtime refuses the second
    episode's module ("binding count 33 > 32"). A module that compiled but
    does not run must not take the program down: its graph runs eagerly
    from then on, counted (``lazy/sync._refused``), with eager's values."""
    from lazy_mlir.pipeline import stages
    monkeypatch.setattr(stages, "WIDE_SUM_TARGETS", frozenset())
    # (31 steps: not the graphs the test above compiled with the rewrite)
    want = _actor_critic_episodes("cpu", episodes=3, steps=31)
    counters.snapshot()
    got = _actor_critic_episodes("lazy", episodes=3, steps=31)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-6)
    # (each refused once: its later runs, the third episode's, are eager ones)
    assert counters.delta("EagerGraph") >= counters.delta("RefusedModule") >= 1


def test_categorical_samples_are_eagers_without_a_fallback(counters):
    """``Categorical.sample`` (``multinomial(p, 1, True)``) and samples drawn
    without replacement take ATen's path on the device (``lazy/multinomial``):
    eager's samples for a seed, its errors for bad probabilities, no
    fallback."""
    p = torch.softmax(torch.randn(4, 6, generator=torch.Generator().manual_seed(0)), -1)
    draws = [lambda q: torch.multinomial(q, 1), lambda q: torch.multinomial(q, 1, True),
             lambda q: torch.multinomial(q, 3), lambda q: torch.multinomial(q[0], 6),
             lambda q: Categorical(q).sample()]
    counters.snapshot()
    for draw in draws:
        torch.manual_seed(7)
        want = draw(p)
        torch.manual_seed(7)
        got = draw(lazy(p))
        lm.mark_step()
        assert torch.equal(got.cpu(), want)
    assert not counters.fell_back(), counters.fell_back()
    for bad in (torch.tensor([0.5, -0.1]), torch.tensor([0.0, 0.0]), torch.tensor([float("nan"), 1.0])):
        errors = []
        for q in (bad, lazy(bad)):
            try:
                torch.multinomial(q, 1)
            except RuntimeError as e:
                errors.append(str(e))
        assert len(errors) == 2 and errors[0] == errors[1], errors
