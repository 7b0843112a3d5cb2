"""Positional encodings from the literature, each with a contract that says which symmetry it keeps.

* [`SinusoidalPositionalEncoding`][groupattn.positional.SinusoidalPositionalEncoding] — Vaswani et al. (2017), 2-D: absolute,
  added to the tokens; *breaks* every symmetry that moves a token.
* [`RotaryPositionalEncoding`][groupattn.positional.RotaryPositionalEncoding] — RoPE, Su et al. (2021), 2-D axial: rotates
  query and key channels by angles of the row and column. ``mode="plane"`` (RoPE's
  frequencies): ``q·k`` depends on the planar offset ``j − i`` only, which the torus's
  wrap-around breaks; ``mode="torus"`` (frequencies that are multiples of ``2π/h`` and
  ``2π/w``): ``q·k`` depends on ``(j − i) mod (h, w)`` only, so attention is exactly
  equivariant to circular shifts. [`RotarySelfAttention`][groupattn.positional.RotarySelfAttention] is a global
  attention layer that uses it; [`apply_rotary`][groupattn.positional.apply_rotary] is the rotation itself.
* [`ALiBiBias`][groupattn.positional.ALiBiBias] — Press et al. (2022): a fixed bias ``−m_h · dist(i, j)`` with
  per-head slopes, Euclidean distance in the plane or on the torus.
* [`LogSpacedContinuousBias`][groupattn.positional.LogSpacedContinuousBias] — Liu et al. (SwinV2, 2022): an MLP of the
  log-spaced relative coordinates, optionally circular and optionally averaged over D4.

Every pairwise positional term here is read by a long label per token pair (the
biases gather a table like [`PairTableBias`][groupattn.positional.PairTableBias]; RoPE's relative rotation has
labels too), and
every contract is decided exactly from those labels by
[`labels_contract`][groupattn.positional.labels_contract] — for every group the token layout can act with
(translations of the torus, C4, D4, p4, p4m, …): *invariant* (the attention that uses
it is *equivariant*) exactly when every generator preserves the labels, *breaks* with a
witness pair otherwise, *unknown* when the layout does not say how the group moves the
tokens.

Every contract is decided from the module's construction-time settings (read-only
afterwards: assigning one raises ``AttributeError``) and from the fixed tables it
computes with; a table that differs from the one its settings define makes the
contract *unknown*. The fixed tables are non-persistent buffers that ``load_state_dict``
(and ``reset_tables``) recompute, so ``meta`` → ``to_empty`` → ``load_state_dict`` gives
the original module. Every constructor refuses, before allocating, tables over
``default_max_memory`` (and announces them to model sizing through ``reserve``).
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable, Mapping
from typing import Any, Generic, Literal, TypeVar, cast, overload

import torch
from einops import rearrange
from torch import nn

from .._errors import ConfigurationError, DtypeError, ShapeError
from .._resources import default_max_memory, format_bytes, reserve, tensor_bytes
from ..actions import FieldType, TokenField, check_grid
from ..contracts import Contract, EquivariantModule, Status
from ..groups import Group, GroupError, TorusTranslations
from ._orbital import IndexedTable, labels_contract, token_permutation

__all__ = [
    "ALiBiBias",
    "LogSpacedContinuousBias",
    "RotaryPositionalEncoding",
    "RotarySelfAttention",
    "SinusoidalPositionalEncoding",
    "apply_rotary",
]

Mode = Literal["plane", "torus"]

#: The wavelength base of the sinusoidal encoding and of RoPE's planar frequencies.
_BASE = 10000.0

_T = TypeVar("_T")

#: Bytes of one int64 (or float64) entry.
_WORD = 8


class _Fixed(Generic[_T]):
    """A construction-time setting: assigned once in ``__init__``, read-only afterwards.

    The contract of every class of this module is decided from its settings (grid,
    mode, width, …) and its fixed tables are computed from them at construction: a
    later assignment would leave the tables of the old settings under a contract of the
    new ones. Assigning (or deleting) it again raises ``AttributeError`` naming the
    class; build a new module instead.
    """

    def __init__(self, doc: str) -> None:
        self.__doc__ = doc
        self.name = ""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    @overload
    def __get__(self, obj: None, objtype: type | None = None) -> _Fixed[_T]: ...

    @overload
    def __get__(self, obj: object, objtype: type | None = None) -> _T: ...

    def __get__(self, obj: object | None, objtype: type | None = None) -> _T | _Fixed[_T]:
        if obj is None:
            return self
        try:
            return cast(_T, obj.__dict__["_fixed_" + self.name])
        except KeyError:
            raise AttributeError(
                f"{type(obj).__name__}: {self.name} is not set yet (it is set in __init__)"
            ) from None

    def __set__(self, obj: object, value: _T) -> None:
        if "_fixed_" + self.name in obj.__dict__:
            _refuse_assignment(obj, self.name, value)
        obj.__dict__["_fixed_" + self.name] = value

    def __delete__(self, obj: object) -> None:
        _refuse_assignment(obj, self.name, None, deleting=True)


def _refuse_assignment(obj: object, name: str, value: object, deleting: bool = False) -> None:
    cls = type(obj).__name__
    got = f"del {name}" if deleting else f"{name} = {value!r}"
    raise AttributeError(
        f"{cls}: expected {name} to stay as constructed ({name}={getattr(obj, name)!r}: its tables "
        f"and its contract are computed from it), got {got}; build a new {cls} instead"
    )


def _check_memory(
    module: str, nbytes: int, what: str, hint: str = "a smaller grid or prefix"
) -> None:
    """Announce ``nbytes`` to model sizing (``reserve``) and refuse it over ``default_max_memory``.

    Called by every constructor of this module *before* it allocates its tables, with an
    estimate of the peak it will reach (tables, pair tables and their intermediates).

    Raises
    ------
    BudgetError
        While a model is being sized (``estimate_model_memory``) over its budget.
    ConfigurationError
        Over ``default_max_memory()`` (half of the machine's memory).
    """
    reserve(nbytes, f"{module}: {what}")
    limit = default_max_memory()
    if nbytes > limit:
        raise ConfigurationError(
            f"{module}: expected {what} to fit in the memory limit of {format_bytes(limit)} "
            f"(half of this machine's memory), got {format_bytes(nbytes)}; use {hint}"
        )


def _on_cpu(compute: Callable[[], _T]) -> _T:
    """Run ``compute`` with CPU as the default device (fixed tables are computed there, in float64)."""
    with torch.device("cpu"):
        return compute()


def _placed(table: torch.Tensor) -> torch.Tensor:
    """A CPU table moved to the default device (``meta`` inside ``with torch.device("meta")``)."""
    device = torch.get_default_device()
    return table if device.type == "cpu" else table.to(device)


def _labels_placed(labels: torch.Tensor) -> torch.Tensor:
    """CPU labels moved to the default device, except ``meta``: labels (integers computed from
    the settings, not a buffer) stay real, so a module built on ``meta`` has them after ``to_empty``."""
    device = torch.get_default_device()
    return labels if device.type in ("cpu", "meta") else labels.to(device)


def _same_table(actual: torch.Tensor, expected: torch.Tensor) -> bool:
    """Whether ``actual`` holds ``expected`` (float64, CPU), rounded to its own dtype.

    Exact equality with ``expected`` cast to ``actual``'s dtype, or — for a table cast
    through another dtype first (float64 → float32 → bfloat16) — within one unit in the
    last place of ``actual``'s dtype of each entry: nothing that changes what the module
    computes beyond the rounding of its dtype passes.
    """
    if actual.shape != expected.shape or not actual.is_floating_point():
        return False
    expected = expected.to(device=actual.device)
    if torch.equal(actual, expected.to(dtype=actual.dtype)):
        return True
    info = torch.finfo(actual.dtype)
    bound = info.eps * expected.abs().clamp_min(info.tiny)
    return bool(((actual.double() - expected).abs() <= bound).all())


def _stale_table(module: nn.Module, expected: Mapping[str, torch.Tensor]) -> str | None:
    """Why the module's fixed tables are not those its settings define (``None``: they are)."""
    for name, table in expected.items():
        actual = getattr(module, name)
        if actual.is_meta:
            return (
                f"its table {name} is on the meta device (no values): load a checkpoint or call "
                f"reset_tables() after to_empty()"
            )
        if not _same_table(actual, table):
            return (
                f"expected its table {name} to be the one its settings define, got a table that was "
                f"changed after construction (edited in place, left by to_empty(), or replaced); "
                f"call reset_tables() to recompute it"
            )
    return None


def _reset_tables(module: nn.Module, expected: Mapping[str, torch.Tensor]) -> None:
    """Copy the fixed tables ``expected`` (float64, CPU) into the module's buffers, in their dtype and device."""
    with torch.no_grad():
        for name, table in expected.items():
            actual = getattr(module, name)
            if actual.is_meta:
                continue  # no storage to fill: to_empty() first
            if actual.shape != table.shape:
                setattr(module, name, table.to(dtype=actual.dtype, device=actual.device))
            else:
                actual.copy_(table.to(device=actual.device))


# ----------------------------------------------------------------------------- helpers


def _check_mode(mode: Any, module: str) -> Mode:
    if mode not in ("plane", "torus"):
        raise ConfigurationError(f"{module}: expected mode 'plane' or 'torus', got {mode!r}")
    return cast(Mode, mode)


def _check_int(value: Any, module: str, what: str, minimum: int, multiple: int = 1) -> int:
    """``value`` as an int ``>= minimum`` divisible by ``multiple``, else a ConfigurationError."""
    try:
        number = operator.index(value)
    except TypeError:
        number = None
    if isinstance(value, bool) or number is None or number < minimum or number % multiple:
        condition = f"an int >= {minimum}" + (f" divisible by {multiple}" if multiple > 1 else "")
        raise ConfigurationError(f"{module}: expected {what} as {condition}, got {value!r}")
    return number


def _coordinates(grid: tuple[int, int]) -> tuple[torch.Tensor, torch.Tensor]:
    """``(ys, xs)``: the row and column of every token, row-major, long ``(h·w,)`` each."""
    h, w = grid
    ys, xs = torch.meshgrid(torch.arange(h), torch.arange(w), indexing="ij")
    return ys.reshape(-1), xs.reshape(-1)


def _pair_offsets(grid: tuple[int, int], mode: Mode) -> tuple[torch.Tensor, torch.Tensor]:
    """``(dy, dx)``, long ``(N, N)``: ``j − i`` per axis, in the plane or reduced mod ``(h, w)``."""
    ys, xs = _coordinates(grid)
    dy, dx = ys[None, :] - ys[:, None], xs[None, :] - xs[:, None]
    if mode == "torus":
        dy, dx = dy % grid[0], dx % grid[1]
    return dy, dx


def _compact(keys: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Labels ``0..K−1`` for the distinct rows of ``keys`` ``(..., F)``, and the distinct rows ``(K, F)``."""
    flat = keys.reshape(-1, keys.shape[-1])
    if flat.shape[1] == 1:  # the same labels, without the row sort's copies of every row
        unique, inverse = torch.unique(flat[:, 0], return_inverse=True)
        return inverse.reshape(keys.shape[:-1]), unique[:, None]
    unique, inverse = torch.unique(flat, dim=0, return_inverse=True)
    return inverse.reshape(keys.shape[:-1]), unique


def _as_layer_contract(pairs: Contract, field: FieldType, module: str) -> Contract:
    """The contract of an attention layer (tokens to tokens) from that of its pairwise positional term."""
    if pairs.kind == Status.INVARIANT:
        return Contract.equivariant(field, field)
    if pairs.kind == Status.BROKEN:
        return Contract.breaks(f"{module}: {pairs.reason}", field, field)
    return Contract.unknown(pairs.reason or f"{module}: promises nothing", field)


class _GridPairBias(IndexedTable):
    """A bias ``(heads, prefix + h·w, prefix + h·w)`` read from a ``(heads, K)`` table by a label per pair.

    The pair-table code path of [`PairTableBias`][groupattn.positional.PairTableBias] (a gather by the module's
    own labels, bias 0 on prefix rows and columns), for the encodings of this module,
    which never had the deprecated ``heads`` alias.
    """

    num_heads = _Fixed[int]("Number of attention heads (read-only).")
    prefix = _Fixed[int]("Leading non-grid tokens, bias 0 (read-only).")
    grid = _Fixed[tuple[int, int]]("Token grid ``(h, w)`` (read-only).")
    mode = _Fixed[Mode]('``"plane"`` or ``"torus"`` (read-only).')

    def __init__(
        self,
        grid: tuple[int, int],
        num_heads: int,
        mode: Mode,
        prefix: int,
        module: str,
        pair_tables: int,
        value_bytes: int,
    ) -> None:
        """Check and set the settings; refuse the pair tables and the bias over the memory limit.

        ``pair_tables`` is the peak number of ``(N, N)`` int64 tables the subclass allocates
        while computing its labels; ``value_bytes`` the bytes of one entry of the bias it
        returns, ``(heads, prefix + N, prefix + N)``.
        """
        super().__init__()
        num_heads = _check_int(num_heads, module, "num_heads", 1)
        prefix = _check_int(prefix, module, "prefix", 0)
        grid = check_grid(grid, module)
        mode = _check_mode(mode, module)
        n = grid[0] * grid[1]
        _check_memory(
            module,
            pair_tables * tensor_bytes((n, n), torch.int64),
            f"the labels of the {n}x{n} token pairs of a {grid[0]}x{grid[1]} grid",
        )
        _check_memory(
            module,
            num_heads * (prefix + n) ** 2 * value_bytes,
            f"the bias it returns, ({num_heads}, {prefix} + {n}, {prefix} + {n})",
        )
        self.num_heads, self.prefix, self.grid, self.mode = num_heads, prefix, grid, mode

    def _fixed_tables(self) -> dict[str, torch.Tensor]:
        """The fixed (non-learned) tables the settings define, float64 (none by default)."""
        return {}

    def reset_tables(self) -> None:
        """Recompute the fixed tables (non-persistent buffers) from the settings, in their dtype and device.

        ``load_state_dict`` calls this, so a module built on the ``meta`` device,
        materialised with ``to_empty`` and loaded from a checkpoint computes with the
        tables its settings define (a checkpoint holds no copy of them). Call it after
        ``to_empty`` without a checkpoint.
        """
        _reset_tables(self, _on_cpu(self._fixed_tables))

    def _load_from_state_dict(self, *args: Any, **kwargs: Any) -> None:
        super()._load_from_state_dict(*args, **kwargs)
        self.reset_tables()

    def _stale(self) -> Contract | None:
        """*Unknown* when a fixed table is not the one the settings define, else ``None``."""
        stale = _stale_table(self, _on_cpu(self._fixed_tables))
        if stale is None:
            return None
        field = TokenField(self.grid, prefix=self.prefix)
        return Contract.unknown(f"{type(self).__name__}: {stale}", field)

    def values(self) -> torch.Tensor:
        """``(heads, K)``: one value per label and head."""
        raise NotImplementedError

    def forward(self) -> torch.Tensor:  # documented by each class: () -> (heads, N', N')
        bias = self.gather(self.values())
        if self.prefix:
            bias = nn.functional.pad(bias, (self.prefix, 0, self.prefix, 0))
        return bias

    def _padded_labels(self) -> torch.Tensor:
        """``(prefix + N, prefix + N)`` labels on the CPU, ``-1`` on prefix rows and columns."""
        labels = self.pair_index.cpu()
        if self.prefix:
            labels = nn.functional.pad(labels, (self.prefix, 0, self.prefix, 0), value=-1)
        return labels


def _token_field(input_type: Any, default: TokenField) -> FieldType:
    return input_type if isinstance(input_type, FieldType) else default


def _other_input_type(module: str, expected: FieldType, got: Any) -> Contract:
    """*Unknown*: the contract is stated for ``expected`` only (the message tells the two apart)."""
    described = got.describe() if isinstance(got, FieldType) else repr(got)
    if described == expected.describe():  # equal descriptions of unequal types: show both
        described += f" ({got!r}, not equal to {expected!r})"
    return Contract.unknown(
        f"{module}: expected input type {expected.describe()}, got {described}", got
    )


# ----------------------------------------------------------------------------- sinusoidal


def sinusoidal_table(dim: int, grid: tuple[int, int]) -> torch.Tensor:
    """The 2-D sinusoidal encoding ``(h·w, dim)`` in float64 (row-major tokens).

    Channels ``[0, dim/2)`` encode the row ``y``, channels ``[dim/2, dim)`` the column
    ``x``, each as in Vaswani et al.: ``PE(p, 2k) = sin(p·ω_k)``, ``PE(p, 2k + 1) =
    cos(p·ω_k)`` with ``ω_k = 10000^(−2k / (dim/2))``.
    """
    half = dim // 2
    omega = _BASE ** (-torch.arange(0, half, 2, dtype=torch.float64) / half)  # (dim/4,)
    ys, xs = _coordinates(grid)

    def axis(p: torch.Tensor) -> torch.Tensor:
        angle = p.double()[:, None] * omega[None, :]
        return torch.stack([angle.sin(), angle.cos()], dim=-1).reshape(p.shape[0], half)

    return torch.cat([axis(ys), axis(xs)], dim=1)


class SinusoidalPositionalEncoding(EquivariantModule):
    """Fixed 2-D sinusoidal positional encoding (Vaswani et al., 2017), added to the tokens.

    Half of the channels encode the token's row, half its column, each with the
    interleaved ``sin``/``cos`` of the original Transformer: for a token at ``(y, x)``,
    ``PE[2k] = sin(y·ω_k)``, ``PE[2k + 1] = cos(y·ω_k)`` for ``k < dim/4`` and the same of
    ``x`` in the second half, ``ω_k = 10000^(−4k/dim)``. Prefix tokens (a class token)
    get no encoding. The table is a non-persistent float64 buffer, added in the input's
    dtype.

    An [`EquivariantModule`][groupattn.contracts.EquivariantModule] from ``TokenField(grid,
    prefix=prefix)`` to itself: calling it checks the input is ``(B, prefix + h·w, dim)``.

    Contract: *breaks* under every group that moves a grid token — translations of the
    torus, rotations and reflections of the grid (C4, D4), p4, p4m — since the encoding is
    absolute: no two positions get the same code (``sin`` and ``cos`` of an integer row
    at frequency 1 determine it), so ``x + PE`` cannot move with ``x``. *Equivariant*
    under a group that moves no token; *unknown* for a group the token layout cannot act
    with. Decided from the generators' token permutations
    ([`token_permutation`][groupattn.positional.token_permutation]); *unknown* when the table
    it adds is not the one its settings define (edited after construction). The settings
    are read-only; ``load_state_dict`` and ``reset_tables`` recompute the table.

    Shapes: ``(B, prefix + h·w, dim) → (B, prefix + h·w, dim)``.

    Parameters
    ----------
    dim
        Token width ``C``, a multiple of 4.
    grid
        Token grid ``(h, w)``.
    prefix
        Leading non-grid tokens (class token), left unchanged.

    Raises
    ------
    ConfigurationError
        For a ``dim`` that is not a positive multiple of 4, a bad grid or a negative prefix.

    Examples
    --------
    >>> import torch
    >>> pe = SinusoidalPositionalEncoding(8, (3, 3))
    >>> pe(torch.zeros(1, 9, 8))[0, 0].tolist()[:2]  # row 0: sin 0, cos 0
    [0.0, 1.0]
    """

    floating_input = True
    encoding: torch.Tensor
    dim = _Fixed[int]("Token width ``C`` (read-only).")
    grid = _Fixed[tuple[int, int]]("Token grid ``(h, w)`` (read-only).")
    prefix = _Fixed[int]("Leading non-grid tokens (read-only).")

    def __init__(self, dim: int, grid: tuple[int, int], prefix: int = 0) -> None:
        name = "SinusoidalPositionalEncoding"
        dim = _check_int(dim, name, "dim", 4, 4)
        prefix = _check_int(prefix, name, "prefix", 0)
        grid = check_grid(grid, name)
        n = grid[0] * grid[1]
        # the table (prefix + N, dim), its unpadded copy, the angles, sin, cos and their stack
        _check_memory(
            name,
            tensor_bytes((prefix + n, dim), torch.float64) * 2 + 4 * _WORD * n * dim,
            f"the table of {prefix} + {grid[0]}x{grid[1]} tokens of width {dim}",
        )
        field = TokenField(grid, prefix=prefix)
        super().__init__(field, field, in_channels=dim)
        self.dim, self.grid, self.prefix = dim, grid, prefix
        self.register_buffer(
            "encoding", _placed(_on_cpu(self._fixed_tables)["encoding"]), persistent=False
        )

    def _fixed_tables(self) -> dict[str, torch.Tensor]:
        """The tables the settings define, float64 on the default device: ``encoding``."""
        table = nn.functional.pad(sinusoidal_table(self.dim, self.grid), (0, 0, self.prefix, 0))
        return {"encoding": table.unsqueeze(0)}

    def reset_tables(self) -> None:
        """Recompute the fixed table ``encoding`` from the settings, in its dtype and device.

        The table is a non-persistent buffer (checkpoints hold no copy of what the settings
        define); ``load_state_dict`` calls this, so a module built on the ``meta``
        device, materialised with ``to_empty`` and loaded from a checkpoint computes
        with the right table. Call it after ``to_empty`` without a checkpoint.
        """
        _reset_tables(self, _on_cpu(self._fixed_tables))

    def _load_from_state_dict(self, *args: Any, **kwargs: Any) -> None:
        super()._load_from_state_dict(*args, **kwargs)
        self.reset_tables()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Add the encoding (the input is checked before, see the class docstring)."""
        return x + self.encoding.to(dtype=x.dtype)

    def contract(self, group: Group, input_type: Any = None) -> Contract:
        """Breaks under every group that moves a token (see the class docstring).

        *Unknown* when the table it adds is not the one its settings define (edited
        after construction).
        """
        name = "SinusoidalPositionalEncoding"
        if input_type is not None and input_type != self.in_type:
            return _other_input_type(name, self.in_type, input_type)
        field = self.in_type
        stale = _stale_table(self, _on_cpu(self._fixed_tables))
        if stale is not None:
            return Contract.unknown(f"{name}: {stale}", field)
        n = self.prefix + self.grid[0] * self.grid[1]
        try:
            generators = group.generators()
            perms = [token_permutation(field, group, g, n) for g in generators]
        except (GroupError, ShapeError) as error:
            return Contract.unknown(f"{name}: promises nothing for {group.name} ({error})", field)
        identity = torch.arange(n)
        for g, p in zip(generators, perms):
            if not torch.equal(p, identity):
                i = int(torch.nonzero(p != identity)[0])
                return Contract.breaks(
                    f"{name}: an absolute (sinusoidal) encoding is not invariant under a group that "
                    f"moves tokens (under {group.name} the generator {g!r} moves token {i} to "
                    f"{int(p[i])}, whose code differs)",
                    field,
                    field,
                )
        return Contract.equivariant(field, field)

    def extra_repr(self) -> str:
        return f"dim={self.dim}, grid={self.grid}, prefix={self.prefix}"


# ----------------------------------------------------------------------------- RoPE


def apply_rotary(
    query: torch.Tensor,
    key: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    module: str = "apply_rotary",
) -> tuple[torch.Tensor, torch.Tensor]:
    """Rotate consecutive channel pairs of queries and keys by per-token angles (RoPE).

    For every token ``n`` and channel pair ``p`` (channels ``2p`` and ``2p + 1``),
    ``(a, b) ↦ (a·cos − b·sin, a·sin + b·cos)`` with ``cos = cos[n, p]``, ``sin =
    sin[n, p]``. Then ``q'_i · k'_j = q_i^T R(φ_j − φ_i) k_j``: the logits see only the
    angle differences. Computed in the queries' dtype.

    Parameters
    ----------
    query, key
        ``(..., N, d)`` with an even ``d`` (the same ``N`` and ``d``).
    cos, sin
        ``(N, d/2)``: cosine and sine of each token's angle per channel pair.
    module
        Name used in error messages.

    Returns
    -------
    tuple[torch.Tensor, torch.Tensor]
        The rotated query and key, shapes unchanged.

    Raises
    ------
    ShapeError
        For a query or key of rank < 2, an odd width, or tables that do not match the
        tokens and width.
    DtypeError
        For inputs that are not tensors, or integer or bool queries, keys or tables (never
        cast to an integer type).
    """
    _check_rotary_inputs(query, key, cos, sin, module)
    n, d = query.shape[-2], query.shape[-1]
    if cos.shape != (n, d // 2) or sin.shape != (n, d // 2):
        raise ShapeError(
            f"{module}: expected cos and sin of shape (N, d/2) = ({n}, {d // 2}) for a query of shape "
            f"{tuple(query.shape)}, got {tuple(cos.shape)} and {tuple(sin.shape)}"
        )
    cos, sin = cos.to(dtype=query.dtype), sin.to(dtype=query.dtype)
    return _rotate(query, cos, sin), _rotate(key, cos, sin)


def _check_rotary_inputs(
    query: Any, key: Any, cos: Any, sin: Any, module: str, tables: bool = True
) -> None:
    """Floating tensors; query and key ``(..., N, d)`` (rank >= 2) of equal ``N`` and ``d``, ``d`` even."""
    named = [("query", query), ("key", key)] + ([("cos", cos), ("sin", sin)] if tables else [])
    for what, tensor in named:
        if not isinstance(tensor, torch.Tensor):
            raise DtypeError(
                f"{module}: expected {what} as a floating-point torch.Tensor, got {type(tensor).__name__} "
                f"(convert it with torch.as_tensor(..., dtype=torch.float32) first)"
            )
        if not tensor.is_floating_point():
            raise DtypeError(
                f"{module}: expected a floating-point {what} (float32, float64, …), got {tensor.dtype}"
            )
    for what, tensor in (("query", query), ("key", key)):
        if tensor.dim() < 2:
            raise ShapeError(
                f"{module}: expected {what} of shape (..., N, d) (rank >= 2: tokens and channels), got "
                f"a tensor of shape {tuple(tensor.shape)}"
            )
    if query.shape[-1] % 2 or key.shape[-2:] != query.shape[-2:]:
        raise ShapeError(
            f"{module}: expected query and key (..., N, d) with the same N and an even d, got "
            f"{tuple(query.shape)} and {tuple(key.shape)}"
        )


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    a, b = x[..., 0::2], x[..., 1::2]
    return torch.stack([a * cos - b * sin, a * sin + b * cos], dim=-1).flatten(-2)


class RotaryPositionalEncoding(nn.Module):
    """2-D axial rotary position embedding (RoPE, Su et al., 2021) for queries and keys.

    The head width ``d`` is split in two: the first ``d/4`` channel pairs rotate by
    angles of the row ``y``, the last ``d/4`` by angles of the column ``x``, pair ``c``
    by ``ω_c · y`` (resp. ``ω_c · x``). After the rotation
    (``forward(q, k)``, [`apply_rotary`][groupattn.positional.apply_rotary]) the logit ``q'_i · k'_j =
    q_i^T R(j − i) k_j`` depends on the positions only through the offset ``j − i``.

    * ``mode="plane"`` — RoPE's frequencies ``ω_c = 10000^(−c/(d/4))`` (per axis):
      ``R`` is a function of the planar offset ``(y_j − y_i, x_j − x_i)``. Attention is
      equivariant to translations of the infinite plane, but on a finite ``h × w`` token
      torus a circular shift changes the planar offset of the pairs it wraps around.
    * ``mode="torus"`` — ``ω_c = 2π·m_c/h`` (rows) and ``2π·m_c/w`` (columns) with integer
      harmonics ``m_c = 1 + (c mod max(1, ⌊side/2⌋))``: the angles are periodic in the
      grid, ``R`` depends only on ``(j − i) mod (h, w)``, and attention is *exactly*
      equivariant to every circular shift. Angles are computed from integer residues
      ``(m_c·p) mod side``, so periodicity is exact in every dtype.

    Neither mode is rotation- or reflection-equivariant in general: ``R(Δ)`` for a
    rotated or reflected offset is another matrix (``R(−Δ) = R(Δ)ᵀ``).

    The tables ``cos``/``sin`` ``(h·w, d/2)`` are non-persistent float64 buffers (cast to
    the queries' dtype), computed from the settings ``head_dim``, ``grid`` and ``mode``
    (read-only after construction) and recomputed by ``load_state_dict`` and
    [`reset_tables`][groupattn.positional.RotaryPositionalEncoding.reset_tables]. [`relative_logits`][groupattn.positional.RotaryPositionalEncoding.relative_logits]
    computes the same logits from a table of the relative rotations ``R(j − i)``
    (``O(N²·d)`` memory), the form in which an operator-by-operator checker can see that
    they are invariant.

    Contract (of the positional information it gives attention, as for a pairwise
    bias): *invariant* under a group exactly when every generator preserves the pairs'
    relative rotations — torus mode under ``TorusTranslations(h, w)``; otherwise
    *breaks* with a witness pair (plane mode under translations of the torus; both
    modes under C4, D4, p4, p4m), or *unknown* if ``TokenField(grid)`` does not say how
    the group moves the tokens. Decided by [`labels_contract`][groupattn.positional.labels_contract],
    and only for the tables its settings define: *unknown* when ``cos``/``sin`` were
    changed after construction (edited in place, left uninitialised by ``to_empty``).

    Shapes: ``(B, heads, h·w, d), (B, heads, h·w, d) → (B, heads, h·w, d), (B, heads, h·w, d)``.

    Parameters
    ----------
    head_dim
        The query/key width per head ``d``, a multiple of 4.
    grid
        Token grid ``(h, w)``.
    mode
        ``"plane"`` (RoPE's frequencies) or ``"torus"`` (frequencies that fit the grid).

    Raises
    ------
    ConfigurationError
        For a ``head_dim`` that is not a positive multiple of 4, a bad grid or mode, or
        tables over the memory limit (``default_max_memory``).
    """

    cos: torch.Tensor
    sin: torch.Tensor
    head_dim = _Fixed[int]("The query/key width per head ``d`` (read-only).")
    grid = _Fixed[tuple[int, int]]("Token grid ``(h, w)`` (read-only).")
    mode = _Fixed[Mode]('``"plane"`` or ``"torus"``: the frequencies (read-only).')

    def __init__(self, head_dim: int, grid: tuple[int, int], mode: Mode = "plane") -> None:
        super().__init__()
        name = "RotaryPositionalEncoding"
        head_dim = _check_int(head_dim, name, "head_dim", 4, 4)
        grid = check_grid(grid, name)
        mode = _check_mode(mode, name)
        n = grid[0] * grid[1]
        # cos, sin and the angles (N, d/2), the per-axis angles and residues, the coordinates
        _check_memory(
            name,
            5 * tensor_bytes((n, head_dim // 2), torch.float64) + 4 * _WORD * n,
            f"the tables of {grid[0]}x{grid[1]} tokens of head width {head_dim}",
            "a smaller grid",
        )
        self.head_dim, self.grid, self.mode = head_dim, grid, mode
        tables = _on_cpu(self._fixed_tables)
        self.register_buffer("cos", _placed(tables["cos"]), persistent=False)
        self.register_buffer("sin", _placed(tables["sin"]), persistent=False)
        self._relative: dict[torch.device, tuple[torch.Tensor, torch.Tensor]] = {}

    def _fixed_tables(self) -> dict[str, torch.Tensor]:
        """The tables the settings define, float64 on the default device: ``cos`` and ``sin``."""
        ys, xs = _coordinates(self.grid)
        angles = torch.cat([self._angles(ys, 0), self._angles(xs, 1)], dim=1)  # (N, d/2)
        return {"cos": angles.cos(), "sin": angles.sin()}

    def reset_tables(self) -> None:
        """Recompute ``cos`` and ``sin`` from the settings, in their dtype and device.

        They are non-persistent buffers (a checkpoint holds no copy of what the settings
        define, and older checkpoints stay loadable); ``load_state_dict`` calls this, so a
        module built on the ``meta`` device, materialised with ``to_empty`` and loaded
        from a checkpoint rotates by the right angles. Call it after ``to_empty`` without
        a checkpoint.
        """
        _reset_tables(self, _on_cpu(self._fixed_tables))

    def _load_from_state_dict(self, *args: Any, **kwargs: Any) -> None:
        super()._load_from_state_dict(*args, **kwargs)
        self.reset_tables()

    @property
    def pairs_per_axis(self) -> int:
        """``d/4``: the channel pairs rotated by the row (and as many by the column)."""
        return self.head_dim // 4

    def harmonics(self, axis: int) -> torch.Tensor:
        """Torus mode: the integer multipliers ``m_c`` ``(d/4,)`` of ``2π/side`` along ``axis`` (0 rows, 1 columns)."""
        side = self.grid[axis]
        return 1 + torch.arange(self.pairs_per_axis) % max(1, side // 2)

    def frequencies(self, axis: int) -> torch.Tensor:
        """The angular frequencies ``ω_c`` ``(d/4,)`` float64 along ``axis`` (0 rows, 1 columns)."""
        if self.mode == "torus":
            return 2 * math.pi * self.harmonics(axis).double() / self.grid[axis]
        p = self.pairs_per_axis
        return _BASE ** (-torch.arange(p, dtype=torch.float64) / p)

    def _angles(self, offsets: torch.Tensor, axis: int) -> torch.Tensor:
        """``(…, d/4)`` float64 angles of integer offsets (reduced mod the side first on the torus)."""
        if self.mode == "torus":
            side = self.grid[axis]
            residue = (offsets[..., None] * self.harmonics(axis)) % side
            return 2 * math.pi * residue.double() / side
        return offsets[..., None].double() * self.frequencies(axis)

    def forward(self, query: torch.Tensor, key: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Rotate queries and keys ``(B, heads, h·w, d)`` by their tokens' angles.

        Raises
        ------
        ShapeError
            For queries or keys of another token count than ``h·w`` or another width
            than ``head_dim``.
        DtypeError
            For integer or bool queries or keys, or non-tensors.
        """
        name = "RotaryPositionalEncoding"
        self._check_tokens(query, key, name)
        return apply_rotary(query, key, self.cos, self.sin, module=name)

    def _check_tokens(self, query: Any, key: Any, name: str) -> None:
        _check_rotary_inputs(query, key, None, None, name, tables=False)
        (h, w), d = self.grid, self.head_dim
        if query.shape[-2] != h * w:
            raise ShapeError(
                f"{name}: expected N={h * w} tokens (the grid {h}x{w}), got {query.shape[-2]} "
                f"(query and key of shape {tuple(query.shape)})"
            )
        if query.shape[-1] != d:
            raise ShapeError(
                f"{name}: expected a head width d={d}, got {query.shape[-1]} (query and key of "
                f"shape {tuple(query.shape)})"
            )

    def pair_labels(self) -> torch.Tensor:
        """``(N, N)`` long: one label per distinct relative rotation ``R(j − i)`` of the pairs.

        Plane mode: the planar offset (``ω_0 = 1`` makes the angles of distinct integer
        offsets distinct); torus mode: the circular offset (``m_0 = 1``).
        """
        dy, dx = _pair_offsets(self.grid, self.mode)
        labels, _ = _compact(torch.stack([dy, dx], dim=-1))
        return labels

    def relative_tables(self) -> tuple[torch.Tensor, torch.Tensor]:
        """``cos`` and ``sin`` of the relative angles, float64 ``(N, N, d/2)`` (pair ``(i, j)``: ``φ_j − φ_i``).

        Computed from the integer offsets ``j − i`` (reduced mod the grid on the torus), so
        two pairs with the same relative rotation get bit-identical entries.
        """
        dy, dx = _pair_offsets(self.grid, self.mode)
        angles = torch.cat([self._angles(dy, 0), self._angles(dx, 1)], dim=-1)
        return angles.cos(), angles.sin()

    def relative_logits(self, query: torch.Tensor, key: torch.Tensor) -> torch.Tensor:
        """The logits ``q_i^T R(j − i) k_j`` of the rotated queries and keys, from relative rotations.

        Equal to ``q' k'ᵀ`` of ``forward`` (up to rounding) but computed as
        ``Σ_c (q_a k_a + q_b k_b)·cos δ + (q_b k_a − q_a k_b)·sin δ`` with the tables of
        [`relative_tables`][groupattn.positional.RotaryPositionalEncoding.relative_tables] (cached per device): no
        position-dependent factor touches a query or key alone. Memory ``O(B·heads·N²·d)``.

        Parameters
        ----------
        query, key
            ``(B, heads, h·w, d)``.

        Returns
        -------
        torch.Tensor
            ``(B, heads, h·w, h·w)``, not scaled by ``1/√d``.

        Raises
        ------
        ShapeError
            For queries and keys not ``(B, heads, h·w, head_dim)`` of equal shape.
        DtypeError
            For integer or bool queries or keys (as ``forward``).
        """
        n, d = self.grid[0] * self.grid[1], self.head_dim
        _check_rotary_inputs(query, key, None, None, "RotaryPositionalEncoding", tables=False)
        if query.dim() != 4 or query.shape[-2:] != (n, d) or key.shape != query.shape:
            raise ShapeError(
                f"RotaryPositionalEncoding: expected query and key (B, heads, N={n}, d={d}) of equal "
                f"shape, got {tuple(query.shape)} and {tuple(key.shape)}"
            )
        cos, sin = self._relative_on(query.device)
        cos, sin = cos.to(query.dtype), sin.to(query.dtype)
        qa, qb, ka, kb = query[..., 0::2], query[..., 1::2], key[..., 0::2], key[..., 1::2]
        same = torch.einsum("bhip,bhjp->bhijp", qa, ka) + torch.einsum("bhip,bhjp->bhijp", qb, kb)
        cross = torch.einsum("bhip,bhjp->bhijp", qb, ka) - torch.einsum("bhip,bhjp->bhijp", qa, kb)
        return (same * cos + cross * sin).sum(-1)

    def _relative_on(self, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        if device not in self._relative:
            cos, sin = self.relative_tables()
            self._relative[device] = (cos.to(device), sin.to(device))
        return self._relative[device]

    def contract(self, group: Group, input_type: Any = None) -> Contract:
        """Invariant exactly when the group preserves the relative rotations (see the class docstring).

        *Unknown* when ``cos``/``sin`` are not the tables the settings define.
        """
        name = "RotaryPositionalEncoding"
        field = _token_field(input_type, TokenField(self.grid))
        stale = _stale_table(self, _on_cpu(self._fixed_tables))
        if stale is not None:
            return Contract.unknown(f"{name}: {stale}", field)
        h, w = self.grid
        if self.mode == "plane":
            reason = (
                f"RoPE with planar frequencies: R(j − i) depends on the planar offset j − i, which "
                f"{group.name} does not preserve"
            )
            if isinstance(group, TorusTranslations):
                reason += " (a circular shift changes the offset of the pairs it wraps around)"
        else:
            reason = (
                f"RoPE with torus frequencies: R(j − i) depends on the circular offset "
                f"(j − i) mod ({h}, {w}) of the {h}x{w} grid, which {group.name} does not preserve"
            )
        return labels_contract(self.pair_labels(), group, field, name, reason)

    def extra_repr(self) -> str:
        return f"head_dim={self.head_dim}, grid={self.grid}, mode={self.mode!r}"


class RotarySelfAttention(EquivariantModule):
    """Global multi-head self-attention over a token grid with 2-D rotary position embedding.

    ``q, k, v = qkv(x)`` per head, queries and keys rotated by
    [`RotaryPositionalEncoding`][groupattn.positional.RotaryPositionalEncoding] (``rotary``), then
    [`attend`][groupattn.attention.attend] and an output projection — the layout of
    [`GlobalSelfAttention`][groupattn.attention.GlobalSelfAttention] with RoPE instead of a bias.

    An [`EquivariantModule`][groupattn.contracts.EquivariantModule] from ``TokenField(grid)`` to
    itself: calling it checks the input is ``(B, h·w, dim)``.

    Contract: that of its RoPE, for the layer — *equivariant* under
    ``TorusTranslations(h, w)`` with ``mode="torus"``; *breaks* under translations of the
    torus with ``mode="plane"`` and under rotations and reflections (C4, D4, p4, p4m) in
    both modes; *unknown* for a group the token layout cannot act with.

    The composition checker ([`certify`][groupattn.check.certify]) traces this layer's body,
    where the rotation multiplies each query by a position-dependent table: it cannot see
    the cancellation in ``q·k`` and does not certify the torus mode. To certify a network
    with torus RoPE, compute the logits with
    [`RotaryPositionalEncoding.relative_logits`][groupattn.positional.RotaryPositionalEncoding.relative_logits].

    Shapes: ``(B, h·w, dim) → (B, h·w, dim)``.

    Parameters
    ----------
    dim
        Token width ``C``.
    num_heads
        Number of heads; ``dim / num_heads`` must be a multiple of 4.
    grid
        Token grid ``(h, w)``.
    mode
        ``"plane"`` or ``"torus"`` (see [`RotaryPositionalEncoding`][groupattn.positional.RotaryPositionalEncoding]).

    Raises
    ------
    ConfigurationError
        For a head width that is not a positive multiple of 4, a bad grid or mode.
    ShapeError
        When called, for an input that is not ``(B, h·w, dim)``.
    DtypeError
        When called, for an integer or bool input, or a floating input of another dtype
        than its weights (outside ``torch.autocast``).
    """

    floating_input = True
    dim = _Fixed[int]("Token width ``C`` (read-only).")
    num_heads = _Fixed[int]("Number of heads (read-only).")
    grid = _Fixed[tuple[int, int]]("Token grid ``(h, w)`` (read-only).")

    def __init__(
        self, dim: int, num_heads: int, grid: tuple[int, int], mode: Mode = "plane"
    ) -> None:
        name = "RotarySelfAttention"
        num_heads = _check_int(num_heads, name, "num_heads", 1)
        dim = _check_int(dim, name, "dim", 1)
        if dim % num_heads or (dim // num_heads) % 4:
            raise ConfigurationError(
                f"{name}: expected a width dim = num_heads · head_dim with head_dim a multiple of 4, "
                f"got dim={dim}, num_heads={num_heads}"
            )
        grid = check_grid(grid, name)
        field = TokenField(grid)
        super().__init__(field, field, in_channels=dim)
        self.dim, self.num_heads, self.grid = dim, num_heads, grid
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.rotary = RotaryPositionalEncoding(dim // num_heads, grid, mode)

    @property
    def mode(self) -> Mode:
        """``"plane"`` or ``"torus"``: the frequencies of the rotary embedding (read-only)."""
        return self.rotary.mode

    @mode.setter
    def mode(self, value: Mode) -> None:
        _refuse_assignment(self, "mode", value)

    def check_input(self, x: Any) -> None:
        """As [`EquivariantModule.check_input`][groupattn.contracts.EquivariantModule.check_input], and the dtype must be its weights'.

        Outside ``torch.autocast`` (for the input's device), a floating input of another
        dtype than ``qkv``'s weight raises [`DtypeError`][groupattn.DtypeError] naming the
        layer, instead of failing inside the matrix product.
        """
        super().check_input(x)
        weight = self.qkv.weight
        if x.dtype != weight.dtype and not torch.is_autocast_enabled(x.device.type):
            wanted, given = (str(t).removeprefix("torch.") for t in (weight.dtype, x.dtype))
            raise DtypeError(
                f"RotarySelfAttention: expected an input of dtype {weight.dtype} (the dtype of its "
                f"weights), got {x.dtype}; cast the input (x.to(torch.{wanted})) or the layer "
                f"(layer.to(torch.{given})), or run it under torch.autocast"
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Attend over all tokens with rotated queries and keys."""
        from ..attention import attend  # attention imports positional: import at call time

        q, k, v = rearrange(
            self.qkv(x), "b n (three h d) -> three b h n d", three=3, h=self.num_heads
        )
        q, k = self.rotary(q, k)
        out = attend(q, k, v, module="RotarySelfAttention")
        return cast(torch.Tensor, self.proj(rearrange(out, "b h n d -> b n (h d)")))

    def contract(self, group: Group, input_type: Any = None) -> Contract:
        """Equivariant exactly when its RoPE is invariant (see the class docstring)."""
        if input_type is not None and input_type != self.in_type:
            return _other_input_type("RotarySelfAttention", self.in_type, input_type)
        return _as_layer_contract(
            self.rotary.contract(group, self.in_type), self.in_type, "RotarySelfAttention"
        )

    def extra_repr(self) -> str:
        return f"dim={self.dim}, num_heads={self.num_heads}, grid={self.grid}, mode={self.mode!r}"


# ----------------------------------------------------------------------------- ALiBi


def alibi_slopes(num_heads: int) -> torch.Tensor:
    """ALiBi's head slopes ``m_h = 2^(−8h/H)``, ``h = 1..H``, float64 ``(H,)``."""
    h = torch.arange(1, num_heads + 1, dtype=torch.float64)
    return torch.pow(2.0, -8.0 * h / num_heads)


class ALiBiBias(_GridPairBias):
    """ALiBi (Press et al., 2022) on a 2-D token grid: a fixed bias ``−m_h · dist(i, j)``.

    Per head ``h`` of ``H`` the slope is ``m_h = 2^(−8h/H)`` (the geometric sequence of
    the paper); ``dist`` is the Euclidean distance between the tokens' grid positions:

    * ``mode="plane"`` — ``√(Δy² + Δx²)`` of the planar offset. Invariant under every
      isometry of the grid onto itself: the rotations by 90° and reflections about its
      centre (D4 on a square grid, D2 on any grid); not under circular shifts, which
      move pairs across the border.
    * ``mode="torus"`` — the distance on the torus, ``√(min(Δy, h − Δy)² + min(Δx, w −
      Δx)²)`` with ``Δ`` reduced mod ``(h, w)``: invariant under every circular shift and,
      on a square torus, under D4 as well (so under p4 and p4m).

    No parameters. The bias is read from a table by one label per distinct squared
    distance (the gather of [`IndexedTable`][groupattn.positional.IndexedTable]) (exact integers), so it is constant on every set of pairs
    with equal distance — in every dtype.

    Contract: decided exactly from the distance labels by
    [`labels_contract`][groupattn.positional.labels_contract] (``−m_h·√·`` is injective): *invariant* under
    the translations of the torus (torus mode) and under the grid's rotations and
    reflections (C4, D4 on a square grid — both modes) and their products; *breaks*
    with a witness pair otherwise (plane mode under translations); *unknown* when
    ``TokenField(grid, prefix)`` cannot be acted on by the group. Attention with this
    bias (e.g. ``GlobalSelfAttention(..., bias=ALiBiBias(...))``) is equivariant exactly
    under the groups the bias is invariant under.

    Shapes: ``() → (heads, prefix + h·w, prefix + h·w)`` (float64; attention casts it).

    Parameters
    ----------
    grid
        Token grid ``(h, w)``.
    num_heads
        Number of attention heads ``H``.
    mode
        ``"plane"`` (Euclidean distance in the plane) or ``"torus"`` (on the torus).
    prefix
        Leading non-grid tokens; their rows and columns get bias 0.

    Raises
    ------
    ConfigurationError
        For a bad grid, mode, ``num_heads < 1`` or ``prefix < 0``, or labels or a bias
        over the memory limit (``default_max_memory``).

    Examples
    --------
    >>> bias = ALiBiBias((3, 3), num_heads=2, mode="torus")
    >>> bias().shape, float(bias()[1, 0, 1])  # neighbours, slope 2^-8
    (torch.Size([2, 9, 9]), -0.00390625)
    """

    slopes: torch.Tensor
    squared_distances: torch.Tensor

    def __init__(
        self,
        grid: tuple[int, int],
        num_heads: int,
        mode: Mode = "plane",
        prefix: int = 0,
    ) -> None:
        # peak: dy, dx, their reductions on the torus, the squared distances, the labels and
        # their copy
        super().__init__(grid, num_heads, mode, prefix, "ALiBiBias", 8, _WORD)
        tables = _on_cpu(self._fixed_tables)
        self.register_buffer("slopes", _placed(tables["slopes"]), persistent=False)
        self.register_buffer(
            "squared_distances", _placed(tables["squared_distances"]), persistent=False
        )
        distinct = tables["squared_distances"].to(dtype=torch.int64)
        labels = _on_cpu(
            lambda: torch.searchsorted(
                distinct, self._squared(*_pair_offsets(self.grid, self.mode))
            )
        )
        self._set_labels(_labels_placed(labels), distinct.shape[0])

    def _squared(self, dy: torch.Tensor, dx: torch.Tensor) -> torch.Tensor:
        """The squared distance of offsets (``j − i`` in the plane, residues on the torus)."""
        if self.mode == "torus":
            h, w = self.grid
            dy, dx = torch.minimum(dy, h - dy), torch.minimum(dx, w - dx)
        return dy * dy + dx * dx

    def _fixed_tables(self) -> dict[str, torch.Tensor]:
        """``slopes`` ``(H,)`` and the distinct ``squared_distances`` ``(K,)`` (sorted), float64.

        Every offset of the grid is the offset of some pair, so the distinct squared
        distances are those of the ``(2h − 1)(2w − 1)`` planar offsets (``h·w`` residues
        on the torus): ``O(h·w)``, not ``O(N²)``.
        """
        h, w = self.grid
        if self.mode == "torus":
            dy, dx = torch.arange(h)[:, None], torch.arange(w)[None, :]
        else:
            dy, dx = torch.arange(-h + 1, h)[:, None], torch.arange(-w + 1, w)[None, :]
        distinct = torch.unique(self._squared(dy, dx))
        return {"slopes": alibi_slopes(self.num_heads), "squared_distances": distinct.double()}

    def _device(self) -> torch.device:
        return self.slopes.device  # no parameters: the labels follow the buffers

    def values(self) -> torch.Tensor:
        """``(heads, K)``: ``−m_h · dist`` for each distinct distance."""
        return -self.slopes[:, None] * self.squared_distances.sqrt()[None, :]

    def contract(self, group: Group, input_type: Any = None) -> Contract:
        """Decided from the distance labels (see the class docstring).

        *Unknown* when ``slopes`` or ``squared_distances`` are not the tables the
        settings define (changed after construction).
        """
        stale = self._stale()
        if stale is not None:
            return stale
        field = _token_field(input_type, TokenField(self.grid, prefix=self.prefix))
        h, w = self.grid
        where = "planar" if self.mode == "plane" else f"{h}x{w} torus"
        reason = f"ALiBi's bias depends on the {where} distance of the pairs, which {group.name} does not preserve"
        if self.mode == "plane" and isinstance(group, TorusTranslations):
            reason += " (a circular shift changes the distance of the pairs it wraps around)"
        return labels_contract(self._padded_labels(), group, field, "ALiBiBias", reason)

    def extra_repr(self) -> str:
        return f"grid={self.grid}, num_heads={self.num_heads}, mode={self.mode!r}, prefix={self.prefix}"


# ----------------------------------------------------------------------------- SwinV2


def _d4_images(dy: torch.Tensor, dx: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The 8 images ``g·(dy, dx)`` under D4 acting linearly on offsets: long ``(…, 8)`` each."""
    ys = torch.stack([dy, -dx, -dy, dx, dy, dx, -dy, -dx], dim=-1)
    xs = torch.stack([dx, dy, -dx, -dy, -dx, dy, dx, -dy], dim=-1)
    return ys, xs


class LogSpacedContinuousBias(_GridPairBias):
    """SwinV2's log-spaced continuous position bias (Liu et al., 2022) on a token window.

    For every relative offset ``Δ = (Δy, Δx)`` of two tokens of the ``h × w`` window,
    the normalised coordinates ``t = 8·Δ/extent`` are log-spaced,
    ``t̂ = sign(t)·log2(1 + |t|)/log2(8)``, and a small MLP (``Linear(2, hidden)``, ReLU,
    ``Linear(hidden, heads)`` without bias, as in SwinV2) gives the bias
    ``16·sigmoid(mlp(t̂))``. The MLP runs once per distinct offset (or orbit) and the
    result is gathered per pair (the gather of [`IndexedTable`][groupattn.positional.IndexedTable]).

    * ``mode="plane"`` (SwinV2) — planar offsets ``Δ ∈ [−(h−1), h−1] × [−(w−1), w−1]``,
      ``extent = side − 1``: the bias is clipped to the window, so attention inside one
      window is translation-equivariant only for shifts that keep the window's tokens in
      it; a circular shift of the window's tokens breaks it.
    * ``mode="torus"`` — circular offsets ``Δ mod (h, w)``, represented centred in
      ``[−⌊side/2⌋, ⌈side/2⌉ − 1]``, ``extent = ⌊side/2⌋``: exactly invariant under every
      circular shift.
    * ``symmetric=True`` (square windows only) — the MLP is averaged over the 8 images
      ``g·Δ`` of the offset under D4 (rotations by 90° and reflections), once per D4-orbit
      of offsets: the bias is then exactly invariant under the grid's rotations and
      reflections as well. Without it the MLP is not symmetric and rotations break it.

    Contract: decided exactly from the offset (or orbit) labels by
    [`labels_contract`][groupattn.positional.labels_contract], for a generic MLP: plane mode *breaks* under
    translations of the torus; torus mode is *invariant* under them; under C4/D4 (and
    p4, p4m) *invariant* with ``symmetric=True`` (p4/p4m need the torus mode), *breaks*
    without; *unknown* when ``TokenField(grid, prefix)`` cannot be acted on by the group.

    Shapes: ``() → (heads, prefix + h·w, prefix + h·w)``.

    Parameters
    ----------
    grid
        The window (token grid) ``(h, w)``.
    num_heads
        Number of attention heads.
    hidden
        Width of the MLP's hidden layer (512 in SwinV2).
    mode
        ``"plane"`` (clipped planar offsets) or ``"torus"`` (circular offsets).
    symmetric
        Average the MLP over the 8 D4 images of each offset (needs ``h = w``).
    prefix
        Leading non-grid tokens; their rows and columns get bias 0.

    Raises
    ------
    ConfigurationError
        For a bad grid, mode, ``hidden``, ``num_heads < 1``, ``prefix < 0``,
        ``symmetric=True`` on a non-square window, or labels or a bias over the memory
        limit (``default_max_memory``).
    """

    features: torch.Tensor
    hidden = _Fixed[int]("Width of the MLP's hidden layer (read-only).")
    symmetric = _Fixed[bool]("Whether the MLP is averaged over D4 (read-only).")

    def __init__(
        self,
        grid: tuple[int, int],
        num_heads: int,
        hidden: int = 512,
        mode: Mode = "plane",
        symmetric: bool = False,
        prefix: int = 0,
    ) -> None:
        name = "LogSpacedContinuousBias"
        hidden = _check_int(hidden, name, "hidden", 1)
        if not isinstance(symmetric, bool):
            raise ConfigurationError(f"{name}: expected symmetric as a bool, got {symmetric!r}")
        # peak: dy, dx, their residues on the torus, the class index and its terms, the
        # labels and their copy; the bias is float32 (or the MLP's dtype: 8 bytes at most)
        super().__init__(grid, num_heads, mode, prefix, name, 6, _WORD)
        h, w = self.grid
        if symmetric and h != w:
            raise ConfigurationError(
                f"{name}: expected a square window for symmetric=True (D4 exchanges the axes), got {h}x{w}"
            )
        self.hidden, self.symmetric = hidden, symmetric
        class_label, _ = _on_cpu(self._labels_of_classes)
        self.register_buffer(
            "features", _placed(_on_cpu(self._fixed_tables)["features"]), persistent=False
        )  # (K, T, 2)
        labels = _on_cpu(
            lambda: class_label[self._class_index(*_pair_offsets(self.grid, self.mode))]
        )
        self._set_labels(_labels_placed(labels), self.features.shape[0])
        self.mlp = nn.Sequential(
            nn.Linear(2, self.hidden), nn.ReLU(), nn.Linear(self.hidden, num_heads, bias=False)
        )

    def _labels_of_classes(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The label of every offset class, and the representative class of every label.

        Every offset class (planar offset, or residue on the torus) is the offset of some
        pair, so the labels are decided on the ``(2h − 1)(2w − 1)`` (``h·w``) classes,
        ``O(h·w)``: one per class, or one per D4-orbit of classes (represented by its
        smallest class) when symmetric.
        """
        h, w = self.grid
        classes = torch.arange(h * w if self.mode == "torus" else (2 * h - 1) * (2 * w - 1))
        if not self.symmetric:
            return classes, classes
        ys, xs = _d4_images(*self._class_offset(classes))
        orbit = self._class_index(ys, xs).min(-1).values  # the orbit: its smallest class
        representatives = torch.unique(orbit)
        return torch.searchsorted(representatives, orbit), representatives

    def _fixed_tables(self) -> dict[str, torch.Tensor]:
        """``features`` ``(K, T, 2)`` float64: the log-spaced offsets of each label's representative(s)."""
        _, rep = self._labels_of_classes()
        ry, rx = self._class_offset(rep)  # (K,) offsets of each label's representative
        if self.symmetric:
            ry, rx = _d4_images(ry, rx)  # (K, 8)
        else:
            ry, rx = ry[:, None], rx[:, None]  # (K, 1)
        return {"features": torch.stack([self._log_spaced(ry, 0), self._log_spaced(rx, 1)], dim=-1)}

    def _class_index(self, dy: torch.Tensor, dx: torch.Tensor) -> torch.Tensor:
        """The index of the offset class of integer offsets (any shape; reduced mod the side on the torus)."""
        h, w = self.grid
        if self.mode == "torus":
            return (dy % h) * w + (dx % w)
        return (dy + h - 1) * (2 * w - 1) + (dx + w - 1)

    def _class_offset(self, index: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The representative offset of class indices: planar, or centred residues on the torus."""
        h, w = self.grid
        if self.mode == "torus":
            dy, dx = index // w, index % w
            return (dy + h // 2) % h - h // 2, (dx + w // 2) % w - w // 2
        return index // (2 * w - 1) - (h - 1), index % (2 * w - 1) - (w - 1)

    def _log_spaced(self, offsets: torch.Tensor, axis: int) -> torch.Tensor:
        """SwinV2's ``sign(t)·log2(1 + |t|)/log2(8)`` of ``t = 8·offset/extent`` (float64).

        On the torus the offsets are first reduced to centred residues (so the 8 D4
        images of a circular offset are circular offsets again).
        """
        side = self.grid[axis]
        if self.mode == "torus":
            offsets = (offsets + side // 2) % side - side // 2
            extent = max(side // 2, 1)
        else:
            extent = max(side - 1, 1)
        t = 8.0 * offsets.double() / extent
        return torch.sign(t) * torch.log2(1.0 + t.abs()) / math.log2(8.0)

    def values(self) -> torch.Tensor:
        """``(heads, K)``: ``16·sigmoid`` of the MLP (averaged over D4 images when symmetric)."""
        weight = cast(nn.Linear, self.mlp[0]).weight
        features = self.features.to(device=weight.device, dtype=weight.dtype)
        out = self.mlp(features).mean(dim=1)  # (K, heads)
        return (16.0 * torch.sigmoid(out)).transpose(0, 1)

    def contract(self, group: Group, input_type: Any = None) -> Contract:
        """Decided from the offset or orbit labels (see the class docstring).

        *Unknown* when ``features`` is not the table the settings define (changed after
        construction).
        """
        stale = self._stale()
        if stale is not None:
            return stale
        field = _token_field(input_type, TokenField(self.grid, prefix=self.prefix))
        h, w = self.grid
        offsets = (
            "clipped planar offset j − i"
            if self.mode == "plane"
            else f"circular offset (j − i) mod ({h}, {w})"
        )
        if self.symmetric:
            offsets = f"D4-orbit of the {offsets}"
        reason = (
            f"SwinV2's bias (an MLP) depends on the {offsets} of the pairs, which {group.name} "
            f"does not preserve"
        )
        if self.mode == "plane" and isinstance(group, TorusTranslations):
            reason += " (a circular shift changes the offset of the pairs it wraps around)"
        return labels_contract(
            self._padded_labels(), group, field, "LogSpacedContinuousBias", reason
        )

    def extra_repr(self) -> str:
        return (
            f"grid={self.grid}, num_heads={self.num_heads}, hidden={self.hidden}, mode={self.mode!r}, "
            f"symmetric={self.symmetric}, prefix={self.prefix}"
        )
