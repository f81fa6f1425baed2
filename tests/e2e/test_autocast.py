"""``lm.autocast("lazy")`` against eager ``torch.autocast("cpu")``: each op's
result dtype and value (bf16 tolerance), gradients, a few training steps
(bf16, and fp16 with ``torch.amp.GradScaler``), and the device-level bf16
mode (``LAZY_MLIR_USE_BF16``).

The ops are computed in one graph (a module fixture: one compile); each
parametrized test then compares one op."""
from __future__ import annotations

import contextlib
import copy

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import lazy_mlir as lm
from lazy_mlir.config import set_config
from lazy_mlir.lazy import autocast as autocast_module

BF16_TOL = dict(rtol=3e-2, atol=3e-2)


def _inputs():
    g = torch.Generator().manual_seed(0)

    def r(*shape, dtype=torch.float32):
        return torch.randn(*shape, generator=g).to(dtype)

    return {
        "a": r(6, 8), "b": r(8, 5), "bias": r(5), "w": r(5, 8), "v": r(8),
        "a3": r(2, 6, 8), "b3": r(2, 8, 5), "c3": r(2, 6, 5),
        "img": r(2, 3, 8, 8), "k2": r(4, 3, 3, 3), "seq": r(2, 3, 10), "k1": r(4, 3, 3),
        "kt": r(3, 4, 3, 3), "q": r(2, 2, 4, 8), "kk": r(2, 2, 4, 8), "vv": r(2, 2, 4, 8),
        "a16": r(6, 8, dtype=torch.bfloat16), "b16": r(6, 8, dtype=torch.bfloat16),
        "a64": r(6, 8, dtype=torch.float64), "b64": r(8, 5, dtype=torch.float64),
        "target": torch.randint(0, 5, (6,), generator=g),
        "idx": torch.tensor([0, 2, 4]), "alpha": r(3).abs() + 0.1, "pos": r(6, 8).abs() + 0.1,
        "sgn": torch.randint(0, 2, (6, 8), generator=g).float() * 2 - 1,
    }


