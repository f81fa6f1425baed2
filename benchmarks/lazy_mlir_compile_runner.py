"""The ``lazy_mlir_compile`` runner of the real-model benchmark.

``benchmarks/real_models.py`` takes one runner per backend in its ``RUNNERS``
dict; this one trains with ``torch.compile(step, backend="lazy_mlir")`` on CPU
tensors (the step as its ``compile`` row compiles it with inductor)::

    from lazy_mlir_compile_runner import run_lazy_mlir_compile
    RUNNERS["lazy_mlir_compile"] = run_lazy_mlir_compile

A runner takes the suite's ``RealModel`` and returns ``(device, model, step,
sync)``: ``step(batch) -> loss`` is one training step on a batch on ``device``.
"""
from __future__ import annotations


def run_lazy_mlir_compile(rm):
    import torch
    from lazy_mlir.frontends import dynamo
    dynamo.register()  # a checkout not reinstalled lacks the entry point
    model = rm.make()
    opt = rm.optimizer(model)

    def step(batch):
        opt.zero_grad(set_to_none=True)
        loss = rm.loss(model, batch)
        loss.backward()
        opt.step()
        return loss

    return "cpu", model, torch.compile(step, backend="lazy_mlir"), lambda: None
