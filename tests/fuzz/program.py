"""A fuzz program as data: inputs and a list of op records, each one line of
Python, so that the program runs, prints as a standalone repro and shrinks
by dropping records.

A record's ``template`` names its operands ``{a0}, {a1}, ...`` and the
variables it defines ``{o0}, ...``; ``render`` fills them with ``v<id>`` (or
``p<k>_v<id>`` when several programs share one function). ``error`` marks a
record eager PyTorch raises at: the lazy device must raise there too, at the
call, and the program goes on without its outputs.
"""
from __future__ import annotations

import dataclasses
import functools
import warnings

import torch

DTYPES = {"float32": torch.float32, "float64": torch.float64, "float16": torch.float16,
          "bfloat16": torch.bfloat16, "int64": torch.int64, "int32": torch.int32,
          "int16": torch.int16, "int8": torch.int8, "uint8": torch.uint8, "bool": torch.bool}


@dataclasses.dataclass(frozen=True)
class Input:
    """``make(shape, dtype, seed, layout, grad)``: a deterministic tensor on
    the device, laid out as ``layout`` says ("c" contiguous, "t" a transposed
    CPU tensor moved, "s" every other row of a larger tensor on the device)."""
    shape: tuple[int, ...]
    dtype: str
    seed: int
    layout: str = "c"
    grad: bool = False

    def source(self, dev: str = "dev") -> str:
        return (f"make({self.shape!r}, torch.{self.dtype}, {self.seed}, {self.layout!r}, "
                f"{self.grad}, {dev})")


@dataclasses.dataclass(frozen=True)
class Op:
    kind: str
    template: str
    args: tuple[int, ...] = ()
    outs: tuple[int, ...] = ()
    error: bool = False
    view: bool = False  # outputs are views of args[0] (strides defined by PyTorch)

    def render(self, name=lambda i: f"v{i}") -> str:
        fill = {f"a{k}": name(i) for k, i in enumerate(self.args)}
        fill.update({f"o{k}": name(i) for k, i in enumerate(self.outs)})
        return self.template.format(**fill)

    @property
    def is_read(self) -> bool:
        return self.kind.startswith("read")


@dataclasses.dataclass(frozen=True)
class Program:
    seed: int
    inputs: tuple[Input, ...]
    ops: tuple[Op, ...]

    @property
    def functional(self) -> bool:
        """No host reads, no ops that raise, no autograd: a program ``lm.jit``
        and ``torch.compile`` can take as one function."""
        # (nor ``arange``: lm.jit returns only tensors computed from its arguments)
        return not any(o.is_read or o.error or o.kind == "backward" or "item()" in o.template
                       or "arange" in o.template for o in self.ops) \
            and not any(i.grad for i in self.inputs)

    def var_ids(self) -> list[int]:
        """Every variable the program defines, in order (inputs first)."""
        ids = list(range(len(self.inputs)))
        for o in self.ops:
            if not o.error:
                ids.extend(o.outs)
        return ids

    def strided_ids(self) -> set[int]:
        """Variables whose strides PyTorch defines: inputs and views of them."""
        # (an input moved from a transposed host tensor is contiguous on the
        # lazy device: its strides, and its views', are not compared)
        known = {k for k, i in enumerate(self.inputs) if i.layout != "t"}
        for o in self.ops:
            if o.view and not o.error and o.args and o.args[0] in known:
                known.update(o.outs)
        return known

    def without(self, drop: set[int]) -> "Program":
        """The program less the records at indices ``drop`` and every record
        that reads a variable they defined (transitively)."""
        gone: set[int] = set()
        kept = []
        for k, o in enumerate(self.ops):
            if k in drop or gone.intersection(o.args):
                gone.update(o.outs)
                continue
            kept.append(o)
        return dataclasses.replace(self, ops=tuple(kept))

    def body(self) -> str:
        """The inputs and records, one line each (``source`` without its frame)."""
        lines = [f"v{k} = {i.source()}" for k, i in enumerate(self.inputs)]
        return "\n".join(lines + [o.render() + ("  # eager raises" if o.error else "")
                                   for o in self.ops])

    def source(self, device: str = "lazy") -> str:
        """A standalone script that runs the program eagerly and on
        ``device`` and prints where they differ."""
        body = "\n".join(f"    {o.render()}" + ("  # eager raises here" if o.error else "")
                         for o in self.ops)
        inputs = "\n".join(f"    v{k} = {i.source()}" for k, i in enumerate(self.inputs))
        ids = ", ".join(f"v{i}" for i in self.var_ids())
        return REPRO.format(seed=self.seed, inputs=inputs, body=body or "    pass",
                            ids=ids or "", device=device)


