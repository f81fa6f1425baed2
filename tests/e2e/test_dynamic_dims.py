"""Automatic dynamic dimensions (``compile_service/size_families.py``): a
training loop over sequences of many lengths compiles the steady step twice
(its first length static, then one module for every length), with eager's
losses; ``LAZY_MLIR_DYNAMIC=0`` compiles one module per length; a module's
guard refuses a graph it would not compute."""
import pytest
import torch
import torch.nn.functional as F

import lazy_mlir as lm
from e2e_helpers import finish_step, lazy

VOCAB, WIDTH = 37, 24  # (sizes of this test's own: no module of another test is reused)


class TinyLM(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding(VOCAB, WIDTH)
        self.mix = torch.nn.Linear(WIDTH, WIDTH)
        self.out = torch.nn.Linear(WIDTH, VOCAB)

    def forward(self, ids):
        h = torch.tanh(self.mix(self.embed(ids)))
        b, t, d = h.shape
        h = h + F.pad(h[:, :t - 1], (0, 0, 1, 0))  # (a shifted copy: slice and pad of t)
        return self.out(h.reshape(b * t, d)).view(b, t, VOCAB)


def _train(lengths, device):
    torch.manual_seed(0)
    model = TinyLM().to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    g = torch.Generator().manual_seed(1)
    losses = []
    for t in lengths:
        ids = torch.randint(0, VOCAB, (3, t), generator=g)
        logits = model(ids.to(device))
        loss = F.cross_entropy(logits[:, :-1].reshape(-1, VOCAB), ids[:, 1:].reshape(-1).to(device))
        loss.backward()
        opt.step()
        opt.zero_grad()
        if device == "lazy":
            lm.mark_step()
        losses.append(loss.item())
    return losses


def _compiles(counters) -> int:
    return counters.delta("UncachedCompile") + counters.delta("PersistentCacheHit")


LENGTHS = (9, 13, 17, 11, 22, 13, 8)


def test_many_lengths_compile_the_steady_step_twice(counters, monkeypatch):
    monkeypatch.setenv("LAZY_MLIR_COMPILE", "wait")
    counters.snapshot()
    lazy = _train(LENGTHS, "lazy")
    assert lazy == pytest.approx(_train(LENGTHS, "cpu"), rel=1e-5)
    # the first step's graph, the steady step at 13 (static), at 17 (dynamic)
    assert _compiles(counters) == 3
    assert counters.delta("DynamicShapeCompile") == 1
    assert counters.delta("DynamicShapeHit") == 3  # 11, 22, 8 (13 again: its own key)
    assert not counters.fell_back()


def test_switched_off_one_module_per_length(counters, monkeypatch):
    monkeypatch.setenv("LAZY_MLIR_COMPILE", "wait")
    monkeypatch.setenv("LAZY_MLIR_DYNAMIC", "0")
    counters.snapshot()
    lengths = (10, 14, 18)
    assert _train(lengths, "lazy") == pytest.approx(_train(lengths, "cpu"), rel=1e-5)
    assert _compiles(counters) == 3 and counters.delta("DynamicShapeCompile") == 0


def test_a_length_of_one_is_never_dynamic(counters, monkeypatch):
    """A size of 1 broadcasts: the plan's guard refuses it (a module of its own)."""
    monkeypatch.setenv("LAZY_MLIR_COMPILE", "wait")
    x = torch.randn(5, 6)

    def f(n):
        y = lazy(x[:, :n])
        return (y * torch.arange(n, dtype=torch.float32).to("lazy")).sum(1)

    counters.snapshot()
    for n in (3, 5, 4, 1):
        out = f(n)
        lm.mark_step()
        torch.testing.assert_close(out.cpu(), (x[:, :n] * torch.arange(n)).sum(1))
    assert counters.delta("DynamicShapeCompile") == 1
    assert counters.delta("DynamicShapeHit") == 1  # 4; 1 compiles its own


def test_torch_compile_backend_shares_the_families(counters, monkeypatch):
    """Dynamo specializes its aot graphs per concrete signature: each new
    length of the forward and of the backward is served by their families'
    modules after the second (2 static + 2 dynamic compiles for 5 lengths)."""
    monkeypatch.setenv("LAZY_MLIR_COMPILE", "wait")
    torch._dynamo.reset()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Embedding(41, 20), torch.nn.Linear(20, 20),
                                torch.nn.Tanh(), torch.nn.Linear(20, 41))
    ref = torch.nn.Sequential(torch.nn.Embedding(41, 20), torch.nn.Linear(20, 20),
                              torch.nn.Tanh(), torch.nn.Linear(20, 41))
    ref.load_state_dict(model.state_dict())

    def step(m, ids):
        return F.cross_entropy(m(ids)[:, :-1].reshape(-1, 41), ids[:, 1:].reshape(-1))
    compiled = torch.compile(step, backend="lazy_mlir")
    counters.snapshot()
    for t in (9, 13, 17, 11, 22):
        ids = torch.randint(0, 41, (3, t))
        got, want = compiled(model, ids), step(ref, ids)
        got.backward()
        want.backward()
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(model[1].weight.grad, ref[1].weight.grad, rtol=1e-4, atol=1e-6)
        model.zero_grad()
        ref.zero_grad()
    assert _compiles(counters) == 4
    assert counters.delta("DynamicShapeCompile") == 2 and counters.delta("DynamicShapeHit") == 6


