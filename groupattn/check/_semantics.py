"""The five families of exact rules, on checker values (see ``._values``).

- ``pointwise`` — elementwise functions of broadcast operands;
- ``movement`` — copies and fills (views, indexing with constant indices, padding,
  concatenation, unfolding, …), read off by running the operation on index probes;
- ``reduce`` / ``normalize`` — functions of the entries along some dims that do
  not depend on their order (sums, maxima, soft-max, norms);
- ``contract`` — sums of products over a shared index (matrix products, einsum,
  linear layers, convolutions after unfolding), where a constant operand may absorb a
  permutation of the summed index if its values are invariant under it.

Every function either returns the output's value with its gather maps, or raises
``Breaks`` (no map exists: the output cannot move with the input) or
``Unverifiable`` (the checker cannot tell).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import torch

from ._maps import (
    constant_classes,
    coordinates,
    dense_ids,
    depends_only_on,
    flat_index,
    lookup_rows,
    value_classes,
)
from ._values import Breaks, Constant, Frame, Moving, Unverifiable

__all__ = ["common_frame", "contract", "movement", "normalize", "pointwise", "reduce"]

#: Above this many map entries (entries × generators) one operation is not checked.
MAX_MAP_ENTRIES = 60_000_000


def _numel(shape: Sequence[int]) -> int:
    return math.prod(int(s) for s in shape)


def check_budget(shape: Sequence[int], frame: Frame, what: str) -> None:
    """Refuse (unverified) maps larger than ``MAX_MAP_ENTRIES``."""
    cost = _numel(shape) * max(1, len(frame.generators))
    if cost > MAX_MAP_ENTRIES:
        raise Unverifiable(
            f"{what}: a tensor of shape {tuple(shape)} with {len(frame.generators)} generators is too large to "
            f"check symbolically ({cost:,} map entries > {MAX_MAP_ENTRIES:,}); certify with a smaller example input"
        )


def common_frame(values: Sequence[Any], what: str) -> Frame | None:
    """The frame shared by the moving operands; invariant ones fit any frame."""
    moving = [v for v in values if isinstance(v, Moving)]
    if not moving:
        return None
    active = [v for v in moving if not v.invariant]
    if not active:
        return moving[0].frame
    frame = active[0].frame
    for v in active[1:]:
        if v.frame is not frame:
            raise Breaks(
                f"{what} combines tensors from different frames: {frame.describe()} and {v.frame.describe()}"
            )
    return frame


def _is_tensor_const(v: Any) -> bool:
    return isinstance(v, Constant) and isinstance(v.first, torch.Tensor)


def _shape(v: Any) -> tuple[int, ...]:
    if isinstance(v, Moving):
        return v.shape
    if _is_tensor_const(v):
        return tuple(v.first.shape)
    return ()


def broadcast_index(shape: Sequence[int], out_shape: Sequence[int]) -> torch.Tensor:
    """Flat index into a tensor of ``shape`` for every entry of its broadcast to ``out_shape``."""
    shape = tuple(int(s) for s in shape)
    out_shape = tuple(int(s) for s in out_shape)
    padded = (1,) * (len(out_shape) - len(shape)) + shape
    base = (
        torch.arange(_numel(shape)).reshape(padded)
        if shape
        else torch.zeros((), dtype=torch.long).reshape(padded)
    )
    return base.expand(out_shape).reshape(-1)


# ----------------------------------------------------------------------------- pointwise


def pointwise(
    operands: Sequence[Any], out_shape: Sequence[int], dtype: torch.dtype, what: str
) -> Moving:
    """``out[j] = f(a[ia(j)], b[ib(j)], …)`` for broadcast operands.

    An output map ``s`` must satisfy, for every operand: a moving operand's entry at
    ``s(j)`` is the moved entry ``m(ia(j))``; an invariant operand's entry is unchanged;
    a constant operand's value at ``s(j)`` equals its value at ``j`` (under both draws).
    """
    out_shape = tuple(int(s) for s in out_shape)
    frame = common_frame(operands, what)
    if frame is None:
        raise Unverifiable(f"{what}: no operand depends on the input")
    tensors = [v for v in operands if isinstance(v, Moving) or _is_tensor_const(v)]
    active = [v for v in tensors if isinstance(v, Moving) and not v.invariant]
    check_budget(out_shape, frame, what)
    columns: list[torch.Tensor] = []
    kinds: list[tuple[str, Any, Any]] = []  # (kind, value, index or (index, copies))
    for v in tensors:
        shape = _shape(v)
        if _numel(shape) == 1 and isinstance(v, Constant):
            continue  # a scalar constant is the same everywhere
        idx = broadcast_index(shape, out_shape)
        if isinstance(v, Constant):
            cls = constant_classes(v)
            columns.append(cls[idx])
            kinds.append(("const", v, idx))
        elif v.invariant and v.classes is not None:
            columns.append(v.classes[idx])
            kinds.append(("const", v, idx))
        else:
            copies = copy_classes(v)
            columns.append(idx if copies is None else copies[idx])
            kinds.append(("moving", v, idx if copies is None else (idx, copies)))
    keys = (
        torch.stack(columns, dim=1)
        if columns
        else torch.zeros(_numel(out_shape), 0, dtype=torch.long)
    )
    if not active:
        return Moving(out_shape, dtype, frame, None, classes=dense_ids(keys) if columns else None)
    # operands of the output's shape propose its map; one with repeated entries names one
    # copy of each, so those without repeats are tried first
    fulls = sorted((v for v in active if v.shape == out_shape), key=lambda v: v.source is not None)
    full = fulls[0] if fulls else None
    maps: list[torch.Tensor] = []
    for g in range(len(frame.generators)):
        targets = []
        for (kind, v, idx), col in zip(kinds, columns):
            if kind == "moving" and not v.invariant:
                if isinstance(idx, tuple):  # entries that copy one source entry are equal
                    position, copies = idx
                    targets.append(copies[v.moves[g][position]])
                else:
                    targets.append(v.moves[g][idx])
            else:
                targets.append(col)
        t = torch.stack(targets, dim=1)
        if full is not None:
            cand = next(
                (
                    v.moves[g]  # type: ignore[index]
                    for v in fulls
                    if bool((keys[v.moves[g]] == t).all())  # type: ignore[index]
                ),
                None,
            )
            if cand is None:
                first = full.moves[g]  # type: ignore[index]
                raise Breaks(_pointwise_reason(kinds, keys[first] != t, what))
            maps.append(cand)
            continue
        found = lookup_rows(keys, t)
        if found is None:
            raise Breaks(
                f"{what}: no entry of its output moves with the input (its operands move in ways that do not fit together)"
            )
        maps.append(found)
    return Moving(out_shape, dtype, frame, maps).normalised()


def _prefer_field_maps(value: Moving) -> None:
    """Give a value that repeats entries the maps of a standard field type, if they agree.

    Its own maps name one copy per entry; when they agree, copy for copy, with the
    action of a grid, lifted grid or token field (``copy_classes``), that action's maps
    are equally true (copies are equal for every input) — and later rules (a
    convolution, a non-linearity, a concatenation) then see the grid's own motion.
    In place; nothing changes when no field type agrees.
    """
    from ._leaf_rules import generator_map, recognise

    if value.invariant:
        return
    found = recognise(value, [])
    if found is None:
        return
    field, group, elements = found
    maps = []
    for generator, element in zip(value.frame.generators, elements):
        m = generator_map(field, group, element, value.shape, generator)
        if m is None:
            return
        maps.append(m)
    value.moves = maps


def copy_classes(v: Moving) -> torch.Tensor | None:
    """Per entry of ``v``, the entry of its duplicate-free sources that it copies.

    ``v`` made by a data movement that repeats entries (nearest up-sampling,
    ``repeat_interleave``, ``expand``, circular padding) keeps its ``source``; two of its
    entries that copy the same source entry are equal for every input, so a pointwise
    operation may match either (``v``'s own map names one copy; a skip connection's map
    may name another). ``None`` when ``v`` has no source, a source is not a moving
    value, or an entry is not a plain copy.
    """
    if v.source is None:
        return None
    if v.copies is not False:
        return v.copies  # type: ignore[no-any-return]
    result: torch.Tensor | None = None
    src_fn, src_data, index = v.source
    fn, data = _expand(src_fn, src_data)
    if data and all(isinstance(d, Moving) for d in data):
        sizes = [_numel(_shape(d)) for d in data]
        offsets = [0]
        for n in sizes:
            offsets.append(offsets[-1] + n)
        gap = float(offsets[-1] + 7)
        probes = [
            torch.arange(n, dtype=torch.float64).reshape(_shape(d)) + offsets[k] + 1
            for k, (d, n) in enumerate(zip(data, sizes))
        ]
        try:
            first, second = fn(probes), fn([p + gap for p in probes])
            if index is not None:
                first, second = first[index], second[index]
            a, b = first.reshape(-1), second.reshape(-1)
            if a.numel() == v.numel and bool((b - a == gap).all()):
                result = (a - 1).long()
        except Exception:  # not replayable on probes: no classes, the plain maps only
            result = None
    v.copies = result
    return result


def _pointwise_reason(kinds: list[tuple[str, Any, Any]], bad: torch.Tensor, what: str) -> str:
    for (kind, v, _), col_bad in zip(kinds, bad.unbind(1)):
        if not bool(col_bad.any()):
            continue
        if kind == "const" and isinstance(v, Constant):
            return f"{what}: combines a moving tensor with a position-dependent constant of shape {tuple(v.first.shape)} (e.g. an absolute position table)"
        if kind == "const":
            return f"{what}: combines a moving tensor with an invariant one of shape {v.shape} that varies along the moved axes"
        if v.invariant:
            return f"{what}: combines a moving tensor with an invariant one of shape {v.shape} that varies along the moved axes"
        return f"{what}: combines tensors that move differently (operand of shape {v.shape})"
    return f"{what}: its operands move in ways that do not fit together"


# ----------------------------------------------------------------------------- movement


def _expand(
    fn: Callable[[list[torch.Tensor]], Any], data: Sequence[Any], depth: int = 0
) -> tuple[Callable[[list[torch.Tensor]], Any], list[Any]]:
    """Replace operands that duplicate entries of their own sources by those sources.

    A copy with repeated entries (circular padding, ``expand``) has ambiguous maps:
    composing the operation with the one that made it reads everything off the
    original, duplicate-free entries.
    """
    if depth > 8 or not any(isinstance(v, Moving) and v.source is not None for v in data):
        return fn, list(data)
    parts: list[tuple[int, int, Any]] = []  # (start, stop, recipe or None)
    flat: list[Any] = []
    for v in data:
        if isinstance(v, Moving) and v.source is not None:
            src_fn, src_data, index = v.source
            inner_fn, inner_data = _expand(src_fn, src_data, depth + 1)
            parts.append((len(flat), len(flat) + len(inner_data), (inner_fn, index)))
            flat.extend(inner_data)
        else:
            parts.append((len(flat), len(flat) + 1, None))
            flat.append(v)

    def composed(tensors: list[torch.Tensor]) -> Any:
        rebuilt = []
        for start, stop, recipe in parts:
            if recipe is None:
                rebuilt.append(tensors[start])
            else:
                inner_fn, index = recipe
                out = inner_fn(tensors[start:stop])
                rebuilt.append(out if index is None else out[index])
        return fn(rebuilt)

    return composed, flat


def movement(
    fn: Callable[[list[torch.Tensor]], Any],
    data: Sequence[Any],
    what: str,
    rows: Sequence[int] | None = None,
) -> list[Any]:
    """Outputs of a pure data movement ``fn`` (copies of operand entries and constant fills).

    ``fn`` is run on three index probes (float64); an output entry that is neither a
    copy nor a fill in all three makes the operation unverifiable.

    ``rows`` (dims of the output) groups entries into windows — e.g. the patches of an
    unfold — so that entries copied into several windows are matched window to window
    first, then inside each window (an entry copied twice otherwise has no structural
    map).

    Returns
    -------
    list
        One value per tensor output of ``fn`` (flattened if it returns a sequence).
    """
    if all(isinstance(v, Constant) for v in data):
        first = fn([v.first for v in data])
        second = fn([v.second for v in data])
        third = fn([v.current for v in data]) if any(v.third is not None for v in data) else None
        exact = all(v.exact for v in data)
        if isinstance(first, torch.Tensor):
            return [Constant(first, second, third, exact)]
        thirds = third if third is not None else [None] * len(first)
        return [Constant(a, b, c, exact) for a, b, c in zip(first, second, thirds)]
    has_source = any(isinstance(v, Moving) and v.source is not None for v in data)
    if rows is not None and has_source:
        efn, edata = _expand(fn, data)
        return _movement(efn, edata, what, rows, (fn, list(data)))
    try:
        return _movement(fn, list(data), what, rows, (fn, list(data)))
    except Breaks:
        if not has_source:
            raise
        efn, edata = _expand(fn, data)
        return _movement(efn, edata, what, rows, (fn, list(data)))


def _movement(
    fn: Callable[[list[torch.Tensor]], Any],
    data: list[Any],
    what: str,
    rows: Sequence[int] | None,
    original: tuple[Any, list[Any]],
) -> list[Any]:
    original_fn, original_data = original
    frame = common_frame(data, what)
    assert frame is not None
    sizes = [_numel(_shape(v)) for v in data]
    offsets = [0]
    for n in sizes:
        offsets.append(offsets[-1] + n)
    total = offsets[-1]
    gap = float(total + 7)
    probes1 = [
        torch.arange(n, dtype=torch.float64).reshape(_shape(v)) + offsets[k] + 1
        for k, (v, n) in enumerate(zip(data, sizes))
    ]
    try:
        out1 = fn(probes1)
        out2 = fn([p + gap for p in probes1])
        out3 = fn([p * 3 for p in probes1])
    except Unverifiable:
        raise
    except Exception as err:
        raise Unverifiable(
            f"{what}: could not be replayed on index probes ({type(err).__name__}: {err})"
        ) from err
    outs1 = [out1] if isinstance(out1, torch.Tensor) else list(out1)
    outs2 = [out2] if isinstance(out2, torch.Tensor) else list(out2)
    outs3 = [out3] if isinstance(out3, torch.Tensor) else list(out3)
    # global tables: which operand owns an index, its map per generator, constant values
    owner = (
        torch.repeat_interleave(torch.arange(len(data)), torch.tensor(sizes, dtype=torch.long))
        if total
        else torch.zeros(0, dtype=torch.long)
    )
    is_moving_active = torch.tensor(
        [isinstance(v, Moving) and not v.invariant for v in data], dtype=torch.bool
    )
    const1 = torch.zeros(total, dtype=torch.float64)
    const2 = torch.zeros(total, dtype=torch.float64)
    const3 = torch.zeros(total, dtype=torch.float64)
    exact = all(v.exact for v in data if isinstance(v, Constant))
    inv_class = torch.full((total,), -1, dtype=torch.long)
    for k, v in enumerate(data):
        if isinstance(v, Constant):
            const1[offsets[k] : offsets[k + 1]] = v.first.detach().reshape(-1).to(torch.float64)
            const2[offsets[k] : offsets[k + 1]] = v.second.detach().reshape(-1).to(torch.float64)
            const3[offsets[k] : offsets[k + 1]] = v.current.detach().reshape(-1).to(torch.float64)
        elif isinstance(v, Moving) and v.invariant:
            # entries of an invariant tensor act like constants: equal where provably equal
            ids = v.classes if v.classes is not None else torch.arange(sizes[k])
            inv_class[offsets[k] : offsets[k + 1]] = ids + offsets[k]
    global_maps: list[torch.Tensor] = []
    for g in range(len(frame.generators)):
        parts = []
        for k, v in enumerate(data):
            if isinstance(v, Moving) and not v.invariant:
                parts.append(v.moves[g] + offsets[k])  # type: ignore[index]
            else:
                parts.append(torch.arange(offsets[k], offsets[k + 1]))
        global_maps.append(torch.cat(parts) if parts else torch.zeros(0, dtype=torch.long))
    results: list[Any] = []
    dtype = next(v.dtype for v in data if isinstance(v, Moving))
    for o1, o2, o3 in zip(outs1, outs2, outs3):
        f1, f2, f3 = o1.reshape(-1), o2.reshape(-1), o3.reshape(-1)
        copy = (f2 - f1 == gap) & (f3 == 3 * f1)
        fill = (f1 == f2) & (f2 == f3)
        if not bool((copy | fill).all()):
            raise Unverifiable(
                f"{what}: not a pure data movement (some output entries combine several inputs)"
            )
        src = torch.where(copy, f1 - 1, torch.zeros_like(f1)).long()
        if bool(copy.any()) and (int(src[copy].min()) < 0 or int(src[copy].max()) >= total):
            raise Unverifiable(f"{what}: its index probes left the input range")
        from_moving = copy & is_moving_active[owner[src]] if total else copy
        from_const = copy & ~from_moving
        sources_move = bool((copy & is_moving_active[owner[src]]).any()) if total else False
        if not bool(from_moving.any()) or not sources_move:
            # only constants, fills and invariant entries: the result does not move;
            # entries copied from one entry (or holding one constant) are equal
            keys = _movement_keys(
                src, from_moving, from_const, (const1, const2, const3), exact, f1, inv_class
            )
            results.append(
                Moving(
                    tuple(o1.shape),
                    dtype,
                    frame,
                    None,
                    classes=torch.unique(keys, return_inverse=True)[1],
                )
            )
            continue
        check_budget(tuple(o1.shape), frame, what)
        keys = src.clone()
        maps: list[torch.Tensor] = []
        all_keys = _movement_keys(
            src, from_moving, from_const, (const1, const2, const3), exact, f1, inv_class
        )
        row_ids = _row_signature(all_keys, tuple(o1.shape), rows) if rows is not None else None
        moving_pos = torch.nonzero(from_moving).reshape(-1)
        moving_src = src[moving_pos]
        unique_sources = moving_src.numel() == torch.unique(moving_src).numel()
        table = torch.full((max(total, 1),), -1, dtype=torch.long)
        if unique_sources:
            table[moving_src] = moving_pos
        else:
            order = torch.argsort(moving_src, stable=True)
            sorted_src = moving_src[order]
            starts = torch.ones_like(sorted_src, dtype=torch.bool)
            starts[1:] = sorted_src[1:] != sorted_src[:-1]
            first = torch.cummax(
                torch.where(starts, torch.arange(sorted_src.numel()), torch.zeros_like(sorted_src)),
                0,
            ).values
            rank = torch.empty_like(moving_src)
            rank[order] = torch.arange(sorted_src.numel()) - first
        for gm in global_maps:
            found = torch.arange(f1.numel())  # fills and constant copies map to themselves
            wanted = gm[moving_src]
            if row_ids is not None:
                targets = all_keys.clone()
                targets[moving_pos] = wanted
                assert rows is not None
                target_rows = _row_signature(
                    targets, tuple(o1.shape), rows, reference=(all_keys, row_ids)
                )
                if target_rows is None:
                    raise Breaks(f"{what}: windows do not move onto windows")
                hit = lookup_rows(
                    torch.stack([row_ids[moving_pos], moving_src], 1),
                    torch.stack([target_rows[moving_pos], wanted], 1),
                )
                if hit is None:
                    raise Breaks(_movement_reason(from_moving, fill, what))
                found[moving_pos] = moving_pos[hit]
                _place_fills_by_consensus(found, from_moving, all_keys, tuple(o1.shape), rows)
            elif unique_sources:
                hit = table[wanted]
                if bool((hit < 0).any()):
                    raise Breaks(_movement_reason(from_moving, fill, what))
                found[moving_pos] = hit
            else:
                # the k-th copy of an entry goes to the k-th copy of its image (broadcasts keep their structure)
                hit = lookup_rows(
                    torch.stack([moving_src, rank], 1), torch.stack([wanted, rank], 1)
                )
                if hit is None:
                    hit = lookup_rows(moving_src[:, None], wanted[:, None])
                if hit is None:
                    raise Breaks(_movement_reason(from_moving, fill, what))
                found[moving_pos] = moving_pos[hit]
            if rows is None:
                _place_fills_like_operand(
                    found, from_moving, all_keys, data, tuple(o1.shape), g_index=len(maps)
                )
            maps.append(found)
        value = Moving(tuple(o1.shape), dtype, frame, maps).normalised()
        if not unique_sources or any(
            isinstance(d, Moving) and d.source is not None for d in original_data
        ):  # a copy of repeated entries (or a movement of one) keeps how it was made
            index = None if isinstance(out1, torch.Tensor) else len(results)
            value.source = (original_fn, original_data, index)
            _prefer_field_maps(value)
        results.append(value)
    return results


def _place_fills_by_consensus(
    found: torch.Tensor,
    from_moving: torch.Tensor,
    keys: torch.Tensor,
    shape: tuple[int, ...],
    rows: Sequence[int],
) -> None:
    """Move constant entries of windows the way the copied entries move inside them.

    Inside each window the copied entries move by a permutation of window positions;
    where every window agrees on it (a rotation permutes kernel offsets the same way in
    every window), padding entries follow it too, so the map keeps its product structure.
    Only entries whose target holds the same constant are moved; the rest stay (any
    entry of the same value is a valid target).
    """
    row_dims = list(rows)
    entry_dims = [d for d in range(len(shape)) if d not in row_dims]
    perm = row_dims + entry_dims
    nrows = _numel([shape[d] for d in row_dims])
    width = _numel([shape[d] for d in entry_dims])
    n = _numel(shape)
    layout = torch.arange(n).reshape(shape).permute(perm).reshape(nrows, width)
    row_of = torch.empty(n, dtype=torch.long)
    ent_of = torch.empty(n, dtype=torch.long)
    row_of[layout.reshape(-1)] = torch.arange(nrows).repeat_interleave(width)
    ent_of[layout.reshape(-1)] = torch.arange(width).repeat(nrows)
    moving = torch.nonzero(from_moving).reshape(-1)
    fills = torch.nonzero(~from_moving).reshape(-1)
    if not fills.numel() or not moving.numel():
        return
    # the target row of each row, read off its copied entries
    target_row = torch.full((nrows,), -1, dtype=torch.long)
    target_row[row_of[moving]] = row_of[found[moving]]
    # candidate permutations of window positions: those of windows without constants
    perm_rows = torch.full((nrows, width), -1, dtype=torch.long)
    perm_rows[row_of[moving], ent_of[moving]] = ent_of[found[moving]]
    complete = (perm_rows >= 0).all(dim=1)
    if not bool(complete.any()):
        return
    candidates = torch.unique(perm_rows[complete], dim=0)[:16]
    fill_mask = perm_rows < 0
    chosen = torch.full((nrows,), -1, dtype=torch.long)
    key_grid = keys[layout]  # (nrows, width)
    valid_target = target_row >= 0
    for ci, pi in enumerate(candidates):
        agrees = ((perm_rows == pi[None, :]) | fill_mask).all(dim=1)
        tgt = layout[target_row.clamp(min=0)][:, pi]  # where each window position would go
        same_fill = ((keys[tgt] == key_grid) | ~fill_mask).all(dim=1)
        ok = agrees & same_fill & valid_target & (chosen < 0)
        chosen[ok] = ci
    rows_f, ents_f = row_of[fills], ent_of[fills]
    has = chosen[rows_f] >= 0
    if not bool(has.any()):
        return
    pis = candidates[chosen[rows_f].clamp(min=0), ents_f]
    cand = layout[target_row[rows_f].clamp(min=0), pis]
    found[fills[has]] = cand[has]


def _place_fills_like_operand(
    found: torch.Tensor,
    from_moving: torch.Tensor,
    keys: torch.Tensor,
    data: list[Any],
    shape: tuple[int, ...],
    g_index: int,
) -> None:
    """For an output shaped like a moving operand, move its constant entries as that operand moves
    (where the target holds the same constant), so e.g. ``y[:, 0] = 0`` keeps the input's action."""
    ref = next(
        (v for v in data if isinstance(v, Moving) and not v.invariant and v.shape == shape), None
    )
    if ref is None or bool(from_moving.all()):
        return
    fills = torch.nonzero(~from_moving).reshape(-1)
    cand = ref.moves[g_index][fills]  # type: ignore[index]
    same = keys[cand] == keys[fills]
    found[fills[same]] = cand[same]


