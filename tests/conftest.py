"""Test options: ``--runslow`` runs the tests marked ``slow`` (skipped in CI).

The suite compiles as lazy-mlir did before background compiles: in this
process (``LAZY_MLIR_COMPILE_WORKERS=0``) and waiting for each compile
(``LAZY_MLIR_COMPILE=wait``), so tests that count compiles, fallbacks and
graphs see each graph compiled at its first run. Either can be set for a run
(``LAZY_MLIR_COMPILE_WORKERS=2 pytest ...`` runs the suite through compile
workers); tests of the workers and of background mode set their own
(tests/e2e/test_compile_workers.py, test_background_compile.py).

A step whose loss is read right after it is launched as one graph
(``LAZY_MLIR_SPLIT=0``): whether it is split in two depends on how long its
module ran against its capture, which a test cannot count on; the tests of
the split force it (tests/e2e/test_early_outputs.py, tests/models).
"""
import importlib.util
import os
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"

os.environ.setdefault("LAZY_MLIR_COMPILE", "wait")
os.environ.setdefault("LAZY_MLIR_COMPILE_WORKERS", "0")
os.environ.setdefault("LAZY_MLIR_SPLIT", "0")


def pytest_addoption(parser):
    parser.addoption("--runslow", action="store_true", help="run tests marked slow")


def pytest_collection_modifyitems(config, items):
    if config.getoption("--runslow"):
        return
    skip = pytest.mark.skip(reason="slow: run with --runslow")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session", autouse=True)
def _private_cache_dir(tmp_path_factory):
    """Tests use a persistent cache of their own, never the user's."""
    os.environ["LAZY_MLIR_CACHE_DIR"] = str(tmp_path_factory.mktemp("lazy-mlir-cache"))


@pytest.fixture(scope="session")
def load_benchmark():
    """``load_benchmark("name")``: ``benchmarks/name.py`` as a module, for the
    tests that check what a benchmark times. Registered in ``sys.modules``
    (dataclasses look their module up), loaded with ``benchmarks/`` on the
    path (scripts import their neighbours, ``_harness``, ``_floor``)."""
    def load(name: str):
        spec = importlib.util.spec_from_file_location(f"_benchmark_{name}",
                                                      BENCHMARKS / f"{name}.py")
        mod = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = mod
        sys.path.insert(0, str(BENCHMARKS))
        try:
            spec.loader.exec_module(mod)
        finally:
            sys.path.remove(str(BENCHMARKS))
        return mod
    return load


@pytest.fixture(scope="session")
def vulkan_session():
    """lazy-mlir's session on the Vulkan target (lavapipe in CI), or a skip
    saying why there is none."""
    import iree.runtime as rt

    from lazy_mlir.runtime.session import DeviceUnavailableError, session_for
    from lazy_mlir.targets import get_target
    drivers = rt.query_available_drivers()
    if "vulkan" not in drivers:
        pytest.skip(f"the IREE runtime has no vulkan driver (drivers: {', '.join(drivers)})")
    try:
        return session_for(get_target("vulkan"))
    except DeviceUnavailableError as e:
        pytest.skip(f"no Vulkan device: {e} (install mesa-vulkan-drivers for lavapipe)")


@pytest.fixture
def vulkan(vulkan_session):
    """The lazy device on the vulkan target for one test (graphs launched
    before it settled first), back on cpu after it."""
    import lazy_mlir as lm
    lm.mark_step()
    lm.wait_device_ops()
    lm.set_target("vulkan")
    try:
        yield
    finally:
        lm.mark_step()
        lm.wait_device_ops()
        lm.set_target("cpu")
