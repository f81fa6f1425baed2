"""``compile_train_step(..., return_outputs=True)``: the model's outputs too.

A training loop often reads more than the loss: the logits for a running
accuracy (``outputs.argmax(1).eq(y).sum()``), a ``transformers`` output's
other fields. With ``return_outputs`` a step returns ``(loss, outputs)``:
the model's output with every tensor detached, as the plain step leaves
them after ``loss.backward()``. A recorded step's graph computes those
tensors too, so a replay binds them to new tensors and rebuilds the same
structure (``torch.utils._pytree``: tuples, lists, dicts, ``transformers``'
``ModelOutput``s); the other leaves (None, numbers, strings) are kept as
recorded. An output that holds any other object (a key-value cache class
that pytree does not know) cannot be rebuilt: the step then runs plain,
with the reason logged once. Outputs whose shape follows the batch (logits)
give recordings at two batch shapes different output specs, so no size
variant (``train_step_sizes.agree``) is made: each batch shape records.
"""
from __future__ import annotations

from collections.abc import Mapping

import torch
import torch.utils._pytree as pytree

_CONSTANT_LEAVES = (type(None), bool, int, float, str)
_TENSOR = object()  # (a tensor's place in a kept spec: the recorded tensor is not kept alive)


def detached(out):
    """``out`` with every tensor detached."""
    return pytree.tree_map_only(torch.Tensor, torch.Tensor.detach, out)


def tensor_leaves(out) -> tuple[list, object]:
    """(the tensors of ``out`` in pytree order, its spec for ``rebuild``)."""
    leaves, tree = pytree.tree_flatten(out)
    tensors = [x for x in leaves if isinstance(x, torch.Tensor)]
    return tensors, (tree, [_TENSOR if isinstance(x, torch.Tensor) else x for x in leaves])


def why_not(out) -> str | None:
    """Why ``out`` cannot be rebuilt at a replay, or None."""
    for x in pytree.tree_leaves(out):
        if not isinstance(x, (torch.Tensor, *_CONSTANT_LEAVES)):
            return (f"return_outputs: the model's output holds a {type(x).__name__}, which a "
                    f"replay cannot rebuild (only tensors, tuples, lists, dicts, ModelOutputs, "
                    f"numbers and strings); a transformers model returns its cache unless "
                    f"given use_cache=False")
    return None


def rebuild(spec, tensors: list):
    """The recorded structure with ``tensors`` in place of its tensors."""
    tree, leaves = spec
    fresh = iter(tensors)
    return pytree.tree_unflatten([next(fresh) if x is _TENSOR else x for x in leaves], tree)


def loss_of(out) -> torch.Tensor:
    """The loss a model returns: a scalar tensor, ``out.loss`` or ``out["loss"]``."""
    loss = out
    if not isinstance(out, torch.Tensor):
        loss = out.get("loss") if isinstance(out, Mapping) else getattr(out, "loss", None)
    if isinstance(loss, torch.Tensor) and loss.dim() == 0:
        return loss
    what = (f"a tensor of shape {tuple(loss.shape)}" if isinstance(loss, torch.Tensor)
            else f"{type(out).__name__}" + (" with no loss" if loss is None else ""))
    raise TypeError(
        "lm.compile_train_step without a loss_fn: the model must return its loss (a scalar "
        "tensor, or an output with .loss or ['loss'], as transformers models given labels); "
        f"it returned {what}. Pass the labels in the batch, or a loss_fn: "
        "compile_train_step(model, loss_fn, optimizer)")