# name -> (expected policy, f(t) computed inside autocast)
OPS = {
    # lower precision (bf16)
    "mm": ("lower", lambda t: torch.mm(t["a"], t["b"])),
    "matmul": ("lower", lambda t: t["a"] @ t["b"]),
    "bmm": ("lower", lambda t: torch.bmm(t["a3"], t["b3"])),
    "baddbmm": ("lower", lambda t: torch.baddbmm(t["c3"], t["a3"], t["b3"])),
    "addbmm": ("lower", lambda t: torch.addbmm(t["bias"], t["a3"], t["b3"])),
    "addmm": ("lower", lambda t: torch.addmm(t["bias"], t["a"], t["b"])),
    "linear": ("lower", lambda t: F.linear(t["a"], t["w"], t["bias"])),
    "conv1d": ("lower", lambda t: F.conv1d(t["seq"], t["k1"], padding=1)),
    "conv2d": ("lower", lambda t: F.conv2d(t["img"], t["k2"], stride=2)),
    "conv_transpose2d": ("lower", lambda t: F.conv_transpose2d(t["img"], t["kt"])),
    "prelu": ("lower", lambda t: F.prelu(t["img"], t["alpha"])),
    "sdpa": ("lower", lambda t: F.scaled_dot_product_attention(t["q"], t["kk"], t["vv"])),
    "mm_of_bf16_and_fp32": ("lower", lambda t: torch.mm(t["a16"], t["b"])),
    # fp32 (computed in float32 even from bf16 inputs)
    "mse_loss": ("fp32", lambda t: F.mse_loss(t["a16"], t["b16"])),
    "cross_entropy": ("fp32", lambda t: F.cross_entropy(t["a"] @ t["b"], t["target"])),
    "nll_loss": ("fp32", lambda t: F.nll_loss((t["a"] @ t["b"]).log_softmax(-1), t["target"])),
    "l1_loss": ("fp32", lambda t: F.l1_loss(t["a16"], t["b16"])),
    "smooth_l1_loss": ("fp32", lambda t: F.smooth_l1_loss(t["a16"], t["b16"])),
    "huber_loss": ("fp32", lambda t: F.huber_loss(t["a16"], t["b16"])),
    "kl_div": ("fp32", lambda t: F.kl_div(t["a16"].log_softmax(-1), t["b16"].softmax(-1),
                                          reduction="batchmean")),
    "bce_with_logits": ("fp32", lambda t: F.binary_cross_entropy_with_logits(
        t["a16"], t["b16"].sigmoid())),
    "soft_margin_loss": ("fp32", lambda t: F.soft_margin_loss(t["a16"], t["sgn"])),
    "prod": ("fp32", lambda t: torch.prod(t["pos"].to(torch.bfloat16), 1)),
    "trace": ("fp32", lambda t: torch.trace(t["a16"])),
    "cdist": ("fp32", lambda t: torch.cdist(t["a16"], t["b16"])),
    # promote (widest input type)
    "cat_mixed": ("promote", lambda t: torch.cat([t["a"], t["a16"]])),
    "cat_bf16": ("promote", lambda t: torch.cat([t["a16"], t["b16"]])),
    "stack_mixed": ("promote", lambda t: torch.stack([t["a16"], t["a"]])),
    "index_copy_mixed": ("promote", lambda t: t["a"].index_copy(0, t["idx"], t["b16"][:3])),
    "cat_with_double": ("promote", lambda t: torch.cat([t["a16"], t["a64"]])),
    # outside CPU autocast's lists: ordinary type promotion, nothing cast
    "softmax_fp32": ("none", lambda t: torch.softmax(t["a"], -1)),
    "softmax_of_mm": ("none", lambda t: torch.softmax(t["a"] @ t["b"], -1)),
    "log_softmax": ("none", lambda t: F.log_softmax(t["a"] @ t["b"], -1)),
    "layer_norm": ("none", lambda t: F.layer_norm(t["a16"], (8,))),
    "layer_norm_fp32": ("none", lambda t: F.layer_norm(t["a"], (8,))),
    "addcmul_mixed": ("none", lambda t: torch.addcmul(t["a"], t["a16"], t["b16"])),
    "index_put": ("none", lambda t: t["a"].index_put((t["idx"],), t["b"].T[:3].contiguous())),
    "add_mixed": ("none", lambda t: t["a"] + t["a16"]),
    "relu": ("none", lambda t: F.relu(t["a16"])),
    "mm_double": ("none", lambda t: torch.mm(t["a64"], t["b64"])),
    "integer_mm": ("none", lambda t: torch.mm(t["target"][None], t["target"][:, None])),
    # a composite: F.multi_head_attention_forward's inner linears, bmm, softmax
    "multihead_attention": ("lower", lambda t: _mha(t)),
    # autocast turned off inside the region
    "mm_disabled": ("none", lambda t: _disabled(t, lambda: torch.mm(t["a"], t["b"]))),
}


def _mha(t):
    torch.manual_seed(0)
    mha = nn.MultiheadAttention(8, 2, batch_first=True).to(t["a"].device)
    return mha(t["a3"], t["a3"], t["a3"], need_weights=False)[0]


def _disabled(t, f):
    if t["a"].device.type == "lazy":
        with lm.autocast("lazy", enabled=False):
            return f()
    with torch.autocast("cpu", enabled=False):
        return f()


def _run(device: str, dtype=torch.bfloat16, ops=OPS):
    t = {k: v.to(device) for k, v in _inputs().items()}
    region = (lm.autocast("lazy", dtype=dtype) if device == "lazy"
              else torch.autocast("cpu", dtype=dtype))
    with region:
        return {name: f(t) for name, (_, f) in ops.items()}


