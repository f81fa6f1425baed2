"""Small edits of the linalg-on-tensors module the linalg pipeline has just
made, for the project's linalg-stage passes (``passes/conv_channels_last.py``):
what they need of the MLIR bindings, so the passes themselves import none.

They edit the module in place, inside ``dialects.runner.run_pipeline``: its
context has every dialect the pipeline loaded (``tm_tensor`` too), which a
fresh parse of the printed text would not know.
"""
from __future__ import annotations

from .torch_import import func_d, ir

__all__ = ["ops_named", "shape", "element_type", "element_bytes", "int_list", "zero_pad", "add_functions",
           "call_instead", "calls_instead", "in_loop", "mark", "FUSION_BARRIER", "barrier_into",
           "barrier_before",
           "producer", "i64_array", "zero_fill", "plain_matmul_maps", "function_bodies",
           "elements", "barrier_uses_after", "copy_before", "barrier_value_for", "users",
           "elementwise", "float_constant_of", "replace_by_f32_constant", "one_element_slice",
           "element_fill"]


def ops_named(module: ir.Module, name: str) -> list:
    """Every operation called ``name`` (``linalg.conv_2d_nchw_fchw``), in order."""
    found = []

    def visit(op):
        if op.name == name:
            found.append(op)
        return ir.WalkResult.ADVANCE
    module.operation.walk(visit)
    return found


def shape(value) -> list[int] | None:
    """The static shape of a ranked tensor value (None otherwise)."""
    t = value.type
    if not isinstance(t, ir.RankedTensorType) or not t.has_static_shape:
        return None
    return list(t.shape)


def element_type(value) -> str:
    """``f32``, ``bf16``, ...: the element type of a ranked tensor value."""
    return str(ir.RankedTensorType(value.type).element_type)


