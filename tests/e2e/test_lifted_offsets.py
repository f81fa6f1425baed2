"""View offsets as graph inputs (``lazy/offsets.py``): slicing, narrowing,
selecting and writing at a new offset each step reuses ONE compiled module,
with eager's values. Each test uses shapes of its own (no module of another
test is reused) and counts the modules compiled."""
import pytest
import torch
import torch.nn.functional as F

import lazy_mlir as lm
from e2e_helpers import lazy
from lazy_mlir.lazy import state


@pytest.fixture(autouse=True)
def _no_rolls_seen():
    """A roll's first shift stays a constant: what shifts this process saw
    before (another test file's rolls of the same shape) must not count."""
    state.roll_shifts.clear()


def _compiles(counters) -> int:
    return counters.delta("UncachedCompile") + counters.delta("PersistentCacheHit")


def _each_offset(fn, data, offsets, counters):
    """``fn(data, i)`` on the lazy device (a step each) equals eager for every
    ``i``; returns the number of modules compiled."""
    counters.snapshot()
    for i in offsets:
        # (a new input each step: with zero-copy inputs, a module that writes
        # a clone of its argument at a slice may write the argument's host
        # memory on its second run, LAZY_MLIR_LIFT_INTS=0 too; not this test's)
        out = fn(lazy(data), i)
        lm.mark_step()
        torch.testing.assert_close(out.cpu(), fn(data, i), rtol=0, atol=0)
    return _compiles(counters)


def test_slice_reads_at_any_start_are_one_module(counters):
    data = torch.randn(23, 7)
    assert _each_offset(lambda d, i: d[i:i + 4] * 3, data, (0, 5, 19, -6, -20), counters) == 1
    assert counters.delta("lifted::int") == 5


def test_narrow_and_strided_slices_are_one_module(counters):
    data = torch.randn(9, 13)
    assert _each_offset(lambda d, i: d.narrow(1, i, 3) + d[:, i:i + 6:2],
                        data, (0, 4, 7), counters) == 1


def test_select_reads_at_any_index_are_one_module(counters):
    data = torch.randn(11, 6)
    offsets = (0, 3, 10, -1)  # (i and i % 6 one value or two: one graph either way)
    assert _each_offset(lambda d, i: torch.cat([d[i], d[:, i % 6]]) * 2, data, offsets,
                        counters) == 1


