"""Shrinking a failing program: delta debugging over its op records.

``shrink(prog, still_fails)`` drops chunks of records (halves, then quarters,
... then single records; a dropped record takes the records that read its
outputs with it, ``Program.without``) as long as ``still_fails`` holds, and
returns the smallest program found: each try is one compile, so a program
of 12 records shrinks in a few dozen.
"""
from __future__ import annotations

from .program import Program
from .run import Finding, check_function, check_lazy


def shrink(prog: Program, still_fails, max_tries: int = 80) -> Program:
    tries = 0
    n = 2
    while len(prog.ops) >= 1 and tries < max_tries:
        size = max(1, len(prog.ops) // n)
        chunks = [set(range(k, min(k + size, len(prog.ops))))
                  for k in range(0, len(prog.ops), size)]
        for chunk in chunks:
            smaller = prog.without(chunk)
            if len(smaller.ops) == len(prog.ops):
                continue
            tries += 1
            if still_fails(smaller):
                prog = smaller
                n = max(n - 1, 2)
                break
        else:
            if size == 1:
                break
            n = min(n * 2, len(prog.ops))
    return prog


def fails_like(finding: Finding):
    """The predicate: the program still fails in the finding's mode with a
    finding of its kind."""
    def still_fails(prog: Program) -> bool:
        if finding.mode == "lazy":
            found = check_lazy([prog])
        else:
            found = check_function([prog], finding.mode)
        return any(f.kind == finding.kind and f.mode == finding.mode
                   and _subject(f) == _subject(finding) for f in found)
    return still_fails


def _subject(f: Finding) -> str:
    """What differs ("v3", "host read 0", "records raising"): shrinking keeps
    it, so that it does not drift to another bug of the same kind."""
    return f.detail.split(":")[0]


def minimal(finding: Finding) -> Program:
    """The finding's program, shrunk."""
    return shrink(finding.program, fails_like(finding))
