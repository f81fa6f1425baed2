"""What a compiled module does to its arguments, read from its linalg text.

IREE updates some operands in place and returns some arguments as views of
their buffers; these regex checks over ``func.func @main`` find the cases the
runtime must guard against (copy an argument first, answer a result with the
argument itself) or that IREE computes wrongly (the graph then runs eagerly).
Pure text functions: no MLIR context, no compiler.
"""
from __future__ import annotations

import re


def clobbered_args(text: str) -> tuple[int, ...]:
    """Function arguments that IREE may write in place: a sort-like op's
    in-place operand, and the tensor an ``insert_slice``/``insert`` writes
    into (or a view of it). IREE writes into the argument's buffer when that
    is its last use, also where the inserted result is not returned (a
    ``clone`` folded away: ``y = d.clone(); y[6:9] = t; y[6] *= -1`` wrote
    ``t`` into ``d``'s imported host memory and returned a new buffer, so no
    result shows the write). (Region arguments, such as an ``scf.for``'s,
    are numbered on after ``main``'s: ``%arg`` numbers past its arity are not
    its arguments.)"""
    found = set(_inserted_into_args(text))
    main = text.find("func.func @main(")
    source = dict(_views(text[main:])) if main >= 0 else {}
    for m in re.finditer(r"tm_tensor\.\w+[^\n]*?outs\(([^)]*)\)", text):
        for value in re.findall(r"%[\w#]+", m.group(1)):  # (or a view of one: x.unsqueeze(2)[i] += 1)
            arg = _viewed_arg(value, source)
            if arg is not None:
                found.add(arg)
    for m in re.finditer(r"torch\.aten\.(?:sort|topk|argsort|kthvalue|median)\w*[^\n]*", text):
        found.update(int(a) for a in re.findall(r"%arg(\d+)\b", m.group(0)))
    arity = main_arity(text)
    return tuple(sorted(a for a in found if arity is None or a < arity))


def main_arity(text: str) -> int | None:
    """The number of arguments of ``func.func @main`` (None without one)."""
    m = re.search(r"func\.func @main\(([^)]*)\)", text)
    return None if m is None else len(re.findall(r"%arg\d+\s*:", m.group(1)))


def returned_args(text: str) -> tuple[tuple[int, int], ...]:
    """(result, argument) pairs of ``main``'s results that are its arguments
    returned unchanged. IREE may update such an argument in place for another
    result (``b = a * 1; a[2:] = x`` returns one buffer for both), so the
    runtime answers these results with the argument itself."""
    main = text.find("func.func @main(")
    ret = re.search(r"^\s*(?:func\.)?return (.*?) :", text[main:], re.M) if main >= 0 else None
    if ret is None:
        return ()
    operands = [o.strip() for o in ret.group(1).split(",")]
    return tuple((i, int(o[4:])) for i, o in enumerate(operands) if re.fullmatch(r"%arg\d+", o))


def writes_into_args(text: str) -> tuple[int, ...]:
    """``main``'s arguments an in-place op may write into: the destination
    of a ``tm_tensor`` op (``scatter``, ``sort``) or of an ``insert_slice``/
    ``insert`` that is the argument, a view of it, or a copy of either
    (``linalg.copy``, or ``linalg_edit.copy_before``'s generic marked
    ``lazy_mlir.own_copy``), through barriers (``passes/scatter_destinations``
    copies a destination read elsewhere; IREE elided a ``linalg.copy``).
    Where none is, no result can be clobbered by folding (``folded_returns``)."""
    main = text.find("func.func @main(")
    if main < 0:
        return ()
    body = text[main:]
    source = dict(_views(body))
    source.update(re.findall(r"(%[\w#]+) = linalg\.copy\b[^\n]*?ins\((%[\w#]+)\b", body))
    source.update(re.findall(r"(%[\w#]+) = linalg\.generic\b[^\n]*?ins\((%[\w#]+) :"
                             r"[^\n]*lazy_mlir\.own_copy\b", body))
    source.update(re.findall(r'(%[\w#]+) = "(?:iree_tensor_ext\.compute_barrier\.start|'
                             r'util\.optimization_barrier)"\((%[\w#]+)\)', body))
    dests = set(re.findall(r"tensor\.insert(?:_slice)? %[\w#]+ into (%[\w#]+)\[", body))
    for m in re.finditer(r"tm_tensor\.\w+[^\n]*?outs\(([^)]*)\)", body):
        dests.update(re.findall(r"%[\w#]+", m.group(1)))
    found = set()
    for value in dests:
        arg = _viewed_arg(value, source)  # (up the views and copies to what they read)
        if arg is not None:
            found.add(arg)
    arity = main_arity(text)
    return tuple(sorted(a for a in found if arity is None or a < arity))