def test_background_plan_modules_check_their_result_shapes(counters, monkeypatch):
    """A plan's module compiled in the background is marked, once settled,
    like one compiled in wait mode: its results' shapes are checked."""
    from lazy_mlir.compile_service import lookup
    from lazy_mlir.compile_service.memory_cache import memory_cache
    monkeypatch.setenv("LAZY_MLIR_COMPILE", "background")
    monkeypatch.setenv("LAZY_MLIR_COMPILE_WORKERS", "1")  # (a worker: settled later)
    x = torch.randn(4, 29)
    for n in (9, 12, 15, 15):
        out = (lazy(x[:, :n]) * 5).sum(1)
        lm.mark_step()
        torch.testing.assert_close(out.cpu(), (x[:, :n] * 5).sum(1))
        lookup.wait_for_compiles()
    plans = [e for e in memory_cache._entries.values() if getattr(e, "dynamic_dims", False)]
    assert plans and counters.delta("DynamicShapeCompile") >= 1


def test_a_new_process_finds_the_plan_on_disk(counters, monkeypatch):
    """The first size served from the disk still starts its family (as a
    compiled one would), so a later process makes the same plan at the same
    second size and loads its module from the disk: nothing compiles."""
    from lazy_mlir.compile_service import size_families
    from lazy_mlir.compile_service.memory_cache import memory_cache
    monkeypatch.setenv("LAZY_MLIR_COMPILE", "wait")
    x = torch.randn(3, 31)

    def run():
        for n in (10, 14, 18):
            out = (lazy(x[:, :n]) * 7).sum(1)
            lm.mark_step()
            torch.testing.assert_close(out.cpu(), (x[:, :n] * 7).sum(1))
    for _ in range(2):  # a first process, then a second one
        memory_cache.clear()  # (what a new process starts with)
        size_families.forget()
        counters.snapshot()
        run()
    assert counters.delta("UncachedCompile") == 0
    assert counters.delta("DynamicShapeHit") == 1 and counters.delta("PersistentCacheHit") >= 2


def test_a_convolution_over_batch_sizes(counters, monkeypatch):
    """The cpu target's convolutions as matmuls fixed a plan's symbolic batch
    (LeNet's module computed batch 4 for batch 5, and the result check
    raised); a plan's module keeps the convolution, and a pass that fixes a
    size anyway is refused (``size_family.still_symbolic``)."""
    from lazy_mlir.models.seed import LeNet5
    monkeypatch.setenv("LAZY_MLIR_COMPILE", "wait")
    torch.manual_seed(0)
    model = LeNet5().eval()
    on_lazy = LeNet5().eval()
    on_lazy.load_state_dict(model.state_dict())
    on_lazy = on_lazy.to("lazy")
    lm.mark_step()
    counters.snapshot()
    with torch.no_grad():
        for b in (3, 4, 5):
            x = torch.randn(b, 1, 28, 28)
            out = on_lazy(lazy(x))
            lm.mark_step()
            torch.testing.assert_close(out.cpu(), model(x), rtol=1e-5, atol=1e-5)
    assert counters.delta("DynamicShapeCompile") == 1 and counters.delta("DynamicShapeHit") == 1
    assert counters.delta("DynamicShapeFailed") == 0


def test_a_flat_tensor_viewed_square_imports(counters, monkeypatch):
    """A flat ``[4 * n * n]`` viewed as ``[2, 2, n, n]`` (GPT-2's attention
    dropout mask) traces to a size ``(n**2)//n`` (the view's split), a floor
    division FxImporter cannot import: an exact one is divided out before
    the import (``size_family.exact_floor_divisions``), and the family gets
    its module (it failed, and every size compiled static)."""
    monkeypatch.setenv("LAZY_MLIR_COMPILE", "wait")
    x = torch.randn(9, 4)

    def f(n):
        y = lazy(x[:n])
        flat = (y @ y.T).repeat(4, 1).reshape(-1) * 3
        return flat.view(2, 2, n, n).softmax(-1)

    counters.snapshot()
    for n in (4, 6, 5):
        out = f(n)
        lm.mark_step()
        want = (3 * (x[:n] @ x[:n].T)).repeat(4, 1).view(2, 2, n, n).softmax(-1)
        torch.testing.assert_close(out.cpu(), want)
    assert counters.delta("DynamicShapeCompile") == 1 and counters.delta("DynamicShapeHit") == 1
    assert counters.delta("DynamicShapeFailed") == 0