def element_bytes(value) -> int:
    """Bytes of one element of a ranked tensor value (a bit-wide one counts 1)."""
    return max(1, ir.RankedTensorType(value.type).element_type.width // 8)


def int_list(op, attribute: str) -> list[int] | None:
    """An integer-elements attribute of ``op`` (strides, dilations) as a list."""
    if attribute not in op.attributes:
        return None
    return list(ir.DenseIntElementsAttr(op.attributes[attribute]))


def zero_pad(value) -> tuple[object, list[int], list[int]] | None:
    """(source, low, high) when ``value`` is a ``tensor.pad`` of ``source`` by
    static amounts with the constant zero; None otherwise."""
    if not isinstance(value, ir.OpResult):
        return None
    op = value.owner
    if op.name != "tensor.pad" or len(op.operands) != 1:  # dynamic amounts are operands
        return None
    yielded = list(op.regions[0].blocks[0].operations)[-1].operands[0]
    if not isinstance(yielded, ir.OpResult) or yielded.owner.name != "arith.constant":
        return None
    constant = yielded.owner.attributes["value"]
    if not isinstance(constant, ir.FloatAttr) or constant.value != 0.0:
        return None
    return (op.operands[0], list(ir.DenseI64ArrayAttr(op.attributes["static_low"])),
            list(ir.DenseI64ArrayAttr(op.attributes["static_high"])))


def producer(value):
    """The operation whose result ``value`` is (None for a block argument)."""
    return value.owner if isinstance(value, ir.OpResult) else None


TENSOR_VIEWS = frozenset({"tensor.extract_slice", "tensor.expand_shape",
                          "tensor.collapse_shape", "tensor.cast"})


def viewed(value):
    """The tensor ``value`` is a view of (through ``TENSOR_VIEWS``: slices,
    reshapes and casts), or ``value`` itself."""
    for _ in range(64):
        op = producer(value)
        if op is None or op.name not in TENSOR_VIEWS:
            return value
        value = op.operands[0]
    return value


def i64_array(op, attribute: str) -> list[int] | None:
    """A ``DenseI64ArrayAttr`` of ``op`` (a transpose's permutation) as a list."""
    if attribute not in op.attributes:
        return None
    return list(ir.DenseI64ArrayAttr(op.attributes[attribute]))


def zero_fill(value) -> bool:
    """Whether ``value`` is a ``linalg.fill`` with the float constant zero."""
    op = producer(value)
    if op is None or op.name != "linalg.fill":
        return False
    scalar = producer(op.operands[0])
    if scalar is None or scalar.name != "arith.constant":
        return False
    constant = scalar.attributes["value"]
    return isinstance(constant, ir.FloatAttr) and constant.value == 0.0


def plain_matmul_maps(op) -> bool:
    """Whether a ``linalg.matmul`` / ``linalg.batch_matmul`` reads its operands
    as plain ``a @ b``: its ``indexing_maps`` (every named op holds them,
    printed only when not the default) are (batch.., m, k), (batch.., k, n) ->
    (batch.., m, n). Read from the attribute, not from the printed op: MLIR
    numbers the values of the whole module to print one op, so printing every
    matmul was quadratic (351 matmuls of a 26k-line module: 38 s)."""
    if "indexing_maps" not in op.attributes:
        return True
    rank = ir.RankedTensorType(op.results[0].type).rank
    dims = [f"d{i}" for i in range(rank + 1)]
    batch, (m, n, k) = dims[:rank - 2], dims[rank - 2:]

    def indexing(*last):
        return f"affine_map<({', '.join(dims)}) -> ({', '.join(batch + list(last))})>"
    plain = f"[{indexing(m, k)}, {indexing(k, n)}, {indexing(m, n)}]"
    return str(op.attributes["indexing_maps"]) == plain


def add_functions(module: ir.Module, text: str) -> None:
    """Parse the functions in ``text`` and move them into ``module``. Ops of
    dialects torch-mlir does not register (IREE's ``util``) are allowed, in
    generic form: they pass through to iree-compile, which knows them."""
    module.context.allow_unregistered_dialects = True
    other = ir.Module.parse(text, module.context)
    for op in list(other.body.operations):
        module.body.append(op.detach_from_parent())


def call_instead(op, callee: str, operands: list) -> None:
    """Replace the one-result ``op`` by ``func.call @callee(operands)``."""
    calls_instead([(op, callee, operands)])


def calls_instead(sites: list) -> None:
    """Replace each one-result ``op`` of ``sites`` ((op, callee, operands))
    by ``func.call @callee(operands)``: every call made before any op is
    erased, so operands gathered beforehand may be results of other sites'
    ops (a matmul of a matmul): replacing an op's uses then reaches the calls
    too. Erased one by one, a later call would use the erased op's result (a
    dangling operand: 'operand is unlinked', or a heap corruption)."""
    calls = []
    for op, callee, operands in sites:
        with ir.InsertionPoint(op), op.location:
            calls.append(func_d.CallOp([op.results[0].type], ir.FlatSymbolRefAttr.get(callee),
                                       operands))
    for (op, _, _), call in zip(sites, calls):
        op.results[0].replace_all_uses_with(call.results[0])
        op.erase()


def in_loop(op) -> bool:
    """Whether ``op`` is inside an ``scf.for`` or ``scf.while`` (at any depth)."""
    parent = op.operation.parent
    while parent is not None:
        if parent.name in ("scf.for", "scf.while"):
            return True
        if parent.name == "func.func":
            return False
        parent = parent.parent
    return False


def mark(op, attribute: str) -> None:
    """Give ``op`` the unit attribute ``attribute`` (a hint to iree-compile)."""
    op.operation.attributes[attribute] = ir.UnitAttr.get(op.context)


FUSION_BARRIER = "iree_tensor_ext.compute_barrier.start"
"""IREE's op that keeps a value's producer out of its consumers' dispatches
(IREE's own filter transposes use it) and is erased once the dispatches are
formed. Not ``util.optimization_barrier``: that one stays in the program as a
host wait, and on IREE's ``local-task`` driver a module that waits on the host
mid-run can leak its transient buffers: the medium ResNet's plain step module
kept 56 MB of the heap after every call (IREE 3.13; modules with host calls
run on ``local-sync`` for the same reason, ``runtime/session``). With this
barrier the module stays on ``local-task``: its step took 24 against 38 ms."""


def _barrier(value, name: str = FUSION_BARRIER):
    """A ``name`` op passing ``value`` through, at the current insertion
    point, with the sizes of its dynamic dimensions attached (``tensor.dim``):
    IREE's barrier takes them as operands, and a module with dynamic
    dimensions failed to compile without them ("value set has 1 dynamic
    dimensions but only 0 dimension values are attached": X-MOD's steps,
    whose token counts per language vary, ran eagerly whole)."""
    index = ir.IndexType.get()
    dims = []
    shaped = _ranked(value.type) if name == FUSION_BARRIER else None
    if shaped is not None:
        for d in range(shaped.rank):
            if shaped.is_dynamic_dim(d):
                dims.append(ir.Operation.create("tensor.dim", results=[index],
                                                operands=[value, _index(d)]).result)
    return ir.Operation.create(name, results=[value.type], operands=[value, *dims])


def _index(k: int):
    """An ``arith.constant`` of ``index`` type ``k`` at the current insertion
    point; its value."""
    index = ir.IndexType.get()
    return ir.Operation.create("arith.constant", results=[index],
                               attributes={"value": ir.IntegerAttr.get(index, k)}).result


def _ranked(t):
    try:
        return ir.RankedTensorType(t)
    except ValueError:  # (not a ranked tensor)
        return None


def barrier_before(op, index: int, barrier: str = FUSION_BARRIER) -> None:
    """Pass ``op``'s operand ``index`` through a ``FUSION_BARRIER`` (for
    that use only), so that iree-compile does not fuse its producer into
    ``op``'s dispatch; or through the op named ``barrier`` (same form)."""
    value = op.operands[index]
    value.context.allow_unregistered_dialects = True
    with ir.InsertionPoint(op), op.location:
        barrier = _barrier(value, barrier)
    op.operands[index] = barrier.result


def barrier_value_for(op, value) -> None:
    """Pass ``value`` through a ``FUSION_BARRIER`` placed before ``op`` for
    its uses inside ``op``'s regions only (a gather's ``tensor.extract``)."""
    value.context.allow_unregistered_dialects = True
    with ir.InsertionPoint(op), op.location:
        barrier = _barrier(value)
    inside = []
    for use in value.uses:
        owner = use.owner.operation if hasattr(use.owner, "operation") else use.owner
        parent = owner.parent
        while parent is not None and parent.name != "func.func":
            if parent == op.operation:
                inside.append((owner, use.operand_number))
                break
            parent = parent.parent
    for owner, index in inside:
        owner.operands[index] = barrier.result


def copy_before(op, index: int) -> None:
    """Pass ``op``'s operand ``index`` (a static tensor) through a copy into
    a new ``tensor.empty`` (for that use only): ``op`` then reads a tensor
    of its own. Not a ``linalg.copy``: iree-compile erases an identity
    copy (generalized, then ``EraseIdentityLinalgOp``), so ``op`` was back
    on the original; the element is chosen by a ``select`` on a true
    behind a ``util.optimization_barrier`` (``OWN_COPY``), which no folder
    sees through. Its other value (a zero) comes from a false behind the
    same barrier: a constant zero folded the select where the copied tensor
    is zeros (``select(c, 0, 0)``), the copy became a constant, and IREE
    3.13 evaluated the scatter into it at load time, in place in a constant
    buffer it packed with another and read back swapped (fuzzer seeds
    801400 and 801402 under ``torch.compile`` in one graph: a scatter-add
    into zeros and an argmax came back each other's values, silently).
    Converted in the copy's body: the barrier's scalars stay ``i1`` (IREE's
    host code has no float16 constants). Element types other than integers
    and floats (complex) get a ``linalg.copy``."""
    from torch_mlir.dialects import arith, linalg, tensor
    value = op.operands[index]
    t = ir.RankedTensorType(value.type)
    et = t.element_type
    value.context.allow_unregistered_dialects = True
    with ir.InsertionPoint(op), op.location:
        empty = tensor.EmptyOp(list(t.shape), et).result
        if not isinstance(et, (ir.IntegerType, ir.FloatType)):
            op.operands[index] = linalg.copy(value, outs=[empty])
            return
        i1 = ir.IntegerType.get_signless(1)
        keep, off = ir.Operation.create("util.optimization_barrier", results=[i1, i1], operands=[
            arith.ConstantOp(i1, ir.IntegerAttr.get(i1, v)).result for v in (1, 0)]).results
        identity = ir.AffineMapAttr.get(ir.AffineMap.get_identity(t.rank))
        parallel = ir.Attribute.parse("#linalg.iterator_type<parallel>")
        copy = linalg.GenericOp([t], [value], [empty], ir.ArrayAttr.get([identity, identity]),
                                ir.ArrayAttr.get([parallel] * t.rank))
        copy.operation.attributes[OWN_COPY] = ir.UnitAttr.get()
        block = copy.regions[0].blocks.append(et, et)
        with ir.InsertionPoint(block):
            if isinstance(et, ir.FloatType):
                zero = arith.UIToFPOp(et, off).result
            elif ir.IntegerType(et).width > 1:
                zero = arith.ExtUIOp(et, off).result
            else:
                zero = off
            linalg.YieldOp([arith.SelectOp(keep, block.arguments[0], zero).result])
    op.operands[index] = copy.results[0]


OWN_COPY = "lazy_mlir.own_copy"


def barrier_into(value, users: tuple[str, ...]) -> int:
    """Pass ``value`` to its users named ``users`` (``scf.for``) through a
    ``FUSION_BARRIER`` (generic form: torch-mlir passes it through), so that
    iree-compile keeps it as computed rather than folding it into its uses.
    Returns the number of operands rerouted."""
    uses = [(u.owner, u.operand_number) for u in value.uses if u.owner.name in users]
    if not uses:
        return 0
    value.context.allow_unregistered_dialects = True
    with ir.InsertionPoint(uses[0][0]), value.owner.location:
        barrier = _barrier(value).result
    for owner, index in uses:
        owner.operands[index] = barrier
    return len(uses)


def function_bodies(module: ir.Module) -> list[list]:
    """The operations directly in each ``func.func``'s body, in order (as
    ``ir.Operation``: an op view's ``name`` may be its symbol's)."""
    return [[o.operation for o in op.regions[0].blocks[0].operations]
            for op in module.body.operations
            if op.operation.name == "func.func" and len(op.regions[0].blocks)]


def elements(value) -> int | None:
    """How many elements ``value`` holds: 1 for an int, index or float, the
    product of a static tensor shape; None for anything else."""
    t = value.type
    if isinstance(t, (ir.IntegerType, ir.IndexType, ir.FloatType)):
        return 1
    if isinstance(t, ir.RankedTensorType) and t.has_static_shape:
        n = 1
        for d in t.shape:
            n *= d
        return n
    return None


def barrier_uses_after(value, op) -> bool:
    """Pass the uses of ``value`` by operations after ``op`` (in ``op``'s
    block, or nested in one there) through one ``FUSION_BARRIER`` placed
    right after ``op``; False when there are none. A later reshape of
    ``value`` moves right after ``op`` and its uses get the barrier instead:
    iree-compile moves a reshape of a barrier's result above it, which
    would move the barrier to wherever the reshape was."""
    block = op.operation.block
    later = []
    for use in value.uses:
        owner = use.owner.operation if hasattr(use.owner, "operation") else use.owner
        while owner.block != block:  # (a use inside an op of the block: that op)
            owner = owner.parent
        if op.operation.is_before_in_block(owner):
            later.append((use.owner, use.operand_number))
    if not later:
        return False
    rest = []
    for owner, index in later:
        o = owner.operation if hasattr(owner, "operation") else owner
        if o.name in _RESHAPES and len(o.operands) == 1 and o.block == block:
            o.move_after(op.operation)
            barrier_uses_after(o.results[0], o)
        else:
            rest.append((owner, index))
    if rest:
        value.context.allow_unregistered_dialects = True
        with ir.InsertionPoint.after(op), op.location:
            barrier = _barrier(value)
        for owner, index in rest:
            owner.operands[index] = barrier.result
    return True


_RESHAPES = ("tensor.expand_shape", "tensor.collapse_shape")


def users(value) -> list:
    """The operations that use ``value``."""
    return [use.owner for use in value.uses]


def elementwise(op, body: str, source: str, result: str) -> bool:
    """``op`` is a ``linalg.generic`` applying the one op ``body`` (``arith.extf``)
    to each element of one ``source``-typed input (identity maps), giving a
    ``result``-typed tensor (element types as ``element_type`` names them)."""
    if op is None or op.name != "linalg.generic" or len(op.operands) != 2:
        return False
    if element_type(op.operands[0]) != source or element_type(op.results[0]) != result:
        return False
    rank = ir.RankedTensorType(op.results[0].type).rank
    identity = ir.AffineMap.get_identity(rank, op.context)
    if any(ir.AffineMapAttr(m).value != identity for m in op.attributes["indexing_maps"]):
        return False
    names = [o.operation.name for o in op.regions[0].blocks[0].operations]
    return names == [body, "linalg.yield"]


def float_constant_of(value) -> float | None:
    """The number of a scalar float ``arith.constant`` ``value`` is, else None."""
    op = producer(value)
    if op is None or op.name != "arith.constant":
        return None
    try:
        return ir.FloatAttr(op.attributes["value"]).value
    except ValueError:  # an integer or a dense (tensor) constant
        return None


def replace_by_f32_constant(op, number: float) -> None:
    """Replace ``op`` (one f32 result) by an ``arith.constant`` of ``number``
    (already an f32 value: exactly representable)."""
    f32 = ir.F32Type.get(op.context)
    with ir.InsertionPoint(op), op.location:
        const = ir.Operation.create("arith.constant", results=[f32],
                                    attributes={"value": ir.FloatAttr.get(f32, number)})
    op.results[0].replace_all_uses_with(const.result)
    op.erase()


def one_element_slice(value):
    """The ``tensor.extract_slice`` that makes ``value`` when it takes one
    element (every size 1), or None."""
    op = producer(value)
    if op is None or op.name != "tensor.extract_slice":
        return None
    return op if all(s == 1 for s in i64_array(op, "static_sizes")) else None


def element_fill(slice_op):
    """Replace the one-element ``tensor.extract_slice`` ``slice_op`` by a
    ``tensor.extract`` of its element and a ``linalg.fill`` of a new tensor
    with it: the same value, which IREE's reshape propagation expands as any
    fill. Returns the fill."""
    from torch_mlir.dialects import linalg, tensor
    source, result = slice_op.operands[0], slice_op.results[0]
    t = ir.RankedTensorType(result.type)
    dynamic = ir.ShapedType.get_dynamic_size()
    runtime = list(slice_op.operands[1:])
    with ir.InsertionPoint(slice_op), slice_op.location:
        offsets = [runtime.pop(0) if o == dynamic else _index(o)
                   for o in i64_array(slice_op, "static_offsets")]
        element = tensor.ExtractOp(source, offsets).result
        filled = linalg.fill(element, outs=[tensor.EmptyOp(list(t.shape), t.element_type).result])
    result.replace_all_uses_with(filled)
    slice_op.erase()
    return filled.owner
