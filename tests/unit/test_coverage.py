"""lm.check_coverage and ``lazy-mlir coverage``: a dry run that lists the ops
that would fall back and compiles nothing."""
from __future__ import annotations

import json
import textwrap

import pytest
import torch

import lazy_mlir as lm
from lazy_mlir.lazy import state
from lazy_mlir.ops import support
from lazy_mlir import metrics
from lazy_mlir.tools.cli import main


def _mlp():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3))


def test_lists_fallbacks_with_location_and_reason_without_compiling():
    before = metrics.snapshot()

    def fn(x):
        y = (x * 2).relu().sum(0)
        s = torch.linalg.svdvals(x)  # LAPACK: no lowering, no decomposition
        return y + s.sum()

    report = lm.check_coverage(fn, torch.randn(4, 4))
    assert not report.ok
    [fb] = report.fallbacks
    assert fb.op == "_linalg_svd" and fb.count == 1
    assert fb.locations and fb.locations[0].endswith("test_coverage.py:28")
    assert "dialect" in fb.reason
    assert {"mul", "relu", "sum", "add"} <= {u.op for u in report.compiled}
    # nothing compiled, ran or counted: the metrics are as before
    assert metrics.snapshot() == before


def test_denied_op_reports_the_reason():
    support.deny("tanh", "test: known wrong lowering")
    try:
        report = lm.check_coverage(lambda x: x.tanh() + 1, torch.randn(3))
    finally:
        state.reset()  # tanh compiles again
    assert [u.op for u in report.fallbacks] == ["tanh"]
    assert report.fallbacks[0].reason == "test: known wrong lowering"
    assert lm.check_coverage(lambda x: x.tanh() + 1, torch.randn(3)).ok


def test_training_step_state_is_restored_and_inner_tensors_poisoned():
    model = _mlp().to("lazy")
    opt = torch.optim.Adam(model.parameters(), lr=0.1)
    x, y = torch.randn(5, 6), torch.randint(0, 3, (5,))
    w0 = model[0].weight.detach().cpu().clone()
    made = []

    def step(x, y):
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        made.append(loss)
        assert loss.item() == 0.0  # host reads are placeholders in a dry run
        lm.mark_step()

    report = lm.check_coverage(step, x, y)
    assert report.ok, str(report)
    assert report.steps == 1 and any("test_coverage.py" in k for k in report.syncs)
    assert torch.equal(model[0].weight.detach().cpu(), w0)
    with pytest.raises(RuntimeError, match="check_coverage"):
        made[0].cpu()
    # The real step afterwards matches eager from the same starting point.
    ref = _mlp()
    ref_opt = torch.optim.Adam(ref.parameters(), lr=0.1)
    for m, o, xx, yy in ((model, opt, x.to("lazy"), y.to("lazy")), (ref, ref_opt, x, y)):
        o.zero_grad()
        torch.nn.functional.cross_entropy(m(xx), yy).backward()
        o.step()
    lm.mark_step()
    torch.testing.assert_close(model[0].weight.detach().cpu(), ref[0].weight.detach())


def test_data_dependent_shape_stops_the_dry_run():
    report = lm.check_coverage(lambda x: torch.nonzero(x).sum() + torch.fft.fft(x).real.sum(),
                               torch.tensor([0.0, 1.0, 2.0]))
    assert report.stopped and "nonzero" in report.stopped and "depends on the data" in report.stopped
    assert not report.ok
    assert "fft" not in " ".join(u.op for u in report.fallbacks)  # never reached


def test_cli_coverage_exit_status_and_json(tmp_path, capsys):
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent("""
        import sys, torch, lazy_mlir as lm
        w = torch.randn(4, 4, device="lazy", requires_grad=True)
        for step in range(int(sys.argv[1])):
            loss = (w @ w).tanh().sum()
            if "--svd" in sys.argv:
                loss = loss + torch.linalg.svdvals(w).sum()
            loss.backward()
            lm.mark_step()
            print("step", step, loss.item())
    """))
    out = tmp_path / "cov.json"
    assert main(["coverage", str(script), "--json", str(out), "--", "5", "--svd"]) == 1
    data = json.loads(out.read_text())
    assert [f["op"] for f in data["fallbacks"]] == ["_linalg_svd"]
    assert data["steps"] == 2 and data["fallbacks"][0]["locations"][0].endswith("train.py:7")
    assert "_linalg_svd" in capsys.readouterr().out
    assert main(["coverage", str(script), "--steps", "0", "--", "3"]) == 0
    assert main(["coverage", str(tmp_path / "missing.py")]) == 2
