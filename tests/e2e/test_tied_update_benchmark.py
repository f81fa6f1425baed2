"""benchmarks/tied_update.py times the update it names: both of its modules
(results in new buffers, and written into their arguments' buffers) compile
with the cpu target's flags and compute AdamW's update of every tensor."""
from __future__ import annotations

import numpy as np
import pytest


def _adamw(p, m, g, q, decay, step_size, bias2_sqrt):
    """The update as the module's body writes it: (exp_avg_sq, exp_avg, param)."""
    q1 = q * np.float32(0.999) + g * g * np.float32(0.001)
    m1 = m + (g - m) * np.float32(0.1)
    return q1, m1, p * decay + step_size * m1 / (np.sqrt(q1) / bias2_sqrt + np.float32(1e-8))


@pytest.mark.parametrize("tied", [False, True])
def test_each_module_computes_adamws_update_of_every_tensor(tied, load_benchmark):
    import iree.compiler as ic
    import iree.runtime as rt
    bench = load_benchmark("tied_update")
    tensors, numel = 2, 64
    text = bench.update_mlir(tensors, numel, tied)
    assert ("iree.abi.output" in text) == tied
    flags = [f for f in bench.cpu_flags() if not f.startswith("--iree-hal-target-backends")]
    vmfb = ic.compile_str(text, target_backends=["llvm-cpu"], extra_args=flags)
    ctx = rt.SystemContext(config=rt.Config("local-sync"))
    ctx.add_vm_module(rt.VmModule.copy_buffer(ctx.instance, vmfb))
    rng = np.random.default_rng(0)
    per_tensor = [[rng.standard_normal(numel).astype(np.float32) for _ in range(4)]
                  for _ in range(tensors)]
    for t in per_tensor:
        t[3] = np.abs(t[3])  # exp_avg_sq is never negative
    scalars = [np.array(v, np.float32) for v in (0.99, -1e-3, 0.7)]
    got = ctx.modules.module.main(*[a for t in per_tensor for a in t], *scalars)
    for i, (p, m, g, q) in enumerate(per_tensor):
        want = _adamw(p, m, g, q, *scalars)
        for j in range(3):
            np.testing.assert_allclose(np.asarray(got[3 * i + j]), want[j], rtol=1e-5, atol=1e-6)