@pytest.fixture(scope="module")
def results():
    eager = _run("cpu")
    lazy = _run("lazy")
    lm.mark_step()
    return eager, lazy


def test_the_lists_are_pytorchs():
    """The three lists are exactly the ops the installed PyTorch has
    AutocastCPU kernels for (a PyTorch upgrade that changes them fails here)."""
    registered = {n for n in torch._C._dispatch_get_all_op_names()
                  if torch._C._dispatch_has_kernel_for_dispatch_key(n, "AutocastCPU")}
    assert set(autocast_module.policy_table()) == registered


@pytest.mark.parametrize("name", list(OPS))
def test_op_matches_eager_cpu_autocast(results, name):
    eager, lazy = results
    e, lz = eager[name], lazy[name]
    assert lz.device.type == "lazy"
    assert lz.dtype == e.dtype, f"{name}: lazy {lz.dtype}, eager {e.dtype}"
    policy = OPS[name][0]
    if policy == "lower":
        assert e.dtype == torch.bfloat16
    elif policy == "fp32":
        assert e.dtype == torch.float32
    if e.is_floating_point():
        torch.testing.assert_close(lz.cpu().double(), e.double(), **BF16_TOL)
    else:
        assert torch.equal(lz.cpu(), e)


def test_float16():
    ops = {k: OPS[k] for k in ("mm", "linear", "cross_entropy", "softmax_of_mm")}
    eager = _run("cpu", torch.float16, ops)
    lazy = _run("lazy", torch.float16, ops)
    for name in ops:
        assert lazy[name].dtype == eager[name].dtype, name
        torch.testing.assert_close(lazy[name].cpu(), eager[name], rtol=1e-2, atol=1e-2)
    assert lazy["mm"].dtype == torch.float16


def _index_put_bf16_into_fp32(device, region) -> str:
    """The error (its message: the traceback would keep the lazy tensor, and
    with it the failed write, alive)."""
    a, one = torch.zeros(4, device=device), torch.ones(1, 1, device=device)
    with region():
        value = (one @ one)[0]  # bf16
    try:
        a.index_put_((torch.tensor([1], device=device),), value)
        a.cpu()  # (the lazy device raises here: its meta kernel does not check dtypes)
    except RuntimeError as e:
        return str(e)
    return "no error"


def test_errors_as_eager():
    """fp16 and bf16 in one promote op is an error of autocast itself;
    index_put of a bf16 value into a float32 tensor is index_put's."""
    for device in ("cpu", "lazy"):
        def region():
            return lm.autocast("lazy") if device == "lazy" else torch.autocast("cpu")

        a16 = torch.ones(2, 2, dtype=torch.float16, device=device)
        b16 = torch.ones(2, 2, dtype=torch.bfloat16, device=device)
        with region(), pytest.raises(RuntimeError, match="Unexpected floating ScalarType"):
            torch.cat([a16, b16])
        assert "dtypes match" in _index_put_bf16_into_fp32(device, region)
    # (a lazy write that failed is reported once more by the next mark_step,
    # after its tensor died: a behaviour of the lazy device, not of autocast)
    with contextlib.suppress(RuntimeError):
        lm.mark_step()
    lm.mark_step()


def _casts_of(loss, w) -> int:
    """How many distinct cast nodes of ``w`` the autograd graph of ``loss`` has."""
    seen, casts, todo = set(), set(), [loss.grad_fn]
    while todo:
        node = todo.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        for f, _ in node.next_functions:
            if "ToCopy" in type(node).__name__ and getattr(f, "variable", None) is w:
                casts.add(node)
            todo.append(f)
    return len(casts)


