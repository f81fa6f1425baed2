"""benchmarks/train_step.py --rounds: each round's ratio to eager is taken in
that round, and the table gives their median and range."""
from __future__ import annotations


def _res(steps, first=100.0):
    return {"steady_ms": steps, "first_ms": first, "losses": [1.0, 0.9], "load": 0.5}


def test_rounds_are_paired_with_eager_round_by_round(load_benchmark):
    H = load_benchmark("_harness")
    spec = H.Spec("mlp", 128, 3)
    # The machine slows down in round 2: both backends take twice as long,
    # and the paired ratio stays 0.5 where the pooled medians give 0.6x.
    eager = H.merge_rounds([_res([10, 10, 10]), _res([20, 20, 20])])
    lazy = H.merge_rounds([_res([5, 5, 5], first=900.0), _res([10, 10, 12])])
    assert eager["round_ms"] == [10, 20] and lazy["round_ms"] == [5, 10]
    assert lazy["steady_ms"] == [5, 5, 5, 10, 10, 12] and lazy["first_ms"] == 900.0
    assert H.paired_ratio(lazy, eager) == (0.5, 0.5, 0.5)
    rows = [H.Row(spec, "eager", eager), H.Row(spec, "lazy_mlir", lazy)]
    cells = H.table_rows(rows)
    assert cells[0][7] == "1.00x"
    assert cells[1][7] == "0.50x (0.50-0.50)"


def test_one_round_keeps_the_plain_ratio_and_a_failed_round_fails_the_row(load_benchmark):
    H = load_benchmark("_harness")
    spec = H.Spec("cnn", 64, 3)
    eager, lazy = H.merge_rounds([_res([10, 10, 10])]), H.merge_rounds([_res([8, 9, 9])])
    assert "round_ms" not in lazy and H.paired_ratio(lazy, eager) is None
    assert H.table_rows([H.Row(spec, "eager", eager), H.Row(spec, "lazy_mlir", lazy)])[1][7] \
        == "0.90x"
    failed = H.merge_rounds([_res([8]), {"error": "timeout after 900 s"}])
    assert failed == {"error": "timeout after 900 s"}
