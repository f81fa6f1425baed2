"""mark_step and ``lm.jit`` compile a graph through the one compile path
(``pipeline.compile``): the same linalg and iree flags on every target, and
the same protections when the module is loaded."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import lazy_mlir as lm
from lazy_mlir.lazy.sync import current_target
from lazy_mlir.pipeline import compile as pipeline_compile
from lazy_mlir.compile_service import lookup
from lazy_mlir.compile_service.executable import eager_executable
from lazy_mlir.runtime import session
from lazy_mlir.compile_service.memory_cache import ModuleCache
from lazy_mlir.targets import get_target


def conv_net(x, w, b):
    return torch.relu(F.conv2d(x, w, b, padding=1))


def _args():
    # Sizes no other test compiles (the module caches of a test run are shared).
    g = torch.Generator().manual_seed(0)
    return (torch.randn(8, 3, 11, 13, generator=g), torch.randn(5, 3, 3, 3, generator=g),
            torch.randn(5, generator=g))


@pytest.fixture
def compiles(monkeypatch):
    """Every module ``compile_module`` makes: (target, lowered text, flags).
    Modules are not loaded (no cuda device here): graphs run eagerly on the
    cpu session, and the module caches are fresh and empty."""
    seen = []
    real = pipeline_compile.compile_module
    cpu = session.session_for(get_target("cpu"))

    def record(stages, target, config, bind=None):
        out = real(stages, target, config, bind)
        seen.append((target.name, stages[-1].text, out.flags))
        return out
    monkeypatch.setattr(pipeline_compile, "compile_module", record)
    monkeypatch.setattr(lookup, "load_executable",
                        lambda result, graph, target: eager_executable(graph))
    monkeypatch.setattr(lookup, "memory_cache", ModuleCache())
    monkeypatch.setattr(lookup, "default_cache", lambda: None)
    monkeypatch.setattr(session, "session_for", lambda target: cpu)
    previous = current_target().name
    yield seen
    lm.set_target(previous)


@pytest.mark.parametrize("target", ["cpu", "vulkan", "cuda"])
def test_jit_and_mark_step_compile_a_graph_alike(compiles, target):
    args = _args()
    lm.jit(conv_net).lower(*args, target=target).compile()
    lm.set_target(target)
    out = conv_net(*[a.to("lazy") for a in args])
    lm.mark_step()
    torch.testing.assert_close(out.cpu(), conv_net(*args), rtol=1e-5, atol=1e-5)
    assert [c[0] for c in compiles] == [target, target]
    (_, jit_text, jit_flags), (_, step_text, step_flags) = compiles
    assert jit_text == step_text
    assert jit_flags == step_flags
    # cpu's rewrites show: its convolution is computed channels last.
    assert ("linalg.conv_2d_nchw_fchw" in jit_text) == (target != "cpu")


def test_jit_lowers_for_the_current_target_and_compile_relowers(compiles):
    args = _args()
    lm.set_target("vulkan")
    lowered = lm.jit(conv_net).lower(*args)
    assert lowered.target.name == "vulkan"
    assert "linalg.conv_2d_nchw_fchw" in lowered.as_text("linalg")
    assert "linalg.conv_2d_nchw_fchw" not in lowered.as_text("linalg", target="cpu")
    lowered.compile("cpu")
    assert compiles[0][0] == "cpu" and "linalg.conv_2d_nchw_fchw" not in compiles[0][1]


def test_jit_loads_with_mark_steps_protections():
    # `a * 1` folds to the argument, which IREE also updates in place for `a`:
    # as in mark_step, the result that is the argument unchanged is the argument.
    def f(a, x):
        b = a * 1
        a[2:].copy_(x)
        return b, a

    a, x = torch.arange(6.0), torch.full((4,), -1.0)
    fn = lm.jit(f).lower(a, x, target="cpu").compile()
    assert fn.compiled.passthrough == ((0, 0),)
    assert fn._module.passthrough == ((0, 0),)
    b, a2 = fn(a, x)
    assert b.tolist() == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]
    assert a2.tolist() == [0.0, 1.0, -1.0, -1.0, -1.0, -1.0]
    assert a.tolist() == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]  # the caller's tensor is not written
    b, a2 = fn(a, x)  # (later calls copy `a` first: a result is written into it)
    assert (b.tolist(), a2.tolist()) == ([0.0, 1.0, 2.0, 3.0, 4.0, 5.0], [0.0, 1.0] + [-1.0] * 4)
    assert a.tolist() == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]


def _count_device_copies(monkeypatch) -> list:
    copies, copy = [], session.Session.copy_on_device
    monkeypatch.setattr(session.Session, "copy_on_device",
                        lambda self, array: copies.append(1) or copy(self, array))
    return copies


def test_an_argument_returned_unchanged_is_not_copied_before_each_call(monkeypatch):
    # An aot forward returns the weights its backward reads: IREE hands back
    # their own buffers, unwritten, so no call needs a copy of them.
    def f(w, x):
        return w, torch.tanh(x @ w)

    w, x = torch.randn(4, 4), torch.randn(3, 4)
    fn = lm.jit(f).lower(w, x, target="cpu").compile()
    assert fn.compiled.passthrough == ((0, 0),)
    fn(w, x)  # (the first call runs on copies of every argument)
    copies = _count_device_copies(monkeypatch)
    same, y = fn(w, x)
    assert copies == []
    assert torch.equal(same, w)
    torch.testing.assert_close(y, torch.tanh(x @ w))


def test_jit_compiles_two_sorts_of_one_operand_right():
    # Two in-place sorts of one operand (their index iota, merged by CSE):
    # IREE sorted it in place for the first and the second read it sorted, so
    # the graph was refused; each sort now fills its own copy
    # (in_place.unshare_sort_operands). An operand with no op to copy (an
    # argument) is still refused: tests/unit/test_in_place_checks.py.
    def f(x):
        return torch.topk(x, 3, 1).indices, torch.topk(x, 3, 1, largest=False).indices

    x = torch.randn(4, 9)
    got = lm.jit(f).lower(x, target="cpu").compile()(x)
    for g, want in zip(got, f(x)):
        assert torch.equal(g, want)
