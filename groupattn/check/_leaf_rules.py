"""Declared contracts of leaf modules, and recognising a value's field type.

A leaf's contract speaks of a group ``G'`` acting on its input through a field type.
The checker finds, for each generator of the value's frame, the element of ``G'``
whose action (read off ``input_type.act`` on an index probe) equals the generator's
map; only when every generator has one is the contract applied. The output's maps
are then read off the declared output type's action.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from ..actions import FieldType, GridField, InvariantField, LiftedField, TokenField, point_group_of
from ..contracts import ContractError, Status, contract_of
from ..groups import (
    FiniteGroup,
    Group,
    GroupElement,
    GroupError,
    RotoTranslationGroup,
    TorusTranslations,
)
from ._export import LeafCall
from ._values import (
    Breaks,
    Constant,
    Frame,
    FrameValue,
    Moving,
    SampleGenerator,
    Unverifiable,
    restrict_to_sample,
)

__all__ = ["action_map", "candidate_groups", "leaf_rule", "match_elements", "recognise"]

#: Groups up to this order are searched element by element when matching maps.
SEARCH_LIMIT = 256
_ACTION_CACHE: dict[tuple[Any, ...], torch.Tensor | None] = {}


def action_map(
    field: FieldType, group: Group, g: Any, shape: tuple[int, ...]
) -> torch.Tensor | None:
    """The gather map of ``field.act(group, g, ·)`` on a tensor of ``shape`` (``None`` if it is not a permutation)."""
    try:
        key: tuple[Any, ...] | None = (
            field,
            group,
            group.element(g).value if not isinstance(g, GroupElement) else g.value,
            tuple(shape),
        )
        hash(key)
    except Exception:
        key = None
    if key is not None and key in _ACTION_CACHE:
        return _ACTION_CACHE[key]
    result = _action_map(field, group, g, shape)
    if key is not None:
        if len(_ACTION_CACHE) > 4096:
            _ACTION_CACHE.clear()
        _ACTION_CACHE[key] = result
    return result


def _action_map(
    field: FieldType, group: Group, g: Any, shape: tuple[int, ...]
) -> torch.Tensor | None:
    n = math.prod(shape)
    probe = torch.arange(n, dtype=torch.float64).reshape(shape)
    try:
        moved = field.act(group, g, probe)
    except (GroupError, ValueError, RuntimeError, IndexError, TypeError, NotImplementedError):
        return None
    if tuple(moved.shape) != tuple(shape):
        return None
    flat = moved.reshape(-1)
    if not bool((flat == flat.round()).all()):
        return None
    return flat.long()


def candidate_groups(group: Group, shape: tuple[int, ...]) -> list[Group]:
    """``group``, and for translations the torus of a grid in ``shape`` that the group's grid covers."""
    out = [group]
    if isinstance(group, TorusTranslations) and len(shape) >= 2:
        pixels = (group.height * group.stride, group.width * group.stride)
        grids = set()
        if len(shape) >= 4:
            grids.add((int(shape[-2]), int(shape[-1])))
        if len(shape) == 3:
            side = math.isqrt(int(shape[1]))
            if side * side == int(shape[1]):
                grids.add((side, side))
        for h, w in sorted(grids):
            if h and w and pixels[0] % h == 0 and pixels[1] % w == 0:
                try:
                    candidate = TorusTranslations(h, w)
                except GroupError:
                    continue
                if candidate != group:
                    out.append(candidate)
    if isinstance(group, RotoTranslationGroup) and group.size is not None and len(shape) >= 4:
        # roto-translations of a coarse square grid (patch tokens of a finer image): the
        # group's action on it is checked map by map in ``match_elements``
        side = int(shape[-1])
        if side == int(shape[-2]) and side and side != group.size and group.size % side == 0:
            try:
                out.append(RotoTranslationGroup(group.point_group, side))
            except GroupError:
                pass
    return out