def folded_into_written(stream_text: str, written: tuple[int, ...]) -> tuple[int, ...]:
    """Results of ``main`` that IREE returns in the buffer of an argument of
    ``written`` (``writes_into_args``): the argument's own buffer view, or
    an export of its imported buffer (a reshape of it), read from IREE's
    stream phase. IREE's folders see through more than the linalg text
    shows (``maximum(x, x)`` is ``x``, the export of an imported argument is
    that argument), and it writes the argument's buffer in place for another
    result all the same (iree-org/iree#16168): such a result comes back with
    the writes (fuzzer seed 500180: ``v3 = maximum(v1, v1);
    v1.index_add_(...)``, ``v3`` and ``v3.flatten()`` held the additions)."""
    main = stream_text.find("util.func public @main(")
    if main < 0 or not written:
        return ()
    body = stream_text[main:]
    args = {f"%arg{n}" for n in written}
    imports = {v for v, a in re.findall(r"(%[\w#]+) = stream\.tensor\.import\b[^\n]*? (%arg\d+) :",
                                        body) if a in args}
    views = {v for v, src in re.findall(r"(%[\w#]+) = stream\.tensor\.export\b[^\n]*? "
                                        r"(%[\w#]+) :", body) if src in imports}
    ret = re.search(r"^\s*util\.return (.*?) :", body, re.M)
    if ret is None:
        return ()
    operands = [o.strip() for o in ret.group(1).split(",")]
    return tuple(k for k, o in enumerate(operands) if o in args or o in views)


def barrier_results(text: str, results: tuple[int, ...]) -> str | None:
    """``text`` with ``main``'s results ``results`` returned through a
    ``util.optimization_barrier`` each: IREE then keeps them out of the
    buffer it writes in place (it copies the argument for the write), as it
    does not for a result it folds into that argument (``folded_into_written``).
    None where ``main``'s return is not found."""
    main = text.find("func.func @main(")
    ret = re.search(r"^(\s*)(?:func\.)?return (.*?) : (.*)$", text[main:], re.M) if main >= 0 else None
    if ret is None:
        return None
    operands = [o.strip() for o in ret.group(2).split(",")]
    types = _split_types(ret.group(3))
    if len(types) != len(operands):
        return None
    indent, lines = ret.group(1), []
    for k in results:
        kept = f"%lazy_mlir_kept{k}"
        lines.append(f'{indent}{kept} = "util.optimization_barrier"({operands[k]}) : '
                     f"({types[k]}) -> {types[k]}")
        operands[k] = kept
    lines.append(f"{indent}return {', '.join(operands)} : {ret.group(3)}")
    start, end = main + ret.start(), main + ret.end()
    return text[:start] + "\n".join(lines) + text[end:]


def _split_types(text: str) -> list[str]:
    """A comma-separated list of types, split at the commas outside ``<>``."""
    out, depth, cur = [], 0, ""
    for ch in text:
        depth += (ch in "<([{") - (ch in ">)]}")
        if ch == "," and depth == 0:
            out.append(cur.strip())
            cur = ""
        else:
            cur += ch
    return out + [cur.strip()] if cur.strip() else out


_SORT_LIKE = {"sort", "topk", "argsort", "msort", "kthvalue", "median", "nanmedian", "mode"}


def shared_sort_operands(text: str) -> str | None:
    """An SSA value that two in-place sorts (``tm_tensor.sort``/``topk``) of
    ``text`` both take as an ``outs`` operand, if any: IREE sorts it in place
    for the first and the second then reads it sorted (wrong indices from
    ``topk(x, 3, 1); topk(x, 3, 1, largest=False)`` in one graph). A value
    only sorts take, whose sorted results nothing reads (the index operand of
    sorts of unique keys, ``ops/sort_scan.py``), is harmless shared: it is
    not one."""
    read_results = set(re.findall(r"%\w+#\d+", text))  # (a sort's own line says %N:2)
    seen: dict[str, bool] = {}  # operand -> whether a sort's result from it is read
    for m in re.finditer(r"^\s*(%\w+)(?::\d+)? = tm_tensor\.(?:sort|topk)\b[^\n]*?"
                         r"outs\(([^)]*?)(?::|\))", text, re.M):
        for k, v in enumerate(re.findall(r"%[\w#]+", m.group(2))):
            read = f"{m.group(1)}#{k}" in read_results
            if v in seen and (read or seen[v] or _read_elsewhere(text, v)):
                return v
            seen[v] = seen.get(v, False) or read
    return None


def _read_elsewhere(text: str, value: str) -> bool:
    """Whether ``value`` is read other than as a sort's in-place operand."""
    own = re.escape(value) + r"(?![\w$.-])"
    for line in re.findall(r"^.*" + own + r".*$", text, re.M):
        if not re.match(r"\s*" + own + r" = ", line) and not _SORT_OUTS.search(line):
            return True
    return False


_IN_PLACE_LIKE = {"slice_scatter", "select_scatter", "copy_", "index_put", "as_strided_scatter"}