def test_gradients_and_weight_cache():
    """Parameter gradients come back float32 with eager's values; a
    parameter used twice is cast once in a region (eager's weight cache)."""
    torch.manual_seed(1)
    x, w0, target = torch.randn(6, 8), torch.randn(5, 8), torch.randint(0, 5, (6,))
    grads, nodes = {}, {}
    for device in ("cpu", "lazy"):
        w = w0.to(device, copy=True).requires_grad_()
        region = lm.autocast("lazy") if device == "lazy" else torch.autocast("cpu")
        with region:
            y1, y2 = F.linear(x.to(device), w), F.linear(x.to(device) * 2, w)
            loss = F.cross_entropy(y1 + y2, target.to(device))
        loss.backward()
        nodes[device] = _casts_of(loss, w)
        grads[device] = w.grad
    lm.mark_step()
    assert nodes["lazy"] == nodes["cpu"] == 1
    assert grads["lazy"].dtype == torch.float32
    torch.testing.assert_close(grads["lazy"].cpu(), grads["cpu"], **BF16_TOL)
    assert not autocast_module._cache  # dropped when the region ended


def test_regions_and_devices():
    """lm.autocast casts lazy tensors only; torch.autocast("cpu") leaves lazy
    tensors alone (its device_type names the tensors it casts);
    a decorator works."""
    a = torch.randn(3, 3)
    with lm.autocast("lazy"):
        assert torch.mm(a, a).dtype == torch.float32
        assert lm.lazy.autocast.is_enabled()
        with lm.autocast("lazy", enabled=False):
            assert not lm.lazy.autocast.is_enabled()
        assert lm.lazy.autocast.is_enabled()
    assert not lm.lazy.autocast.is_enabled()
    la = a.to("lazy")
    with torch.autocast("cpu"):
        assert torch.mm(la, la).dtype == torch.float32
    with pytest.raises(RuntimeError):
        lm.autocast("cpu")
    with pytest.warns(UserWarning, match="not supported"):
        region = lm.autocast("lazy", dtype=torch.float64)
    with region:
        assert torch.mm(la, la).dtype == torch.float32

    @lm.autocast("lazy")
    def f(x):
        return x @ x

    assert f(la).dtype == torch.bfloat16
    assert (la @ la).dtype == torch.float32
    lm.mark_step()


def _router(x, w):
    """transformers' ``maybe_autocast`` around a MoE router (Ernie 4.5 MoE,
    Flint, MiniCPM5 MoE): autocast off for the tensors' device type."""
    device_type = x.device.type
    on = torch.is_autocast_enabled(device_type)
    with torch.autocast(device_type, enabled=False) if on else contextlib.nullcontext():
        return on, torch.get_autocast_dtype(device_type), F.linear(x.float(), w.float())


def test_the_autocast_state_of_the_tensors_device_type():
    # (sweep hf/causal-lm/ernie4_5_moe died: torch.is_autocast_enabled("lazy")
    # raised 'unknown device type for autocast' where eager runs)
    x, w = torch.randn(4, 8), torch.randn(3, 8)
    on, _, y = _router(x.to("lazy"), w.to("lazy"))
    assert on is False
    torch.testing.assert_close(y.cpu(), x @ w.T)
    with lm.autocast("lazy", dtype=torch.float16):
        assert torch.is_autocast_enabled("lazy") and not torch.is_autocast_enabled("cpu")
        assert torch.get_autocast_dtype("lazy") == torch.float16
        with lm.autocast("lazy", enabled=False):
            assert not torch.is_autocast_enabled("lazy")
    assert not torch.is_autocast_enabled("lazy")


def _asks_autocast(x: torch.Tensor) -> torch.Tensor:
    if torch.is_autocast_enabled():
        return x.to(torch.get_autocast_dtype("cpu"))
    return x * 2


def test_torchscript_compiles_code_that_asks_the_autocast_state():
    # (the wrappers above replaced PyTorch's builtins: scripting code that
    # asks them, nn.MultiheadAttention's, tried to compile the wrapper and
    # failed in inspect.getsource of the builtin inside)
    scripted = torch.jit.script(_asks_autocast)
    assert "aten::is_autocast_enabled" in str(scripted.graph)
    torch.testing.assert_close(scripted(torch.ones(3)), torch.full((3,), 2.0))


