"""The real-model suite: the models people train, at a tiny and a medium size.

Each ``RealModel`` builds a fresh, seeded model (``transformers`` models are
built from configs: nothing is downloaded), a deterministic batch per step
(CPU tensors, keyword inputs as the model takes them) and its loss. Tests,
benchmarks, ``lazy-mlir doctor`` and the Vulkan/CUDA checks all train the
same models through it, so a number in one place is comparable with another.

Dropout is off (probability 0) in every model: the suite compares backends
whose random streams differ (``torch.compile``'s inductor draws its own), and
the loss curves must agree op for op.

``transformers`` is a test and benchmark dependency, imported only when a
``transformers`` model is built.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn as nn
import torch.nn.functional as F

# size -> hidden width, layers, attention heads, sequence, batch, image side,
# ResNet's first stage width (doubling per stage)
SIZES = {
    "tiny": dict(hidden=64, layers=2, heads=2, seq=32, batch=4, image=32, resnet_width=32),
    "medium": dict(hidden=512, layers=4, heads=8, seq=128, batch=8, image=64, resnet_width=64),
}
VOCAB = 512
CLASSES = 10


@dataclass(frozen=True)
class RealModel:
    """One model of the suite at one size.

    ``make()``: the model, its weights drawn from ``torch.manual_seed(seed)``;
    ``batch(step, device)``: the step's keyword inputs; ``loss(model, batch)``:
    forward and loss (``model(**batch).loss`` for ``transformers`` models).
    ``computes_own_loss``: the model returns its loss from labels in the
    batch (so ``compile_train_step`` needs no ``loss_fn``); else ``loss_fn``
    is the loss of the model's output and the batch's ``labels``, as
    ``compile_train_step(model, loss_fn, optimizer)`` takes it: both forms
    train with ``step(**batch)``."""

    name: str
    size: str
    make: Callable[[], nn.Module]
    batch: Callable[..., dict]
    loss: Callable[[nn.Module, dict], torch.Tensor]
    computes_own_loss: bool
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] | None = None

    @property
    def id(self) -> str:
        return f"{self.name}-{self.size}"

    def optimizer(self, model: nn.Module, capturable: bool | None = None) -> torch.optim.Optimizer:
        """AdamW as users create it: by default ``capturable`` off the CPU (so
        that ``compile_train_step`` replays it; the CPU refuses the flag).
        PyTorch's TorchScript lazy backend refuses it too: pass False there."""
        if capturable is None:
            capturable = next(model.parameters()).device.type != "cpu"
        return torch.optim.AdamW(model.parameters(), lr=1e-3, capturable=capturable)


def _seeded(build, seed: int = 0):
    def make():
        torch.manual_seed(seed)
        return build()
    return make


def _token_batch(dims, labels_like_inputs=True):
    def batch(step: int, device="cpu") -> dict:
        g = torch.Generator().manual_seed(1000 + step)
        ids = torch.randint(0, VOCAB, (dims["batch"], dims["seq"]), generator=g)
        out = {"input_ids": ids, "labels": ids.clone() if labels_like_inputs else
               torch.randint(0, VOCAB, ids.shape, generator=g)}
        return {k: v.to(device) for k, v in out.items()}
    return batch


def _image_batch(dims):
    def batch(step: int, device="cpu") -> dict:
        g = torch.Generator().manual_seed(2000 + step)
        side = dims["image"]
        out = {"pixel_values": torch.randn(dims["batch"], 3, side, side, generator=g),
               "labels": torch.randint(0, CLASSES, (dims["batch"],), generator=g)}
        return {k: v.to(device) for k, v in out.items()}
    return batch


def _hf_loss(model, batch):
    return model(**batch).loss


def _gpt2(d):
    from transformers import GPT2Config, GPT2LMHeadModel
    return GPT2LMHeadModel(GPT2Config(
        vocab_size=VOCAB, n_positions=d["seq"], n_embd=d["hidden"], n_layer=d["layers"],
        n_head=d["heads"], bos_token_id=0, eos_token_id=0, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0))


def _bert(d):
    from transformers import BertConfig, BertForMaskedLM
    return BertForMaskedLM(BertConfig(
        vocab_size=VOCAB, hidden_size=d["hidden"], num_hidden_layers=d["layers"],
        num_attention_heads=d["heads"], intermediate_size=4 * d["hidden"],
        max_position_embeddings=d["seq"], hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0))


