"""Graph keys: structural, stable across processes, blind to tensor contents."""
import subprocess
import sys

import torch

import lazy_mlir as lm  # noqa: F401  (registers the lazy device)
from lazy_mlir.lazy.capture import value_of
from lazy_mlir.graph.program import Graph


def _key(fn, *cpu_args):
    args = [a.to("lazy") for a in cpu_args]
    return Graph.build([value_of(fn(*args))]).key


def test_same_structure_same_key_different_data():
    assert _key(lambda a, b: a * b + 1, torch.ones(3), torch.ones(3)) == \
        _key(lambda a, b: a * b + 1, torch.randn(3), torch.randn(3))


def test_aliasing_of_inputs_changes_key():
    a, b = torch.ones(3).to("lazy"), torch.ones(3).to("lazy")
    k_ab = Graph.build([value_of(a + b)]).key
    k_aa = Graph.build([value_of(a + a)]).key
    assert k_ab != k_aa


def test_wiring_alone_changes_key():
    """The same nodes in the same order, fed differently: a node's key leaves
    its inputs out, the graph's key says where each comes from."""
    x = torch.randn(3).to("lazy")
    s, c = x.sin(), x.cos()

    def key(first, second):
        return Graph.build([value_of(s), value_of(c), value_of(first - second)]).key
    assert key(s, c) != key(c, s)
    assert key(s, c) == key(s, c)


def test_shape_dtype_op_and_constant_change_key():
    base = _key(lambda a: a * 0, torch.ones(3))
    assert base != _key(lambda a: a * 0, torch.ones(4))
    assert base != _key(lambda a: a * 0, torch.ones(3, dtype=torch.float64))
    assert base != _key(lambda a: a + 0, torch.ones(3))
    assert _key(lambda a: a.sum(0), torch.ones(3, 3)) != _key(lambda a: a.sum(1), torch.ones(3, 3))


def test_lifted_scalars_do_not_change_key():
    assert _key(lambda a: a * 0.5, torch.ones(3)) == _key(lambda a: a * 0.25, torch.ones(3))


def test_key_is_stable_across_processes():
    code = ("import torch, lazy_mlir\n"
            "from lazy_mlir.lazy.capture import value_of\n"
            "from lazy_mlir.graph.program import Graph\n"
            "x = torch.ones(2, 3).to('lazy')\n"
            "print(Graph.build([value_of((x @ x.T).relu().sum(0) * 3.5)]).key)\n")
    keys = {subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           check=True).stdout.strip() for _ in range(2)}
    assert len(keys) == 1 and len(next(iter(keys))) == 64


def test_nodes_come_depth_first_after_their_inputs_in_argument_order():
    """The order (and so the key) the walk gives: each node after its inputs,
    the inputs walked in the order of the node's arguments, a node shared by
    two paths placed once, where the first path reaches it."""
    x = torch.randn(3).to("lazy")
    shared = x.exp()            # read by both branches
    left = shared.sin()
    right = (shared * 2).cos()  # (2 is a lifted scalar: data, not a node)
    out = left - right
    leaf = x.neg()              # a second root whose input is data
    graph = Graph.build([value_of(out), value_of(leaf)])
    ops = [n.op.__name__.split(".")[0] for n in graph.nodes]
    assert ops == ["exp", "sin", "mul", "cos", "sub", "neg"]
    assert Graph.build([value_of(leaf), value_of(out)]).key != graph.key
