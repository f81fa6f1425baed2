"""CI guard: PyTorch OpInfo samples of a fixed set of ops on the lazy device.

Each (op, dtype) below runs its first ``SAMPLES`` OpInfo samples on the lazy
device (in a worker subprocess, so that a hang or a crash fails one op and not
the session), compares them with eager CPU and must come out exactly as
``EXPECTED`` says:

``compiled``            every sample matches, nothing falls back;
``fallback: a,b``       every sample matches; these aten ops ran eagerly;
``error: <cause>``      the lazy device raises (cause as in opinfo_sweep);
``mismatch``            a known wrong answer (a bug in lazy_mlir, kept here
                        so that it is seen; fix it and update the entry).

A regression fails the op's test, and so does an improvement: update
``EXPECTED`` deliberately (``python tests/e2e/test_opinfo.py`` prints the
table as it is now). The full sweep over all of ``op_db`` is
``benchmarks/op_coverage.py``. Ops never run are in ``opinfo_skips.py``.
"""
from __future__ import annotations

import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import opinfo_sweep as sweep  # noqa: E402
from opinfo_skips import METADATA_ONLY, SKIPS  # noqa: E402

SAMPLES = 3

# (op, dtype) -> expected outcome; see the module docstring.
EXPECTED: dict[tuple[str, str], str] = {
    # unary elementwise
    ('abs', 'float32'): 'compiled',
    ('exp', 'float32'): 'compiled',
    ('log', 'float32'): 'compiled',
    ('sqrt', 'float32'): 'compiled',
    ('rsqrt', 'float32'): 'compiled',
    ('sigmoid', 'float32'): 'compiled',
    ('tanh', 'float32'): 'compiled',
    ('sin', 'float32'): 'compiled',
    ('erf', 'float32'): 'compiled',
    ('ceil', 'float32'): 'compiled',
    ('sign', 'float32'): 'compiled',
    ('clamp', 'float32'): 'compiled',
    ('nn.functional.relu', 'float32'): 'compiled',
    ('nn.functional.gelu', 'float32'): 'compiled',
    ('nn.functional.silu', 'float32'): 'compiled',
    # unary elementwise, int64
    ('neg', 'int64'): 'compiled',
    ('abs', 'int64'): 'compiled',
    # binary elementwise
    ('add', 'float32'): 'compiled',
    ('add', 'int64'): 'compiled',
    ('add', 'bool'): 'compiled',
    ('sub', 'float32'): 'compiled',
    ('mul', 'float32'): 'compiled',
    ('mul', 'int64'): 'compiled',
    ('div.no_rounding_mode', 'float32'): 'compiled',
    ('div.floor_rounding', 'int64'): 'compiled',
    ('pow', 'float32'): 'compiled',
    ('maximum', 'float32'): 'compiled',
    ('remainder', 'float32'): 'compiled',
    ('remainder', 'int64'): 'compiled',
    ('atan2', 'float32'): 'compiled',
    ('atan2', 'bool'): 'compiled',
    ('bitwise_and', 'int64'): 'compiled',
    ('bitwise_and', 'bool'): 'compiled',
    ('logical_and', 'bool'): 'compiled',
    ('logical_not', 'bool'): 'compiled',
    # comparisons
    ('eq', 'float32'): 'compiled',
    ('eq', 'int64'): 'compiled',
    ('lt', 'float32'): 'compiled',
    ('ne', 'bool'): 'compiled',
    ('isnan', 'float32'): 'compiled',
    ('clamp_min', 'bool'): 'compiled',
    # reductions
    ('sum', 'float32'): 'compiled',
    ('sum', 'int64'): 'compiled',
    ('sum', 'bool'): 'compiled',
    ('mean', 'float32'): 'compiled',
    ('amax', 'float32'): 'compiled',
    ('argmax', 'float32'): 'compiled',
    ('argmax', 'int64'): 'compiled',
    ('prod', 'float32'): 'compiled',
    ('var', 'float32'): 'compiled',
    ('max.reduction_with_dim', 'float32'): 'compiled',
    ('logsumexp', 'float32'): 'compiled',
    ('all', 'bool'): 'compiled',
    ('any', 'float32'): 'compiled',
    ('cumsum', 'float32'): 'compiled',
    ('norm', 'float32'): 'compiled',
    # matmul family
    ('matmul', 'float32'): 'compiled',
    ('mm', 'float32'): 'compiled',
    ('bmm', 'float32'): 'compiled',
    ('addmm', 'float32'): 'compiled',
    ('nn.functional.linear', 'float32'): 'compiled',
    ('einsum', 'float32'): 'compiled',
    ('mm', 'int64'): 'compiled',
    ('baddbmm', 'float32'): 'compiled',
    # indexing, scatter, gather
    ('index_select', 'float32'): 'compiled',
    ('gather', 'float32'): 'compiled',
    ('gather', 'int64'): 'compiled',
    ('scatter', 'float32'): 'compiled',
    ('index_add', 'float32'): 'compiled',
    ('index_put', 'float32'): 'compiled',
    ('index_put', 'bool'): 'compiled',
    ('__getitem__', 'float32'): 'compiled',
    ('take_along_dim', 'float32'): 'compiled',
    ('nn.functional.embedding', 'float32'): 'compiled',
    # shape ops
    ('reshape', 'float32'): 'compiled',
    ('permute', 'float32'): 'compiled',
    ('transpose', 'int64'): 'compiled',
    ('squeeze', 'float32'): 'compiled',
    ('unsqueeze', 'bool'): 'compiled',
    ('expand', 'float32'): 'compiled',
    ('flatten', 'float32'): 'compiled',
    ('narrow', 'float32'): 'compiled',
    ('split', 'float32'): 'compiled',
    ('flip', 'float32'): 'compiled',
    ('roll', 'float32'): 'compiled',
    ('tril', 'float32'): 'compiled',
    # cat / stack
    ('cat', 'float32'): 'compiled',
    ('cat', 'int64'): 'compiled',
    ('cat', 'bool'): 'compiled',
    ('stack', 'float32'): 'compiled',
    # softmax, norms, losses
    ('softmax', 'float32'): 'compiled',
    ('log_softmax', 'float32'): 'compiled',
    ('nn.functional.layer_norm', 'float32'): 'compiled',
    ('nn.functional.batch_norm', 'float32'): 'compiled',
    ('nn.functional.group_norm', 'float32'): 'compiled',
    ('nn.functional.cross_entropy', 'float32'): 'compiled',
    # conv / pool
    ('nn.functional.conv2d', 'float32'): 'compiled',
    ('nn.functional.conv1d', 'float32'): 'compiled',
    ('nn.functional.max_pool2d', 'float32'): 'compiled',
    ('nn.functional.avg_pool2d', 'float32'): 'compiled',
    ('nn.functional.adaptive_avg_pool2d', 'float32'): 'compiled',
    # where / masked
    ('where', 'float32'): 'compiled',
    ('where', 'bool'): 'compiled',
    ('masked_fill', 'float32'): 'compiled',
    ('masked_fill', 'int64'): 'compiled',
    # sorting, data-dependent shapes
    ('sort', 'float32'): 'compiled',
    ('sort', 'bool'): 'compiled',
    ('topk', 'float32'): 'compiled',
    ('nonzero', 'float32'): 'fallback: nonzero',
    ('unique', 'float32'): 'fallback: _unique2',
    ('masked_select', 'float32'): 'fallback: masked_select',
    # special functions: our decompositions of ATen's Math.h (erfcx through
    # torch-mlir's log_ndtr decomposition, digamma's unrolled loop, int promotion)
    ('special.log_ndtr', 'float32'): 'compiled',
    ('digamma', 'float32'): 'compiled',
    ('lgamma', 'int64'): 'compiled',
    ('erfc', 'float32'): 'compiled',
    # precise rewrites of inaccurate lowerings; view(dtype) as a bitcast; take of a 0-d index
    ('tan', 'float32'): 'compiled',
    ('copysign', 'float32'): 'compiled',
    ('take', 'float32'): 'compiled',
    # LAPACK ops unrolled over their static size
    ('linalg.lu_factor', 'float32'): 'compiled',
    ('linalg.solve', 'float32'): 'compiled',
    ('linalg.inv', 'float32'): 'compiled',
    ('linalg.cholesky', 'float32'): 'compiled',
    ('linalg.slogdet', 'float32'): 'compiled',
    # stable sort, scans, bisection, resampling with host-made weights
    ('argsort', 'float32'): 'compiled',
    ('cummax', 'float32'): 'compiled',
    ('searchsorted', 'float32'): 'compiled',
    ('_upsample_bilinear2d_aa', 'float32'): 'compiled',
    # pairwise distances: cdist's direct and matmul routes, pdist
    ('cdist', 'float32'): 'compiled',
    ('nn.functional.pdist', 'float32'): 'compiled',
    ('histc', 'float32'): 'compiled',
    ('mode', 'float32'): 'compiled',
    ('nn.functional.embedding_bag', 'float32'): 'compiled',
    ('_segment_reduce.offsets', 'float32'): 'compiled',
    # random ops: eager's numbers (CPU generator fills), compared by value
    ('randn_like', 'float32'): 'compiled',
    ('bernoulli', 'float32'): 'compiled',
    ('nn.functional.alpha_dropout', 'float32'): 'compiled',
    ('multinomial', 'float32'): 'compiled',  # (ATen's draw: lazy/multinomial.py)
}


