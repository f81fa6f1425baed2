"""The largest matmul of a linalg graph, and the cpu flags that depend on it.

No compiler needed: the stages are IR texts written here.
"""
from __future__ import annotations

from lazy_mlir.config import PipelineConfig
from lazy_mlir.pipeline.contractions import largest_matmul
from lazy_mlir.pipeline.stages import Provenance, Stage, iree_flags
from lazy_mlir.targets import CPU, CPU_DATA_TILING, LARGE_MATMUL_MACS

SMALL = ("%4 = linalg.matmul ins(%collapsed, %transposed_11 : tensor<43x9xf32>, tensor<9x32xf32>)"
         " outs(%3 : tensor<43x32xf32>) -> tensor<43x32xf32>\n")
BIG = ("%9 = linalg.matmul ins(%a, %b : tensor<512x1024xf32>, tensor<1024x128xf32>)"
       " outs(%8 : tensor<512x128xf32>) -> tensor<512x128xf32>\n")
BATCH = ("%2 = linalg.batch_matmul ins(%x, %y : tensor<4x64x32xf16>, tensor<4x32x8xf16>)"
         " outs(%1 : tensor<4x64x8xf16>) -> tensor<4x64x8xf16>\n")
ALIGNED_BATCH = BATCH.replace("x8x", "x16x")
BIG_BATCH = ("%3 = linalg.batch_matmul ins(%x, %y : tensor<2x1024x1024xf32>, tensor<2x1024x512xf32>)"
             " outs(%1 : tensor<2x1024x512xf32>) -> tensor<2x1024x512xf32>\n")
MAPPED = ("%5 = linalg.matmul indexing_maps = [#map, #map1, #map2] ins(%a, %b : "
          "tensor<4096x4096xf32>, tensor<4096x4096xf32>) outs(%c : tensor<4096x4096xf32>)\n")
DYNAMIC = ("%6 = linalg.matmul ins(%a, %b : tensor<?x4096xf32>, tensor<4096x4096xf32>)"
           " outs(%c : tensor<?x4096xf32>) -> tensor<?x4096xf32>\n")


def test_largest_matmul_reads_static_named_matmuls():
    assert largest_matmul("") == 0
    assert largest_matmul(SMALL) == 43 * 9 * 32
    assert largest_matmul(SMALL + BIG) == 512 * 1024 * 128 == LARGE_MATMUL_MACS
    # a batch of small aligned matmuls is never data-tiled (passes/data_tiling), a batch of
    # big ones is, and so is one whose 8 columns the packs pad
    assert largest_matmul(ALIGNED_BATCH) == 0
    assert largest_matmul(BATCH) == 4 * 64 * 32 * 8
    assert largest_matmul(BIG_BATCH) == 2 * 1024 * 1024 * 512
    assert largest_matmul(MAPPED + DYNAMIC) == 0  # not read: no guess at their sizes
    # with data_tiling's hint
    hinted = BIG.replace("linalg.matmul ins", "linalg.matmul {iree.opt.data_tiling} ins")
    assert hinted != BIG and largest_matmul(hinted) == LARGE_MATMUL_MACS


def _linalg(text: str) -> tuple[Stage, ...]:
    return (Stage("linalg", text, Provenance("test", 0.0)),)


def test_cpu_data_tiles_only_graphs_with_a_large_matmul():
    config = PipelineConfig()
    big, small = iree_flags(CPU, config, _linalg(BIG)), iree_flags(CPU, config, _linalg(SMALL))
    assert all(f in big for f in CPU_DATA_TILING)
    assert not any(f in small for f in CPU_DATA_TILING)
    assert "--iree-llvmcpu-target-cpu=host" in small
    # a flag the configuration names stays, whatever the graph
    own = PipelineConfig(iree_flags=(("cpu", ("--iree-opt-data-tiling",)),))
    flags = iree_flags(CPU, own, _linalg(SMALL))
    assert "--iree-opt-data-tiling" in flags
    assert "--iree-llvmcpu-enable-ukernels=all" not in flags
    assert iree_flags(CPU, own, _linalg(BIG)).count("--iree-opt-data-tiling") == 1
    # IREE's torch input path: no linalg to read, the target's flags as they are
    torch_flags = iree_flags(CPU, config, (Stage("torch", SMALL, Provenance("test", 0.0)),))
    assert all(f in torch_flags for f in CPU_DATA_TILING) and "--iree-input-type=torch" in torch_flags


def _planned_stages(width: int):
    """The stages of a module with a dynamic batch (``size_family``) whose
    matmul is ``[b, width] x [width, 512]``, planned at batch 128."""
    import torch
    from torch.fx.experimental.proxy_tensor import make_fx
    from lazy_mlir.pipeline.size_family import derive_plan, family_of
    from lazy_mlir.pipeline.stages import lower

    def f(x, w):
        return torch.ops.aten.mm.default(x, w).relu()
    graphs = [make_fx(f, tracing_mode="fake")(torch.randn(b, width), torch.randn(width, 512))
              for b in (96, 128)]
    graphs[1].meta["size_plan"] = derive_plan(family_of(graphs[0])[1], family_of(graphs[1])[1])
    return lower(graphs[1], PipelineConfig(), "cpu")


def test_a_module_with_dynamic_sizes_data_tiles_by_its_plans_sizes():
    """IREE's torch input has no linalg to read: the largest matmul at the
    plan's sizes decides, as for a static module of them (a module of small
    matmuls was data-tiled, and a tiny GPT-2's then failed to compile so,
    ~30 s, before compiling again without)."""
    config = PipelineConfig()
    small, big = _planned_stages(64), _planned_stages(1024)
    assert big[-1].name == "torch-backend" and "[?,1024]" in big[-1].text
    assert big[-1].matmul_macs == 128 * 1024 * 512 >= LARGE_MATMUL_MACS
    assert all(f in iree_flags(CPU, config, big) for f in CPU_DATA_TILING)
    assert small[-1].matmul_macs == 128 * 64 * 512
    assert not any(f in iree_flags(CPU, config, small) for f in CPU_DATA_TILING)
