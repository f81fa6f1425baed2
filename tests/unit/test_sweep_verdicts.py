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


def test_a_mode_not_run_is_not_counted():
    from lazy_mlir.tools.sweep_report import summary
    rec = dict(_record([1, 2, 2, 2, 2, 2, 2], 0), name="x", status="ran",
               eager={"step_ms": 1.0})
    assert verdict(rec, "train_step") == "not-run"
    assert any("**train_step**: ;" in line or "0/0" in line for line in summary({"x": rec}))


def test_a_mismatch_gone_without_dropout_is_the_dropout_stream():
    rec = {"plain": {"loss_difference": 0.05, "compiles_by_step": [1, 2, 2, 2, 2, 2, 2]}}
    assert verdict(rec, "plain") == "mismatch"
    rec["no_dropout"] = {"loss_difference": 1e-6}
    assert verdict(rec, "plain") == "dropout-rng"
    rec["no_dropout"] = {"loss_difference": 0.05}
    assert verdict(rec, "plain") == "mismatch"
    rec["no_dropout"] = {"loss_difference": 0.05, "eager_perturbed_difference": 0.2}
    assert verdict(rec, "plain") == "unstable"


def test_a_rerun_of_one_mode_keeps_the_other_modes_result():
    from lazy_mlir.tools.sweep import merged
    old = {"name": "x", "status": "ran", "plain": {"fallback_ops": 0}, "eager": {}}
    new = {"name": "x", "status": "ran", "train_step": {"fallback_ops": 1}, "eager": {}}
    out = merged(new, old)
    assert out["plain"] == old["plain"] and out["train_step"] == new["train_step"]
    assert out["kept"] == ["plain"]
    assert merged({"name": "x", "status": "died"}, old) == {"name": "x", "status": "died"}


def test_a_train_step_never_replayed_is_not_replayed():
    rec = {"train_step": {"compiles_by_step": [1, 2, 2, 2, 2, 2], "loss_difference": 0.0,
                          "replayed": 0, "refused": ["a state tensor is a view of another"]}}
    assert verdict(rec, "train_step") == "not-replayed"
    rec["train_step"]["replayed"] = 2
    assert verdict(rec, "train_step") == "ok"


def test_only_steps_timed_quietly_after_warmup_count_toward_the_median():
    """A triage record (``--steps 5``) timed a step that can hold a compile,
    and a record made under load timed noise: neither is a speed claim."""
    from lazy_mlir.tools.sweep_report import summary
    from lazy_mlir.tools.sweep_run import _median_ms

    assert _median_ms([9.0] * WARMUP) is None  # (no step after warm-up)
    assert _median_ms([9.0] * WARMUP + [0.001, 0.003, 0.002]) == 2.0

    def rec(steps, load, lazy_ms):
        by_step = [1, 2] + [2] * (steps - 2)
        return {"name": "x", "status": "ran", "steps": steps, "load": load,
                "eager": {"step_ms": 1.0},
                "plain": {"compiles_by_step": by_step, "loss_difference": 0.0,
                          "fallback_ops": 0, "step_ms": lazy_ms}}

    kept = dict(rec(10, 1.0, 300.0), kept=["plain"])  # (its eager step timed in a later run)
    records = {"triage": rec(5, 0.5, 900.0), "loaded": rec(10, 6.0, 50.0),
               "quiet": rec(10, 1.0, 2.0), "kept": kept}
    line = next(x for x in summary(records) if x.startswith("- **plain**"))
    assert "2.00x (range 2.00-2.00x, 1 entries" in line
