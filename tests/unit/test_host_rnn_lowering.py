"""LSTM layers as host calls of PyTorch's oneDNN LSTM (ops/rnn_host.py,
passes/host_rnn.py, runtime/host_rnn.py): the decompositions compute eager's
values and gradients, the torch-dialect rewrite leaves calls that lower to
linalg and run through IREE as eager, and only the in-process cpu session
ever turns it on."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

from lazy_mlir.config import PipelineConfig
from lazy_mlir.ops import rnn_host
from lazy_mlir.passes import host_rnn
from lazy_mlir.runtime import host_rnn as runtime_rnn
from lazy_mlir.targets import Target, get_target

T, B, I, H = 6, 3, 4, 5


def _params(lstm):
    return [p.detach() for p in lstm._flat_weights]


@pytest.mark.parametrize("layers,bidirectional,bias,batch_first",
                         [(1, False, True, False), (2, True, True, True), (2, False, False, True)])
def test_the_decompositions_compute_eagers_values_and_gradients(layers, bidirectional, bias,
                                                                batch_first):
    torch.manual_seed(0)
    lstm = torch.nn.LSTM(I, H, layers, bias=bias, batch_first=batch_first,
                         bidirectional=bidirectional)
    dirs = 1 + bidirectional
    x = torch.randn((B, T, I) if batch_first else (T, B, I), requires_grad=True)
    h0 = torch.randn(layers * dirs, B, H, requires_grad=True)
    c0 = torch.randn(layers * dirs, B, H, requires_grad=True)
    out, (hy, cy) = lstm(x, (h0, c0))
    d_out, d_hy, d_cy = torch.randn_like(out), torch.randn_like(hy), torch.randn_like(cy)
    want = torch.autograd.grad((out * d_out).sum() + (hy * d_hy).sum() + (cy * d_cy).sum(),
                               [x, h0, c0, *lstm._flat_weights])
    width = max(rnn_host.workspace_floats(T, B, w, H) for w in (I, H * dirs))
    config = (bias, layers, bidirectional, batch_first, False, width)
    params = _params(lstm)
    with torch.no_grad():
        got = host_rnn.host_lstm(x, h0, c0, params, *config)
        assert len(got) == 4 + 2 * layers * dirs
        for g, w in zip(got[:3], (out, hy, cy)):
            torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-6)
        assert torch.isnan(got[4]).all()  # the loop backward's packs: NaN, never read here
        saved = [*got[3:], got[1], got[2]]  # (as lazy/rnn.py saves them)
        grads = host_rnn.host_lstm_backward(d_out, d_hy, d_cy, x, h0, c0, params, saved,
                                            *config)
    for g, w in zip(grads, want):
        torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-5)


def test_a_backward_refuses_a_workspace_the_host_forward_did_not_write():
    width = rnn_host.workspace_floats(T, B, I, H)
    args = [torch.randn(T, B, I), torch.zeros(B, H), torch.zeros(B, H), torch.randn(4 * H, I),
            torch.randn(4 * H, H), torch.zeros(4 * H), torch.zeros(4 * H)]
    y, hy, cy, saved = rnn_host.lstm_layer(*args, width, False)
    rest = (torch.ones_like(y), torch.zeros_like(hy), torch.zeros_like(cy), False)
    rnn_host.lstm_layer_backward(*args, y, hy, cy, saved, *rest)  # (accepted)
    with pytest.raises(RuntimeError, match="compiled with different settings"):
        rnn_host.lstm_layer_backward(*args, y, hy, cy, torch.zeros(width), *rest)
    with pytest.raises(RuntimeError, match="compiled with different settings"):
        rnn_host.lstm_layer_backward(*args, y, hy, cy, saved.clone(), *rest)


def test_the_workspace_is_onednns_own_memory_and_forgotten_when_freed():
    width = rnn_host.workspace_floats(T, B, I, H)
    args = [torch.randn(T, B, I), torch.zeros(B, H), torch.zeros(B, H), torch.randn(4 * H, I),
            torch.randn(4 * H, H), torch.zeros(4 * H), torch.zeros(4 * H)]
    saved = rnn_host.lstm_layer(*args, width, False)[3]
    assert saved.shape == (width,) and saved.dtype == torch.float32
    address = saved.data_ptr()
    assert rnn_host._LIVE[address][0] == saved.nbytes
    del saved
    assert address not in rnn_host._LIVE
    # a node's length is the largest of its layers': a smaller layer's is padded (a copy)
    padded = rnn_host.lstm_layer(*args, width + 3, False)[3]
    assert padded.shape == (width + 3,) and (padded[width:] == 0).all()
    assert rnn_host._LIVE[padded.data_ptr()][0] == padded.nbytes


def test_only_the_in_process_cpu_session_turns_it_on(monkeypatch):
    config = PipelineConfig()
    assert not config.rnn_as_calls("cpu")
    on = PipelineConfig(host_rnn=True)
    assert on.rnn_as_calls("cpu")
    assert not on.rnn_as_calls("vulkan") and not on.rnn_as_calls("cuda")
    assert on.key != config.key  # part of every cache key
    assert PipelineConfig(host_rnn=False).key == config.key  # (old keys stay valid)
    cpu = get_target("cpu")
    assert runtime_rnn.session_config(cpu, config).host_rnn
    for gpu in (Target("vulkan", "vulkan-spirv", "vulkan", ()), Target("cuda", "cuda", "cuda", ())):
        assert not runtime_rnn.session_config(gpu, config).host_rnn
    monkeypatch.setenv("LAZY_MLIR_RNN", "0")
    assert not runtime_rnn.session_config(cpu, on).host_rnn
    assert not rnn_host.enabled()


def _one_layer(x, h0, c0, w_ih, w_hh, b_ih, b_hh, dy, width):
    """Forward then backward of one reversed layer, as the lowering writes them."""
    ops = torch.ops.lazy_mlir
    y, hy, cy, saved = ops.host_lstm_layer(x, h0, c0, w_ih, w_hh, b_ih, b_hh, width, True)
    grads = ops.host_lstm_layer_backward(x, h0, c0, w_ih, w_hh, b_ih, b_hh, y, hy, cy, saved,
                                         dy, torch.zeros_like(hy), torch.zeros_like(cy), True)
    return (y, hy, cy, *grads)


def test_the_calls_lower_to_linalg_and_run_through_iree_as_eager():
    import iree.compiler as ic
    import iree.runtime as rt

    from lazy_mlir.dialects.runner import run_pipeline
    from lazy_mlir.dialects.torch_import import import_fx
    from lazy_mlir.passes import pipelines

    g = torch.Generator().manual_seed(0)
    args = [torch.randn(T, B, I, generator=g), torch.randn(B, H, generator=g),
            torch.randn(B, H, generator=g), torch.randn(4 * H, I, generator=g),
            torch.randn(4 * H, H, generator=g), torch.randn(4 * H, generator=g),
            torch.randn(4 * H, generator=g), torch.randn(T, B, H, generator=g)]
    width = rnn_host.workspace_floats(T, B, I, H)
    gm = make_fx(lambda *a: _one_layer(*a, width))(*args)
    module = import_fx(gm)
    assert host_rnn.calls_instead(module) == 2
    text = str(module)
    assert "torch.operator" not in text and host_rnn.CALL_MARK + "lstm_layer_reverse(" in text
    config = PipelineConfig()
    backend = run_pipeline(text, pipelines.as_pipeline(pipelines.torch_backend(config)), "b")
    linalg = run_pipeline(backend, host_rnn.unverified(
        pipelines.as_pipeline(pipelines.linalg(config))), "linalg")
    assert host_rnn.check_lowered(linalg) is None
    assert host_rnn.check_lowered(backend) is not None
    cpu = get_target("cpu")
    vmfb = ic.compile_str(linalg, extra_args=[f"--iree-hal-target-backends={cpu.backend}",
                                              *cpu.flags])
    assert runtime_rnn.imports_rnn(vmfb)
    rconfig = rt.Config("local-sync")
    ctx = rt.SystemContext(config=rconfig)
    ctx.add_vm_module(runtime_rnn.create_module(rconfig.device))
    ctx.add_vm_module(rt.VmModule.copy_buffer(ctx.instance, vmfb))
    outs = ctx.modules.module["main"](*[a.numpy() for a in args])
    want = _one_layer(*args, width)
    assert len(outs) == len(want)
    for got, w in zip(outs, want):
        np.testing.assert_allclose(np.asarray(got.to_host()), w.numpy(), rtol=1e-5, atol=1e-6)
