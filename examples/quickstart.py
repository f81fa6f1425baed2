"""The lazy device in a few lines: capture, sync points, mark_step, metrics.

Run: python examples/quickstart.py
"""
import torch

import lazy_mlir as lm


def add_two_maybe(t: torch.Tensor, maybe: torch.Tensor) -> torch.Tensor:
    if maybe:  # a sync point: the condition is computed, then Python branches
        return t + 2
    return t


def main() -> None:
    t = torch.ones(1).to("lazy")
    for flag in (1, 0):
        maybe = torch.BoolTensor([flag]).to(lm.lazy_device())
        r = add_two_maybe(t, maybe)
        print(f"add_two_maybe(ones, {bool(flag)}) =", r)
        assert torch.equal(r.cpu(), add_two_maybe(torch.ones(1), torch.BoolTensor([flag])))

    torch.manual_seed(0)
    x = torch.randn(64, 128, device="lazy")
    y = (x @ x.T).relu().sum(0)
    lm.mark_step()  # cut the trace, compile (or reuse), run
    torch.manual_seed(0)
    xe = torch.randn(64, 128)
    expected = (xe @ xe.T).relu().sum(0)
    print("y[:4] =", y.cpu()[:4])
    torch.testing.assert_close(y.cpu(), expected, rtol=1e-4, atol=1e-3)
    print("matches eager PyTorch")
    print(lm.metrics.metrics_report())


if __name__ == "__main__":
    main()
