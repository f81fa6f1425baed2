"""``lm.export(..., dynamic_dims=...)`` through the lazy device
(``export/dynamic.py``): one artifact runs at every size, run here by the
IREE runtime (``lazy_mlir.export.load``) against eager PyTorch; an index out
of range at a dynamic size raises (never a read outside the table), and so
does an input of another rank, static size or dtype. ``arange(t)`` (the
positions) is an op of the graph, following the size."""
import numpy as np
import pytest
import torch

import lazy_mlir as lm
from lazy_mlir.export import ExportError, SignatureError, load

VOCAB, WIDTH = 29, 12  # (sizes of this test's own)


class TinyLM(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding(VOCAB, WIDTH)
        self.pos = torch.nn.Embedding(64, WIDTH)
        self.out = torch.nn.Linear(WIDTH, VOCAB)

    def forward(self, ids):
        b, t = ids.shape
        h = torch.tanh(self.embed(ids) + self.pos(torch.arange(t, device=ids.device)))
        h = h + torch.nn.functional.pad(h[:, :t - 1], (0, 0, 1, 0))  # (slice and pad of t)
        return self.out(h.reshape(b * t, WIDTH)).view(b, t, VOCAB).log_softmax(-1)


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    torch.manual_seed(0)
    model = TinyLM().eval()
    ids = torch.randint(0, VOCAB, (2, 6))
    path = lm.export(model, (ids,), path=tmp_path_factory.mktemp("dyn") / "lm",
                     params="external", dynamic_dims={"ids": {0: "batch", 1: ("t", 3, 64)}})
    return model, load(path)


def test_runs_at_two_sizes_as_eager(exported):
    model, fn = exported
    assert fn.signature == ("forward(ids: int64[batch,t]) -> (output: float32[batch,t,29]) "
                            "where 3 <= t <= 64")
    rng = np.random.default_rng(0)
    for b, t in ((3, 9), (1, 17)):
        ids = rng.integers(0, VOCAB, (b, t))
        out = fn(ids)
        assert out.shape == (b, t, VOCAB)
        with torch.no_grad():
            np.testing.assert_allclose(out, model(torch.from_numpy(ids)).numpy(), rtol=1e-5,
                                       atol=1e-5)


def test_bad_inputs_raise(exported):
    _, fn = exported
    ids = np.random.default_rng(1).integers(0, VOCAB, (2, 11))
    ids[1, 7] = VOCAB + 1000  # out of range at a size never traced
    with pytest.raises(IndexError, match=r"embedding.*\[0, 29\)"):
        fn(ids)
    ids[1, 7] = -1
    with pytest.raises(IndexError, match="embedding"):
        fn(ids)
    with pytest.raises(SignatureError, match="batch,t"):
        fn(np.zeros((2, 3, 4), np.int64))  # another rank
    with pytest.raises(SignatureError, match="3 <= t <= 64"):
        fn(np.zeros((2, 65), np.int64))  # a size out of range
    with pytest.raises(SignatureError, match="int64"):
        fn(np.zeros((2, 5), np.int32))


def test_a_graph_that_changes_with_the_size_is_refused(tmp_path):
    def branchy(x):
        return x * 2 if x.shape[0] < 5 else x * 3  # (the size picks another constant)

    with pytest.raises(ExportError, match="constant"):
        lm.export(branchy, torch.ones(4, 3), path=tmp_path / "b",
                  dynamic_dims={"x": {0: "n"}})


def test_a_static_export_clamps_an_input_index(tmp_path):
    """Static shapes (``lm.jit``'s capture) clamp indices, those of the
    inputs too: an input index was checked on the example at capture and
    then left unclamped, so a bad one read outside the table (zeros)."""
    torch.manual_seed(0)
    lookup = torch.nn.Embedding(VOCAB, 3).eval()
    fn = load(lm.export(lookup, torch.zeros(4, dtype=torch.int64), path=tmp_path / "s"))
    ids = np.array([0, 5, VOCAB + 10 ** 6, 2])
    with torch.no_grad():
        np.testing.assert_allclose(fn(ids), lookup(torch.tensor([0, 5, VOCAB - 1, 2])).numpy())