def outcome(res: dict) -> str:
    """A sweep result as the string EXPECTED holds."""
    status = res["status"]
    if status == "fallback":
        return "fallback: " + ",".join(sorted(res.get("fallback_ops", {})))
    if status == "error":
        return "error: " + (res.get("cause") or "?")
    return status


def explain(res: dict) -> str:
    lines = [f"{res['op']} {res['dtype']}: {res['status']} ({res.get('samples', 0)} samples)"]
    for m in res.get("mismatches", ()):
        lines.append(f"  mismatch in sample {m['sample']} [{m['desc']}]: {m}")
    for e in res.get("errors", ()):
        lines.append(f"  error in sample {e['sample']} [{e['desc']}]: {e['type']}: {e['message']}"
                     f" (at {e.get('where')})")
    for a, c in res.get("fallback_ops", {}).items():
        lines.append(f"  fallback aten::{a}: {c}")
    for n in res.get("notes", ()):
        lines.append(f"  note: {n}")
    return "\n".join(lines)


@pytest.fixture(scope="module")
def worker():
    w = sweep.Worker(timeout=sweep.SAMPLE_TIMEOUT)
    w._start()
    # The worker sweeps this checkout's lazy_mlir.
    assert os.path.realpath(w.lazy_mlir_file).startswith(os.path.realpath(sweep.REPO)), \
        w.lazy_mlir_file
    yield w
    w.close()