def _movement_keys(
    src: torch.Tensor,
    from_moving: torch.Tensor,
    from_const: torch.Tensor,
    consts: tuple[torch.Tensor, torch.Tensor, torch.Tensor],
    exact: bool,
    f1: torch.Tensor,
    inv_class: torch.Tensor,
) -> torch.Tensor:
    """One key per output entry: the source index for copies of moving entries; for
    constants, fills and entries of invariant tensors ``-1 - class`` (equal only when equal)."""
    safe = src.clamp(min=0, max=max(inv_class.numel() - 1, 0))
    inv = inv_class[safe] if inv_class.numel() else torch.full_like(src, -1)
    inv = torch.where(from_const, inv, torch.full_like(inv, -1))
    v1, v2, v3 = (torch.where(from_const, c[safe] if c.numel() else f1, f1) for c in consts)
    w1, w2, w3 = (torch.where(inv >= 0, torch.zeros_like(v), v) for v in (v1, v2, v3))
    cls = value_classes(w1, w2, w3, exact=exact)
    ncls = int(cls.max()) + 1 if cls.numel() else 0
    cls = torch.where(inv >= 0, ncls + inv, cls)
    return torch.where(from_moving, src, -1 - cls)


def _row_signature(
    keys: torch.Tensor,
    shape: tuple[int, ...],
    rows: Sequence[int],
    reference: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> torch.Tensor | None:
    """An id per entry naming its window by the sorted multiset of keys in the window.

    With ``reference = (keys, ids)`` the ids are those of the reference windows with the
    same multiset (``None`` when some window has no counterpart).
    """
    row_dims = list(rows)
    entry_dims = [d for d in range(len(shape)) if d not in row_dims]
    perm = row_dims + entry_dims
    nrows = _numel([shape[d] for d in row_dims])
    width = _numel([shape[d] for d in entry_dims])
    grid = keys.reshape(shape).permute(perm).reshape(nrows, width)
    sig = grid.sort(dim=1).values
    if reference is None:
        _, inverse = torch.unique(sig, dim=0, return_inverse=True)
        per_row = inverse
    else:
        ref_keys, ref_ids = reference
        ref_grid = ref_keys.reshape(shape).permute(perm).reshape(nrows, width).sort(dim=1).values
        ref_row_ids = ref_ids.reshape(shape).permute(perm).reshape(nrows, width)[:, 0]
        found = lookup_rows(ref_grid, sig)
        if found is None:
            return None
        per_row = ref_row_ids[found]
    expanded = per_row[:, None].expand(nrows, width).reshape([shape[d] for d in perm])
    inverse_perm = [perm.index(d) for d in range(len(shape))]
    return expanded.permute(inverse_perm).reshape(-1)


def _movement_reason(from_moving: torch.Tensor, fill: torch.Tensor, what: str) -> str:
    if bool(fill.any()):
        return f"{what}: keeps or pads only part of a moved axis (entries would move to or from fixed padding / dropped positions)"
    return f"{what}: selects or rearranges entries in a way that does not move with the input"


# ----------------------------------------------------------------------------- reductions


def _row_structure(
    x: Moving, dims: Sequence[int], what: str, g: int
) -> tuple[torch.Tensor, torch.Tensor, bool]:
    """Split the map of generator ``g`` along reduced ``dims``.

    Returns the map of the kept coordinates (one per kept index, row-major over the
    kept dims), the reduced source flat index per entry, and whether the map is the
    identity inside every row.
    """
    shape = x.shape
    red = sorted(set(dims))
    keep = [d for d in range(len(shape)) if d not in red]
    m = x.moves[g]  # type: ignore[index]
    src = coordinates(m, shape)
    for d in keep:
        if not depends_only_on(src[d], shape, set(keep)):
            raise Breaks(
                f"{what}: works along dim(s) {red} of a tensor of shape {shape}, but the group moves entries "
                f"between those and other dims (e.g. a rotation exchanges the two spatial axes)"
            )
    red_shape = tuple(shape[d] for d in red)
    keep_shape = tuple(shape[d] for d in keep)
    rsize = _numel(red_shape)
    red_src = flat_index([src[d] for d in red], red_shape) if red else torch.zeros_like(m)
    own = coordinates(torch.arange(_numel(shape)), shape)
    red_own = flat_index([own[d] for d in red], red_shape) if red else torch.zeros_like(m)
    perm = keep + red
    rows = red_src.reshape(shape).permute(perm).reshape(-1, max(rsize, 1))
    if rsize and not bool((rows.sort(dim=1).values == torch.arange(rsize)).all()):
        raise Unverifiable(
            f"{what}: the group does not permute the entries along dim(s) {red} one-to-one"
        )
    identity_inside = bool(torch.equal(red_src, red_own))
    keep_src = [src[d].reshape(shape).permute(perm).reshape(-1, max(rsize, 1))[:, 0] for d in keep]
    rho = flat_index(keep_src, keep_shape) if keep else torch.zeros(1, dtype=torch.long)
    return rho, red_src, identity_inside


def reduce(
    x: Moving,
    dims: Sequence[int],
    out_shape: Sequence[int],
    dtype: torch.dtype,
    what: str,
    positional: bool = False,
) -> Moving:
    """A reduction along ``dims`` whose result does not depend on the order of the entries.

    ``positional=True`` for results that *are* positions or depend on the order (arg-max,
    cumulative sums): then the group must not move entries inside a row.
    """
    out_shape = tuple(int(s) for s in out_shape)
    if x.invariant:
        return Moving(out_shape, dtype, x.frame, None)
    check_budget(x.shape, x.frame, what)
    maps = []
    for g in range(len(x.frame.generators)):
        rho, _, identity_inside = _row_structure(x, dims, what, g)
        if positional and not identity_inside:
            raise Unverifiable(
                f"{what}: returns positions (or an order-dependent result) along an axis the group moves"
            )
        if _numel(out_shape) != rho.numel():
            raise Unverifiable(f"{what}: output shape {out_shape} does not match the kept dims")
        maps.append(rho)
    return Moving(out_shape, dtype, x.frame, maps).normalised()


def normalize(
    x: Moving, dims: Sequence[int], dtype: torch.dtype, what: str, positional: bool = False
) -> Moving:
    """A same-shape map computed row by row along ``dims`` from the row's entries as a set
    (soft-max, normalisation); ``positional=True`` for order-dependent ones (cumulative sums)."""
    if x.invariant:
        return Moving(x.shape, dtype, x.frame, None)
    check_budget(x.shape, x.frame, what)
    for g in range(len(x.frame.generators)):
        _, _, identity_inside = _row_structure(x, dims, what, g)
        if positional and not identity_inside:
            raise Unverifiable(
                f"{what}: depends on the order of entries along an axis the group moves"
            )
    return Moving(x.shape, dtype, x.frame, list(x.moves) if x.moves is not None else None)


# ----------------------------------------------------------------------------- contraction


def contract(a: Any, la: str, b: Any, lb: str, lo: str, dtype: torch.dtype, what: str) -> Moving:
    """``out[lo] = Σ a[la] · b[lb]`` over the letters shared by ``a`` and ``b`` but not in ``lo``."""
    if isinstance(a, Constant) and isinstance(b, Moving):
        return contract(b, lb, a, la, lo, dtype, what)
    if not isinstance(a, Moving):
        raise Unverifiable(f"{what}: no operand depends on the input")
    if len(set(la)) != len(la) or len(set(lb)) != len(lb) or len(set(lo)) != len(lo):
        raise Unverifiable(f"{what}: repeated index letters (diagonals) are not supported")
    if (set(la) | set(lb)) - set(lo) - (set(la) & set(lb)) or set(lo) - set(la) - set(lb):
        raise Unverifiable(f"{what}: sums over an index of one operand only")
    sizes: dict[str, int] = {}
    for letters, shape in ((la, _shape(a)), (lb, _shape(b))):
        if len(letters) != len(shape):
            raise Unverifiable(f"{what}: index letters {letters} do not fit shape {shape}")
        for ch, s in zip(letters, shape):
            if sizes.setdefault(ch, int(s)) != int(s):
                raise Unverifiable(f"{what}: index {ch} has sizes {sizes[ch]} and {s}")
    out_shape = tuple(sizes[ch] for ch in lo)
    frame = common_frame([a, b], what)
    assert frame is not None
    b_moving = isinstance(b, Moving)
    if a.invariant and (not b_moving or b.invariant):
        return Moving(out_shape, dtype, frame, None)
    batch = [ch for ch in lo if ch in la and ch in lb]
    free_a = [ch for ch in lo if ch in la and ch not in lb]
    free_b = [ch for ch in lo if ch in lb and ch not in la]
    summed = [ch for ch in la if ch in lb and ch not in lo]
    check_budget(out_shape, frame, what)
    check_budget(_shape(a), frame, what)
    grid = _grid(lo, sizes)
    maps = []
    for g in range(len(frame.generators)):
        fa = _factor(
            a, la, batch, free_a, summed, sizes, g, what, None if b_moving else batch + free_a
        )
        if b_moving:
            fb = _factor(b, lb, batch, free_b, summed, sizes, g, what)
            for ch in batch:
                if not torch.equal(
                    _on_grid(fa[ch], "".join(batch), sizes), _on_grid(fb[ch], "".join(batch), sizes)
                ):
                    raise Breaks(
                        f"{what}: its two operands move differently along the shared index {ch}"
                    )
            for ch in summed:
                both = "".join(batch) + "".join(summed)
                if not torch.equal(_on_grid(fa[ch], both, sizes), _on_grid(fb[ch], both, sizes)):
                    raise Breaks(
                        f"{what}: its two operands move differently along the summed index {ch}"
                    )
            functions = {**fa, **{ch: fb[ch] for ch in free_b}}
        else:
            functions = {
                **fa,
                **_absorb_constant(b, lb, batch, free_b, summed, sizes, fa, what, free_a),
            }
        coords = []
        for ch in lo:
            func, letters = functions[ch]
            coords.append(
                func[tuple(grid[c] for c in letters)] if letters else func.expand(out_shape)
            )
        maps.append(flat_index([c.reshape(-1) for c in coords], out_shape))
    return Moving(out_shape, dtype, frame, maps).normalised()


def _on_grid(fn: tuple[torch.Tensor, str], letters: str, sizes: dict[str, int]) -> torch.Tensor:
    """Evaluate a letter function ``(values, argument letters)`` on the full grid of ``letters``."""
    func, args = fn
    grid = _grid(letters, sizes)
    shape = [sizes[c] for c in letters]
    return func[tuple(grid[c] for c in args)] if args else func.expand(shape)


def _grid(letters: str, sizes: dict[str, int]) -> dict[str, torch.Tensor]:
    n = len(letters)
    grid = {}
    for i, ch in enumerate(letters):
        shape = [1] * n
        shape[i] = sizes[ch]
        grid[ch] = torch.arange(sizes[ch]).reshape(shape).expand([sizes[c] for c in letters])
    return grid


def _factor(
    v: Moving,
    letters: str,
    batch: list[str],
    free: list[str],
    summed: list[str],
    sizes: dict[str, int],
    g: int,
    what: str,
    summed_context: list[str] | None = None,
) -> dict[str, Any]:
    """Source coordinate of each letter as a function of the letters it may depend on.

    Batch letters may depend on batch letters only; free letters on batch and free
    letters; summed letters on batch and summed letters — or on ``summed_context``
    (batch and free letters) when the other operand is a constant that can absorb a
    permutation of the summed index per free index — one-to-one for each context.
    Returns ``{letter: (function tensor, argument letters)}``.
    """
    shape = v.shape
    m = v.moves[g] if v.moves is not None else torch.arange(v.numel)
    src = coordinates(m, shape)
    pos = {ch: i for i, ch in enumerate(letters)}
    context = summed_context if summed_context is not None else batch
    result: dict[str, Any] = {}
    for group_letters, allowed_letters in (
        (batch, batch),
        (free, batch + free),
        (summed, context + summed),
    ):
        allowed = {pos[c] for c in allowed_letters if c in pos}
        for ch in group_letters:
            if ch not in pos:
                continue
            c = src[pos[ch]]
            if not depends_only_on(c, shape, allowed):
                raise Breaks(
                    f"{what}: the group moves entries of an operand across its index {ch} depending on other "
                    "indices, so the product does not move with the input"
                )
            args = [a for a in letters if pos[a] in allowed]
            index = tuple(slice(None) if i in allowed else 0 for i in range(len(shape)))
            func = c.reshape(shape)[index]
            result[ch] = (func, "".join(args))
    if summed:
        ssz = [sizes[c] for c in summed]
        ctx = [c for c in context if c in pos]
        flat = flat_index(
            [_on_grid(result[c], "".join(ctx + summed), sizes).reshape(-1) for c in summed],
            tuple(ssz),
        )
        rows = flat.reshape(-1, _numel(ssz))
        if not bool((rows.sort(dim=1).values == torch.arange(_numel(ssz))).all()):
            raise Unverifiable(f"{what}: the group does not permute the summed entries one-to-one")
    return result


def _absorb_constant(
    b: Constant,
    lb: str,
    batch: list[str],
    free: list[str],
    summed: list[str],
    sizes: dict[str, int],
    fa: dict[str, Any],
    what: str,
    free_a: list[str] | None = None,
) -> dict[str, Any]:
    """Free-letter functions of a constant operand that absorbs the moving operand's permutation.

    For every context ``c`` (batch and the moving operand's free indices) the summed
    index moves by a permutation ``τ_c``; needs an index ``j'`` per ``(c, j)`` with
    ``b[β(c), k', j'] = b[c, τ_c⁻¹(k'), j]`` for all ``k'`` (values equal in both draws).
    """
    b_batch = [c for c in batch if c in lb]
    if [c for c in batch if c not in lb]:
        raise Unverifiable(f"{what}: a batch index missing from one operand")
    ctx = b_batch + list(free_a or [])
    order = b_batch + summed + free
    perm = [lb.index(c) for c in order]
    cls = constant_classes(b).reshape(tuple(int(s) for s in b.first.shape)).permute(perm)
    nb = _numel([sizes[c] for c in b_batch])
    nk = _numel([sizes[c] for c in summed])
    nj = _numel([sizes[c] for c in free])
    nctx = _numel([sizes[c] for c in ctx])
    cls3 = cls.reshape(nb, nk, nj)
    ctx_s = "".join(ctx)
    # the batch index of B for each context, and where the group sends it (β)
    bidx = (
        flat_index(
            [g.reshape(-1) for g in (_grid(ctx_s, sizes)[c] for c in b_batch)],
            tuple(sizes[c] for c in b_batch),
        )
        if b_batch
        else torch.zeros(nctx, dtype=torch.long)
    )
    if b_batch:
        beta = flat_index(
            [_on_grid(fa[c], ctx_s, sizes).reshape(-1) for c in b_batch],
            tuple(sizes[c] for c in b_batch),
        )
    else:
        beta = torch.zeros(nctx, dtype=torch.long)
    if summed:
        tau = flat_index(
            [_on_grid(fa[c], ctx_s + "".join(summed), sizes).reshape(-1) for c in summed],
            tuple(sizes[c] for c in summed),
        ).reshape(nctx, nk)
    else:
        tau = torch.zeros(nctx, 0, dtype=torch.long)
    identity = bool(torch.equal(beta, bidx)) and bool(
        torch.equal(tau, torch.arange(nk).expand(nctx, nk))
    )
    if identity:
        gamma = torch.arange(nj).expand(nctx, nj)
    else:
        # contexts that move the same way need one look-up: usually a handful of distinct (b, β, τ)
        combo = torch.cat([bidx[:, None], beta[:, None], tau], dim=1)
        distinct, which = torch.unique(combo, dim=0, return_inverse=True)
        ub, ubeta, utau = distinct[:, 0], distinct[:, 1], distinct[:, 2:]
        nu = distinct.shape[0]
        tau_inv = torch.argsort(utau, dim=1)
        # the column of b at (context, j) read through τ⁻¹: moved[c, k', j] = cls3[b(c), τ_c⁻¹(k'), j]
        moved = torch.gather(cls3[ub], 1, tau_inv[:, :, None].expand(nu, nk, nj))
        keys = torch.cat(
            [
                torch.arange(nb)[:, None].expand(nb, nj).reshape(-1, 1),
                cls3.permute(0, 2, 1).reshape(nb * nj, nk),
            ],
            dim=1,
        )
        targets = torch.cat(
            [
                ubeta[:, None].expand(nu, nj).reshape(-1, 1),
                moved.permute(0, 2, 1).reshape(nu * nj, nk),
            ],
            dim=1,
        )
        found = lookup_rows(keys, targets)
        if found is None:
            raise Breaks(
                f"{what}: a weight of shape {tuple(b.first.shape)} is not invariant under the way the group permutes "
                "the summed index (e.g. an unconstrained convolution kernel under rotations)"
            )
        gamma = (found % max(nj, 1)).reshape(nu, nj)[which]
    # γ as per-letter functions of (context, free)
    free_sizes = tuple(sizes[c] for c in free)
    gcoords = coordinates(gamma.reshape(-1), free_sizes) if free else []
    out: dict[str, Any] = {}
    shape_cf = [sizes[c] for c in ctx] + list(free_sizes)
    for c, t in zip(free, gcoords):
        out[c] = (t.reshape(shape_cf), ctx_s + "".join(free))
    return out
