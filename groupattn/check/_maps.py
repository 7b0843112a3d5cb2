"""Small exact tools on gather maps: value classes, row look-up, coordinates, dependence."""

from __future__ import annotations

from typing import Any

import torch

__all__ = [
    "constant_classes",
    "coordinates",
    "dense_ids",
    "depends_only_on",
    "flat_index",
    "lookup_rows",
    "value_classes",
]


def dense_ids(columns: torch.Tensor) -> torch.Tensor:
    """Long ids ``(n,)`` for the rows of ``columns`` ``(n, k)``: equal exactly when the rows are equal.

    Combines one column at a time through one-dimensional ``unique`` (fast), never
    hashing, so equal ids always mean equal rows.
    """
    n = columns.shape[0]
    if columns.shape[1] == 0:
        return torch.zeros(n, dtype=torch.long)
    ids = torch.unique(columns[:, 0], return_inverse=True)[1]
    for c in range(1, columns.shape[1]):
        col = torch.unique(columns[:, c], return_inverse=True)[1]
        width = int(col.max()) + 1 if n else 1
        ids = torch.unique(ids * width + col, return_inverse=True)[1]
    return ids


#: Entries of a constant whose values agree to about this relative precision (30 bits of
#: mantissa) under both random parameter draws count as equal: the same function of the
#: parameters summed in another order (e.g. a kernel averaged over its rotations)
#: differs only by rounding. Bins are fixed per value: distinct values never chain.
VALUE_TOLERANCE = 1e-9


def _tolerant_ids(values: torch.Tensor) -> torch.Tensor:
    """Ids equal for values that agree to about 30 significant bits (≈ 1e-9 relative).

    Each float64 is rounded to 30 bits of mantissa (its bit pattern with the low 22 bits
    rounded away): a relative bin per value, so small entries are never merged because a
    large one sits in the same constant, and bins are fixed, so distinct values never
    chain together. Exact equality always gives one id; non-finite values are kept apart.
    """
    v = values.to(torch.float64) + 0.0  # -0.0 → 0.0
    bits = v.view(torch.int64)
    rounded = torch.bitwise_and(bits + (1 << 21), ~((1 << 22) - 1))
    finite = torch.isfinite(v)
    key = torch.where(finite, rounded, bits)
    return torch.unique(key, return_inverse=True)[1]


def constant_classes(c: Any) -> torch.Tensor:
    """Value classes of a ``Constant``: equal in every evaluation (both
    random draws and the current parameters), exactly when the constant is exact."""
    return value_classes(c.first, c.second, c.third, exact=c.exact)


def value_classes(
    first: torch.Tensor,
    second: torch.Tensor,
    third: torch.Tensor | None = None,
    exact: bool = False,
) -> torch.Tensor:
    """Long ids, one per entry, equal when both draws agree on the two entries.

    Floating-point values agree when they are within ``VALUE_TOLERANCE`` of each
    other (relative); NaN entries compare equal to each other, and so do infinities
    of one sign.
    """
    values = [first.detach().reshape(-1), second.detach().reshape(-1)]
    if third is not None:
        values.append(
            third.detach().reshape(-1).to(values[0].dtype)
            if third.shape == first.shape
            else third.detach().expand(first.shape).reshape(-1)
        )
    cols = []
    for v in values:
        cols.extend([v.real, v.imag] if v.is_complex() else [v])
    ids = []
    for c in cols:
        c = c.to(torch.float64)
        c = torch.where(torch.isnan(c), torch.full_like(c, 1.2345678e300), c) + 0.0
        ids.append(torch.unique(c, return_inverse=True)[1] if exact else _tolerant_ids(c))
    return dense_ids(torch.stack(ids, dim=1))


def lookup_rows(keys: torch.Tensor, targets: torch.Tensor) -> torch.Tensor | None:
    """For each row of ``targets`` the index of a row of ``keys`` equal to it.

    Parameters
    ----------
    keys, targets
        Long tensors ``(n, k)`` and ``(m, k)``.

    Returns
    -------
    torch.Tensor or None
        Long ``(m,)``; ``None`` when some target row is not among the keys.
    """
    n = keys.shape[0]
    if keys.shape[1] != 1:
        ids = dense_ids(torch.cat([keys, targets], dim=0))
        keys, targets = ids[:n, None], ids[n:, None]
    k = keys[:, 0]
    t = targets[:, 0]
    if n == 0:
        return None if t.numel() else torch.zeros(0, dtype=torch.long)
    order = torch.argsort(k, stable=True)
    sorted_keys = k[order]
    pos = torch.searchsorted(sorted_keys, t).clamp(max=n - 1)
    if not bool((sorted_keys[pos] == t).all()):
        return None
    return order[pos]


def coordinates(flat: torch.Tensor, shape: tuple[int, ...]) -> list[torch.Tensor]:
    """Per-dimension coordinates of flat (row-major) indices into ``shape``."""
    coords: list[torch.Tensor] = []
    rest = flat
    for size in reversed(shape):
        coords.append(rest % size if size > 0 else rest)
        rest = torch.div(rest, size, rounding_mode="floor") if size > 0 else rest
    coords.reverse()
    return coords


def flat_index(coords: list[torch.Tensor], shape: tuple[int, ...]) -> torch.Tensor:
    """Row-major flat index of per-dimension coordinates."""
    out = torch.zeros_like(coords[0]) if coords else torch.zeros((), dtype=torch.long)
    for c, size in zip(coords, shape):
        out = out * size + c
    return out


def depends_only_on(values: torch.Tensor, shape: tuple[int, ...], allowed: set[int]) -> bool:
    """Whether ``values`` (one per entry of a tensor of ``shape``) is constant along every dim not in ``allowed``."""
    v = values.reshape(shape)
    for d in range(len(shape)):
        if d in allowed or shape[d] <= 1:
            continue
        if not bool((v == v.narrow(d, 0, 1)).all()):
            return False
    return True
