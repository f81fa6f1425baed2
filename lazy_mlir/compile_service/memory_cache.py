"""The compiled-module cache: structural key -> loaded module."""
from __future__ import annotations

import threading


class ModuleCache:
    """In-memory cache keyed by (graph key, input signature, target, config)."""

    def __init__(self):
        self._entries: dict[tuple, object] = {}
        self._lock = threading.Lock()

    def get(self, key: tuple):
        with self._lock:
            return self._entries.get(key)

    def put(self, key: tuple, entry) -> None:
        with self._lock:
            self._entries[key] = entry

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()

    def __len__(self) -> int:
        return len(self._entries)


memory_cache = ModuleCache()
