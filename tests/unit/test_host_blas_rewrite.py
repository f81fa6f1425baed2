"""The host_blas linalg-stage pass: which matmuls become calls of torch.mm, and
that IREE's module calling ``host_calls.runtime.blas`` computes what torch does."""
import iree.compiler as ic
import iree.runtime as rt
import numpy as np
import pytest
import torch

from lazy_mlir.config import PipelineConfig
from lazy_mlir.dialects.torch_import import parse
from lazy_mlir.host_calls.passes import blas as hb
from lazy_mlir.host_calls.runtime import blas as runtime_blas
from lazy_mlir.targets import get_target


def t(shape, dtype="f32"):
    return "tensor<" + "x".join(map(str, shape)) + f"x{dtype}>"


def matmul(name, a, b, ta=False, tb=False, dtype="f32", init="zero"):
    """(body, arguments, result type) of ``a @ b`` (shapes as the matmul reads
    them), an operand transposed by a ``linalg.transpose`` when ``ta``/``tb``."""
    batch = len(a) == 3
    op = "linalg.batch_matmul" if batch else "linalg.matmul"
    perm = "[0, 2, 1]" if batch else "[1, 0]"
    swap = (lambda s: [*s[:-2], s[-1], s[-2]])
    out = [*a[:-1], b[-1]]
    sa, sb = (swap(a) if ta else a), (swap(b) if tb else b)
    lines, lhs, rhs = [], f"%a{name}", f"%b{name}"
    for flag, src, shape, var in ((ta, f"%a{name}", a, "ta"), (tb, f"%b{name}", b, "tb")):
        if flag:
            lines.append(f"  %e{var}{name} = tensor.empty() : {t(shape, dtype)}\n"
                         f"  %{var}{name} = linalg.transpose ins({src} : {t(swap(shape), dtype)}) "
                         f"outs(%e{var}{name} : {t(shape, dtype)}) permutation = {perm}\n")
    lhs = f"%ta{name}" if ta else lhs
    rhs = f"%tb{name}" if tb else rhs
    zero = "0.0" if init == "zero" else "1.0"
    lines.append(f"  %z{name} = arith.constant {zero} : {dtype}\n"
                 f"  %e{name} = tensor.empty() : {t(out, dtype)}\n"
                 f"  %f{name} = linalg.fill ins(%z{name} : {dtype}) outs(%e{name} : "
                 f"{t(out, dtype)}) -> {t(out, dtype)}\n"
                 f"  %{name} = {op} ins({lhs}, {rhs} : {t(a, dtype)}, {t(b, dtype)}) "
                 f"outs(%f{name} : {t(out, dtype)}) -> {t(out, dtype)}\n")
    return "".join(lines), f"%a{name}: {t(sa, dtype)}, %b{name}: {t(sb, dtype)}", t(out, dtype)


def module(*mms) -> str:
    body = "".join(m[0] for m in mms)
    args = ", ".join(m[1] for m in mms)
    results = ", ".join(m[2] for m in mms)
    names = ", ".join("%" + m[0].strip().splitlines()[-1].split("=")[0].strip()[1:] for m in mms)
    return f"func.func @main({args}) -> ({results}) {{\n{body}  return {names} : {results}\n}}\n"


def loaded(m, driver: str = "local-sync"):
    """``main`` of ``m`` compiled for the cpu target and loaded beside the
    ``lazy_mlir_blas`` module its calls import."""
    cpu = get_target("cpu")
    vmfb = ic.compile_str(str(m), extra_args=[f"--iree-hal-target-backends={cpu.backend}",
                                              *cpu.flags])
    assert runtime_blas.imports_blas(vmfb)
    config = rt.Config(driver)
    ctx = rt.SystemContext(config=config)
    ctx.add_vm_module(runtime_blas.create_module(config.device))
    ctx.add_vm_module(rt.VmModule.copy_buffer(ctx.instance, vmfb))
    return ctx.modules.module["main"]


