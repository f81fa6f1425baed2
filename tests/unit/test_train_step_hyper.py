"""train_step_hyper's pure pieces: the guard's structure of a lifted value,
and the check of lifted keys a plan does not bind (``fixed``), which
torch.optim's own optimizers never reach but a replay must not skip."""
import torch

from lazy_mlir.frontends import train_step_hyper as hyper


def _bound(pos, group, keys=("lr",)):
    return hyper.Bound(pos, group, keys, float, torch.float32)


def test_structure_keeps_type_and_zero_but_not_the_value():
    assert hyper.structure(0.1) == hyper.structure(0.2)
    assert hyper.structure(0.0) != hyper.structure(0.1)  # (SGD's momentum 0: no buffers)
    assert hyper.structure(1) != hyper.structure(1.0)
    assert hyper.structure((0.9, 0.999)) == hyper.structure((0.8, 0.99))


def test_a_lifted_key_the_plan_does_not_bind_is_checked_per_replay():
    groups = [{"lr": 0.1, "betas": (0.9, 0.999)}, {"lr": 0.01}]
    lifted = {(0, "lr"), (1, "lr")}
    fixed = hyper.fixed(lifted, (_bound(0, 0),), groups)
    assert fixed == ((1, "lr", 0.01),)
    assert hyper.fixed_hold(fixed, groups)
    groups[0]["lr"] = 0.5  # (bound: changes nothing)
    assert hyper.fixed_hold(fixed, groups)
    groups[1]["lr"] = 0.02  # (taken as a constant by the plan: no replay)
    assert not hyper.fixed_hold(fixed, groups)


def test_bind_makes_each_input_from_the_group_and_reuses_it_while_it_holds():
    groups, made, bound = [{"lr": 0.1}], {}, [None, None]
    hyper.bind((_bound(1, 0),), groups, bound, made)
    first = bound[1]
    assert torch.equal(first.host, torch.tensor(0.1))
    hyper.bind((_bound(1, 0),), groups, bound, made)
    assert bound[1] is first  # (uploaded once while the value holds)
    groups[0]["lr"] = 0.2
    hyper.bind((_bound(1, 0),), groups, bound, made)
    assert torch.equal(bound[1].host, torch.tensor(0.2))
