"""The pass pipeline configuration: frozen, loadable from TOML, part of every
cache key.

A TOML file (``--pipeline-config FILE`` or ``LAZY_MLIR_PIPELINE=FILE``)::

    opt_level = 3                      # iree-compile --iree-opt-level=O<n> (unset: IREE's default)
    decompositions = true              # PyTorch decompositions before import
    backend_legal_ops = ["aten.flatten.using_ints"]
    torch_backend_before = []          # passes run on the imported torch IR
    torch_backend_after = []           # passes run on the backend contract
    linalg_after = ["canonicalize"]    # passes run on linalg-on-tensors
    input = "linalg"                   # or "torch": IREE's own torch input
    mixed_precision = "none"           # or "bf16": matmul/conv in bf16, f32 accumulate
                                       # (also LAZY_MLIR_USE_BF16=1, over any file)
    conv_lowering = "auto"             # "im2col": convs as im2col + matmul (passes/conv_matmul.py)
                                       # and non-overlapping max and average pooling as
                                       # elementwise ops (passes/pool_elementwise.py);
                                       # "native": aten.convolution; "auto": im2col on cpu only,
                                       # with stride-1 forwards, input gradients of any stride
                                       # (3+ channels) and depthwise convolutions as IREE's
                                       # channels-last ones (passes/conv_channels_last.py)

    [iree_flags]
    cpu = ["--iree-opt-data-tiling"]
"""
from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import os
import tomllib
from dataclasses import dataclass
from pathlib import Path


class ConfigError(ValueError):
    """A pipeline configuration that cannot be used; the message says why."""


