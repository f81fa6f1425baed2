"""Automatic dynamic dimensions: a second size of a graph compiles a module
for every size of its family (``pipeline/size_family.py``).

The first graph of a family compiles static, as every graph did before (a
dimension is dynamic only once it has been seen to vary: static modules
keep IREE's static tiling). When a graph misses the caches and a graph of
its family (same ops, dtypes and ranks; other sizes) was seen before, the
two give a ``SizePlan``; its module, compiled once with those dimensions
dynamic (``DynamicShapeCompile``), then serves every later graph the plan
admits (``DynamicShapeHit``), loaded under each one's own key too. A plan
whose module fails to compile or load is not used again: the family's
sizes compile static as before, and the family makes no other plan (one
failed compile, not one per pair of sizes).

On the cpu target; ``LAZY_MLIR_DYNAMIC=0`` keeps one module per size.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field, replace

import torch.fx as fx

from .. import metrics
from ..config import switched_on
from ..pipeline.size_family import Sizes, SizePlan, derive_plan, family_of, symbolic_module
from .executable import FAILED, LOADED, CompilingExecutable
from .memory_cache import memory_cache

log = logging.getLogger("lazy_mlir")
SWITCH = "LAZY_MLIR_DYNAMIC"
MAX_PLANS = 4  # per family: a family whose sizes keep escaping its plans stays static


@dataclass
class Family:
    """What is known of one family on one target and config: the sizes it
    was first seen with and the plans made since (with their module's
    memory-cache key)."""

    first: Sizes
    plans: list[tuple[SizePlan, tuple]] = field(default_factory=list)


_families: dict[tuple, Family] = {}


def enabled(target) -> bool:
    return target.name == "cpu" and switched_on(SWITCH)


@dataclass
class DynamicAnswer:
    """What ``dynamic_executable`` found for a graph: ``entry`` (a loaded
    module, or one compiling: the graph runs eagerly meanwhile), ``cache``:
    whether the graph's own key may keep it (not while it compiles: the
    memory cache would keep answering the compile after it settled)."""

    entry: object
    cache: bool


def dynamic_executable(graph, gm, target, config, memory_key, compile_plan):
    """The executable of a plan that admits ``graph`` (fx module ``gm``),
    or of a new plan made from it and the first graph of its family
    (``compile_plan(gm, plan)`` compiles it; returns the entry and its
    memory key); None where the graph compiles static."""
    if not enabled(target):
        return None
    fkey, sizes = family_of(gm)
    if fkey is None:
        return None
    family = _families.get((fkey, target.cache_key, config.key))
    if family is None:
        _families[(fkey, target.cache_key, config.key)] = Family(sizes)
        return None
    for plan, key in family.plans:
        entry = memory_cache.get(key) if key is not None else None
        if key is None or (entry is not None and entry.state == FAILED):
            return None  # (a plan of this family failed: its sizes compile static for good)
        if entry is None or not plan.admits(sizes):
            continue
        if entry.state == LOADED:
            metrics.counter_inc("DynamicShapeHit")
            return DynamicAnswer(entry, True)
        if isinstance(entry, CompilingExecutable):  # (this graph's own eager module)
            metrics.counter_inc("EagerWhileCompiling")
            return DynamicAnswer(CompilingExecutable(gm, entry.future, entry.job), False)
    if len(family.plans) >= MAX_PLANS:
        return None
    plan = derive_plan(family.first, sizes)
    if plan is None or any(plan.key == p.key for p, _ in family.plans):
        return None  # (no plan, or one that failed)
    try:  # (traced here too: the guard needs what the trace assumed)
        plan = replace(plan, guards=symbolic_module(gm, plan).meta["size_guards"])
    except Exception as e:  # noqa: BLE001 - any failure: the family stays static
        log.info("lazy-mlir: no module with dynamic dimensions (%s)", str(e)[:300])
        family.plans.append((plan, None))
        return None
    planned = fx.GraphModule(gm, gm.graph)  # (``gm`` itself may compile static next)
    planned.meta["size_plan"] = plan
    metrics.counter_inc("DynamicShapeCompile")
    entry, key = compile_plan(planned, "dyn:" + fkey + ":" + plan.key)
    family.plans.append((plan, key))
    if entry.state != LOADED:  # a failed plan is skipped from now on (memory cache)
        return DynamicAnswer(entry, False) if isinstance(entry, CompilingExecutable) else None
    return DynamicAnswer(entry, True)


def plan_of(entry) -> SizePlan | None:
    """The plan whose loaded module ``entry`` is (what a front end that
    replays a module on inputs of new sizes checks them against); None for
    any other entry."""
    if not getattr(entry, "dynamic_dims", False) or entry.state != LOADED:
        return None
    for family in _families.values():
        for plan, key in family.plans:
            if key is not None and memory_cache.get(key) is entry:
                return plan
    return None


def note(graph, gm_of, target, config) -> None:
    """A graph served from the disk is its family's first size in this
    process, as a compiled one would be (``gm_of()``: its fx module), so
    that a second size makes the plan in every process alike."""
    if not enabled(target) or not getattr(graph, "in_worker", True):
        return
    fkey, sizes = family_of(gm_of())
    if fkey is not None:
        _families.setdefault((fkey, target.cache_key, config.key), Family(sizes))


def forget() -> None:
    """Every family forgotten (with the memory cache: ``lm.reset``)."""
    _families.clear()
