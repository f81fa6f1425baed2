"""Where a bool mask stands among an ``index``/``index_put``'s indices
(``ops/index.py``'s masked write, the capture's count check in
``lazy/bounds.py`` and the masked backward in ``lazy/masked_backward.py``).
No registrations: importable from any layer above without loading the
decomposition domains out of their order (``registry.load_domains``)."""
from __future__ import annotations


def lone_index(indices) -> tuple[int, object] | None:
    """(its position, the index) where ``indices`` are leading ``None``s and
    one index (a bool mask, where the callers look), else None."""
    p = 0
    while p < len(indices) and indices[p] is None:
        p += 1
    if p == len(indices) or any(i is not None for i in indices[p + 1:]):
        return None
    return p, indices[p]


def count_dim(self_rank: int, p: int, mask_rank: int, values_shape) -> int | None:
    """The dim of ``values`` that stands against the selected elements of a
    write ``self[..., mask] = values`` (``p`` leading ``None``s), or None
    where ``values`` does not reach it (it broadcasts over them)."""
    trailing = self_rank - p - mask_rank
    dim = len(values_shape) - trailing - 1
    return dim if dim >= 0 else None
