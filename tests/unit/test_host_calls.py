"""``host_calls.runtime.switches.session_config``: the one gate of the three kinds of
host call (matmuls, LSTM layers, flash attention). Only the in-process cpu
session turns a kind on, each kind's switch turns it off, and the field is
part of every cache key. No compiler needed."""
from __future__ import annotations

import pytest

from lazy_mlir.config import PipelineConfig
from lazy_mlir.host_calls.ops import attention as attention_host, rnn as rnn_host
from lazy_mlir.host_calls.runtime import blas as runtime_blas
from lazy_mlir.host_calls.runtime import switches as host_calls
from lazy_mlir.targets import Target, get_target

KINDS = {  # field: (the config's "as calls" question, the switch, its enabled())
    "host_blas": ("matmuls_as_calls", "LAZY_MLIR_BLAS", runtime_blas.enabled),
    "host_rnn": ("rnn_as_calls", "LAZY_MLIR_RNN", rnn_host.enabled),
    "host_attention": ("attention_as_calls", "LAZY_MLIR_HOST_ATTENTION",
                       attention_host.enabled),
}


@pytest.mark.parametrize("field", sorted(KINDS))
def test_only_the_in_process_cpu_session_turns_it_on(field, monkeypatch):
    as_calls, switch, enabled = KINDS[field]
    for _, name, _ in KINDS.values():  # (on whatever this machine's ``auto``)
        monkeypatch.setenv(name, "1")
    config = PipelineConfig()
    assert not getattr(config, as_calls)("cpu")
    on = PipelineConfig(**{field: True})
    assert getattr(on, as_calls)("cpu")
    assert not getattr(on, as_calls)("vulkan") and not getattr(on, as_calls)("cuda")
    assert on.key != config.key  # part of every cache key
    assert PipelineConfig(**{field: False}).key == config.key  # (old keys stay valid)
    cpu = get_target("cpu")
    assert getattr(host_calls.session_config(cpu, config), field)
    for gpu in (Target("vulkan", "vulkan-spirv", "vulkan", ()), Target("cuda", "cuda", "cuda", ())):
        assert not getattr(host_calls.session_config(gpu, config), field)
    monkeypatch.setenv(switch, "0")
    assert not getattr(host_calls.session_config(cpu, on), field)
    assert not enabled()
    others = [f for f in KINDS if f != field]  # one switch turns off one kind
    assert all(getattr(host_calls.session_config(cpu, config), f) for f in others)