def generator_map(
    field: FieldType, group: Group, element: Any, shape: tuple[int, ...], generator: Any
) -> torch.Tensor | None:
    """The map of ``element`` by ``field``, restricted to one sample for a ``SampleGenerator``."""
    m = action_map(field, group, element, shape)
    if m is None or not isinstance(generator, SampleGenerator):
        return m
    return restrict_to_sample(m, shape, generator.sample)


def _base(generator: Any) -> GroupElement:
    return generator.element if isinstance(generator, SampleGenerator) else generator


def _element_guesses(frame_group: Group, g: GroupElement, target: Group) -> list[GroupElement]:
    guesses: list[GroupElement] = []
    try:
        guesses.append(target.element(g.value))
    except (GroupError, ValueError, TypeError):
        pass
    if isinstance(frame_group, TorusTranslations) and isinstance(target, TorusTranslations):
        sy, sx = frame_group.height // target.height, frame_group.width // target.width
        dy, dx = g.value
        if sy and sx and dy % sy == 0 and dx % sx == 0:
            try:
                guesses.append(target.element((dy // sy, dx // sx)))
            except (GroupError, ValueError):
                pass
    if (
        isinstance(frame_group, RotoTranslationGroup)
        and isinstance(target, RotoTranslationGroup)
        and frame_group.size is not None
        and target.size
        and frame_group.size % target.size == 0
    ):
        c = frame_group.size // target.size
        (dy, dx), h = g.value
        if dy % c == 0 and dx % c == 0:
            try:
                guesses.append(target.element(((dy // c, dx // c), h)))
            except (GroupError, ValueError):
                pass
    return guesses


def match_elements(
    field: FieldType,
    frame: Frame,
    maps: list[torch.Tensor] | None,
    shape: tuple[int, ...],
    target: Group,
    search: bool = True,
    copies: torch.Tensor | None = None,
) -> list[GroupElement] | None:
    """Elements of ``target`` acting (by ``field``) as each generator's map, or ``None``.

    The element with the generator's own value (or its value on a coarser torus) is
    tried first; with ``search`` a small group is then searched element by element. A
    leaf's contract holds for any element whose action matches, so leaves search;
    naming the output's type does not (the certificate promises that the output moves
    by the *same* element as the input). ``copies`` (for a value that repeats entries,
    see ``_semantics.copy_classes``): two maps match when they pick copies of the same
    entries — equal values for every input.
    """
    n = math.prod(shape)
    ident = torch.arange(n)
    found: list[GroupElement] = []
    cache: list[tuple[GroupElement, torch.Tensor]] | None = None

    def same(m: torch.Tensor, want: torch.Tensor) -> bool:
        if torch.equal(m, want):
            return True
        return copies is not None and m.shape == want.shape and torch.equal(copies[m], copies[want])

    for k, gen in enumerate(frame.generators):
        g = _base(gen)
        want = maps[k] if maps is not None else ident
        hit = None
        for e in _element_guesses(frame.group, g, target):
            m = generator_map(field, target, e, shape, gen)
            if m is not None and same(m, want):
                hit = e
                break
        if hit is None and search and isinstance(target, FiniteGroup):
            try:
                small = target.order() <= SEARCH_LIMIT
            except GroupError:
                small = False
            if small:
                if cache is None:
                    cache = []
                    for e in target.elements():
                        m = action_map(field, target, e, shape)
                        if m is not None:
                            cache.append((e, m))
                if isinstance(gen, SampleGenerator):
                    hit = next(
                        (
                            e
                            for e, m in cache
                            if torch.equal(restrict_to_sample(m, shape, gen.sample), want)
                        ),
                        None,
                    )
                else:
                    hit = next((e for e, m in cache if same(m, want)), None)
        if hit is None:
            return None
        found.append(hit)
    return found


def _standard_types(shape: tuple[int, ...], group: Group) -> list[FieldType]:
    types: list[FieldType] = []
    try:
        pg = point_group_of(group)
    except GroupError:
        pg = None
    if len(shape) == 4:
        types.append(GridField())
    if len(shape) == 5 and pg is not None and shape[2] == pg.order():
        types.append(LiftedField(pg))
    if len(shape) == 3:
        side = math.isqrt(int(shape[1]))
        if side * side == int(shape[1]):
            types.append(TokenField((side, side)))
        if pg is not None and shape[1] % pg.order() == 0:
            rest = shape[1] // pg.order()
            s2 = math.isqrt(rest)
            if s2 * s2 == rest:
                types.append(TokenField((s2, s2), point_group=pg))
    return types


def recognise(
    value: Moving, preferred: list[tuple[FieldType, Group]]
) -> tuple[FieldType, Group, list[GroupElement]] | None:
    """A standard field type and group whose action matches the value's maps."""
    frame = value.frame
    candidates = list(preferred)
    for g in candidate_groups(frame.group, value.shape):
        for t in _standard_types(value.shape, g):
            candidates.append((t, g))
    copies = _copies(value)
    for field, group in candidates:
        elems = match_elements(
            field, frame, value.moves, value.shape, group, search=False, copies=copies
        )
        if elems is not None:
            return field, group, elems
    return None


def _copies(value: Moving) -> torch.Tensor | None:
    from ._semantics import copy_classes

    return copy_classes(value)


def _declared_input(module: Any, group: Group) -> FieldType | None:
    try:
        c = contract_of(module, group, None)
    except (ContractError, GroupError, ValueError):
        return None
    t = c.input_type[0] if isinstance(c.input_type, tuple) else c.input_type
    return t if isinstance(t, FieldType) else None


def leaf_rule(
    name: str, leaf: LeafCall, inputs: list[Any], out_meta: Any, frame_counter: list[int]
) -> Any:
    """Apply a leaf module's declared contract to its input values."""
    from ._propagate import new_frame

    module: Any = leaf.module
    label = f"{name} ({leaf.path}: {type(module).__name__})"
    tensors = inputs
    if not tensors:
        raise Unverifiable(f"{label}: no tensor input")
    x = tensors[0]
    metas = list(out_meta) if isinstance(out_meta, list | tuple) else [out_meta]
    if isinstance(x, Constant):
        raise Unverifiable(f"{label}: its input does not depend on the network's input")
    if not isinstance(x, Moving):
        raise Unverifiable(f"{label}: its input is not a tracked tensor")
    validate: Any = getattr(module, "validate_contract_state", None)
    frame = x.frame
    if x.invariant:
        # nothing moves its input; a deterministic module's output does not move either
        if any(isinstance(v, FrameValue) for v in tensors[1:]):
            raise Unverifiable(f"{label}: restores a frame for an input that does not move")
        return [Moving(tuple(int(s) for s in m.shape), m.dtype, frame, None) for m in metas]
    last_error = "no group it declares a contract for acts on its input like this"
    for group in candidate_groups(frame.group, x.shape):
        try:
            stated = contract_of(module, group, None)
        except (ContractError, GroupError, ValueError):
            stated = None
        if stated is not None and stated.kind == Status.BROKEN:
            raise Breaks(f"{label}: {stated.reason or 'declares that it breaks equivariance'}")
        in_type = _declared_input(module, group)
        if in_type is None:
            continue
        elems = match_elements(in_type, frame, x.moves, x.shape, group, copies=_copies(x))
        if elems is None:
            last_error = (
                f"its input does not move as the declared {in_type.describe()} under {group.name}"
            )
            continue
        try:
            contract = contract_of(module, group, in_type)
        except (ContractError, GroupError, ValueError) as err:
            last_error = str(err)
            continue
        if callable(validate):
            problem = validate(group)
            if problem:
                raise Breaks(f"{label}: {problem}")
        kind = contract.kind
        if kind == Status.BROKEN:
            raise Breaks(f"{label}: {contract.reason or 'declares that it breaks equivariance'}")
        if kind == Status.UNVERIFIED:
            last_error = contract.reason or "promises nothing"
            continue
        others = tensors[1:]
        if kind == Status.FRAME_RESTORING:
            return _restore(label, contract, group, x, others, metas)
        for other in others:
            if isinstance(other, FrameValue):
                raise Unverifiable(f"{label}: uses a canonicalizer's frame as data")
            if isinstance(other, Moving) and not other.invariant and other is not x:
                raise Unverifiable(
                    f"{label}: several moving tensor inputs; the contract speaks of the first only"
                )
        out_group = contract.output_group or group
        main_shape = tuple(int(s) for s in metas[0].shape)
        if kind == Status.INVARIANT:
            return [Moving(tuple(int(s) for s in m.shape), m.dtype, frame, None) for m in metas]
        out_type = contract.output_type
        if out_type is None:
            raise Unverifiable(f"{label}: its contract names no output type")
        if kind == Status.EQUIVARIANT:
            maps = []
            for e, gen in zip(elems, frame.generators):
                try:
                    oe = out_group.element(e.value) if out_group is not group else e
                except (GroupError, ValueError) as err:
                    raise Unverifiable(
                        f"{label}: cannot carry {e!r} to the output group {out_group.name} ({err})"
                    ) from err
                m = generator_map(out_type, out_group, oe, main_shape, gen)
                if m is None:
                    raise Unverifiable(
                        f"{label}: its declared output type {out_type.describe()} does not fit shape {main_shape}"
                    )
                maps.append(m)
            main = Moving(main_shape, metas[0].dtype, frame, maps).normalised()
            rest = [_untracked(label, m) for m in metas[1:]]
            return [main, *rest]
        if kind == Status.CANONICALIZING:
            new = new_frame(
                frame_counter, out_group, name, frame, main_shape[0] if main_shape else 1
            )
            maps = []
            for gen in new.generators:
                m = generator_map(out_type, out_group, _base(gen), main_shape, gen)
                if m is None:
                    raise Unverifiable(
                        f"{label}: its declared output type {out_type.describe()} does not fit shape {main_shape}"
                    )
                maps.append(m)
            main = Moving(main_shape, metas[0].dtype, new, maps).normalised()
            if len(metas) == 3:  # Canonicalized(output, frame, margin)
                margin = Moving(tuple(int(s) for s in metas[2].shape), metas[2].dtype, frame, None)
                return [main, FrameValue(new, tuple(int(s) for s in metas[1].shape)), margin]
            return [main, *[_untracked(label, m) for m in metas[1:]]]
        last_error = f"a contract of kind {kind.value} is not supported"
    raise Unverifiable(f"{label}: {last_error}")


def _untracked(label: str, meta: Any) -> Any:
    from ._aten import Poison

    return Poison(f"an extra output of {label}")


def _restore(
    label: str, contract: Any, group: Group, x: Moving, others: list[Any], metas: list[Any]
) -> Any:
    frame_arg = next((o for o in others if isinstance(o, FrameValue)), None)
    if frame_arg is None:
        raise Unverifiable(f"{label}: its frame argument is not a canonicalizer's frame")
    frame = frame_arg.frame
    if x.frame is not frame:
        raise Breaks(
            f"{label}: restores {frame.describe()} but its input is in {x.frame.describe()}"
        )
    parent = frame.parent
    if parent is None:
        raise Unverifiable(f"{label}: the frame has no parent")
    out_type = contract.output_type
    if out_type is None:
        raise Unverifiable(f"{label}: its contract names no output type")
    main_shape = tuple(int(s) for s in metas[0].shape)
    restored_group = contract.output_group or parent.group
    maps = []
    for gen in parent.generators:
        try:
            e = (
                restored_group.element(gen.value)
                if restored_group is not parent.group
                else _base(gen)
            )
        except (GroupError, ValueError) as err:
            raise Unverifiable(f"{label}: cannot restore {parent.group.name} ({err})") from err
        m = generator_map(out_type, restored_group, e, main_shape, gen)
        if m is None:
            raise Unverifiable(
                f"{label}: its declared output type {out_type.describe()} does not fit shape {main_shape}"
            )
        maps.append(m)
    main = Moving(main_shape, metas[0].dtype, parent, maps).normalised()
    return [main, *[_untracked(label, m) for m in metas[1:]]]


def _unused(_: InvariantField) -> None:  # pragma: no cover
    return None
