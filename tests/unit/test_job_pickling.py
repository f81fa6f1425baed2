"""``compile_worker.dumps``: values torch pickles by a bare name (memory
formats) are named from torch itself, not from whichever module of
``sys.modules`` happens to hold ``torch``, and layouts (which pickle refuses)
travel too: a worker (``python -P``, in any directory) loads every job."""
from __future__ import annotations

import subprocess
import sys
import textwrap

# A program whose first module (imported before torch, as a user's
# ``models.py`` is) holds ``torch`` and cannot be imported by a worker: the
# benchmarks' ``_bench_real_models`` was one, and BERT's step job then
# killed its worker. It writes the job pickled both ways.
PROGRAM = textwrap.dedent("""
    import importlib.util, pickle, sys
    path = sys.argv[1] + "/user_models.py"
    open(path, "w").write("import torch\\n")
    spec = importlib.util.spec_from_file_location("user_models", path)
    sys.modules["user_models"] = module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    import torch
    from lazy_mlir.compile_service.compile_worker import dumps
    job = {"memory_format": torch.contiguous_format, "other": torch.channels_last,
           "layout": torch.strided, "dtype": torch.float32}
    open(sys.argv[1] + "/plain.pkl", "wb").write(pickle.dumps(job["memory_format"]))
    open(sys.argv[1] + "/job.pkl", "wb").write(dumps(job))
""")
LOAD = "import pickle, sys; print(pickle.load(open(sys.argv[1], 'rb')))"


def _load(path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-P", "-c", LOAD, str(path)], capture_output=True,
                          text=True, cwd="/")


def test_memory_formats_and_layouts_load_in_a_fresh_interpreter(tmp_path):
    subprocess.run([sys.executable, "-c", PROGRAM, str(tmp_path)], check=True, cwd=tmp_path)
    plain = _load(tmp_path / "plain.pkl")  # what pickle itself wrote: the user's module
    assert plain.returncode != 0 and "user_models" in plain.stderr
    job = _load(tmp_path / "job.pkl")
    assert job.returncode == 0, job.stderr
    assert job.stdout.strip() == ("{'memory_format': torch.contiguous_format, 'other': "
                                  "torch.channels_last, 'layout': torch.strided, "
                                  "'dtype': torch.float32}")