@pytest.mark.parametrize("dtype", [torch.float32, torch.bool, torch.int64])
def test_one_element_slices_at_any_offset_stack_in_one_module(counters, dtype):
    """A one-element slice at a lifted offset given unit dimensions (stacked,
    unsqueezed) failed IREE 3.13's compile and ran eagerly (fuzzer seed
    960551): IREE bubbled the ``expand_shape`` through the slice into a slice
    of a higher rank than its source. ``passes/element_slices`` reads its
    element."""
    data = (torch.arange(42) % 5 - 2).reshape(6, 7).to(dtype)

    def fn(d, i):
        row, col = d[:, 1], d[2]
        return torch.cat([torch.stack([row[i:i + 1], row[i + 2:i + 3]]).view(-1),
                          torch.stack([col[i].unsqueeze(0), col[::2][i // 2:i // 2 + 1]])[0],
                          d[i:i + 1, i:i + 1].unsqueeze(0).reshape(-1),
                          torch.stack([d[i:i + 1, 3:4], d[i + 1:i + 2, 4:5]]).view(-1)])
    assert _each_offset(fn, data, (0, 1, 3), counters) == 1
    assert counters.delta("EagerGraph") == 0 and not counters.fell_back()


def _write(d, i):
    y = d.clone()
    y[i:i + 3] = torch.arange(15.0).reshape(3, 5).to(d.device)  # copy_ through a slice
    y[i + 3] += 2.0  # an in-place op through a select
    y[:, 1:][i] *= -1.0  # a select of a slice
    return y


def test_writes_through_views_at_any_offset_are_one_module(counters):
    data = torch.randn(10, 5)
    assert _each_offset(_write, data, (0, 2, 6), counters) == 1


class _TinyLM(torch.nn.Module):
    def __init__(self, vocab=37, width=12):
        super().__init__()
        self.emb = torch.nn.Embedding(vocab, width)
        self.out = torch.nn.Linear(width, vocab)

    def forward(self, x):
        return self.out(torch.tanh(self.emb(x)))


def _word_lm_epoch(model, source, bptt, lr=0.5, after_step=None) -> list[float]:
    """PyTorch's word-language-model loop: the whole batchified corpus on
    the device, ``source[i:i+bptt]`` and the next tokens each step (the
    losses read at the end: a loss read right after its step splits later
    steps in two, ``lazy/early_outputs.py``, on timings)."""
    losses = []
    for i in range(0, source.size(0) - 1 - bptt + 1, bptt):  # the full batches
        data, target = source[i:i + bptt], source[i + 1:i + 1 + bptt].view(-1)
        model.zero_grad()
        out = model(data)
        loss = F.cross_entropy(out.view(-1, out.size(-1)), target)
        loss.backward()
        for p in model.parameters():
            p.data.add_(p.grad, alpha=-lr)
        if source.device.type == "lazy":
            lm.mark_step()
            after_step(i)
        losses.append(loss)
    return [loss.item() for loss in losses]


def _roll(d, i):
    """A roll by ``i`` (two dims when ``i`` is odd, the flattened tensor when
    it is 3)."""
    return d.roll(i) if i == 3 else d.roll(*(((i, 1 - i), (0, -1)) if i % 2 else (i, 1)))


def test_rolls_by_any_shift_are_two_modules(counters):
    """``roll``'s shift becomes a runtime offset once it varies
    (``offsets.roll``): an augmentation that rolls its batch by a random
    amount each step compiled a module per amount; now the first shift's
    module and one for every later shift. Shifts past the size, negative
    ones, several dims, the flattened tensor and bools included."""
    data = torch.randn(5, 4)
    assert _each_offset(_roll, data, (1, -7, 13, 5), counters) == 2
    assert counters.delta("lifted::int") == 2 * 3  # (two dims, from the second step)
    assert _each_offset(lambda d, i: _roll(d, 3 - 3 * (i % 2)), data, (0, 1, 2), counters) == 2
    b = torch.rand(6, 3) > 0.5
    assert _each_offset(lambda d, i: d.roll(i, 0), b, (1, 4, -2), counters) == 2


def test_a_roll_by_one_shift_keeps_it_constant(counters):
    """A shifted-window transformer rolls by the same shift every step:
    static slices, no lifted offset (~1.4x faster than the dynamic one)."""
    data = torch.randn(3, 7)
    assert _each_offset(lambda d, i: d.roll(-2, 1).roll(2, 1) * (i + 0.5), data, (1, 2, 3), counters) == 1
    assert counters.delta("lifted::int") == 0


def test_rolls_are_counted_per_graph_when_mark_step_is_never_called(counters):
    """A loop that reads its result each step without ``mark_step`` (a loss
    printed each step) launches a graph a step: its rolls are counted from
    one in each, so the second shift lifts as in a loop with ``mark_step``,
    not a module for every shift."""
    data = torch.randn(7, 3)
    counters.snapshot()
    for i in (1, 4, 2, 6):
        out = lazy(data).roll(i, 0) * 2
        torch.testing.assert_close(out.cpu(), data.roll(i, 0) * 2, rtol=0, atol=0)
    assert _compiles(counters) == 2
    # (and a slice offset a loop revisits is uploaded once, not once a step)
    kept = {i: len(state.lifted_ints.get(i, ())) for i in (3, 2)}
    for _ in range(3):
        for i in (3, 2):
            torch.testing.assert_close(lazy(data)[i:i + 2].sum(0).cpu(), data[i:i + 2].sum(0))
    assert all(len(state.lifted_ints[i]) == max(n, 1) for i, n in kept.items())


def test_gradient_of_a_roll_by_a_runtime_shift(counters):
    """The backward of a roll is a roll by the negated shift: eager's values.
    (The backward's own graph still holds its shift as a constant: compiled
    autograd saves it as a size, ``lazy/backward.py``.)"""
    def roll_and_grad(d, i):
        x = d.detach().requires_grad_()
        y = _roll(x, i)
        (y * torch.arange(float(y.numel()), device=d.device).view(y.shape)).sum().backward()
        return torch.cat([y.detach(), x.grad])
    _each_offset(roll_and_grad, torch.randn(5, 4), (1, -7, 3, 2), counters)


def test_word_language_model_pattern_compiles_once(counters):
    torch.manual_seed(0)
    corpus = torch.randint(0, 37, (64, 6))  # (tokens, batch): batchify's layout
    model = _TinyLM()
    device_model = _TinyLM()
    device_model.load_state_dict(model.state_dict())
    expected = _word_lm_epoch(model, corpus, bptt=9)
    compiles = []
    counters.snapshot()
    got = _word_lm_epoch(device_model.to("lazy"), corpus.to("lazy"), bptt=9,
                         after_step=lambda i: compiles.append(_compiles(counters)))
    assert len(got) == 7
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
    # The first step's graph is one of its own (its outputs come in another
    # order: the gradients are new); the six offsets after it are one module.
    assert compiles[-1] - compiles[0] == 1, compiles
    assert counters.delta("lifted::int") == 2 * len(got)


def test_jit_keeps_offsets_constant_for_every_target(counters):
    """lm.jit's graph is lowered for any target, Vulkan too (where offsets are
    not lifted), and its offsets are not its arguments: they stay constants."""
    x = torch.randn(10, 6)
    fn = lm.jit(lambda t: t[3:7] * 2 + t[5])
    lowered = fn.lower(x, target="vulkan")
    from lazy_mlir.pipeline.fx_graph import to_fx
    targets = {str(n.target) for n in to_fx(lowered.graph).graph.nodes}
    assert not any("_at" in t for t in targets), targets
    out = lowered.compile("cpu")(x)
    torch.testing.assert_close(out, x[3:7] * 2 + x[5])
