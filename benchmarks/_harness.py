"""Shared helpers for the benchmarks, in three parts by where they run:

- ``_drive``: the driver, which runs each (row, backend) pair in a fresh
  subprocess and merges rounds;
- ``_worker``: what runs in that subprocess (a backend set up, one pair timed,
  the ``@@RESULT@@ {json}`` line the driver reads: everything else a worker
  prints, compiler chatter and warnings, is ignored), and the training-step
  closures the in-process benchmarks share;
- ``_report``: each row judged against eager, ratios, and the tables;

beside ``_specs`` (rows, models, inputs, ``Row``), which all three read.
This module gathers their names, so a benchmark needs one import
(``import _harness as H``).
"""
from __future__ import annotations

from _drive import environment_line, inputs_dir, merge_rounds, run_subprocess  # noqa: F401
from _report import (HEADER, judge, markdown, paired_ratio, print_report,  # noqa: F401
                     rich_table, table_rows, _fmt, _rel)
from _specs import (BACKENDS, COMPILE_ABS_TOL, CONV_MODELS, DRIFT_REL_TOL,  # noqa: F401
                    MODELS, REL_TOL, RESULT_TAG, Row, Spec, build, default_specs,
                    make_inputs, seed_models, zoo_module, _conv_model)
from _worker import (cycling_step, emit, run_worker, timed_lazy_step,  # noqa: F401
                     _backend_notes, _fallback_note, _setup_backend)
