"""benchmarks/host_overhead.py prints the per-op floors its table stands on:
eager CPU, a bare Python __torch_dispatch__ subclass, and the lazy device."""
from __future__ import annotations

import re


def test_floors_are_measured_for_eager_a_bare_subclass_and_lazy(load_benchmark):
    mod = load_benchmark("host_overhead")
    line = mod.floors(n=20, trials=5)
    eager, bare, lazy = (float(v) for v in re.findall(r"([\d.]+) us", line))
    # A Python dispatch costs more than the C++ kernel call it wraps, and the
    # lazy op does at least what the bare subclass does.
    assert 0 < eager < bare < lazy