def argument_read_after_in_place_write(text: str) -> str | None:
    """An argument that ``main`` inserts a slice into (IREE writes that in
    place) and also returns a view of (a reshape or slice of it, which IREE
    returns as a view of the argument's buffer): ``b = a.view(2, 3) * 1;
    a[2:] = x`` returned the updated ``a`` as ``b``. (An argument returned
    unchanged is handled by ``returned_args``; compute that reads the
    argument is ordered before the write by IREE.)"""
    main = text.find("func.func @main(")
    ret = re.search(r"^\s*(?:func\.)?return (.*?) :", text[main:], re.M) if main >= 0 else None
    if ret is None:
        return None
    body = text[main:]
    returned = {o.strip() for o in ret.group(1).split(",")}
    views = _views(body)
    for arg in set(re.findall(r"tensor\.insert_slice %[\w#]+ into (%arg\d+)\[", body)):
        if (_aliases(arg, views) - {arg}) & returned:
            return arg
    return None


def _views(body: str) -> list[tuple[str, str]]:
    """(view, source) pairs of the reshapes and slices in ``body``."""
    return re.findall(r"(%[\w#]+) = tensor\.(?:expand_shape|collapse_shape|extract_slice) "
                      r"(%[\w#]+)\b", body)


def _aliases(value: str, views: list[tuple[str, str]]) -> set[str]:
    """``value`` and its views, and views of those."""
    aliases = {value}
    for _ in range(len(views)):
        grown = aliases | {out for out, src in views if src in aliases}
        if grown == aliases:
            break
        aliases = grown
    return aliases


def _inserted_into_args(text: str) -> set[int]:
    """``main``'s arguments that an ``insert_slice`` or ``insert`` writes
    into, directly or through a view of the argument."""
    main = text.find("func.func @main(")
    if main < 0:
        return set()
    body = text[main:]
    source = dict(_views(body))
    found = set()
    for value in set(re.findall(r"tensor\.insert(?:_slice)? %[\w#]+ into (%[\w#]+)\[", body)):
        arg = _viewed_arg(value, source)
        if arg is not None:
            found.add(arg)
    return found


def _viewed_arg(value: str, source: dict[str, str]) -> int | None:
    """The number of the argument ``value`` is (or a view or copy of, up
    ``source``: view -> what it views), or None."""
    for _ in range(len(source) + 1):
        if value not in source:
            break
        value = source[value]
    return int(value[4:]) if re.fullmatch(r"%arg\d+", value) else None



_SORT_OUTS = re.compile(r"tm_tensor\.(?:sort|topk)\b[^\n]*?outs\(([^)]*?)(?::|\))")


def unshare_sort_operands(text: str) -> str:
    """``text`` with each in-place operand that two sorts share (for
    ``shared_sort_operands``: the index ``iota`` of two sorts of one shape,
    merged by CSE, as in a MoE router's two ``topk``s) defined again, by a
    copy of its defining op, for its second sort: each sort then fills its
    own. Left as it is where the defining op is not found (the check then
    refuses the graph, as before)."""
    # Each round gives one sort its own operand: at most one round a sort
    # (a MoE model's routers share one iota among 40 and more).
    for _ in range(len(_SORT_OUTS.findall(text))):
        value = shared_sort_operands(text)
        if value is None:
            return text
        new = _redefine_for_second_sort(text, value)
        if new is None:
            return text
        text = new
    return text


def _redefine_for_second_sort(text: str, value: str) -> str | None:
    lines = text.split("\n")
    start = next((i for i, ln in enumerate(lines) if ln.lstrip().startswith(value + " = ")), None)
    if start is None:
        return None
    end = start
    if lines[start].rstrip().endswith("{"):  # an op with a region: to its closing brace
        indent = lines[start][:len(lines[start]) - len(lines[start].lstrip())]
        end = next((j for j in range(start + 1, len(lines))
                    if lines[j].startswith(indent + "}")), None)
        if end is None:
            return None
    own = re.compile(re.escape(value) + r"(?![\w$.-])")
    uses = [i for i, ln in enumerate(lines)
            if (m := _SORT_OUTS.search(ln)) and own.search(m.group(1))]
    if len(uses) < 2 or uses[1] <= end:
        return None
    fresh = f"%lazy_mlir_unshared{text.count('%lazy_mlir_unshared')}"  # (grows by 2 a copy)
    clone = [lines[start].replace(value + " = ", fresh + " = ", 1)] + lines[start + 1:end + 1]
    m = _SORT_OUTS.search(lines[uses[1]])
    outs = own.sub(fresh, m.group(1))
    lines[uses[1]] = lines[uses[1]][:m.start(1)] + outs + lines[uses[1]][m.end(1):]
    return "\n".join(lines[:uses[1]] + clone + lines[uses[1]:])
