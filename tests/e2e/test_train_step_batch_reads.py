"""compile_train_step over a step that reads its batch on the host
(transformers' ``warn_if_padding_and_no_attention_mask``: ``pad in
input_ids[:, [-1, 0]]``, in ~30 model families): the read is answered on the
host and kept as a guard (``host_eval.Read``), so the step replays while the
read gives the same value, and runs plain on a batch where it does not."""
from __future__ import annotations

import torch
import torch.nn as nn

import lazy_mlir as lm
from e2e_helpers import train_steps

PAD = 0


class _Tagger(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.emb = nn.Embedding(20, 8)
        self.out = nn.Linear(8, 20)

    def forward(self, ids, labels):
        scale = 0.5 if PAD in ids[:, [-1, 0]] else 1.0  # (a host read of the batch)
        logits = self.out(self.emb(ids)) * scale
        return nn.functional.cross_entropy(logits.flatten(0, 1), labels.flatten())


def _batches():
    g = torch.Generator().manual_seed(1)
    out = [torch.randint(1, 20, (4, 6), generator=g) for _ in range(6)]
    out[4][0, -1] = PAD  # this batch's read differs: its step runs plain
    return out


def _eager():
    model = _Tagger()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    return train_steps(model, opt, [(ids, ids) for ids in _batches()], "cpu", None)


def test_a_step_reading_its_batch_replays_and_a_batch_read_otherwise_runs_plain():
    model = _Tagger().to("lazy")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, capturable=True)
    step = lm.compile_train_step(model, opt)
    names = ("TrainStepReplayed", "TrainStepPlain", "TrainStepRefused")
    before = {n: lm.metrics.counter_value(n) for n in names}
    losses = [step(ids.to("lazy"), ids.to("lazy")).item() for ids in _batches()]
    moved = {n: lm.metrics.counter_value(n) - before[n] for n in names}
    assert moved == {"TrainStepReplayed": 2, "TrainStepPlain": 1, "TrainStepRefused": 0}, moved
    torch.testing.assert_close(torch.tensor(losses), torch.tensor(_eager()), rtol=1e-4, atol=1e-5)