@dataclass(frozen=True)
class PipelineConfig:
    opt_level: int | None = None
    decompositions: bool = True
    backend_legal_ops: tuple[str, ...] = ()
    torch_backend_before: tuple[str, ...] = ()
    torch_backend_after: tuple[str, ...] = ()
    linalg_after: tuple[str, ...] = ()
    input: str = "linalg"
    mixed_precision: str = "none"
    conv_lowering: str = "auto"
    # Large f32 matmuls as calls into torch.mm (host_calls/passes/blas.py). Never set
    # in a TOML file: only the in-process cpu session turns it on
    # (host_calls.runtime.switches.session_config); a module with the calls needs
    # PyTorch in the process that runs it.
    host_blas: bool = False
    # LSTM layers as calls into PyTorch's oneDNN LSTM (host_calls/passes/rnn.py); as
    # host_blas: only the in-process cpu session turns it on
    # (host_calls.runtime.switches.session_config).
    host_rnn: bool = False
    # Attention as calls into PyTorch's CPU flash attention
    # (host_calls/passes/attention.py); as host_blas (host_calls.runtime.switches.session_config).
    host_attention: bool = False
    iree_flags: tuple[tuple[str, tuple[str, ...]], ...] = ()

    def __post_init__(self):
        if self.input not in ("linalg", "torch"):
            raise ConfigError(f"input must be 'linalg' or 'torch', not {self.input!r}")
        if self.mixed_precision not in ("none", "bf16"):
            raise ConfigError(f"mixed_precision must be 'none' or 'bf16', not "
                              f"{self.mixed_precision!r}")
        if self.conv_lowering not in ("auto", "im2col", "native"):
            raise ConfigError(f"conv_lowering must be 'auto', 'im2col' or 'native', not "
                              f"{self.conv_lowering!r}")
        if not isinstance(self.host_blas, bool):
            raise ConfigError(f"host_blas must be true or false, not {self.host_blas!r}")
        if not isinstance(self.host_rnn, bool):
            raise ConfigError(f"host_rnn must be true or false, not {self.host_rnn!r}")
        if not isinstance(self.host_attention, bool):
            raise ConfigError(
                f"host_attention must be true or false, not {self.host_attention!r}")
        if self.opt_level is not None and not 0 <= self.opt_level <= 3:
            raise ConfigError(f"opt_level must be 0..3, not {self.opt_level}")

    def conv_as_matmul(self, target: str | None) -> bool:
        """Whether convolutions compiled for ``target`` (None: not known yet)
        become im2col + matmul. "auto": on cpu only, where it made the MNIST
        CNN step 1.5x faster (with matmul data tiling; at 3.7x the peak
        memory); GPU targets keep their convolution code until measured."""
        if self.conv_lowering == "auto":
            return target == "cpu"
        return self.conv_lowering == "im2col"

    def direct_convs(self, target: str | None) -> bool:
        """Whether convolutions with ``conv_matmul.DIRECT_CHANNELS`` (stride-1
        forwards, input gradients of any stride) and depthwise ones compiled
        for ``target`` run as IREE's channels-last direct convolution (``passes/conv_channels_last.py``):
        "auto" on cpu, where it made the LeNet-5 and MNIST CNN steps faster
        than im2col. Not under bf16 mixed precision: the rewrite takes float32
        convolutions."""
        return (self.conv_lowering == "auto" and target == "cpu"
                and self.mixed_precision == "none")

    def matmuls_as_calls(self, target: str | None) -> bool:
        """Whether large f32 matmuls compiled for ``target`` become calls of
        ``torch.mm`` (``host_calls/passes/blas.py``): cpu only, when ``host_blas``."""
        return self.host_blas and target == "cpu"

    def rnn_as_calls(self, target: str | None) -> bool:
        """Whether LSTM layers compiled for ``target`` become calls of PyTorch's
        oneDNN LSTM (``host_calls/passes/rnn.py``): cpu only, when ``host_rnn``."""
        return self.host_rnn and target == "cpu"

    def attention_as_calls(self, target: str | None) -> bool:
        """Whether attention nodes compiled for ``target`` become calls of
        PyTorch's CPU flash attention (``host_calls/passes/attention.py``): cpu only,
        when ``host_attention``."""
        return self.host_attention and target == "cpu"

    def flags_for(self, target: str) -> tuple[str, ...]:
        return dict(self.iree_flags).get(target, ())

    @functools.cached_property
    def key(self) -> str:
        """A stable digest of every field (part of every cache key). Computed
        once: the config is frozen, and every sync point asks for it."""
        fields = dataclasses.asdict(self)
        if not self.host_blas:  # (keys made before the field existed stay valid)
            del fields["host_blas"]
        if not self.host_rnn:
            del fields["host_rnn"]
        if not self.host_attention:
            del fields["host_attention"]
        blob = json.dumps(fields, sort_keys=True, default=list)
        return hashlib.sha256(blob.encode()).hexdigest()[:16]

    def replace(self, **changes) -> "PipelineConfig":
        return dataclasses.replace(self, **changes)

    @staticmethod
    def from_toml(path: str | os.PathLike) -> "PipelineConfig":
        try:
            data = tomllib.loads(Path(path).read_text())
        except FileNotFoundError:
            raise ConfigError(f"pipeline config {path} does not exist") from None
        except tomllib.TOMLDecodeError as e:
            raise ConfigError(f"pipeline config {path} is not valid TOML: {e}") from None
        return PipelineConfig.from_dict(data, source=str(path))

    @staticmethod
    def from_dict(data: dict, source: str = "config") -> "PipelineConfig":
        known = {f.name: f for f in dataclasses.fields(PipelineConfig)}
        unknown = sorted(set(data) - set(known))
        if unknown:
            raise ConfigError(f"{source}: unknown key(s) {', '.join(unknown)}; valid keys: "
                              f"{', '.join(sorted(known))}")
        kwargs = {}
        for name, value in data.items():
            if name == "iree_flags":
                if not isinstance(value, dict):
                    raise ConfigError(f"{source}: iree_flags must be a table of lists")
                value = tuple(sorted((k, tuple(v)) for k, v in value.items()))
            elif isinstance(value, list):
                value = tuple(value)
            kwargs[name] = value
        try:
            return PipelineConfig(**kwargs)
        except TypeError as e:
            raise ConfigError(f"{source}: {e}") from None


_current: list[PipelineConfig | None] = [None]

OFF_WORDS = ("0", "false", "off", "no")


def switched_on(name: str) -> bool:
    """Whether the environment switch ``name`` (default on) is on: anything
    but 0 / false / off / no. Read at each call: a test or a user may flip it."""
    return os.environ.get(name, "1").strip().lower() not in OFF_WORDS


BF16_SWITCH = "LAZY_MLIR_USE_BF16"


def current_config() -> PipelineConfig:
    """The process's config: set by ``set_config``, else ``LAZY_MLIR_PIPELINE``
    (a TOML file; unset: the defaults), with ``mixed_precision = "bf16"``
    when ``LAZY_MLIR_USE_BF16`` is on (1 / true / on / yes: the seeds'
    ``LTC_USE_BF16``; tensors keep reporting float32). Both are read when
    no config is set yet (at the first compile, or after ``set_config(None)``)."""
    if _current[0] is None:
        path = os.environ.get("LAZY_MLIR_PIPELINE")
        config = PipelineConfig.from_toml(path) if path else PipelineConfig()
        if os.environ.get(BF16_SWITCH, "0").strip().lower() not in OFF_WORDS + ("",):
            config = config.replace(mixed_precision="bf16")
        _current[0] = config
    return _current[0]


def set_config(config: PipelineConfig | str | os.PathLike | None) -> None:
    """Use ``config`` (or the TOML file at that path; None: the default)."""
    if config is not None and not isinstance(config, PipelineConfig):
        config = PipelineConfig.from_toml(config)
    _current[0] = config