def test_embedding_bag_max_over_index_counts(counters, monkeypatch):
    """Max bags clamp their positions into [-n, n): the -n made no plan, and
    every index count compiled its own module (``size_family.explain``)."""
    monkeypatch.setenv("LAZY_MLIR_COMPILE", "wait")
    losses = {}
    for device in ("cpu", "lazy"):
        torch.manual_seed(0)
        bag = torch.nn.EmbeddingBag(50, 8, mode="max").to(device)
        opt = torch.optim.SGD(bag.parameters(), lr=0.1)
        losses[device] = []
        counters.snapshot()
        for n in (94, 106, 90, 80, 100):
            g = torch.Generator().manual_seed(n)
            idx = torch.randint(0, 50, (n,), generator=g).to(device)
            offsets = torch.tensor([0, n // 3, n // 2], device=device)
            losses[device].append(finish_step(bag(idx, offsets).pow(2).sum(), opt, device))
    torch.testing.assert_close(losses["lazy"], losses["cpu"], rtol=1e-5, atol=1e-5)
    assert counters.delta("DynamicShapeCompile") == 1 and counters.delta("DynamicShapeHit") == 2
    assert counters.delta("EagerGraph") == 0


def test_two_index_tensors_of_a_new_length_each_step(counters, monkeypatch):
    """A MoE layer's ``routing_weights[top_x, idx]`` (one token count per
    expert and step): torch-mlir could not lower two index tensors of a
    symbolic length, the family's module failed (``DynamicShapeFailed``) and
    every count compiled its own (``ops/symbolic._index`` flattens them)."""
    monkeypatch.setenv("LAZY_MLIR_COMPILE", "wait")
    torch.manual_seed(0)
    weights = torch.randn(16, 3)
    for n in (3, 5, 7, 9, 12):
        top, col = torch.randperm(16)[:n], torch.randint(-3, 3, (n,))
        h = torch.randn(n, 1)
        got = (lazy(h) * lazy(weights)[lazy(top), lazy(col), None]).cpu()
        assert torch.equal(got, h * weights[top, col, None])
    assert counters.delta("DynamicShapeCompile") == 1 and counters.delta("DynamicShapeHit") == 3
    assert counters.delta("DynamicShapeFailed") == 0


def test_two_integer_sorts_of_one_shape_in_a_module_of_dynamic_length(counters, monkeypatch):
    """Each sorts unique keys and reads only them: their index operand, one
    iota after CSE, is harmless shared, and the family's module compiles
    (it was refused, ``shared_sort_operands``, and each length compiled)."""
    monkeypatch.setenv("LAZY_MLIR_COMPILE", "wait")
    torch.manual_seed(0)
    w = torch.randn(16, 100)
    for n in range(5, 10):
        x = torch.randn(2, n, 16)
        a = (x.sum(1) @ w * 10).int()
        want = torch.sort(a, stable=True)[1] + torch.sort(a * 2 + 1, descending=True, stable=True)[1]
        al = (lazy(x).sum(1) @ lazy(w) * 10).int()
        got = torch.sort(al, stable=True)[1] + torch.sort(al * 2 + 1, descending=True, stable=True)[1]
        assert torch.equal(got.cpu(), want)
    assert counters.delta("DynamicShapeFailed") == 0 and counters.delta("DynamicShapeHit") == 3


def test_top_p_filtering_over_a_growing_sequence(counters, monkeypatch):
    """HF sampling's top-k and top-p filters (two float sorts of one shape)
    in a graph whose other input grows each token: a float32 sort is one
    sort of order-preserving int32 bits (``ops/sort_scan._float32_key``; the
    two-sort form read its first sort's indices, which two sorts shared),
    and ``view(dtype)`` goes through a module with dynamic dimensions."""
    monkeypatch.setenv("LAZY_MLIR_COMPILE", "wait")
    torch.manual_seed(0)
    w = torch.randn(16, 100)

    def probs(x, w):
        logits = x.sum(1) @ w
        logits = logits.masked_fill(logits < torch.topk(logits, 5)[0][..., -1, None], -float("inf"))
        sorted_logits, order = torch.sort(logits, descending=False)
        drop = sorted_logits.softmax(-1).cumsum(-1) <= 0.1
        return logits.masked_fill(drop.scatter(1, order, drop), -float("inf")).softmax(-1)
    for n in range(5, 10):
        x = torch.randn(2, n, 16)
        torch.testing.assert_close(probs(lazy(x), lazy(w)).cpu(), probs(x, w))
    assert counters.delta("DynamicShapeFailed") == 0 and counters.delta("DynamicShapeHit") == 3


def test_a_view_as_another_dtype_of_one_width_over_lengths(counters, monkeypatch):
    monkeypatch.setenv("LAZY_MLIR_COMPILE", "wait")
    for n in (5, 7, 9, 11):
        x = torch.randn(2, n)
        assert torch.equal((lazy(x).view(torch.int32) ^ 5).cpu(), x.view(torch.int32) ^ 5)
    assert counters.delta("DynamicShapeFailed") == 0 and counters.delta("DynamicShapeHit") == 2
