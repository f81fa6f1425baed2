"""Old name of ``module_cache``, kept while ``lazy/sync.py`` imports it from
here; delete it when that import reads ``from ..runtime.module_cache import
EagerEntry, module_for``."""
from .module_cache import EagerEntry, module_for  # noqa: F401