def _vit(d):
    from transformers import ViTConfig, ViTForImageClassification
    return ViTForImageClassification(ViTConfig(
        image_size=d["image"], patch_size=8, num_channels=3, hidden_size=d["hidden"],
        num_hidden_layers=d["layers"], num_attention_heads=d["heads"],
        intermediate_size=4 * d["hidden"], num_labels=CLASSES, hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0))


def _resnet(d):
    from transformers import ResNetConfig, ResNetForImageClassification
    width = d["resnet_width"]
    return ResNetForImageClassification(ResNetConfig(
        num_channels=3, embedding_size=width, hidden_sizes=[width * 2 ** i for i in range(d["layers"])],
        depths=[1] * d["layers"], layer_type="basic", num_labels=CLASSES))


class LSTMLanguageModel(nn.Module):
    """Embedding, a multi-layer ``nn.LSTM``, a vocabulary head."""

    def __init__(self, hidden: int, layers: int):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, hidden)
        self.lstm = nn.LSTM(hidden, hidden, layers, batch_first=True)
        self.head = nn.Linear(hidden, VOCAB)

    def forward(self, input_ids):
        out, _ = self.lstm(self.embed(input_ids))
        return self.head(out)


class EncoderLanguageModel(nn.Module):
    """Embedding plus learned positions, ``nn.TransformerEncoder``, a head."""

    def __init__(self, hidden: int, layers: int, heads: int, seq: int):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, hidden)
        self.position = nn.Parameter(torch.randn(seq, hidden) * 0.02)
        layer = nn.TransformerEncoderLayer(hidden, heads, 4 * hidden, dropout=0.0,
                                           batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.head = nn.Linear(hidden, VOCAB)

    def forward(self, input_ids):
        return self.head(self.encoder(self.embed(input_ids) + self.position))


def token_cross_entropy(logits, labels):
    """A language model's loss: cross entropy over every position."""
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1))


def _lm_loss(model, batch):
    return token_cross_entropy(model(input_ids=batch["input_ids"]), batch["labels"])


def _entry(name, size, build, batch, own_loss=True) -> RealModel:
    return RealModel(name, size, _seeded(build), batch, _hf_loss if own_loss else _lm_loss,
                     own_loss, None if own_loss else token_cross_entropy)


def real_model(name: str, size: str = "tiny", **dims) -> RealModel:
    """The suite's ``name`` at ``size`` ("tiny" or "medium"); ``dims``
    override that size's dimensions (``layers=1``: the same model, one layer
    deep, for a check that must compile quickly), and are named in its size
    (``tiny,layers=1``)."""
    if size not in SIZES:
        raise ValueError(f"unknown size {size!r}: one of {', '.join(SIZES)}")
    unknown = sorted(set(dims) - set(SIZES[size]))
    if unknown:
        raise ValueError(f"unknown dimension {', '.join(unknown)}: one of {', '.join(SIZES[size])}")
    d = {**SIZES[size], **dims}
    size = ",".join([size, *(f"{k}={v}" for k, v in sorted(dims.items()))])
    builders = {
        "gpt2": lambda: _entry("gpt2", size, lambda: _gpt2(d), _token_batch(d)),
        "bert": lambda: _entry("bert", size, lambda: _bert(d), _token_batch(d, False)),
        "vit": lambda: _entry("vit", size, lambda: _vit(d), _image_batch(d)),
        "resnet": lambda: _entry("resnet", size, lambda: _resnet(d), _image_batch(d)),
        "lstm": lambda: _entry("lstm", size, lambda: LSTMLanguageModel(d["hidden"], d["layers"]),
                               _token_batch(d, False), own_loss=False),
        "transformer": lambda: _entry(
            "transformer", size,
            lambda: EncoderLanguageModel(d["hidden"], d["layers"], d["heads"], d["seq"]),
            _token_batch(d, False), own_loss=False),
    }
    if name not in builders:
        raise ValueError(f"unknown model {name!r}: one of {', '.join(MODEL_NAMES)}")
    return builders[name]()


MODEL_NAMES = ("gpt2", "bert", "vit", "resnet", "lstm", "transformer")


def suite(size: str = "tiny", names=MODEL_NAMES) -> list[RealModel]:
    """Every model of the suite (or ``names``) at ``size``."""
    return [real_model(n, size) for n in names]
