"""``ops/subgraph.py``: an aten function traced once into a template, and
``to_fx`` splicing it where a ``lazy_mlir::subgraph`` node stands."""
import pytest
import torch

from lazy_mlir.ops import subgraph


def _fn(x, w):
    return (torch.tanh(x @ w), x)  # the second output is an input: copied


def test_template_is_functional_aten_with_a_stable_key():
    x, w = torch.randn(3, 4), torch.randn(4, 5)
    t1 = subgraph.make_template(_fn, [x, w])
    t2 = subgraph.make_template(_fn, [torch.randn(3, 4), torch.randn(4, 5)])
    assert t1.key == t2.key and t1.key.startswith("subgraph-")
    assert t1.outputs == (((3, 5), (5, 1), torch.float32), ((3, 4), (4, 1), torch.float32))
    targets = {n.target for n in t1.gm.graph.nodes if n.op == "call_function"}
    assert torch.ops.aten.clone.default in targets
    got = torch.ops.lazy_mlir.subgraph([x, w], t1.key)  # the CPU kernel
    torch.testing.assert_close(got[0], torch.tanh(x @ w))
    torch.testing.assert_close(got[1], x)
    assert subgraph.make_template(_fn, [torch.randn(2, 4), w]).key != t1.key


def test_devices_become_the_cpu():
    t = subgraph.make_template(lambda x: (x + torch.ones(2, device=x.device),),
                               [torch.randn(2)])
    devices = [a for n in t.gm.graph.nodes for a in n.kwargs.values()
               if isinstance(a, torch.device)]
    assert devices and all(d.type == "cpu" for d in devices)


def test_a_closed_over_tensor_is_refused():
    c = torch.randn(2)
    with pytest.raises(ValueError, match="not an input"):
        subgraph.make_template(lambda x: (x * c,), [torch.randn(2)])


def test_spliced_into_an_fx_graph():
    import torch.fx as fx
    t = subgraph.make_template(_fn, [torch.randn(3, 4), torch.randn(4, 5)])
    g = fx.Graph()
    a, b = g.placeholder("a"), g.placeholder("b")
    outs = subgraph.inline(g, t.key, [a, b])
    g.output(tuple(outs))
    gm = fx.GraphModule(torch.nn.Module(), g)
    x, w = torch.randn(3, 4), torch.randn(4, 5)
    torch.testing.assert_close(gm(x, w)[0], torch.tanh(x @ w))


def test_an_unknown_key_says_where_templates_come_from():
    with pytest.raises(RuntimeError, match="no subgraph template"):
        subgraph.template("subgraph-nope")
