"""The model sweep's CI sample (``lazy_mlir.models.sweep.CI_SAMPLE``): one
entry per root cause the sweep found and fixed, each trained eagerly and on
the lazy device by the sweep's own runner, in a child process as the sweep
runs it. The plain loop must not crash, run a graph or an op eagerly, or
differ from eager's losses; the slow variant (``--runslow``) checks
``compile_train_step`` too, on more entries. The full sweep: ``python -m lazy_mlir.tools.sweep``."""
from __future__ import annotations

import pytest

from lazy_mlir.models.sweep import CI_SAMPLE, KNOWN_FAILURES, SLOW_SAMPLE
from lazy_mlir.tools import sweep_report
from lazy_mlir.tools.sweep import run_child

pytest.importorskip("transformers")


def _check(rec: dict, modes) -> None:
    assert rec.get("status") == "ran", rec
    for mode in modes:
        out = rec[mode]
        assert "crash" not in out, out.get("traceback", out)
        assert sweep_report.verdict(rec, mode) in ("ok", "recompiles"), (mode, out)


@pytest.mark.parametrize("name", CI_SAMPLE)
def test_sample_entry_trains_compiled(name):
    rec = run_child(name, steps=4, timeout=600, env={"LAZY_MLIR_SWEEP_MODES": "plain"})
    _check(rec, ("plain",))


@pytest.mark.slow
@pytest.mark.parametrize("name", [
    pytest.param(n, marks=pytest.mark.xfail(reason=KNOWN_FAILURES[n], strict=True))
    if n in KNOWN_FAILURES else n for n in SLOW_SAMPLE])
def test_sample_entry_both_ways(name):
    _check(run_child(name, steps=7, timeout=900), ("plain", "train_step"))
