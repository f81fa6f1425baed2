"""``compile_train_step`` at a new batch size: the recorded step replayed on
a module with dynamic dimensions (issue 53).

A batch of a new shape changes the step's guard, so the step would record
again (twice) at every new length. The lazy device's size families
(``compile_service/size_families.py``) already compile the step's graph once
for every size of its family; this lets the step replay on that module too.

Two recordings *agree but for sizes* when their guards differ only in the
batch's shapes (same ranks and dtypes), their graphs are one size family
(same ops, dtypes, ranks: ``pipeline/size_family.family_of``) and one plan
with a loaded module admits both, only batch inputs have dynamic
dimensions in it, and the recordings have the same constants, outputs
(their shapes included), index checks and places of random seeds; a
constant with a dynamic dimension must come from a host factory
(``arange(t)``: ``lazy/device.made_by``) whose integer arguments follow
the sizes, and is made again for each new size. Then both shapes replay,
each on the module its recording ran; once a recording at a third shape
agrees too (the plan's expressions of the sizes, found from two points,
hold at a third: ``view(b * t, d)`` is not taken for ``k * t + c``), a
batch of any other shape the plan admits (``SizePlan.admits_shapes``: its static
dimensions unchanged, its varied ones consistent, the trace's guards true)
replays on the plan's module without recording: ``SizeVariant``. The
module's results are checked against the recorded shapes at each run
(``LoadedModule.dynamic_dims``): a mismatch raises, never binds.

What it takes on trust: that the step's Python builds the same graph at
the new size with its integers following the plan's expressions of the
sizes (``view(b * t, d)``, ``arange(t)``), as it did at the three recorded
ones. A step that takes another path at some size (``if ids.shape[1] >
64:``) is not seen; ``compile_train_step(..., dynamic=False)`` records at
every batch shape instead, as ``LAZY_MLIR_DYNAMIC=0`` does for every way in.

Counter: ``TrainStepNewSize`` (a new batch shape served by a variant).
"""
from __future__ import annotations

import copy
from dataclasses import dataclass, field

import torch

from ..compile_service import size_families
from ..compile_service.executable import fx_module_of
from ..lazy.device import factory_value, made_by
from ..pipeline.size_family import Expr, SizePlan, explain, family_of

SHAPES = 1  # the batch's (shape, dtype) pairs in a guard (``CompiledTrainStep._guard``)


@dataclass(frozen=True)
class Remade:
    """A constant input made by a host factory whose integer arguments
    follow the sizes (an ``Expr`` of the classes where they vary)."""

    op: object
    args: tuple
    kwargs: dict

    def data(self, classes: tuple[int, ...]):
        args = tuple(a.value(classes) if isinstance(a, Expr) else a for a in self.args)
        return factory_value(self.op, args, self.kwargs).data


@dataclass
class SizeVariant:
    """A recorded step (``plan``, a ``train_step._Plan`` whose entry is the
    module of ``sizes``), the plan of sizes under which it replays, and its
    constants made again at each size (``remade``: position in ``bound``)."""

    plan: object
    sizes: SizePlan
    remade: dict[int, Remade]
    guards: set = field(default_factory=set)  # the guards of the recordings that made it
    confirmed: bool = False  # a recording at a third shape agreed with it

    def plan_for(self, lead: list[torch.Tensor]):
        """The step's plan on ``lead`` (state, then batch): the recorded one
        with its size-following constants made for these sizes; None where
        the module does not compute the step at their shapes."""
        classes = self._classes(lead)
        if classes is None:
            return None
        bound = list(self.plan.bound)
        for i, r in self.remade.items():
            bound[i] = r.data(classes)
        shapes = [tuple(t.shape) for t in lead] + [d.spec.shape for d in bound]
        contiguous = ([t.is_contiguous() for t in lead]
                      + list(self.sizes.sizes.contiguous[len(lead):]))
        if len(shapes) != len(self.sizes.dims) or not self.sizes.admits_shapes(shapes,
                                                                                contiguous):
            return None
        plan = copy.copy(self.plan)
        plan.bound = bound
        return plan

    def _classes(self, lead) -> tuple[int, ...] | None:
        """Each class's size, read from the state and batch; None where
        they disagree or some class is not among them."""
        found: list = [None] * len(self.sizes.hints)
        for t, cls in zip(lead, self.sizes.dims):
            if t.dim() != len(cls):
                return None
            for s, c in zip(t.shape, cls):
                if c is not None and found[c] not in (None, s):
                    return None
                if c is not None:
                    found[c] = s
        return None if None in found else tuple(found)


