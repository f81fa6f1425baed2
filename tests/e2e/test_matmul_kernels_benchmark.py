"""benchmarks/matmul_kernels.py times the products it names: its NN, NT and
TN matmuls (written as torch-mlir lowers ``a @ b``, ``a @ b.t()`` and
``a.t() @ b``) compile with the cpu target's flags and compute those products."""
from __future__ import annotations

import numpy as np
import pytest


@pytest.mark.parametrize("kind", ["NN", "NT", "TN"])
def test_the_benchmarked_matmul_is_the_named_product(kind, load_benchmark):
    import iree.compiler as ic
    import iree.runtime as rt
    bench = load_benchmark("matmul_kernels")
    m, n, k = 8, 24, 16
    text, inputs = bench.matmul_mlir(m, n, k, kind)
    shapes = [tuple(int(d) for d in i.split("=")[0].split("x")[:-1]) for i in inputs]
    rng = np.random.default_rng(0)
    a, b = (rng.standard_normal(s).astype(np.float32) for s in shapes)
    flags = [f for f in bench.cpu_flags() if not f.startswith("--iree-hal-target-backends")]
    vmfb = ic.compile_str(text, target_backends=["llvm-cpu"], extra_args=flags)
    config = rt.Config("local-sync")
    ctx = rt.SystemContext(config=config)
    ctx.add_vm_module(rt.VmModule.copy_buffer(ctx.instance, vmfb))
    got = np.asarray(ctx.modules.module.main(a, b))
    want = {"NN": lambda: a @ b, "NT": lambda: a @ b.T, "TN": lambda: a.T @ b}[kind]()
    assert got.shape == (m, n)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