# The helpers a program's records call; the repro prints this same text.
HELPERS = '''
def make(shape, dtype, seed, layout, grad, dev):
    g = torch.Generator().manual_seed(seed)
    full = list(shape)
    if layout == "t" and len(full) >= 2:
        full[-1], full[-2] = full[-2], full[-1]
    elif layout == "s" and full:
        full[0] *= 2
    n = 1
    for s in full:
        n *= s
    if dtype == torch.bool:
        t = torch.randint(0, 2, (n,), generator=g).bool()
    elif dtype.is_floating_point:
        t = (torch.randint(-32, 33, (n,), generator=g) / 8).to(dtype)
    elif dtype == torch.uint8:
        t = torch.randint(0, 40, (n,), generator=g).to(dtype)
    else:
        t = torch.randint(-20, 21, (n,), generator=g).to(dtype)
    t = t.reshape(full)
    if layout == "t" and len(full) >= 2:
        t = t.transpose(-1, -2)  # moved with its strides
    t = t.clone() if dev == "cpu" else t.to(dev)  # (eager: the storage .to would give)
    if layout == "s" and full:
        t = t[::2]  # a view on the device
    return t.requires_grad_() if grad else t


def backward(ts):
    loss = 0
    for k, t in enumerate(ts):
        w = torch.arange(t.numel(), dtype=t.dtype, device=t.device).reshape(t.shape) % 3 - 1
        loss = loss + (t * w).sum() * (k + 1)
    loss.backward()
'''

REPRO = '''import os
os.environ.setdefault("LAZY_MLIR_COMPILE", "wait")
import torch
import lazy_mlir as lm
''' + HELPERS + '''

def program(dev, reads):
{inputs}
{body}
    return [{ids}]


eager_reads, lazy_reads = [], []
eager = program("cpu", eager_reads)
lazy = program("{device}", lazy_reads)
lm.mark_step()
for k, (e, l) in enumerate(zip(eager, lazy)):
    print(k, e.dtype, tuple(e.shape), e.stride(), "|", l.dtype, tuple(l.shape), l.stride())
    torch.testing.assert_close(l.detach().cpu(), e.detach(), equal_nan=True,
                               msg=lambda m: f"variable {{k}}: {{m}}")
assert str(eager_reads) == str(lazy_reads), (eager_reads, lazy_reads)
print("same as eager (seed {seed})")
'''


def namespace(device: str, reads: list) -> dict:
    """The globals a program's records run in."""
    ns = {"torch": torch, "dev": device, "reads": reads}
    exec(_helpers_code(), ns)
    return ns


@functools.lru_cache(maxsize=None)
def _helpers_code():
    return compile(HELPERS, "<fuzz helpers>", "exec")


@functools.lru_cache(maxsize=65536)
def compiled(line: str):
    return compile(line, "<fuzz op>", "exec")


def run_ops(prog: Program, device: str, ns: dict | None = None, name=lambda i: f"v{i}"):
    """Run ``prog`` op by op in ``ns`` (a fresh namespace by default); the
    namespace and the indices of the records that raised."""
    ns = namespace(device, []) if ns is None else ns
    raised = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for k, i in enumerate(prog.inputs):
            exec(compiled(f"{name(k)} = {i.source()}"), ns)
        for k, o in enumerate(prog.ops):
            try:
                exec(compiled(o.render(name)), ns)
            except Exception as ex:  # noqa: BLE001 - which records raise is what we compare
                raised.append(k)
                if is_refusal(ex):
                    ns.setdefault("refused", []).append(k)
    return ns, raised


# The lazy device's documented refusals (NotImplementedError at the call,
# never a value): a write whose eager result is its kernel's memory order
# (over elements it also reads, or through a view whose elements overlap),
# and a write of other bytes than 0 and 1 into a bool through a uint8 view
# (eager keeps bytes a bool cannot hold: undefined values). Loud, not wrong:
# a program that meets one is not compared past it (``run.check_lazy``).
REFUSALS = ("PyTorch computes this in memory order", "whose elements overlap in memory",
            "view of a bool tensor")


def is_refusal(ex: Exception) -> bool:
    return type(ex) is NotImplementedError and str(ex).startswith("lazy-mlir:") and any(
        r in str(ex) for r in REFUSALS)


def function_source(progs: list[Program], fname: str = "fuzz_fn") -> tuple[str, list]:
    """One Python function running ``progs`` (all functional) side by side:
    its arguments are every program's inputs, its result every variable.
    Also the (program, variable) of each result."""
    params, lines, results = [], [], []
    for p, prog in enumerate(progs):
        name = (lambda p_: lambda i: f"p{p_}_v{i}")(p)
        params += [name(k) for k in range(len(prog.inputs))]
        lines += [f"    {o.render(name)}" for o in prog.ops]
        results += [(p, i) for i in prog.var_ids()]
    ret = ", ".join(f"p{p}_v{i}" for p, i in results)
    head = f"    dev = {params[0]}.device  # (factories follow the arguments: lazy in lm.jit)\n"
    src = (f"def {fname}({', '.join(params)}):\n" + head + "\n".join(lines)
           + f"\n    return [{ret}]\n")
    return src, results
