# seed 970273 [lazy] fallback: {'EagerGraph': 1}
import os
os.environ.setdefault("LAZY_MLIR_COMPILE", "wait")
import torch
import lazy_mlir as lm

def make(shape, dtype, seed, layout, grad, dev):
    g = torch.Generator().manual_seed(seed)
    full = list(shape)
    if layout == "t" and len(full) >= 2:
        full[-1], full[-2] = full[-2], full[-1]
    elif layout == "s" and full:
        full[0] *= 2
    n = 1
    for s in full:
        n *= s
    if dtype == torch.bool:
        t = torch.randint(0, 2, (n,), generator=g).bool()
    elif dtype.is_floating_point:
        t = (torch.randint(-32, 33, (n,), generator=g) / 8).to(dtype)
    elif dtype == torch.uint8:
        t = torch.randint(0, 40, (n,), generator=g).to(dtype)
    else:
        t = torch.randint(-20, 21, (n,), generator=g).to(dtype)
    t = t.reshape(full)
    if layout == "t" and len(full) >= 2:
        t = t.transpose(-1, -2)  # moved with its strides
    t = t.clone() if dev == "cpu" else t.to(dev)  # (eager: the storage .to would give)
    if layout == "s" and full:
        t = t[::2]  # a view on the device
    return t.requires_grad_() if grad else t


def backward(ts):
    loss = 0
    for k, t in enumerate(ts):
        w = torch.arange(t.numel(), dtype=t.dtype, device=t.device).reshape(t.shape) % 3 - 1
        loss = loss + (t * w).sum() * (k + 1)
    loss.backward()


def program(dev, reads):
    v0 = make((1, 1), torch.int64, 6791911, 'c', False, dev)
    v1 = v0.unfold(0, 1, 2)
    v1.index_put_((torch.tensor([-1, 0], device=dev),), torch.ones((2, 1, 1), dtype=torch.int64, device=dev), accumulate=False)
    return [v0, v1]


eager_reads, lazy_reads = [], []
eager = program("cpu", eager_reads)
lazy = program("lazy", lazy_reads)
lm.mark_step()
for k, (e, l) in enumerate(zip(eager, lazy)):
    print(k, e.dtype, tuple(e.shape), e.stride(), "|", l.dtype, tuple(l.shape), l.stride())
    torch.testing.assert_close(l.detach().cpu(), e.detach(), equal_nan=True,
                               msg=lambda m: f"variable {k}: {m}")
assert str(eager_reads) == str(lazy_reads), (eager_reads, lazy_reads)
print("same as eager (seed 970273)")