def size_free(guard: tuple) -> tuple:
    """``guard`` with the batch's shapes replaced by their ranks: the guard
    of every batch size a variant may serve."""
    shapes = guard[SHAPES]
    return guard[:SHAPES] + (tuple((len(s), dtype) for s, dtype in shapes),) + guard[SHAPES + 1:]


def family(graph, target) -> tuple | None:
    """(family key, sizes) of a recorded step's graph; None where the
    target compiles no module with dynamic dimensions (or the graph is not
    keyed in families)."""
    if not size_families.enabled(target):
        return None
    try:
        fkey, sizes = family_of(fx_module_of(graph))
    except Exception:  # noqa: BLE001 - (an untraceable graph: recorded per shape, as before)
        return None
    return None if fkey is None else (fkey, sizes)


def agree(p, q, n_state: int) -> SizeVariant | None:
    """The variant of two recordings ``p`` and ``q`` (``train_step._Plan``s
    made under guards that differ only in the batch's shapes, ``n_state``
    state inputs first) where they agree but for sizes; else None."""
    if p.family is None or q.family is None or p.family[0] != q.family[0]:
        return None
    if any(kind == "new" for kind, _ in p.slots):  # (the optimizer's first step)
        return None
    if (p.slots, p.specs, p.checks, p.seeds, p.hyper, p.fixed, p.no_grad, p.n_lead) != (
            q.slots, q.specs, q.checks, q.seeds, q.hyper, q.fixed, q.no_grad, q.n_lead):
        return None
    for entry in (p.entry, q.entry):
        plan = size_families.plan_of(entry)
        if plan is None or not (plan.admits(p.family[1]) and plan.admits(q.family[1])):
            continue
        remade = _remade(plan, p, q, n_state)
        if remade is not None and same_constants(p, q, set(remade)):
            replayed = copy.copy(p)
            replayed.entry = entry
            return SizeVariant(replayed, plan, remade)
    return None


def _remade(plan: SizePlan, p, q, n_state: int) -> dict[int, Remade] | None:
    """The constants of ``p`` with a dynamic dimension, each as the host
    factory call that makes it at any size; None where one is not such a
    call or the state has a dynamic dimension."""
    pairs = list(zip(plan.class_sizes(q.family[1]), plan.class_sizes(p.family[1])))
    out = {}
    for i in plan.dynamic_inputs():
        if i < n_state:
            return None
        if i < p.n_lead:
            continue  # (the batch)
        a, b = made_by(q.bound[i - p.n_lead]), made_by(p.bound[i - p.n_lead])
        if a is None or b is None or a[0] != b[0] or a[2] != b[2] or len(a[1]) != len(b[1]):
            return None
        args = []
        for x, y in zip(a[1], b[1]):
            e = explain(x, y, pairs) if type(x) is int and type(y) is int and x != y else None
            if e is None and (type(x) is not type(y) or x != y):
                return None
            args.append(x if e is None else e)
        out[i - p.n_lead] = Remade(b[0], tuple(args), b[2])
    return out


def same_constants(p, q, remade=frozenset()) -> bool:
    """The constants two recordings read (their inputs after the state and
    the batch) are equal, random seeds, hyperparameters and ``remade`` ones
    aside."""
    if len(p.bound) != len(q.bound):
        return False
    rebound = p.rebound
    for i, (a, b) in enumerate(zip(p.bound, q.bound)):
        if a is b or i in rebound or i in remade:
            continue
        if a.host is None or b.host is None or a.spec != b.spec or not torch.equal(a.host,
                                                                                 b.host):
            return False
    return True