def _train(model, device, dtype, scaled, steps=3):
    g = torch.Generator().manual_seed(3)
    xs, ys = torch.randn(steps, 8, 16, generator=g), torch.randint(0, 4, (steps, 8), generator=g)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler(device, init_scale=2.0 ** 8, enabled=scaled)
    losses = []
    for i in range(steps):
        opt.zero_grad()
        region = (lm.autocast("lazy", dtype=dtype) if device == "lazy"
                  else torch.autocast("cpu", dtype=dtype))
        with region:
            loss = F.cross_entropy(model(xs[i].to(device)), ys[i].to(device))
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        if device == "lazy":
            lm.mark_step()
        losses.append(loss.item())
    return losses, scaler.get_scale(), [p.detach().cpu() for p in model.parameters()]


@pytest.mark.parametrize("dtype,scaled", [(torch.bfloat16, False), (torch.float16, True)],
                         ids=["bf16", "fp16-gradscaler"])
def test_training_matches_eager(dtype, scaled):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.LayerNorm(32), nn.Linear(32, 4))
    eager = _train(copy.deepcopy(model), "cpu", dtype, scaled)
    compiles = lm.metrics.counter_value("UncachedCompile")
    lazy = _train(copy.deepcopy(model).to("lazy"), "lazy", dtype, scaled)
    # GradScaler's unscale (run eagerly) reads every gradient: in one graph,
    # not one graph per gradient (19 compiles over the three steps before)
    assert lm.metrics.counter_value("UncachedCompile") - compiles <= 8
    assert lazy[0] == pytest.approx(eager[0], rel=1e-2, abs=1e-2)
    assert lazy[1] == eager[1]  # the same scale: no step skipped on one side only
    for p_lazy, p_eager in zip(lazy[2], eager[2]):
        assert p_lazy.dtype == torch.float32
        torch.testing.assert_close(p_lazy, p_eager, **BF16_TOL)


