"""The sweep report's verdicts read compiles after warm-up from the compiles
by step, so records made under an older warm-up read as the current one."""
from lazy_mlir.tools.sweep_report import verdict
from lazy_mlir.tools.sweep_run import WARMUP


def _record(by_step, stored):
    return {"plain": {"compiles_by_step": by_step, "compiles_after_warmup": stored,
                      "loss_difference": 0.0}}


def test_a_split_compiled_by_the_last_warmup_step_is_not_a_recompile():
    by_step = [1, 2, 2] + [2] * (WARMUP - 4) + [4, 4, 4]  # the split's two at step WARMUP
    assert verdict(_record(by_step, 2), "plain") == "ok"  # (stored under a shorter warm-up)


def test_a_compile_after_warmup_is_a_recompile():
    by_step = [1, 2] + [2] * (WARMUP - 2) + [3, 3]
    assert verdict(_record(by_step, 0), "plain") == "recompiles"