def test_expected_table_is_consistent():
    db = sweep.op_db()
    for op, dtype in EXPECTED:
        assert op in db, f"{op} is not in op_db"
        assert op not in SKIPS, f"{op} is in opinfo_skips.SKIPS"
        assert sweep.supports(op, sweep.DTYPES[dtype]), f"{op} does not support {dtype}"
    for op in list(SKIPS) + list(METADATA_ONLY):
        assert op in db, f"opinfo_skips names {op}, which is not in op_db"


@pytest.mark.parametrize("op,dtype", list(EXPECTED), ids=[f"{o}-{d}" for o, d in EXPECTED])
def test_opinfo(worker, op, dtype):
    res = worker.run(op, dtype, samples=SAMPLES)
    assert outcome(res) == EXPECTED[(op, dtype)], explain(res)


if __name__ == "__main__":
    # Print EXPECTED as the lazy device does now (paste it above after review).
    w = sweep.Worker()
    try:
        print("EXPECTED: dict[tuple[str, str], str] = {")
        for op, dtype in EXPECTED:
            res = w.run(op, dtype, samples=SAMPLES)
            got = outcome(res)
            flag = "" if got == EXPECTED[(op, dtype)] else "  # CHANGED"
            print(f"    ({op!r}, {dtype!r}): {got!r},{flag}", flush=True)
            if flag:
                print("    # " + explain(res).replace("\n", "\n    # "), flush=True)
        print("}")
    finally:
        w.close()