BIG = [256, 256], [256, 256]            # 16.8 M multiply-adds: the threshold
SMALL = [128, 512], [512, 64]           # the tiny suite's largest: 4.2 M


def test_large_f32_matmuls_only_become_calls():
    m = parse(module(matmul("big", *BIG), matmul("small", *SMALL),
                     matmul("half", *BIG, dtype="f16"), matmul("acc", *BIG, init="one")))
    assert hb.matmuls_as_calls(m) == 1
    text = str(m)
    assert text.count(hb.CALL_PREFIX) == 1
    assert text.count("linalg.matmul") == 3  # small, f16, accumulating into ones
    assert f"func.func private @{hb.MODULE}.matmul(tensor<?x?xf32>, tensor<?x?xf32>, i32, i32)" \
        in text
    m.operation.verify()


def test_transposed_operands_are_passed_as_they_lie():
    m = parse(module(matmul("nt", [512, 256], [256, 384], tb=True),
                     matmul("tn", [512, 256], [256, 384], ta=True),
                     matmul("qnt", [16, 128, 64], [16, 64, 128], tb=True)))
    assert hb.matmuls_as_calls(m) == 3
    text = str(m)
    assert f"{hb.CALL_PREFIX}matmul_01_512x256_384x256(%arg0, %arg1)" in text
    assert f"{hb.CALL_PREFIX}matmul_10_256x512_256x384(%arg2, %arg3)" in text
    assert f"{hb.CALL_PREFIX}batch_matmul_01_16x128x64_16x128x64(%arg4, %arg5)" in text
    m.operation.verify()


def mapped_matmul(a, b, b_dims: str) -> str:
    """``main`` of one matmul of ``a`` and ``b`` (as stored) with its
    ``indexing_maps`` spelled out, ``b`` read through ``b_dims`` ("k n": the
    default; "n k": transposed)."""
    rank = len(a)
    op = "linalg.batch_matmul" if rank == 3 else "linalg.matmul"
    dims = ", ".join(f"d{i}" for i in range(rank + 1))
    batch = "d0, " if rank == 3 else ""
    m, n, k = (f"d{rank - 2}", f"d{rank - 1}", f"d{rank}")
    amap = (lambda *r: f"affine_map<({dims}) -> ({batch}{', '.join(r)})>")
    names = {"k": k, "n": n}
    maps = f"[{amap(m, k)}, {amap(*(names[d] for d in b_dims.split()))}, {amap(m, n)}]"
    out = [*a[:-1], b[-1] if b_dims == "k n" else b[-2]]
    return (f"func.func @main(%a: {t(a)}, %b: {t(b)}) -> {t(out)} {{\n"
            f"  %z = arith.constant 0.0 : f32\n  %e = tensor.empty() : {t(out)}\n"
            f"  %f = linalg.fill ins(%z : f32) outs(%e : {t(out)}) -> {t(out)}\n"
            f"  %r = {op} indexing_maps = {maps} ins(%a, %b : {t(a)}, {t(b)}) "
            f"outs(%f : {t(out)}) -> {t(out)}\n  return %r : {t(out)}\n}}\n")


@pytest.mark.parametrize("a, b", [([512, 256], [256, 384]), ([16, 128, 64], [16, 64, 128])])
def test_only_matmuls_with_the_default_maps_become_calls(a, b):
    """A matmul whose ``indexing_maps`` read ``b`` transposed is no plain
    ``a @ b``: it stays IREE's; the default maps spelled out are called."""
    assert hb.matmuls_as_calls(parse(mapped_matmul(a, b, "k n"))) == 1
    swapped = [*b[:-2], b[-1], b[-2]]
    assert hb.matmuls_as_calls(parse(mapped_matmul(a, swapped, "n k"))) == 0


