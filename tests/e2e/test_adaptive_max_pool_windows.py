"""``adaptive_max_pool2d`` where the input's sizes are not multiples of the
output's (7x5 to 4x4): windows of different sizes, gathered
(``ops/lowering._adaptive_windows``). It fell back: torch-mlir's own
decomposition makes one ``max_pool2d`` whose 6x4 result it casts to 4x4."""
import pytest
import torch
import torch.nn.functional as F

import lazy_mlir as lm


@pytest.mark.parametrize("shape,size", [((3, 7, 5), (4, 4)), ((2, 3, 9, 6), (4, 5))])
def test_uneven_windows_compile_to_eagers_values_indices_and_gradient(shape, size):
    lm.metrics.reset()
    x = torch.randn(*shape, generator=torch.Generator().manual_seed(0))
    xl = x.to("lazy").requires_grad_()
    y, i = F.adaptive_max_pool2d(xl, size, return_indices=True)
    (y * torch.arange(y.numel()).reshape(y.shape).to("lazy")).sum().backward()
    xe = x.clone().requires_grad_()
    ye, ie = F.adaptive_max_pool2d(xe, size, return_indices=True)
    (ye * torch.arange(ye.numel()).reshape(ye.shape)).sum().backward()
    assert torch.equal(y.cpu(), ye) and torch.equal(i.cpu(), ie)
    torch.testing.assert_close(xl.grad.cpu(), xe.grad)
    fallbacks = [n for n in lm.metrics.counter_names()
                 if n.startswith("aten::") and lm.metrics.counter_value(n)]
    assert fallbacks == [] and lm.metrics.counter_value("EagerGraph") == 0
