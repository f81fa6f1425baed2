"""The weight gradient of ``EmbeddingBag(mode="max")`` compiles
(``ops/embedding_bag._max_backward``): each column's gradient goes to the
row its max came from, empty bags none. ``_embedding_bag_backward`` of max
bags ran eagerly every step."""
import torch
import torch.nn.functional as F

import lazy_mlir as lm


def test_max_bags_weight_gradient_compiles_to_eagers():
    lm.metrics.reset()
    g = torch.Generator().manual_seed(0)
    weight = torch.randn(12, 5, generator=g)
    idx = torch.tensor([1, 2, 2, 5, 1, 1, 7, 0, 3])
    offsets = torch.tensor([0, 3, 3, 6])  # (an empty bag)
    out_grad = torch.randn(4, 5, generator=g)
    grads = []
    for dev in ("cpu", "lazy"):
        w = weight.detach().to(dev).requires_grad_()
        out = F.embedding_bag(idx.to(dev), w, offsets.to(dev), mode="max")
        (out * out_grad.to(dev)).sum().backward()
        grads.append(w.grad.cpu())
    torch.testing.assert_close(grads[1], grads[0])
    fallbacks = [n for n in lm.metrics.counter_names()
                 if n.startswith("aten::") and lm.metrics.counter_value(n)]
    assert fallbacks == [] and lm.metrics.counter_value("EagerGraph") == 0