def test_many_matmuls_are_read_in_linear_time():
    """The pass asks every matmul whether its maps are the default; printing
    each op to see them numbered the whole module's values every time, so
    that xLSTM's 26k-line step (351 matmuls) spent 38 s here and the 1000
    small matmuls below 14 s (0.03 s read from the attribute)."""
    import time
    m = parse(module(*(matmul(f"m{i}", [8, 8], [8, 8]) for i in range(1000))))
    t0 = time.perf_counter()
    assert hb.matmuls_as_calls(m) == 0
    assert time.perf_counter() - t0 < 3.0


def test_a_matmul_of_called_matmuls_calls_their_calls():
    """Matmuls reading another called matmul's result, as it lies or through
    a transpose (Kimi Linear's step): their operands are gathered before any
    matmul is replaced, so replaced one by one the later calls read an erased
    matmul's result ('operand is unlinked'; in a compile, a heap corruption:
    'malloc(): invalid size', the hang of the sweep's kimi_linear)."""
    T = t([256, 256])
    m = parse(f"""func.func @main(%a: {T}, %b: {T}, %c: {T}) -> ({T}, {T}) {{
  %z = arith.constant 0.0 : f32
  %e = tensor.empty() : {T}
  %f = linalg.fill ins(%z : f32) outs(%e : {T}) -> {T}
  %m1 = linalg.matmul ins(%a, %b : {T}, {T}) outs(%f : {T}) -> {T}
  %m2 = linalg.matmul ins(%m1, %c : {T}, {T}) outs(%f : {T}) -> {T}
  %et = tensor.empty() : {T}
  %t = linalg.transpose ins(%m1 : {T}) outs(%et : {T}) permutation = [1, 0]
  %m3 = linalg.matmul ins(%c, %t : {T}, {T}) outs(%f : {T}) -> {T}
  return %m2, %m3 : {T}, {T}
}}
""")
    assert hb.matmuls_as_calls(m) == 3
    m.operation.verify()
    g = torch.Generator().manual_seed(0)
    a, b, c = (torch.randn(256, 256, generator=g) / 16 for _ in range(3))
    m2, m3 = (torch.from_numpy(np.asarray(r.to_host())) for r in loaded(m)(a.numpy(), b.numpy(),
                                                                           c.numpy()))
    torch.testing.assert_close(m2, a @ b @ c, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(m3, c @ (a @ b).t(), atol=1e-4, rtol=1e-4)


def test_the_runtime_registers_the_module_the_pass_calls():
    assert runtime_blas.MODULE == hb.MODULE


def test_a_shape_used_twice_makes_one_function():
    m = parse(module(matmul("x", *BIG), matmul("y", *BIG)))
    assert hb.matmuls_as_calls(m) == 2
    assert str(m).count(f"func.func private @{hb.CALL_PREFIX[6:]}") == 1


def test_the_calls_compute_what_torch_does():
    text = module(matmul("nn", [256, 512], [512, 192]),
                  matmul("nt", [256, 512], [512, 192], tb=True),
                  matmul("tn", [256, 512], [512, 192], ta=True),
                  matmul("qnt", [4, 128, 128], [4, 128, 256], tb=True))
    m = parse(text)
    assert hb.matmuls_as_calls(m) == 4
    main = loaded(m)
    g = torch.Generator().manual_seed(0)
    args = [torch.randn(256, 512, generator=g), torch.randn(512, 192, generator=g),
            torch.randn(256, 512, generator=g), torch.randn(192, 512, generator=g),
            torch.randn(512, 256, generator=g), torch.randn(512, 192, generator=g),
            torch.randn(4, 128, 128, generator=g), torch.randn(4, 256, 128, generator=g)]
    outs = main(*[a.numpy() for a in args])
    want = [args[0] @ args[1], args[2] @ args[3].t(), args[4].t() @ args[5],
            torch.bmm(args[6], args[7].transpose(1, 2))]
    for got, w in zip(outs, want):
        np.testing.assert_allclose(np.asarray(got.to_host()), w.numpy(), rtol=1e-4, atol=1e-4)


def chained_loops(n: int) -> str:
    """tanh(x) through ``n`` chained loops (each five tanhs), then ``@ w``:
    256x256, a matmul the pass calls."""
    T = t([256, 256])

    def tanh(src, dst, indent):
        return [f"{indent}{dst} = linalg.generic {{indexing_maps = [#id, #id], iterator_types "
                f"= [\"parallel\", \"parallel\"]}} ins({src} : {T}) outs(%e : {T}) {{",
                f"{indent}^bb0(%in: f32, %out: f32):", f"{indent}  %y = math.tanh %in : f32",
                f"{indent}  linalg.yield %y : f32", f"{indent}}} -> {T}"]
    lines = ["#id = affine_map<(d0, d1) -> (d0, d1)>", f"func.func @main(%x: {T}, %w: {T}) -> {T} {{",
             "  %c0 = arith.constant 0 : index", "  %c1 = arith.constant 1 : index",
             "  %c5 = arith.constant 5 : index", "  %zero = arith.constant 0.0 : f32",
             f"  %e = tensor.empty() : {T}", *tanh("%x", "%l0", "  ")]
    for k in range(n):
        lines += [f"  %l{k + 1} = scf.for %i = %c0 to %c5 step %c1 iter_args(%h = %l{k}) -> ({T}) {{",
                  *tanh("%h", "%t", "    "), f"    scf.yield %t : {T}", "  }"]
    lines += [f"  %f = linalg.fill ins(%zero : f32) outs(%e : {T}) -> {T}",
              f"  %m = linalg.matmul ins(%l{n}, %w : {T}, {T}) outs(%f : {T}) -> {T}",
              f"  return %m : {T}", "}", ""]
    return "\n".join(lines)


def test_a_module_of_many_loops_gets_no_call_and_compiles():
    """18 chained loops before a called matmul: IREE's stream analyses stop
    converging ('failed to solve for usage analysis'; the word-language-model
    example's evaluation: '... timepoint coverage'); from ``MAX_LOOPS`` loops
    the matmul stays IREE's and the module compiles. Below, it is called."""
    assert hb.matmuls_as_calls(parse(chained_loops(hb.MAX_LOOPS - 1))) == 1
    m = parse(chained_loops(18))
    assert hb.matmuls_as_calls(m) == 0
    cpu = get_target("cpu")
    vmfb = ic.compile_str(str(m), extra_args=[f"--iree-hal-target-backends={cpu.backend}",
                                              *cpu.flags])
    assert not runtime_blas.imports_blas(vmfb)


@pytest.mark.parametrize("name", ["vulkan", "cuda"])
def test_gpu_targets_never_get_the_rewrite(name):
    on = PipelineConfig(host_blas=True)
    from lazy_mlir.pipeline.stages import _linalg_edits
    assert not [e for e in _linalg_edits(on, name) if e[0] == "host_blas"]
    assert [e for e in _linalg_edits(on, "cpu") if e[0] == "host_blas"]


ID2 = "affine_map<(d0, d1) -> (d0, d1)>"


def elementwise(name, src, shape, op, source, result):
    """``%name = op(src)`` elementwise (``arith.extf`` / ``arith.truncf``)."""
    return (f"  %e{name} = tensor.empty() : {t(shape, result)}\n"
            f"  %{name} = linalg.generic {{indexing_maps = [{ID2}, {ID2}], iterator_types = "
            f"[\"parallel\", \"parallel\"]}} ins({src} : {t(shape, source)}) outs(%e{name} : "
            f"{t(shape, result)}) {{\n  ^bb0(%in: {source}, %out: {result}):\n"
            f"    %y = {op} %in : {source} to {result}\n    linalg.yield %y : {result}\n"
            f"  }} -> {t(shape, result)}\n")


def bf16_module(m=256, k=512, n=192):
    """Three bf16 products as torch-mlir writes autocast's: ``mm`` (bf16
    operands, a float32 accumulation rounded by ``truncf``), the same read as
    float32 (no rounding user), and ``addmm``'s upcast (float32 matmul of
    ``extf``'d operands, the second a transposed weight)."""
    a, b, w, out = [m, k], [k, n], [n, k], [m, n]
    mm = lambda name, x, y, tx, ty: (
        f"  %f{name} = linalg.fill ins(%zero : f32) outs(%acc : {t(out)}) -> {t(out)}\n"
        f"  %{name} = linalg.matmul ins({x}, {y} : {t(a, tx)}, {t(b, ty)}) "
        f"outs(%f{name} : {t(out)}) -> {t(out)}\n")
    body = (f"  %zero = arith.constant 0.0 : f32\n  %acc = tensor.empty() : {t(out)}\n"
            + mm("r", "%a", "%b", "bf16", "bf16") + elementwise("rr", "%r", out, "arith.truncf", "f32", "bf16")
            + mm("x", "%a", "%b", "bf16", "bf16")
            + elementwise("wa", "%a", a, "arith.extf", "bf16", "f32")
            + f"  %et = tensor.empty() : {t(b, 'bf16')}\n"
            f"  %wt = linalg.transpose ins(%w : {t(w, 'bf16')}) outs(%et : {t(b, 'bf16')}) permutation = [1, 0]\n"
            + elementwise("wb", "%wt", b, "arith.extf", "bf16", "f32")
            + mm("u", "%wa", "%wb", "f32", "f32"))
    results = f"{t(out, 'bf16')}, {t(out)}, {t(out)}"
    return (f"func.func @main(%a: {t(a, 'bf16')}, %b: {t(b, 'bf16')}, %w: {t(w, 'bf16')}) -> "
            f"({results}) {{\n{body}  return %rr, %x, %u : {results}\n}}\n")


def test_bf16_products_become_calls_rounded_only_where_every_user_rounds():
    m = parse(bf16_module())
    assert hb.matmuls_as_calls(m) == 3
    text = str(m)
    assert f"{hb.CALL_PREFIX}matmul_bf16_rounded_00_256x512_512x192(%arg0, %arg1)" in text
    assert f"{hb.CALL_PREFIX}matmul_bf16_00_256x512_512x192(%arg0, %arg1)" in text
    assert f"{hb.CALL_PREFIX}matmul_bf16_01_256x512_192x512(%arg0, %arg2)" in text  # extf peeled
    assert "linalg.matmul" not in text
    m.operation.verify()


def test_a_widened_operand_beside_a_float32_one_stays_float32():
    text = bf16_module().replace("%wa, %wb", "%wa, %wa2").replace(
        "  %zero =", "  %wa2 = tensor.empty() : tensor<512x192xf32>\n  %zero =", 1)
    m = parse(text)
    hb.matmuls_as_calls(m)
    assert f"{hb.CALL_PREFIX}matmul_00_256x512_512x192(%" in str(m)


def test_the_bf16_calls_compute_what_torch_does():
    m = parse(bf16_module())
    assert hb.matmuls_as_calls(m) == 3
    main = loaded(m)
    g = torch.Generator().manual_seed(0)
    a, b, w = (torch.randn(s, generator=g).bfloat16() for s in ([256, 512], [512, 192], [192, 512]))
    import ml_dtypes
    bits = [x.view(torch.int16).numpy().view(ml_dtypes.bfloat16) for x in (a, b, w)]
    rr, x, u = main(*bits)
    rr = torch.from_numpy(np.asarray(rr.to_host()).view(np.int16).copy()).view(torch.bfloat16)
    exact = a.float() @ b.float()
    torch.testing.assert_close(rr, a @ b, atol=0, rtol=2 ** -7)      # eager's bf16 mm, rounded once
    torch.testing.assert_close(torch.from_numpy(np.asarray(x.to_host())), exact, atol=1e-4, rtol=1e-5)
    torch.testing.assert_close(torch.from_numpy(np.asarray(u.to_host())), a.float() @ w.float().t(),
                               atol=1e-4, rtol=1e-5)
