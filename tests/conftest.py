"""Test options: ``--runslow`` runs the tests marked ``slow`` (skipped in CI)."""
import pytest


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
    import os
    os.environ["LAZY_MLIR_CACHE_DIR"] = str(tmp_path_factory.mktemp("lazy-mlir-cache"))