def test_compile_train_step_under_autocast():
    """A step recorded inside lm.autocast replays there with eager CPU
    autocast's losses; outside the region it is not replayed (the guard
    includes the autocast state) and computes in float32."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
    g = torch.Generator().manual_seed(5)
    xs, ys = torch.randn(5, 8, 16, generator=g), torch.randint(0, 4, (5, 8), generator=g)
    eager = copy.deepcopy(model)
    eager_opt = torch.optim.SGD(eager.parameters(), lr=0.1)
    lazy = copy.deepcopy(model).to("lazy")
    step = lm.compile_train_step(lazy, F.cross_entropy, torch.optim.SGD(lazy.parameters(), lr=0.1))
    replayed = lm.metrics.counter_value("TrainStepReplayed")
    for i in range(5):
        region = lm.autocast("lazy") if i < 4 else lm.autocast("lazy", enabled=False)
        with region:
            got = step(xs[i].to("lazy"), ys[i].to("lazy")).item()
        with torch.autocast("cpu", enabled=i < 4):
            eager_opt.zero_grad(set_to_none=True)
            loss = F.cross_entropy(eager(xs[i]), ys[i])
            loss.backward()
            eager_opt.step()
        assert got == pytest.approx(loss.item(), rel=1e-2, abs=1e-2), i
    # steps 3 and 4 replayed; step 5, outside autocast, records in float32
    assert lm.metrics.counter_value("TrainStepReplayed") - replayed == 2


def test_device_bf16_mode(monkeypatch):
    """LAZY_MLIR_USE_BF16=1 (the seed's LTC_USE_BF16): matmuls run in bf16
    inside the graph while every tensor reports float32."""
    x, w = torch.randn(64, 64), torch.randn(64, 64)
    monkeypatch.setenv("LAZY_MLIR_USE_BF16", "1")
    set_config(None)
    try:
        assert lm.config.current_config().mixed_precision == "bf16"
        out = (x.to("lazy") @ w.to("lazy")).relu()
        assert out.dtype == torch.float32
        got = out.cpu()
    finally:
        monkeypatch.delenv("LAZY_MLIR_USE_BF16")
        set_config(None)
    assert lm.config.current_config().mixed_precision == "none"
    exact = (x @ w).relu()
    assert got.dtype == torch.float32
    torch.testing.assert_close(got, exact, rtol=3e-2, atol=0.5)
    assert not torch.allclose(got, exact, rtol=1e-5, atol=1e-5)  # bf16 really ran
    bf16 = (x.bfloat16().float() @ w.bfloat16().float()).relu()  # bf16 operands, f32 sums
    torch.testing.assert_close(got, bf16, rtol=1e-4, atol=1e-3)


def test_torch_autocast_of_the_lazy_device_is_lm_autocast():
    # (torch.autocast("lazy") raised 'unsupported autocast device_type': a
    # script's `torch.autocast(device_type=x.device.type)`, and transformers'
    # maybe_autocast(enabled=False) inside an lm.autocast region, crashed)
    x, w = torch.randn(4, 8), torch.randn(3, 8)
    lx, lw = x.to("lazy"), w.to("lazy")
    with torch.autocast("lazy", dtype=torch.bfloat16):
        assert lm.lazy.autocast.is_enabled() and torch.is_autocast_enabled("lazy")
        y = F.linear(lx, lw)
        assert y.dtype == torch.bfloat16
        on, dtype, z = _router(lx, lw)  # autocast off inside, as transformers does
        assert on and dtype == torch.bfloat16 and z.dtype == torch.float32
        assert lm.lazy.autocast.is_enabled()
    assert not lm.lazy.autocast.is_enabled()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert F.linear(x, w).dtype == torch.bfloat16
    torch.testing.assert_close(y.cpu().float(), F.linear(x.bfloat16(), w.bfloat16()).float())
    torch.testing.assert_close(z.cpu(), x @ w.T)

    @torch.autocast(device_type="lazy", dtype=torch.float16)
    def f(a):
        return a @ a.T

    assert f(lx).dtype == torch.float16 and (lx @ lx.T).dtype == torch.float32
    lm.mark_step()


def test_pytorchs_autocast_still_scripts_and_compiles_for_other_devices():
    """The lazy device's hook on torch.autocast leaves TorchScript (which reads
    the class's source) and Dynamo (which knows the class) as they were."""
    lm.lazy.autocast.accept_lazy_in_torch_autocast()

    @torch.jit.script
    def scripted(x):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return x @ x

    def region(x):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return x @ x

    x = torch.randn(3, 3)
    assert scripted(x).dtype == torch.bfloat16
    assert torch.compile(region, backend="eager", fullgraph=True)(x).dtype == torch.bfloat16


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_layer_norm_statistics_of_a_half_input_are_eagers_dtype_across_graphs(dtype):
    # Layer norm under bf16 autocast: its mean and rstd, saved for the
    # backward, are outputs of a step's first part when the step is split.
    # The meta kernel said float32, eager's CPU kernel and the compiled
    # module give the input's dtype: the next graph, declared to take
    # float32, was handed a bfloat16 buffer ('element type mismatch').
    g = torch.Generator().manual_seed(0)
    x, w, b = (torch.randn(*s, generator=g).to(dtype) for s in ((4, 8), (8,), (8,)))
    want = torch.ops.aten.native_layer_norm(x, [8], w, b, 1e-5)
    got = torch.ops.aten.native_layer_norm(x.to("lazy"), [8], w.to("lazy"), b.to("lazy"), 1e-5)
    assert [t.dtype for t in got] == [t.dtype for t in want]
    lm.mark_step()  # the statistics are this graph's outputs ...
    later = [t * 2 for t in got]
    lm.mark_step()  # ... and the next one's inputs
    for t, e in zip(later, want):
        torch.testing.assert_close(t.cpu(), e * 2)
